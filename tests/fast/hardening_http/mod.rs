//! Hardening of the HTTP listeners, through the real binary with raw HTTP clients: session caps,
//! the reaping of initialize-only sessions and of sessions unused after their handshake,
//! sessions bound to their principal for GET and DELETE, header-read timeouts and connection
//! caps on `/mcp` and the admin listener, `Origin` and admin `Host` validation, the
//! per-session subscription cap, and stalled request bodies (the body deadline and the
//! per-principal budget).
//!
//! This module holds the served proxy and its raw requests; stalled request bodies are
//! `bodies`.

mod bodies;

use std::time::Duration;

use crate::support::exposition::Exposition;
use crate::support::proxy::{ProxyProcess, toml_str};
use crate::support::raw_http::{self, LEGACY, Reply};
use anyhow::Context;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MODERN: &str = "2026-07-28";
/// How long one exchange, or the wait for an event, may take.
const DEADLINE: Duration = Duration::from_secs(10);
const ALICE: &str = "alice-token-hardening-1";
const BOB: &str = "bob-token-hardening-2";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)];
/// The labels of legacy HTTP sessions in `mcp_proxy_downstream_sessions`.
const LEGACY_HTTP: [(&str, &str); 2] = [("transport", "http"), ("era", "2025")];

/// Past `max_sessions_per_principal` a principal's next `initialize` gets 503 saying which
/// limit; past `max_sessions` anyone's does; open sessions keep working and are counted in
/// `mcp_proxy_downstream_sessions`; a `DELETE` (answered 204) frees a place.
#[tokio::test]
async fn sessions_past_the_caps_are_refused_clearly_and_open_ones_keep_working() -> anyhow::Result<()> {
    let served = Served::start("max_sessions = 3\nmax_sessions_per_principal = 2\n").await?;
    let alice = [served.open(ALICE).await?, served.open(ALICE).await?];
    let refused = served.initialize(ALICE).await?;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE, "{refused:?}");
    assert!(refused.body.contains("server.max_sessions_per_principal"), "{refused:?}");
    let bob = served.open(BOB).await?;
    let refused = served.initialize(BOB).await?;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE, "{refused:?}");
    assert!(refused.body.contains("(server.max_sessions)"), "{refused:?}");
    for session in alice.iter().chain([&bob]) {
        served.assert_reads(session).await?;
    }
    assert_eq!(served.legacy_sessions_metric().await?, 3.0, "three sessions counted");
    let deleted = served.send(served.request(reqwest::Method::DELETE, &alice[0])).await?;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "DELETE answers 204: {deleted:?}");
    let gone = served.send(served.read(&alice[0])).await?;
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "{gone:?}");
    let again = served.open(ALICE).await?;
    served.assert_reads(&again).await?;
    assert_eq!(served.legacy_sessions_metric().await?, 3.0, "still three sessions counted");
    Ok(())
}

/// A session that only sent `initialize` is closed once `session_idle_timeout` passes, and
/// leaves the sessions metric.
#[tokio::test]
async fn an_initialize_only_session_is_closed_after_the_idle_timeout() -> anyhow::Result<()> {
    let served = Served::start("session_idle_timeout = \"2s\"\n").await?;
    let reply = served.initialize(ALICE).await?;
    let session = Session { id: reply.session.clone().context("no Mcp-Session-Id")?, token: ALICE };
    assert_eq!(served.legacy_sessions_metric().await?, 1.0, "counted from initialize on");
    // The reaper stops counting a session once it has closed it.
    served.proxy.wait_metric("mcp_proxy_downstream_sessions", &LEGACY_HTTP, |n| n == 0.0).await?;
    let after = served.send(served.read(&session)).await?;
    assert_eq!(after.status, StatusCode::NOT_FOUND, "the reaped session is gone: {after:?}");
    Ok(())
}

