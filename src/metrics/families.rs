//! The metric families of [`super::Metrics`], as one table: each family's field, kind, name, labels
//! and help, registered in that order under the `mcp_proxy_` prefix (but the two histograms of
//! the OpenTelemetry MCP semantic conventions, which keep their own names and buckets).

use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

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

/// One field per family (`field: Type = builder_method(args);`), and [`Families::register`], which
/// registers them in the order written.
macro_rules! families {
    ($($(#[$doc:meta])* $field:ident: $ty:ty = $kind:ident($($arg:expr),* $(,)?);)*) => {
        /// Every family, with the registry that holds them and their full names.
        pub(super) struct Families {
            pub(super) registry: Registry,
            pub(super) family_names: Vec<String>,
            $($(#[$doc])* pub(super) $field: $ty,)*
        }

        impl Families {
            /// Every family registered in a fresh registry, `build_info` first (set to 1).
            pub(super) fn register() -> Families {
                let mut b = Builder { registry: Registry::new(), family_names: Vec::new() };
                let build_info = b.gauge("build_info", &["version"], "Always 1; the version label says which build.");
                build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
                $(let $field = b.$kind($($arg),*);)*
                Families { registry: b.registry, family_names: b.family_names, $($field,)* }
            }
        }
    };
}

families! {
    downstream_requests: IntCounterVec = counter("downstream_requests_total", &["method", "outcome"],
        "Downstream requests.");
    downstream_duration: HistogramVec = histogram("downstream_request_duration_seconds", &["method"],
        "Downstream request latency.");
    upstream_requests: IntCounterVec = counter("upstream_requests_total", &["upstream", "method", "outcome"],
        "Requests sent to upstreams.");
    upstream_duration: HistogramVec = histogram("upstream_request_duration_seconds", &["upstream", "method"],
        "Upstream request latency.");
    /// `mcp.server.operation.duration` of the semantic conventions.
    server_operation_duration: HistogramVec = semconv_histogram("mcp_server_operation_duration_seconds", SEMCONV_LABELS,
        "MCP request duration as the server (OpenTelemetry semantic conventions: mcp.server.operation.duration).");
    /// `mcp.client.operation.duration` of the semantic conventions.
    client_operation_duration: HistogramVec = semconv_histogram("mcp_client_operation_duration_seconds", SEMCONV_LABELS,
        "MCP request duration as the client (OpenTelemetry semantic conventions: mcp.client.operation.duration).");
    upstream_up: IntGaugeVec = gauge("upstream_up", &["upstream"], "1 while the upstream is connected.");
    upstream_sessions: IntGaugeVec = gauge("upstream_sessions", &["upstream"],
        "Per-principal or per-host upstream sessions open (besides the shared connection).");
    upstream_sessions_reclaimed: IntCounterVec = counter("upstream_sessions_reclaimed_total", &["upstream"],
        "Upstream sessions reclaimed from a full pool for another principal (their subscriptions wait).");
    upstream_reconnects: IntCounterVec = counter("upstream_reconnects_total", &["upstream"], "Upstream reconnections.");
    catalog_resources: IntGaugeVec = gauge("catalog_resources", &["upstream"], "Resources listed per upstream.");
    catalog_templates: IntGaugeVec = gauge("catalog_templates", &["upstream"], "Resource templates per upstream.");
    catalog_unlisted: IntCounterVec = counter("catalog_unlisted_total", &["upstream"],
        "Upstream entries not listed (URI without a scheme, or listed twice).");
    cache_hits: IntCounterVec = counter("cache_hits_total", &["upstream"], "Reads answered from the cache.");
    cache_misses: IntCounterVec = counter("cache_misses_total", &["upstream"], "Reads that went upstream.");
    cache_inserts: IntCounterVec = counter("cache_inserts_total", &["upstream"], "Values inserted into the cache.");
    cache_evictions: IntCounterVec = counter("cache_evictions_total", &["cause"], "Entries the cache evicted.");
    cache_invalidations: IntCounterVec = counter("cache_invalidations_total", &["cause"],
        "Entries dropped as possibly stale.");
    cache_entries: IntGauge = gauge0("cache_entries", "Entries in the read cache.");
    cache_weighted_bytes: IntGauge = gauge0("cache_weighted_bytes", "Weighted size of the read cache.");
    cache_shared: IntCounterVec = counter("cache_shared_events_total", &["event"],
        "What happened in the cluster's shared cache tier (hits, fills, invalidations, errors).");
    cache_shared_up: IntGauge = gauge0("cache_shared_up", "1 while the cluster's shared cache tier answers.");
    downstream_sessions: IntGaugeVec = gauge("downstream_sessions", &["transport", "era"], "Open downstream sessions.");
    downstream_subscriptions: IntGaugeVec = gauge("downstream_subscriptions", &["upstream"],
        "URIs held by downstream sessions.");
    upstream_subscriptions: IntGaugeVec = gauge("upstream_subscriptions", &["upstream"],
        "URIs the proxy holds upstream.");
    notifications_received: IntCounterVec = counter("notifications_received_total", &["upstream", "kind"],
        "Notifications from upstreams.");
    notifications_delivered: IntCounterVec = counter("notifications_delivered_total", &["kind"],
        "Notifications sent to sessions.");
    notifications_dropped: IntCounterVec = counter("notifications_dropped_total", &["kind"],
        "Notifications a session lost (slow or gone).");
    policy_denials: IntCounterVec = counter("policy_denials_total", &["action", "policy"],
        "Requests or items refused by policy.");
    served_bytes: IntCounterVec = counter("served_bytes_total", &["upstream"], "Resource content bytes served.");
    relay_unattributed: IntCounterVec = counter("relay_unattributed_total", &["upstream", "kind"],
        "Log messages dropped and requests refused: an upstream sent them for no call in flight it named.");
    rate_limited: IntCounterVec = counter("rate_limited_total", &["kind", "scope", "upstream"],
        "Requests refused by a rate limit, before any work: kind (calls, reads), the bucket's scope (principal, upstream) and the upstream the request was for (empty when it named none).");
    cluster_redis_up: IntGaugeVec = gauge("cluster_redis_up", &["replica"],
        "1 while this replica reaches Redis (`[cluster]` only; the label is this replica's id).");
    cluster_replicas: IntGaugeVec = gauge("cluster_replicas", &["replica"],
        "Replicas this one saw alive at its last heartbeat, itself included.");
    cluster_redis_failures: IntCounterVec = counter("cluster_redis_failures_total", &["replica"],
        "Redis commands of this replica that failed or timed out.");
    cluster_answers: IntCounterVec = counter("cluster_answers_total", &["replica", "outcome"],
        "Hosts' answers to requests a replica sent them (sampling, elicitation), by what became of them here: local, forwarded (to the asking replica), delivered (from another), dropped, unheard.");
    cluster_forwards: IntCounterVec = counter("cluster_forwards_total", &["outcome"],
        "Requests for per-principal upstream sessions held by another replica, and retries of calls parked on another: forwarded, fallback (owner unreachable, run here), failed; at the owner: served, resumed (a retry of a call parked there), refused (a bad mark).");
    listener_connections: IntGaugeVec = gauge("listener_connections", &["kind"],
        "Connections open on the MCP listener, by kind: host (counted against server.max_connections) or peer (other replicas', counted apart).");
    cluster_redis_rejected: IntCounterVec = counter("cluster_redis_rejected_total", &["kind"],
        "Values read from Redis that did not open under this cluster's sealing key (forged, sealed under another secret, altered, moved to another key, or written in clear before sealing) and were taken as missing, by kind: cache_entry, session_record, session_news (a host's answer addressed to this replica), kept_answer (a call's answer kept for a host's resumption).");
    auth_refused: IntCounterVec = counter("auth_refused_total", &["reason"],
        "HTTP requests refused with 401, by why the token was not accepted.");
    request_bodies_cut: IntCounterVec = counter("request_bodies_cut_total", &["reason"],
        "Request bodies cut before they arrived whole: body_timeout (not whole within server.body_read_timeout), body_budget (past server.max_body_bytes_per_principal).");
    denials: IntCounterVec = counter("denials_total", &["kind"],
        "Requests refused by policy (a read, call, prompt, template or subscription; list filtering is not counted here).");
    audit_dropped: IntCounter = counter0("audit_dropped_total",
        "Audit events dropped because the audit writer's queue was full.");
}

/// Registers families under the `mcp_proxy_` prefix and remembers their full names.
struct Builder {
    registry: Registry,
    family_names: Vec<String>,
}

impl Builder {
    fn counter(&mut self, name: &'static str, labels: &[&str], help: &str) -> IntCounterVec {
        self.register(IntCounterVec::new(Opts::new(name, help).namespace("mcp_proxy"), labels))
    }

    fn gauge(&mut self, name: &'static str, labels: &[&str], help: &str) -> IntGaugeVec {
        self.register(IntGaugeVec::new(Opts::new(name, help).namespace("mcp_proxy"), labels))
    }

    fn counter0(&mut self, name: &'static str, help: &str) -> IntCounter {
        self.register(IntCounter::with_opts(Opts::new(name, help).namespace("mcp_proxy")))
    }

    fn gauge0(&mut self, name: &'static str, help: &str) -> IntGauge {
        self.register(IntGauge::with_opts(Opts::new(name, help).namespace("mcp_proxy")))
    }

    fn histogram(&mut self, name: &'static str, labels: &[&str], help: &str) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).namespace("mcp_proxy").buckets(LATENCY_BUCKETS.to_vec());
        self.register(HistogramVec::new(opts, labels))
    }

    /// A histogram of the semantic conventions: their name (no `mcp_proxy_` prefix) and their
    /// advised buckets.
    fn semconv_histogram(&mut self, name: &'static str, labels: &[&str], help: &str) -> HistogramVec {
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
