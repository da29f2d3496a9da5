//! The admin listener, separate from the MCP endpoint: `GET /metrics` (Prometheus text),
//! `/healthz` (the process answers), `/readyz` (every required upstream is up) and `/status`
//! (JSON: upstreams, cache and subscription totals).
//!
//! It knows nothing of the proxy's parts: it renders [`Metrics`] and asks the `status` closure
//! of [`AdminState`] for a [`StatusReport`] on each `/readyz` and `/status` request.
//!
//! Like `/mcp`, it answers only requests whose `Host` is loopback, its own address or one of
//! `server.allowed_hosts` (a DNS-rebinding page cannot read it), caps its connections and
//! times out slow request heads (see [`crate::listener`]).
//!
//! Invariant: nothing here carries a principal's secret or a session id; `/status` shows what
//! `last_error` texts upstream supervision chose to record (ours, not upstream internals).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::cluster::{ClusterReport, RedisState};
use crate::coherence::Tracked;
use crate::listener::{self, ConnectionLimits, allowed_hosts};
use crate::metrics::Metrics;
use crate::protocol::Era;
use crate::upstream::{LinkState, UpstreamStatus};

/// What the admin handlers read from.
#[derive(Clone)]
pub struct AdminState {
    pub metrics: Metrics,
    /// Called on each `/readyz` and `/status` request; keep it quick (no awaiting, short locks).
    pub status: Arc<dyn Fn() -> StatusReport + Send + Sync>,
}

/// The body of `/status`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StatusReport {
    pub upstreams: Vec<UpstreamReport>,
    pub cache: CacheReport,
    pub subscriptions: SubscriptionReport,
    /// What the last reload of the configuration did (absent until one ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_reload: Option<ReloadReport>,
    /// What the last reload of the policies folder did (absent until one ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_reload: Option<PolicyReloadReport>,
    /// `[cluster]`: this replica, the replicas seen, Redis's state (absent for one process).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterReport>,
}

/// Cache totals in `/status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CacheReport {
    pub enabled: bool,
    pub entries: u64,
    pub weighted_bytes: u64,
    pub max_bytes: u64,
    /// Per-URI bookkeeping kept (bounded; returns to zero as entries expire).
    pub tracked: Tracked,
}

/// Subscription totals in `/status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SubscriptionReport {
    /// Registered notification outlets (legacy sessions and listen streams).
    pub hosts: usize,
    /// Holder × URI pairs, the cache's own holds included.
    pub held: usize,
    /// Distinct upstream URIs held.
    pub upstream_uris: usize,
}

/// The outcome of the last configuration reload in `/status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReloadReport {
    /// `applied`, `unchanged` or `rejected`.
    pub outcome: &'static str,
    /// Seconds since the Unix epoch.
    pub at_unix: u64,
    /// Every problem of a rejected config (`at: message`), or the sections that need a restart.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// Upstreams given other roots in place, without a reconnect (not in `changed`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roots_changed: Vec<String>,
    /// Sections that differ but take effect only after a restart.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restart_needed: Vec<String>,
}

/// The last reload of the policies folder in `/status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyReloadReport {
    /// Reloads so far, applied or refused.
    pub reloads: u64,
    /// `applied`, or `refused` (the files had problems; the rules in force stay).
    pub outcome: &'static str,
    /// Hosts the last applied reload told their resource list changed.
    pub hosts_told: usize,
    /// Hosts the last applied reload told their tools or prompts changed.
    pub tools_told: usize,
}

/// One upstream in `/status`.
#[derive(Debug, Clone, Serialize)]
pub struct UpstreamReport {
    pub name: String,
    pub state: LinkState,
    pub era: Option<Era>,
    /// `/readyz` waits for it.
    pub required: bool,
    pub resources: usize,
    pub templates: usize,
    /// Its tools and prompts as hosts see them (0 until they are fetched, and while it is down).
    pub tools: usize,
    pub prompts: usize,
    /// Why it is (or last was) down, in plain words.
    pub last_error: Option<String>,
    /// What its stdio child last wrote to stderr before it went down (bounded).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stderr_tail: Vec<String>,
    pub reconnects: u64,
    /// Per-principal or per-host upstream sessions open besides the shared connection.
    pub sessions: usize,
}