/// A session that said nothing after its handshake (`initialize` + `initialized`) is closed
/// once `unused_session_idle_timeout` passes, long before the idle timeout, and leaves the
/// sessions metric; sessions that made a request, or hold their GET stream, are kept past it
/// (only the idle timeout applies to them).
#[tokio::test]
async fn a_session_unused_after_its_handshake_is_closed_after_the_unused_timeout() -> anyhow::Result<()> {
    let served = Served::start("session_idle_timeout = \"1h\"\nunused_session_idle_timeout = \"1s\"\n").await?;
    let reading = served.open(ALICE).await?;
    served.assert_reads(&reading).await?;
    let streaming = served.open(ALICE).await?;
    let stream = tokio::time::timeout(DEADLINE, served.request(reqwest::Method::GET, &streaming).send()).await??;
    assert_eq!(stream.status(), StatusCode::OK, "the GET stream is open");
    // Opened after the others last spoke: once it is reaped, they have been silent longer.
    let unused = served.open(ALICE).await?;
    served.proxy.wait_metric("mcp_proxy_downstream_sessions", &LEGACY_HTTP, |n| n == 2.0).await?;
    let gone = served.send(served.read(&unused)).await?;
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "the unused session is closed: {gone:?}");
    served.assert_reads(&reading).await.context("a session that made a request is kept")?;
    served.assert_reads(&streaming).await.context("a session holding its GET stream is kept")?;
    assert_eq!(served.legacy_sessions_metric().await?, 2.0, "the two used sessions counted");
    drop(stream);
    Ok(())
}

/// Another principal holding a session's id gets 404 for GET (the SSE stream) and DELETE, as
/// for an unknown session; the owner's session is untouched and the owner may end it.
#[tokio::test]
async fn get_and_delete_by_another_principal_answer_like_an_unknown_session() -> anyhow::Result<()> {
    let served = Served::start("").await?;
    let alices = served.open(ALICE).await?;
    let stolen = Session { id: alices.id.clone(), token: BOB };
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let reply = served.send(served.request(method.clone(), &stolen)).await?;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{method} by bob: {reply:?}");
        assert_eq!(reply.body, "Not Found: Session not found", "{method} by bob");
    }
    served.assert_reads(&alices).await?;
    let stream = tokio::time::timeout(DEADLINE, served.request(reqwest::Method::GET, &alices).send()).await??;
    assert_eq!(stream.status(), StatusCode::OK, "alice's own GET opens the stream");
    drop(stream);
    let deleted = served.send(served.request(reqwest::Method::DELETE, &alices)).await?;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT, "{deleted:?}");
    Ok(())
}

/// A connection that sends half a request head is closed within `header_read_timeout`, on
/// `/mcp` and on the admin listener — while a session's SSE stream, open longer than that,
/// still delivers its notifications.
#[tokio::test]
async fn a_half_sent_request_is_closed_within_the_header_timeout() -> anyhow::Result<()> {
    let served = Served::start("header_read_timeout = \"1s\"\n").await?;
    let session = served.open(ALICE).await?;
    let reply = served.send(served.call(&session, "resources/subscribe", json!({"uri": served.uri("a.txt")}))).await?;
    anyhow::ensure!(reply.message().is_some_and(|m| m["result"].is_object()), "subscribe: {reply:?}");
    let mut stream = tokio::time::timeout(DEADLINE, served.request(reqwest::Method::GET, &session).send()).await??;
    anyhow::ensure!(stream.status() == StatusCode::OK, "GET stream: {}", stream.status());
    let started = tokio::time::Instant::now();
    for address in [served.mcp_address(), served.admin_address().await?] {
        let mut half = TcpStream::connect(&address).await?;
        half.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl").await?;
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(DEADLINE, half.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "{address}: the half-open connection is still open after {DEADLINE:?}");
    }
    assert!(started.elapsed() >= Duration::from_secs(1), "the SSE stream has been open past the timeout");
    std::fs::write(served.root.join("a.txt"), "changed")?;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut heard = String::new();
    while !heard.contains("notifications/resources/updated") {
        let chunk = tokio::time::timeout_at(deadline, stream.chunk()).await.context("no notification")??;
        heard.push_str(&String::from_utf8_lossy(&chunk.context("the SSE stream ended")?));
    }
    Ok(())
}

