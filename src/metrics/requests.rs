//! What became of requests besides their outcome and latency: refused by a rate limit, by
//! policy, by authentication, a body cut; bytes served, a relayed message no call claimed, an
//! audit event dropped.

use super::labels::{policy_label, upstream_label};
use super::{DenialAction, DenialKind, Metrics};

impl Metrics {
    /// A request was refused by a rate limit: `kind` is `calls` or `reads`, `scope` the
    /// bucket's (`principal`, `upstream`), `upstream` the one the request was for, if any.
    pub fn rate_limited(&self, kind: &'static str, scope: &'static str, upstream: Option<&str>) {
        let upstream = upstream.map_or("", upstream_label);
        self.inner.rate_limited.with_label_values(&[kind, scope, upstream]).inc();
    }

    /// Policy refused `action`; `policy` is the file whose rule decided, `None` for the default.
    pub fn policy_denied(&self, action: DenialAction, policy: Option<&str>) {
        self.inner.policy_denials.with_label_values(&[action.label(), policy_label(policy)]).inc();
    }

    /// A request was refused by policy; `kind` says what it asked for.
    pub fn denied(&self, kind: DenialKind) {
        self.inner.denials.with_label_values(&[kind.label()]).inc();
    }

    /// An HTTP request was refused with 401; `reason` is a bounded label (`missing`, `expired`…).
    pub fn auth_refused(&self, reason: &'static str) {
        self.inner.auth_refused.with_label_values(&[reason]).inc();
    }

    /// A request body was cut; `reason` is `body_timeout` or `body_budget`.
    pub fn request_body_cut(&self, reason: &'static str) {
        self.inner.request_bodies_cut.with_label_values(&[reason]).inc();
    }

    /// Resource content of `bytes` bytes (text as UTF-8, blobs decoded) was sent to a client.
    pub fn bytes_served(&self, upstream: &str, bytes: u64) {
        self.inner.served_bytes.with_label_values(&[upstream_label(upstream)]).inc_by(bytes);
    }

    /// `upstream` sent a `kind` (`log`, `sampling`, `elicitation`) that names no call in flight.
    pub fn relay_unattributed(&self, upstream: &str, kind: &'static str) {
        self.inner.relay_unattributed.with_label_values(&[upstream_label(upstream), kind]).inc();
    }

    /// An audit event was dropped: the writer's queue was full.
    pub fn audit_dropped(&self) {
        self.inner.audit_dropped.inc();
    }
}
