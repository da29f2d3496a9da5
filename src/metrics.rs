//! Metrics: one [`Metrics`] handle that owns its own prometheus [`Registry`] and renders it in
//! the Prometheus text format for the admin listener's `/metrics`.
//!
//! Every family is named `mcp_proxy_<what>_<unit>[_total]` — but the two histograms of the
//! OpenTelemetry MCP semantic conventions, `mcp_server_operation_duration_seconds` and
//! `mcp_client_operation_duration_seconds` (their names and buckets), recorded with our own
//! request histograms — and registered in [`Metrics::new`];
//! [`Metrics::family_names`] lists them (the Grafana dashboard test checks its queries against
//! it). Callers record events through small methods, one line per event:
//! `metrics.downstream_request("resources/read", metrics::outcome(&result), started.elapsed(), hop)`.
//!
//! Invariant: every label value is bounded, so the number of series does not grow with traffic.
//! The API never accepts a URI, a principal, a token or a session id: methods and outcomes are
//! `&'static str` (fixed at compile time), closed sets are enums, an `upstream` label must be a
//! configured upstream name (anything not shaped like one — a URI always has a `:` — is recorded
//! as `invalid`), and a `policy` label must be a policy file name (anything else is `other`).

mod labels;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

pub use self::labels::{
    AUTH_REFUSAL_REASONS, AnswerOutcome, DenialAction, DenialKind, EvictionCause, InvalidationCause, NotificationKind,
    SealedKind, SharedCacheEvent, Transport,
};
use self::labels::{policy_label, upstream_label};
use crate::error::ProxyError;
use crate::protocol::{DOWNSTREAM_METHODS, Era, KNOWN_VERSIONS, method};

/// Latency buckets (seconds): from a cache hit (~50 µs) to a slow upstream read (30 s).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0,
];

/// The buckets (seconds) the OpenTelemetry MCP semantic conventions advise for
/// `mcp.server.operation.duration` and `mcp.client.operation.duration`; our own histograms keep
/// the finer [`LATENCY_BUCKETS`].
pub const SEMCONV_BUCKETS: &[f64] = &[0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

/// The labels of the semantic conventions' histograms.
const SEMCONV_LABELS: &[&str] = &["mcp_method_name", "error_type", "mcp_protocol_version", "network_transport"];

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
    inner: Arc<Inner>,
}

/// Keeps a `mcp_proxy_downstream_sessions` series incremented while it lives; hold it in the
/// session and the gauge drops by one when the session (and so this) goes.
#[must_use = "the session is counted only while this guard lives"]
pub struct SessionGuard {
    gauge: IntGauge,
}

struct Inner {
    registry: Registry,
    family_names: Vec<String>,
    downstream_requests: IntCounterVec,
    downstream_duration: HistogramVec,
    upstream_requests: IntCounterVec,
    upstream_duration: HistogramVec,
    /// `mcp.server.operation.duration` of the semantic conventions.
    server_operation_duration: HistogramVec,
    /// `mcp.client.operation.duration` of the semantic conventions.
    client_operation_duration: HistogramVec,
    upstream_up: IntGaugeVec,
    upstream_sessions: IntGaugeVec,
    upstream_sessions_reclaimed: IntCounterVec,
    upstream_reconnects: IntCounterVec,
    catalog_resources: IntGaugeVec,
    catalog_templates: IntGaugeVec,
    catalog_unlisted: IntCounterVec,
    cache_hits: IntCounterVec,
    cache_misses: IntCounterVec,
    cache_inserts: IntCounterVec,
    cache_evictions: IntCounterVec,
    cache_invalidations: IntCounterVec,
    cache_entries: IntGauge,
    cache_weighted_bytes: IntGauge,
    cache_shared: IntCounterVec,
    cache_shared_up: IntGauge,
    downstream_sessions: IntGaugeVec,
    downstream_subscriptions: IntGaugeVec,
    upstream_subscriptions: IntGaugeVec,
    notifications_received: IntCounterVec,
    notifications_delivered: IntCounterVec,
    notifications_dropped: IntCounterVec,
    policy_denials: IntCounterVec,
    served_bytes: IntCounterVec,
    relay_unattributed: IntCounterVec,
    rate_limited: IntCounterVec,
    cluster_redis_up: IntGaugeVec,
    cluster_replicas: IntGaugeVec,
    cluster_redis_failures: IntCounterVec,
    cluster_answers: IntCounterVec,
    cluster_forwards: IntCounterVec,
    listener_connections: IntGaugeVec,
    cluster_redis_rejected: IntCounterVec,
    auth_refused: IntCounterVec,
    request_bodies_cut: IntCounterVec,
    denials: IntCounterVec,
    audit_dropped: IntCounter,
}

