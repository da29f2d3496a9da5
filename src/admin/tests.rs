use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::cluster::{ClusterReport, RedisState};
use crate::protocol::Era;
use crate::upstream::{LinkState, UpstreamStatus};

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
    assert_eq!((code, serde_json::from_str::<Value>(&body).unwrap()), (200, json!({ "ready": true, "missing": [] })));

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
        let redis = crate::cluster::RedisHealth { state, last_error: None, since_unix: 0, failures: 0, recoveries: 0 };
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