/// Whether the proxy is ready, and which required upstreams keep it from being so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    pub ready: bool,
    /// Required upstreams that are not up, in report order.
    pub missing: Vec<String>,
    /// `[cluster]`: Redis as this replica sees it (it keeps the replica unready only with
    /// `ready_without_redis = false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<RedisState>,
}

/// Serve the admin routes on `listener` until `shutdown`, within `limits`. Only requests
/// whose `Host` is loopback, the listen address or one of `extra_hosts`
/// (`server.allowed_hosts`) are answered (DNS rebinding); others get 403.
pub async fn serve_admin(
    listener: TcpListener,
    state: AdminState,
    limits: ConnectionLimits,
    extra_hosts: Vec<String>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let address = listener.local_addr()?;
    let hosts: Arc<[String]> = allowed_hosts(address, &extra_hosts).into();
    let app = router(state).layer(axum::middleware::from_fn_with_state(hosts, require_allowed_host));
    tracing::info!(address = %address, "admin listening at http://{address}");
    listener::serve(listener, app, limits, None, None, shutdown).await
}

/// 403 unless the request's `Host` (port aside, or exactly `host:port`) is in `allowed`.
async fn require_allowed_host(State(allowed): State<Arc<[String]>>, request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|value| value.to_str().ok()).unwrap_or("");
    if host_allowed(host, &allowed) {
        return next.run(request).await;
    }
    tracing::warn!(host, "admin request with a disallowed Host refused (possible DNS rebinding)");
    (StatusCode::FORBIDDEN, "Forbidden: Host header is not allowed\n").into_response()
}

/// Whether a `Host` header value names one of `allowed` (names or `name:port`).
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host.as_str(), |(name, port)| match port.parse::<u16>() {
            Ok(_) => name,
            Err(_) => host.as_str(),
        }),
    };
    !name.is_empty()
        && allowed.iter().any(|entry| entry.eq_ignore_ascii_case(name) || entry.eq_ignore_ascii_case(&host))
}

/// The admin routes, for embedding or testing without a listener.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .with_state(state)
}

impl StatusReport {
    /// Ready when every required upstream is up (and, with `[cluster] ready_without_redis =
    /// false`, Redis is reached).
    pub fn readiness(&self) -> Readiness {
        let missing: Vec<String> = self
            .upstreams
            .iter()
            .filter(|upstream| upstream.required && upstream.state != LinkState::Up)
            .map(|upstream| upstream.name.clone())
            .collect();
        let redis = self.cluster.as_ref().map(|cluster| cluster.redis.state);
        let cluster_ready = !self.cluster.as_ref().is_some_and(ClusterReport::keeps_unready);
        Readiness { ready: missing.is_empty() && cluster_ready, missing, redis }
    }
}

impl UpstreamReport {
    /// From an upstream's health snapshot plus what the config and the catalog know.
    pub fn new(status: UpstreamStatus, required: bool, resources: usize, templates: usize) -> Self {
        let UpstreamStatus { name, state, era, last_error, stderr_tail, reconnects, sessions } = status;
        let (tools, prompts) = (0, 0);
        Self {
            name,
            state,
            era,
            required,
            resources,
            templates,
            tools,
            prompts,
            last_error,
            stderr_tail,
            reconnects,
            sessions,
        }
    }

    /// With the tools and prompts the offerings catalog holds for it.
    pub fn with_offerings(mut self, tools: usize, prompts: usize) -> Self {
        (self.tools, self.prompts) = (tools, prompts);
        self
    }
}

/// `/status` is the report with the readiness verdict alongside.
#[derive(Serialize)]
struct StatusBody {
    #[serde(flatten)]
    readiness: Readiness,
    #[serde(flatten)]
    report: StatusReport,
}

async fn metrics(State(state): State<AdminState>) -> Response {
    ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], state.metrics.render()).into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AdminState>) -> Response {
    let readiness = (state.status)().readiness();
    let code = if readiness.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, Json(readiness)).into_response()
}