impl Metrics {
    /// Register every family in a fresh registry and pre-create the label sets known up front.
    pub fn new() -> Self {
        let mut b = Builder { registry: Registry::new(), family_names: Vec::new() };
        let build_info = b.gauge("build_info", "Always 1; the version label says which build.", &["version"]);
        build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        let inner = Inner {
            downstream_requests: b.counter("downstream_requests_total", "Downstream requests.", &["method", "outcome"]),
            downstream_duration: b.histogram(
                "downstream_request_duration_seconds",
                "Downstream request latency.",
                &["method"],
            ),
            upstream_requests: b.counter(
                "upstream_requests_total",
                "Requests sent to upstreams.",
                &["upstream", "method", "outcome"],
            ),
            upstream_duration: b.histogram(
                "upstream_request_duration_seconds",
                "Upstream request latency.",
                &["upstream", "method"],
            ),
            server_operation_duration: b.semconv_histogram(
                "mcp_server_operation_duration_seconds",
                "MCP request duration as the server (OpenTelemetry semantic conventions: mcp.server.operation.duration).",
                SEMCONV_LABELS,
            ),
            client_operation_duration: b.semconv_histogram(
                "mcp_client_operation_duration_seconds",
                "MCP request duration as the client (OpenTelemetry semantic conventions: mcp.client.operation.duration).",
                SEMCONV_LABELS,
            ),
            upstream_up: b.gauge("upstream_up", "1 while the upstream is connected.", &["upstream"]),
            upstream_sessions: b.gauge(
                "upstream_sessions",
                "Per-principal or per-host upstream sessions open (besides the shared connection).",
                &["upstream"],
            ),
            upstream_sessions_reclaimed: b.counter(
                "upstream_sessions_reclaimed_total",
                "Upstream sessions reclaimed from a full pool for another principal (their subscriptions wait).",
                &["upstream"],
            ),
            upstream_reconnects: b.counter("upstream_reconnects_total", "Upstream reconnections.", &["upstream"]),
            catalog_resources: b.gauge("catalog_resources", "Resources listed per upstream.", &["upstream"]),
            catalog_templates: b.gauge("catalog_templates", "Resource templates per upstream.", &["upstream"]),
            catalog_unlisted: b.counter(
                "catalog_unlisted_total",
                "Upstream entries not listed (URI without a scheme, or listed twice).",
                &["upstream"],
            ),
            cache_hits: b.counter("cache_hits_total", "Reads answered from the cache.", &["upstream"]),
            cache_misses: b.counter("cache_misses_total", "Reads that went upstream.", &["upstream"]),
            cache_inserts: b.counter("cache_inserts_total", "Values inserted into the cache.", &["upstream"]),
            cache_evictions: b.counter("cache_evictions_total", "Entries the cache evicted.", &["cause"]),
            cache_invalidations: b.counter(
                "cache_invalidations_total",
                "Entries dropped as possibly stale.",
                &["cause"],
            ),
            cache_entries: b.gauge0("cache_entries", "Entries in the read cache."),
            cache_weighted_bytes: b.gauge0("cache_weighted_bytes", "Weighted size of the read cache."),
            cache_shared: b.counter(
                "cache_shared_events_total",
                "What happened in the cluster's shared cache tier (hits, fills, invalidations, errors).",
                &["event"],
            ),
            cache_shared_up: b.gauge0("cache_shared_up", "1 while the cluster's shared cache tier answers."),
            downstream_sessions: b.gauge("downstream_sessions", "Open downstream sessions.", &["transport", "era"]),
            downstream_subscriptions: b.gauge(
                "downstream_subscriptions",
                "URIs held by downstream sessions.",
                &["upstream"],
            ),
            upstream_subscriptions: b.gauge("upstream_subscriptions", "URIs the proxy holds upstream.", &["upstream"]),
            notifications_received: b.counter(
                "notifications_received_total",
                "Notifications from upstreams.",
                &["upstream", "kind"],
            ),
            notifications_delivered: b.counter(
                "notifications_delivered_total",
                "Notifications sent to sessions.",
                &["kind"],
            ),
            notifications_dropped: b.counter(
                "notifications_dropped_total",
                "Notifications a session lost (slow or gone).",
                &["kind"],
            ),
            policy_denials: b.counter(
                "policy_denials_total",
                "Requests or items refused by policy.",
                &["action", "policy"],
            ),
            served_bytes: b.counter("served_bytes_total", "Resource content bytes served.", &["upstream"]),
            relay_unattributed: b.counter(
                "relay_unattributed_total",
                "Log messages dropped and requests refused: an upstream sent them for no call in flight it named.",
                &["upstream", "kind"],
            ),
            rate_limited: b.counter(
                "rate_limited_total",
                "Requests refused by a rate limit, before any work: kind (calls, reads), the bucket's scope \
                 (principal, upstream) and the upstream the request was for (empty when it named none).",
                &["kind", "scope", "upstream"],
            ),
            cluster_redis_up: b.gauge(
                "cluster_redis_up",
                "1 while this replica reaches Redis (`[cluster]` only; the label is this replica's id).",
                &["replica"],
            ),
            cluster_replicas: b.gauge(
                "cluster_replicas",
                "Replicas this one saw alive at its last heartbeat, itself included.",
                &["replica"],
            ),
            cluster_redis_failures: b.counter(
                "cluster_redis_failures_total",
                "Redis commands of this replica that failed or timed out.",
                &["replica"],
            ),
            cluster_answers: b.counter(
                "cluster_answers_total",
                "Hosts' answers to requests a replica sent them (sampling, elicitation), by what became of \
                 them here: local, forwarded (to the asking replica), delivered (from another), dropped, unheard.",
                &["replica", "outcome"],
            ),
            cluster_forwards: b.counter(
                "cluster_forwards_total",
                "Requests for per-principal upstream sessions held by another replica: forwarded, fallback (owner unreachable, run here), failed; at the owner: served, refused (a bad mark).",
                &["outcome"],
            ),
            listener_connections: b.gauge(
                "listener_connections",
                "Connections open on the MCP listener, by kind: host (counted against server.max_connections) or peer (other replicas', counted apart).",
                &["kind"],
            ),
            cluster_redis_rejected: b.counter(
                "cluster_redis_rejected_total",
                "Values read from Redis that did not open under this cluster's sealing key (forged, sealed under \
                 another secret, altered, moved to another key, or written in clear before sealing) and were taken \
                 as missing, by kind: cache_entry, session_record.",
                &["kind"],
            ),
            auth_refused: b.counter(
                "auth_refused_total",
                "HTTP requests refused with 401, by why the token was not accepted.",
                &["reason"],
            ),
            request_bodies_cut: b.counter(
                "request_bodies_cut_total",
                "Request bodies cut before they arrived whole: body_timeout (not whole within server.body_read_timeout), body_budget (past server.max_body_bytes_per_principal).",
                &["reason"],
            ),
            denials: b.counter(
                "denials_total",
                "Requests refused by policy (a read, call, prompt, template or subscription; list filtering is not counted here).",
                &["kind"],
            ),
            audit_dropped: b.counter0(
                "audit_dropped_total",
                "Audit events dropped because the audit writer's queue was full.",
            ),
            registry: b.registry,
            family_names: b.family_names,
        };
        let metrics = Metrics { inner: Arc::new(inner) };
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

    /// A request was refused by a rate limit: `kind` is `calls` or `reads`, `scope` the
    /// bucket's (`principal`, `upstream`), `upstream` the one the request was for, if any.
    pub fn rate_limited(&self, kind: &'static str, scope: &'static str, upstream: Option<&str>) {
        let upstream = upstream.map_or("", upstream_label);
        self.inner.rate_limited.with_label_values(&[kind, scope, upstream]).inc();
    }

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

    pub fn cache_hit(&self, upstream: &str) {
        self.inner.cache_hits.with_label_values(&[upstream_label(upstream)]).inc();
    }

    pub fn cache_miss(&self, upstream: &str) {
        self.inner.cache_misses.with_label_values(&[upstream_label(upstream)]).inc();
    }

    pub fn cache_insert(&self, upstream: &str) {
        self.inner.cache_inserts.with_label_values(&[upstream_label(upstream)]).inc();
    }

    pub fn cache_eviction(&self, cause: EvictionCause) {
        self.inner.cache_evictions.with_label_values(&[cause.label()]).inc();
    }

    /// `entries` cache entries were dropped as possibly stale.
    pub fn cache_invalidation(&self, cause: InvalidationCause, entries: u64) {
        self.inner.cache_invalidations.with_label_values(&[cause.label()]).inc_by(entries);
    }

    /// The cache's current size (moka's `entry_count` and `weighted_size`).
    /// Something happened in the shared cache tier.
    pub fn shared_cache(&self, event: SharedCacheEvent) {
        self.inner.cache_shared.with_label_values(&[event.label()]).inc();
    }

    pub fn set_shared_cache_up(&self, up: bool) {
        self.inner.cache_shared_up.set(i64::from(up));
    }

    pub fn set_cache_size(&self, entries: u64, weighted_bytes: u64) {
        self.inner.cache_entries.set(saturate(entries));
        self.inner.cache_weighted_bytes.set(saturate(weighted_bytes));
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

    /// Policy refused `action`; `policy` is the file whose rule decided, `None` for the default.
    pub fn policy_denied(&self, action: DenialAction, policy: Option<&str>) {
        self.inner.policy_denials.with_label_values(&[action.label(), policy_label(policy)]).inc();
    }

    /// Resource content of `bytes` bytes (text as UTF-8, blobs decoded) was sent to a client.
    pub fn bytes_served(&self, upstream: &str, bytes: u64) {
        self.inner.served_bytes.with_label_values(&[upstream_label(upstream)]).inc_by(bytes);
    }

    /// `upstream` sent a `kind` (`log`, `sampling`, `elicitation`) that names no call in flight.
    pub fn relay_unattributed(&self, upstream: &str, kind: &'static str) {
        self.inner.relay_unattributed.with_label_values(&[upstream_label(upstream), kind]).inc();
    }

    /// This process is replica `replica` of a cluster: its series start (Redis down, 1 replica).
    /// `replica` is the configured id, one per process, so the label is bounded.
    pub fn cluster_replica(&self, replica: &str) {
        let i = &self.inner;
        i.cluster_redis_up.with_label_values(&[replica]).set(0);
        i.cluster_replicas.with_label_values(&[replica]).set(1);
        i.cluster_redis_failures.with_label_values(&[replica]);
        for outcome in AnswerOutcome::ALL {
            i.cluster_answers.with_label_values(&[replica, outcome.label()]);
        }
        for outcome in ["forwarded", "fallback", "failed", "served", "refused"] {
            i.cluster_forwards.with_label_values(&[outcome]);
        }
    }

    pub fn cluster_redis_up(&self, replica: &str, up: bool) {
        self.inner.cluster_redis_up.with_label_values(&[replica]).set(i64::from(up));
    }

    pub fn cluster_replicas(&self, replica: &str, seen: usize) {
        self.inner.cluster_replicas.with_label_values(&[replica]).set(saturate(seen));
    }

    pub fn cluster_redis_failure(&self, replica: &str) {
        self.inner.cluster_redis_failures.with_label_values(&[replica]).inc();
    }

    /// A host's answer to a request a replica sent it met `outcome` on replica `replica`.
    pub fn cluster_answer(&self, replica: &str, outcome: AnswerOutcome) {
        self.inner.cluster_answers.with_label_values(&[replica, outcome.label()]).inc();
    }

    /// A request for a per-principal session held elsewhere, or forwarded here; `outcome` is
    /// `forwarded`, `fallback`, `failed`, `served` or `refused`.
    pub fn cluster_forward(&self, outcome: &'static str) {
        self.inner.cluster_forwards.with_label_values(&[outcome]).inc();
    }

    /// `open` connections of `kind` (`host`, `peer`) on the MCP listener.
    pub fn listener_connections(&self, kind: &'static str, open: usize) {
        self.inner.listener_connections.with_label_values(&[kind]).set(saturate(open));
    }

    /// A value of `kind` read from Redis did not open: it is taken as missing.
    pub fn redis_rejected(&self, kind: SealedKind) {
        self.inner.cluster_redis_rejected.with_label_values(&[kind.label()]).inc();
    }

    /// An HTTP request was refused with 401; `reason` is a bounded label (`missing`, `expired`…).
    pub fn auth_refused(&self, reason: &'static str) {
        self.inner.auth_refused.with_label_values(&[reason]).inc();
    }

    /// A request body was cut; `reason` is `body_timeout` or `body_budget`.
    pub fn request_body_cut(&self, reason: &'static str) {
        self.inner.request_bodies_cut.with_label_values(&[reason]).inc();
    }

    /// A request was refused by policy; `kind` says what it asked for.
    pub fn denied(&self, kind: DenialKind) {
        self.inner.denials.with_label_values(&[kind.label()]).inc();
    }

    /// An audit event was dropped: the writer's queue was full.
    pub fn audit_dropped(&self) {
        self.inner.audit_dropped.inc();
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

/// Registers families under the `mcp_proxy_` prefix and remembers their full names.
struct Builder {
    registry: Registry,
    family_names: Vec<String>,
}

impl Builder {
    fn counter(&mut self, name: &'static str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.register(IntCounterVec::new(Opts::new(name, help).namespace("mcp_proxy"), labels))
    }

    fn gauge(&mut self, name: &'static str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.register(IntGaugeVec::new(Opts::new(name, help).namespace("mcp_proxy"), labels))
    }

    fn counter0(&mut self, name: &'static str, help: &str) -> IntCounter {
        self.register(IntCounter::with_opts(Opts::new(name, help).namespace("mcp_proxy")))
    }

    fn gauge0(&mut self, name: &'static str, help: &str) -> IntGauge {
        self.register(IntGauge::with_opts(Opts::new(name, help).namespace("mcp_proxy")))
    }

    fn histogram(&mut self, name: &'static str, help: &str, labels: &[&str]) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).namespace("mcp_proxy").buckets(LATENCY_BUCKETS.to_vec());
        self.register(HistogramVec::new(opts, labels))
    }

    /// A histogram of the semantic conventions: their name (no `mcp_proxy_` prefix) and their
    /// advised buckets.
    fn semconv_histogram(&mut self, name: &'static str, help: &str, labels: &[&str]) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).buckets(SEMCONV_BUCKETS.to_vec());
        self.register(HistogramVec::new(opts, labels))
    }

    fn register<C>(&mut self, collector: prometheus::Result<C>) -> C
    where
        C: prometheus::core::Collector + Clone + 'static,
    {
        let collector = collector.expect("metric options are static and valid");
        self.registry.register(Box::new(collector.clone())).expect("metric names are unique");
        for desc in collector.desc() {
            self.family_names.push(desc.fq_name.clone());
        }
        collector
    }
}

fn saturate(value: impl TryInto<i64>) -> i64 {
    value.try_into().unwrap_or(i64::MAX)
}
