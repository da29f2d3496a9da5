//! Metrics: one [`Metrics`] handle that owns its own prometheus `Registry` and renders it in
//! the Prometheus text format for the admin listener's `/metrics`.
//!
//! Every family is named `mcp_proxy_<what>_<unit>[_total]` — but the two histograms of the
//! OpenTelemetry MCP semantic conventions, `mcp_server_operation_duration_seconds` and
//! `mcp_client_operation_duration_seconds` (their names and buckets), recorded with our own
//! request histograms — and registered from one table (`families.rs`);
//! [`Metrics::family_names`] lists them (the Grafana dashboard test checks its queries against
//! it). Callers record events through small methods, one line per event, kept by what they
//! count: requests here and in `requests.rs`, upstreams and sessions in `upstreams.rs`, the
//! read cache in `cache.rs`, a cluster replica in `cluster.rs`:
//! `metrics.downstream_request("resources/read", metrics::outcome(&result), started.elapsed(), hop)`.
//!
//! Invariant: every label value is bounded, so the number of series does not grow with traffic.
//! The API never accepts a URI, a principal, a token or a session id: methods and outcomes are
//! `&'static str` (fixed at compile time), closed sets are enums, an `upstream` label must be a
//! configured upstream name (anything not shaped like one — a URI always has a `:` — is recorded
//! as `invalid`), and a `policy` label must be a policy file name (anything else is `other`).

mod cache;
mod cluster;
mod families;
mod labels;
mod requests;
mod upstreams;

use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntGauge, TextEncoder};

use self::families::Families;
pub use self::families::{LATENCY_BUCKETS, SEMCONV_BUCKETS};
use self::labels::upstream_label;
pub use self::labels::{
    AUTH_REFUSAL_REASONS, AnswerOutcome, DenialAction, DenialKind, EvictionCause, InvalidationCause, NotificationKind,
    SealedKind, SharedCacheEvent, Transport,
};
use crate::error::ProxyError;
use crate::protocol::{DOWNSTREAM_METHODS, KNOWN_VERSIONS};

/// A request's protocol version and transport, as the semantic conventions' histograms label
/// them: `mcp_protocol_version` a version the proxy knows, any other (or none) `other`;
/// `network_transport` `pipe` (stdio) or `tcp` (HTTP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    version: &'static str,
    transport: &'static str,
}

impl Hop {
    /// `version` as a bounded label, over stdio (`pipe`) or not (`tcp`).
    pub fn new(version: Option<&str>, transport: Transport) -> Hop {
        let known = version.and_then(|version| KNOWN_VERSIONS.iter().find(|known| **known == version));
        let transport = match transport {
            Transport::Stdio => "pipe",
            Transport::Http => "tcp",
        };
        Hop { version: known.copied().unwrap_or("other"), transport }
    }
}

/// Every `outcome` label value: `ok` or a [`ProxyError::kind`]. Pre-created so dashboards show 0.
pub const OUTCOMES: &[&str] =
    &["ok", "not_found", "invalid_cursor", "invalid_params", "upstream_down", "upstream_timeout", "upstream_failed"];

/// The `outcome` label of a request's result: `ok`, or the error's bounded [`ProxyError::kind`].
pub fn outcome<T>(result: &Result<T, ProxyError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(error) => error.kind(),
    }
}

/// The `error_type` label of the semantic conventions' histograms: empty for `ok` (no error),
/// else the outcome, one of a bounded set.
fn error_type(outcome: &'static str) -> &'static str {
    if outcome == "ok" { "" } else { outcome }
}

/// A cheap `Clone` handle on the proxy's metrics.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Families>,
}

/// Keeps a `mcp_proxy_downstream_sessions` series incremented while it lives; hold it in the
/// session and the gauge drops by one when the session (and so this) goes.
#[must_use = "the session is counted only while this guard lives"]
pub struct SessionGuard {
    gauge: IntGauge,
}

impl Metrics {
    /// Register every family in a fresh registry and pre-create the label sets known up front.
    pub fn new() -> Self {
        let metrics = Metrics { inner: Arc::new(Families::register()) };
        metrics.precreate();
        metrics
    }

    /// The full name of every family this registers, whether or not it has a series yet.
    pub fn family_names(&self) -> &[String] {
        &self.inner.family_names
    }

    /// The registry in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut text = String::new();
        if let Err(error) = TextEncoder::new().encode_utf8(&self.inner.registry.gather(), &mut text) {
            tracing::error!(error = %error, "metrics could not be rendered");
        }
        text
    }

    /// A downstream request over `hop` finished: `method` is the MCP method, `outcome` see
    /// [`outcome`].
    pub fn downstream_request(&self, method: &'static str, outcome: &'static str, elapsed: Duration, hop: Hop) {
        let i = &self.inner;
        i.downstream_requests.with_label_values(&[method, outcome]).inc();
        i.downstream_duration.with_label_values(&[method]).observe(elapsed.as_secs_f64());
        let labels = [method, error_type(outcome), hop.version, hop.transport];
        i.server_operation_duration.with_label_values(&labels).observe(elapsed.as_secs_f64());
    }

    /// A request to `upstream` over `hop` finished.
    pub fn upstream_request(
        &self,
        upstream: &str,
        method: &'static str,
        outcome: &'static str,
        elapsed: Duration,
        hop: Hop,
    ) {
        let (i, upstream) = (&self.inner, upstream_label(upstream));
        i.upstream_requests.with_label_values(&[upstream, method, outcome]).inc();
        i.upstream_duration.with_label_values(&[upstream, method]).observe(elapsed.as_secs_f64());
        let labels = [method, error_type(outcome), hop.version, hop.transport];
        i.client_operation_duration.with_label_values(&labels).observe(elapsed.as_secs_f64());
    }

    fn precreate(&self) {
        let i = &self.inner;
        for reason in AUTH_REFUSAL_REASONS {
            i.auth_refused.with_label_values(&[reason]);
        }
        for kind in DenialKind::ALL {
            i.denials.with_label_values(&[kind.label()]);
        }
        for reason in ["body_timeout", "body_budget"] {
            i.request_bodies_cut.with_label_values(&[reason]);
        }
        // A principal's own buckets (no upstream): the panel has a line at 0 before any refusal.
        for kind in ["calls", "reads"] {
            i.rate_limited.with_label_values(&[kind, "principal", ""]);
        }
        for method in DOWNSTREAM_METHODS {
            for outcome in OUTCOMES {
                i.downstream_requests.with_label_values(&[method, outcome]);
            }
        }
        for cause in EvictionCause::ALL {
            i.cache_evictions.with_label_values(&[cause.label()]);
        }
        for cause in InvalidationCause::ALL {
            i.cache_invalidations.with_label_values(&[cause.label()]);
        }
        for event in SharedCacheEvent::ALL {
            i.cache_shared.with_label_values(&[event.label()]);
        }
        for kind in SealedKind::ALL {
            i.cluster_redis_rejected.with_label_values(&[kind.label()]);
        }
        for kind in NotificationKind::ALL {
            i.notifications_delivered.with_label_values(&[kind.label()]);
            i.notifications_dropped.with_label_values(&[kind.label()]);
        }
        for action in DenialAction::ALL {
            i.policy_denials.with_label_values(&[action.label(), "default"]);
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

fn saturate(value: impl TryInto<i64>) -> i64 {
    value.try_into().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
