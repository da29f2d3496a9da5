//! The upstreams' series: each one's connection, sessions and catalog, the subscriptions held
//! on both sides, notifications in and out, and the downstream sessions open.

use super::labels::upstream_label;
use super::{Metrics, NotificationKind, OUTCOMES, SessionGuard, Transport, saturate};
use crate::protocol::{Era, method};

impl Metrics {
    /// An upstream is configured: its per-upstream series start at 0 (and `up` at 0).
    pub fn upstream_configured(&self, upstream: &str) {
        let (i, upstream) = (&self.inner, upstream_label(upstream));
        i.upstream_up.with_label_values(&[upstream]).set(0);
        i.upstream_sessions.with_label_values(&[upstream]).set(0);
        i.upstream_sessions_reclaimed.with_label_values(&[upstream]);
        i.upstream_reconnects.with_label_values(&[upstream]);
        i.catalog_resources.with_label_values(&[upstream]);
        i.catalog_templates.with_label_values(&[upstream]);
        i.cache_hits.with_label_values(&[upstream]);
        i.cache_misses.with_label_values(&[upstream]);
        i.cache_inserts.with_label_values(&[upstream]);
        i.catalog_unlisted.with_label_values(&[upstream]);
        i.served_bytes.with_label_values(&[upstream]);
        for kind in NotificationKind::ALL {
            i.notifications_received.with_label_values(&[upstream, kind.label()]);
        }
        for kind in ["log", "sampling", "elicitation"] {
            i.relay_unattributed.with_label_values(&[upstream, kind]);
        }
        for outcome in OUTCOMES {
            i.upstream_requests.with_label_values(&[upstream, method::RESOURCES_READ, outcome]);
        }
        for outcome in ["ok", "upstream_failed"] {
            i.upstream_requests.with_label_values(&[upstream, method::RESOURCES_LIST, outcome]);
        }
    }

    /// An upstream left the configuration: its gauges go (its counters stay, as history).
    pub fn upstream_removed(&self, upstream: &str) {
        let (i, upstream) = (&self.inner, upstream_label(upstream));
        for gauge in [
            &i.upstream_up,
            &i.upstream_sessions,
            &i.catalog_resources,
            &i.catalog_templates,
            &i.downstream_subscriptions,
            &i.upstream_subscriptions,
        ] {
            let _ = gauge.remove_label_values(&[upstream]);
        }
    }

    pub fn set_upstream_up(&self, upstream: &str, up: bool) {
        self.inner.upstream_up.with_label_values(&[upstream_label(upstream)]).set(i64::from(up));
    }

    /// How many per-principal or per-host sessions `upstream` has open now.
    pub fn set_upstream_sessions(&self, upstream: &str, open: usize) {
        self.inner.upstream_sessions.with_label_values(&[upstream_label(upstream)]).set(saturate(open));
    }

    /// A full pool of `upstream`'s sessions reclaimed one for another principal.
    pub fn upstream_session_reclaimed(&self, upstream: &str) {
        self.inner.upstream_sessions_reclaimed.with_label_values(&[upstream_label(upstream)]).inc();
    }

    pub fn upstream_reconnected(&self, upstream: &str) {
        self.inner.upstream_reconnects.with_label_values(&[upstream_label(upstream)]).inc();
    }

    /// The upstream's catalog was (re)loaded with this many entries (0, 0 when it went down).
    pub fn set_catalog_size(&self, upstream: &str, resources: usize, templates: usize) {
        let (i, upstream) = (&self.inner, upstream_label(upstream));
        i.catalog_resources.with_label_values(&[upstream]).set(saturate(resources));
        i.catalog_templates.with_label_values(&[upstream]).set(saturate(templates));
    }

    /// An upstream entry was left out of the catalog (its URI has no scheme).
    pub fn catalog_entry_unlisted(&self, upstream: &str) {
        self.inner.catalog_unlisted.with_label_values(&[upstream_label(upstream)]).inc();
    }

    /// A downstream session opened; it is counted until the returned guard is dropped.
    pub fn downstream_session(&self, transport: Transport, era: Era) -> SessionGuard {
        let gauge = self.inner.downstream_sessions.with_label_values(&[transport.label(), era.label()]);
        gauge.inc();
        SessionGuard { gauge }
    }

    /// How many URIs of `upstream` downstream sessions hold (summed over sessions).
    pub fn set_downstream_subscriptions(&self, upstream: &str, held: usize) {
        self.inner.downstream_subscriptions.with_label_values(&[upstream_label(upstream)]).set(saturate(held));
    }

    /// How many URIs the proxy holds subscribed at `upstream` (one per URI, shared).
    pub fn set_upstream_subscriptions(&self, upstream: &str, held: usize) {
        self.inner.upstream_subscriptions.with_label_values(&[upstream_label(upstream)]).set(saturate(held));
    }

    pub fn notification_received(&self, upstream: &str, kind: NotificationKind) {
        self.inner.notifications_received.with_label_values(&[upstream_label(upstream), kind.label()]).inc();
    }

    pub fn notification_delivered(&self, kind: NotificationKind) {
        self.inner.notifications_delivered.with_label_values(&[kind.label()]).inc();
    }

    pub fn notification_dropped(&self, kind: NotificationKind) {
        self.inner.notifications_dropped.with_label_values(&[kind.label()]).inc();
    }
}