/// With `max_connections = 2`, a third connection is not served while two that have sent
/// requests are open, the open ones keep working, and it is served once one of them closes — on
/// both listeners. (A connection that never sent a request is closed for a newcomer instead:
/// tests/fast/bounds.rs.)
#[tokio::test]
async fn past_the_connection_cap_new_connections_wait_and_open_ones_work() -> anyhow::Result<()> {
    let served = Served::start("max_connections = 2\nheader_read_timeout = \"60s\"\n").await?;
    for address in [served.mcp_address(), served.admin_address().await?] {
        let mut working = TcpStream::connect(&address).await?;
        raw_http::healthz(&mut working).await.context("first connection")?;
        let mut idle = TcpStream::connect(&address).await?;
        raw_http::healthz(&mut idle).await.context("second connection")?;
        let mut waiting = TcpStream::connect(&address).await?;
        waiting.write_all(raw_http::HEALTHZ).await?;
        let mut byte = [0u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(500), waiting.read(&mut byte)).await;
        assert!(early.is_err(), "{address}: a third connection was served past the cap");
        raw_http::healthz(&mut working).await.context("the open connection still works")?;
        drop(idle);
        let served_later = tokio::time::timeout(DEADLINE, waiting.read(&mut byte)).await;
        assert!(matches!(served_later, Ok(Ok(1))), "{address}: the waiting connection is served: {served_later:?}");
    }
    Ok(())
}

/// `/mcp` refuses a request whose `Origin` is not in `allowed_origins` with 403, serves one
/// whose `Origin` is, and one without `Origin` (non-browser clients).
#[tokio::test]
async fn mcp_refuses_origins_that_are_not_allowed() -> anyhow::Result<()> {
    let served = Served::start("allowed_origins = [\"http://app.example:*\"]\n").await?;
    for (origin, expected) in [
        (Some("http://evil.example"), StatusCode::FORBIDDEN),
        (Some("http://app.example:3000"), StatusCode::OK),
        (None, StatusCode::OK),
    ] {
        let mut request = served.modern_list(ALICE);
        if let Some(origin) = origin {
            request = request.header("Origin", origin);
        }
        let reply = served.send(request).await?;
        assert_eq!(reply.status, expected, "Origin {origin:?}: {reply:?}");
    }
    Ok(())
}

/// The admin listener answers only for loopback, its own address and `allowed_hosts`; any
/// other `Host` (a DNS-rebinding page) gets 403.
#[tokio::test]
async fn admin_refuses_hosts_that_are_not_allowed() -> anyhow::Result<()> {
    let served = Served::start("allowed_hosts = [\"admin.internal\"]\n").await?;
    let admin = served.admin_address().await?;
    for (host, expected) in [
        ("evil.example:9464", StatusCode::FORBIDDEN),
        ("evil.example", StatusCode::FORBIDDEN),
        (admin.as_str(), StatusCode::OK),
        ("localhost:9464", StatusCode::OK),
        ("admin.internal:9464", StatusCode::OK),
    ] {
        let request = served.http.get(format!("http://{admin}/status")).header("Host", host);
        let reply = served.send(request).await?;
        assert_eq!(reply.status, expected, "Host {host}: {reply:?}");
    }
    Ok(())
}