async fn status(State(state): State<AdminState>) -> Json<StatusBody> {
    let report = (state.status)();
    Json(StatusBody { readiness: report.readiness(), report })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;

    /// (name, state, required) of each upstream in the report; tests change them.
    type States = Arc<Mutex<Vec<(&'static str, LinkState, bool)>>>;

    /// A real admin listener whose status report reads `states`.
    struct Fixture {
        states: States,
        base: String,
        shutdown: CancellationToken,
        server: tokio::task::JoinHandle<std::io::Result<()>>,
        metrics: Metrics,
    }

    async fn start(states: Vec<(&'static str, LinkState, bool)>) -> Fixture {
        let states: States = Arc::new(Mutex::new(states));
        let metrics = Metrics::new();
        let report_states = states.clone();
        let status = Arc::new(move || StatusReport {
            upstreams: report_states
                .lock()
                .unwrap()
                .iter()
                .map(|&(name, state, required)| report(name, state, required))
                .collect(),
            cache: CacheReport { entries: 3, weighted_bytes: 4096, ..CacheReport::default() },
            subscriptions: SubscriptionReport { hosts: 2, held: 1, upstream_uris: 1 },
            config_reload: None,
            policy_reload: None,
            cluster: None,
        });
        let state = AdminState { metrics: metrics.clone(), status };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let shutdown = CancellationToken::new();
        let limits = ConnectionLimits { max_connections: 16, header_read_timeout: Duration::from_secs(5) };
        let server = tokio::spawn(serve_admin(listener, state, limits, Vec::new(), shutdown.clone()));
        Fixture { states, base, shutdown, server, metrics }
    }

    fn report(name: &str, state: LinkState, required: bool) -> UpstreamReport {
        let era = (state == LinkState::Up).then_some(Era::Modern);
        let last_error = (state == LinkState::Down).then(|| "connection closed".to_string());
        let status = UpstreamStatus {
            name: name.into(),
            state,
            era,
            last_error,
            stderr_tail: Vec::new(),
            reconnects: 1,
            sessions: 0,
        };
        UpstreamReport::new(status, required, 12, 2).with_offerings(3, 1)
    }

    async fn get(fixture: &Fixture, path: &str) -> (u16, String, String) {
        let client = crate::crypto::http_client().build().expect("a client");
        let response = client.get(format!("{}{path}", fixture.base)).send().await.unwrap();
        let code = response.status().as_u16();
        let content_type =
            response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
        (code, content_type, response.text().await.unwrap())
    }

    #[tokio::test]
    async fn healthz_and_metrics_answer_over_http() {
        let fixture = start(vec![("docs", LinkState::Up, true)]).await;
        fixture.metrics.cache_hit("docs");
        assert_eq!(get(&fixture, "/healthz").await, (200, "text/plain; charset=utf-8".into(), "ok".into()));
        let (code, content_type, body) = get(&fixture, "/metrics").await;
        assert_eq!((code, content_type.as_str()), (200, "text/plain; version=0.0.4"));
        assert!(body.contains("mcp_proxy_cache_hits_total{upstream=\"docs\"} 1"), "{body}");
        assert!(body.contains("# TYPE mcp_proxy_build_info gauge"));
        fixture.shutdown.cancel();
        fixture.server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn readyz_flips_with_the_required_upstreams_only() {
        let fixture = start(vec![("docs", LinkState::Up, true), ("mem", LinkState::Down, false)]).await;
        let (code, _, body) = get(&fixture, "/readyz").await;
        assert_eq!(
            (code, serde_json::from_str::<Value>(&body).unwrap()),
            (200, json!({ "ready": true, "missing": [] }))
        );

        fixture.states.lock().unwrap()[0].1 = LinkState::Connecting;
        fixture.states.lock().unwrap()[1].2 = true;
        let (code, _, body) = get(&fixture, "/readyz").await;
        let expected = json!({ "ready": false, "missing": ["docs", "mem"] });
        assert_eq!((code, serde_json::from_str::<Value>(&body).unwrap()), (503, expected));

        fixture.states.lock().unwrap()[0].1 = LinkState::Up;
        fixture.states.lock().unwrap()[1].1 = LinkState::Up;
        assert_eq!(get(&fixture, "/readyz").await.0, 200);
        fixture.shutdown.cancel();
    }

    #[tokio::test]
    async fn status_is_json_with_every_upstream_and_the_totals() {
        let fixture = start(vec![("docs", LinkState::Up, true), ("mem", LinkState::Down, true)]).await;
        let (code, content_type, body) = get(&fixture, "/status").await;
        assert_eq!((code, content_type.as_str()), (200, "application/json"));
        let status: Value = serde_json::from_str(&body).unwrap();
        let expected = json!({
            "ready": false,
            "missing": ["mem"],
            "upstreams": [
                { "name": "docs", "state": "up", "era": "2026-07-28", "required": true, "resources": 12,
                  "templates": 2, "tools": 3, "prompts": 1, "last_error": null, "reconnects": 1, "sessions": 0 },
                { "name": "mem", "state": "down", "era": null, "required": true, "resources": 12,
                  "templates": 2, "tools": 3, "prompts": 1, "last_error": "connection closed", "reconnects": 1, "sessions": 0 },
            ],
            "cache": {
                "enabled": false, "entries": 3, "weighted_bytes": 4096, "max_bytes": 0,
                "tracked": { "generations": 0, "hints": 0, "holds": 0, "stale": 0 }
            },
            "subscriptions": { "hosts": 2, "held": 1, "upstream_uris": 1 },
        });
        assert_eq!(status, expected);
        fixture.shutdown.cancel();
    }

    #[test]
    fn readiness_ignores_optional_upstreams() {
        fn check(upstreams: &[(&str, LinkState, bool)], missing: &[&str]) {
            let report = StatusReport {
                upstreams: upstreams.iter().map(|&(name, state, required)| report(name, state, required)).collect(),
                ..StatusReport::default()
            };
            let ready = missing.is_empty();
            let expected = Readiness { ready, missing: missing.iter().map(|m| m.to_string()).collect(), redis: None };
            assert_eq!(report.readiness(), expected, "{upstreams:?}");
        }
        check(&[], &[]);
        check(&[("docs", LinkState::Up, true)], &[]);
        check(&[("docs", LinkState::Connecting, true)], &["docs"]);
        check(&[("docs", LinkState::Down, false)], &[]);
        check(&[("a", LinkState::Down, true), ("b", LinkState::Up, true), ("c", LinkState::Down, true)], &["a", "c"]);
    }

    #[test]
    fn redis_down_keeps_a_replica_unready_only_when_configured_so() {
        fn check(state: RedisState, ready_without_redis: bool, ready: bool) {
            let redis =
                crate::cluster::RedisHealth { state, last_error: None, since_unix: 0, failures: 0, recoveries: 0 };
            let cluster = ClusterReport {
                replica: "r1".into(),
                replicas: vec!["r1".into()],
                reachable: Vec::new(),
                redis,
                redis_url: "redis://127.0.0.1:6379".into(),
                ready_without_redis,
            };
            let report = StatusReport { cluster: Some(cluster), ..StatusReport::default() };
            let expected = Readiness { ready, missing: Vec::new(), redis: Some(state) };
            assert_eq!(report.readiness(), expected, "{state:?} {ready_without_redis}");
        }
        check(RedisState::Up, true, true);
        check(RedisState::Down, true, true);
        check(RedisState::Up, false, true);
        check(RedisState::Down, false, false);
        check(RedisState::Connecting, false, false);
        assert_eq!(StatusReport::default().readiness().redis, None, "no cluster, no redis field");
    }

    #[test]
    fn host_allowed_takes_names_with_or_without_port() {
        let allowed: Vec<String> = ["localhost", "127.0.0.1", "::1", "admin.internal"].map(String::from).to_vec();
        for (host, expected) in [
            ("localhost", true),
            ("LOCALHOST:9464", true),
            ("127.0.0.1:1", true),
            ("[::1]:9464", true),
            ("admin.internal:80", true),
            ("evil.example", false),
            ("evil.example:9464", false),
            ("localhost.evil.example", false),
            ("", false),
        ] {
            assert_eq!(host_allowed(host, &allowed), expected, "{host}");
        }
    }
}