/// Past `max_subscriptions_per_session` a subscribe gets a clear error; subscribing again to a
/// held URI is fine, and unsubscribing frees a place.
#[tokio::test]
async fn subscriptions_past_the_per_session_cap_are_refused_clearly() -> anyhow::Result<()> {
    let served = Served::start("max_subscriptions_per_session = 2\n").await?;
    let session = served.open(ALICE).await?;
    let [a, b, c] = ["a.txt", "b.txt", "c.txt"].map(|name| served.uri(name));
    for uri in [&a, &b, &a] {
        let reply = served.send(served.call(&session, "resources/subscribe", json!({"uri": uri}))).await?;
        assert!(reply.message().is_some_and(|m| m["result"].is_object()), "subscribe {uri}: {reply:?}");
    }
    let reply = served.send(served.call(&session, "resources/subscribe", json!({"uri": c}))).await?;
    let message = reply.message().context("a JSON-RPC answer")?;
    let text = message["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("server.max_subscriptions_per_session"), "over the cap: {reply:?}");
    let reply = served.send(served.call(&session, "resources/unsubscribe", json!({"uri": a}))).await?;
    assert!(reply.message().is_some_and(|m| m["result"].is_object()), "unsubscribe: {reply:?}");
    let reply = served.send(served.call(&session, "resources/subscribe", json!({"uri": c}))).await?;
    assert!(reply.message().is_some_and(|m| m["result"].is_object()), "after unsubscribing: {reply:?}");
    served.assert_reads(&session).await
}

/// The proxy with bearer principals alice and bob, one folder upstream `docs` (a, b, c.txt),
/// `server_extra` in `[server]`.
struct Served {
    proxy: ProxyProcess,
    http: reqwest::Client,
    root: std::path::PathBuf,
    _files: tempfile::TempDir,
}

/// A legacy session and the token it was opened with.
struct Session {
    id: String,
    token: &'static str,
}

impl Served {
    async fn start(server_extra: &str) -> anyhow::Result<Self> {
        let files = tempfile::tempdir()?;
        for name in ["a.txt", "b.txt", "c.txt"] {
            std::fs::write(files.path().join(name), "alpha")?;
        }
        let root = files.path().canonicalize()?;
        let config = format!(
            "[server]\n{server_extra}\n[auth]\nmode = \"bearer\"\n\n\
             [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
             [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n\
             [[upstreams]]\nname = \"docs\"\ndir = {}\n",
            toml_str(root.to_str().context("utf-8 path")?)
        );
        let proxy = ProxyProcess::start_with(&config, &[], &TOKENS).await?;
        proxy.wait_up("docs", 1).await?;
        let http = reqwest::Client::builder().pool_max_idle_per_host(0).build()?;
        Ok(Self { proxy, http, root, _files: files })
    }

    fn uri(&self, name: &str) -> String {
        format!("docs+file:///{name}")
    }

    fn mcp_address(&self) -> String {
        self.proxy.url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned()
    }

    async fn admin_address(&self) -> anyhow::Result<String> {
        Ok(self.proxy.admin_url().await?.trim_start_matches("http://").to_owned())
    }

    /// `initialize` as `token`; the reply (with the new session id, if one was opened).
    async fn initialize(&self, token: &str) -> anyhow::Result<Reply> {
        self.send(self.post(token).json(&raw_http::initialize("hardening"))).await
    }

    /// `initialize` + `notifications/initialized`: an open session.
    async fn open(&self, token: &'static str) -> anyhow::Result<Session> {
        let reply = self.initialize(token).await?;
        anyhow::ensure!(reply.status == StatusCode::OK, "initialize: {reply:?}");
        let session = Session { id: reply.session.context("no Mcp-Session-Id")?, token };
        let reply = self.send(self.in_session(self.post(token), &session).json(&raw_http::initialized())).await?;
        anyhow::ensure!(reply.status.is_success(), "initialized: {reply:?}");
        Ok(session)
    }

    fn post(&self, token: &str) -> reqwest::RequestBuilder {
        self.http
            .post(&self.proxy.url)
            .bearer_auth(token)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
    }

    fn in_session(&self, request: reqwest::RequestBuilder, session: &Session) -> reqwest::RequestBuilder {
        request.header("Mcp-Session-Id", &session.id).header("MCP-Protocol-Version", LEGACY)
    }

    /// A GET or DELETE on `session`, with its token.
    fn request(&self, method: reqwest::Method, session: &Session) -> reqwest::RequestBuilder {
        let request = self.http.request(method, &self.proxy.url).bearer_auth(session.token);
        self.in_session(request.header("Accept", "text/event-stream"), session)
    }

    fn call(&self, session: &Session, method: &str, params: Value) -> reqwest::RequestBuilder {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        self.in_session(self.post(session.token), session).json(&body)
    }

    fn read(&self, session: &Session) -> reqwest::RequestBuilder {
        self.call(session, "resources/read", json!({"uri": self.uri("a.txt")}))
    }

    /// A stateless 2026-07-28 `resources/list` as `token`.
    fn modern_list(&self, token: &str) -> reqwest::RequestBuilder {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "hardening", "version": "0"}}}});
        self.post(token).header("MCP-Protocol-Version", MODERN).header("Mcp-Method", "resources/list").json(&body)
    }

    async fn assert_reads(&self, session: &Session) -> anyhow::Result<()> {
        let reply = self.send(self.read(session)).await?;
        anyhow::ensure!(reply.contents_text().as_deref() == Some("alpha"), "session {} reads: {reply:?}", session.id);
        Ok(())
    }

    async fn legacy_sessions_metric(&self) -> anyhow::Result<f64> {
        let exposition = Exposition::parse(&self.proxy.admin_get("/metrics").await?)?;
        Ok(exposition.value("mcp_proxy_downstream_sessions", &LEGACY_HTTP).unwrap_or(0.0))
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<Reply> {
        raw_http::send(request).await
    }
}
