//! Bad input on the proxy's streamable HTTP endpoint, sent raw with reqwest: each gets a clear
//! error, never a hang or a 5xx, and loses nothing — a legacy session keeps working, and a
//! well-formed request on a fresh connection still succeeds afterwards. The proxy runs in process
//! (`support::inproc`): what is under test is what crosses its HTTP listener.

use std::time::Duration;

use crate::support::inproc::InProcessProxy;
use anyhow::Context;
use reqwest::StatusCode;
use serde_json::{Value, json};

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";
/// How long one raw exchange may take; a hang fails the test.
const EXCHANGE_DEADLINE: Duration = Duration::from_secs(10);
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const HEADER_MISMATCH: i64 = -32020;

/// Bodies that are not JSON, or not JSON-RPC, get an HTTP 4xx or a JSON-RPC parse/invalid-request
/// error — in the 2026 stateless mode and inside a legacy session.
#[tokio::test]
async fn invalid_json_gets_a_4xx_or_a_parse_error() -> anyhow::Result<()> {
    let served = Served::start().await?;
    let session = served.legacy_session().await?;
    let bodies: [&[u8]; 6] =
        [b"{not json", b"[1, 2", b"", b"\"a string\"", b"{\"jsonrpc\":\"2.0\"}", b"\xff\xfe\x00garbage"];
    for body in bodies {
        for headers in [served.modern_headers("resources/list", None), session.headers()] {
            let reply = served.post(&headers, body.to_vec()).await?;
            let code = reply.json_rpc().and_then(|m| m["error"]["code"].as_i64());
            assert!(
                reply.status.is_client_error() || matches!(code, Some(PARSE_ERROR | INVALID_REQUEST)),
                "{:?}: {reply:?}",
                String::from_utf8_lossy(body)
            );
        }
    }
    served.assert_still_serves(Some(&session)).await
}

/// A `resources/read` without `uri` is invalid params (-32602), in both eras.
#[tokio::test]
async fn read_without_uri_gets_invalid_params_in_both_eras() -> anyhow::Result<()> {
    let served = Served::start().await?;
    let session = served.legacy_session().await?;
    let modern = served.modern_request(7, "resources/read", json!({}));
    let reply = served.post(&served.modern_headers("resources/read", None), modern).await?;
    assert_eq!(reply.error_code(), Some(INVALID_PARAMS), "2026-07-28: {reply:?}");
    let legacy = json!({"jsonrpc": "2.0", "id": 7, "method": "resources/read", "params": {}});
    let reply = served.post(&session.headers(), legacy).await?;
    assert_eq!(reply.error_code(), Some(INVALID_PARAMS), "legacy: {reply:?}");
    served.assert_still_serves(Some(&session)).await
}

/// A 2026-07-28 request whose `Mcp-Method` (or `Mcp-Name`) header disagrees with its body is
/// refused with HTTP 400 and -32020 before it reaches the proxy.
#[tokio::test]
async fn standard_headers_that_disagree_with_the_body_get_400() -> anyhow::Result<()> {
    let served = Served::start().await?;
    let read = served.modern_request(3, "resources/read", json!({"uri": served.file_uri}));
    let wrong_method = served.modern_headers("resources/list", Some(&served.file_uri));
    let wrong_name = served.modern_headers("resources/read", Some("docs+file:///elsewhere"));
    for headers in [wrong_method, wrong_name] {
        let reply = served.post(&headers, read.clone()).await?;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{headers:?}: {reply:?}");
        assert_eq!(reply.error_code(), Some(HEADER_MISMATCH), "{headers:?}: {reply:?}");
    }
    served.assert_still_serves(None).await
}

/// A method nobody implements gets -32601 in both eras.
#[tokio::test]
async fn unknown_method_gets_method_not_found_in_both_eras() -> anyhow::Result<()> {
    let served = Served::start().await?;
    let session = served.legacy_session().await?;
    let modern = served.modern_request(5, "resources/frobnicate", json!({}));
    let reply = served.post(&served.modern_headers("resources/frobnicate", None), modern).await?;
    assert_eq!(reply.error_code(), Some(METHOD_NOT_FOUND), "2026-07-28: {reply:?}");
    let legacy = json!({"jsonrpc": "2.0", "id": 5, "method": "resources/frobnicate", "params": {}});
    let reply = served.post(&session.headers(), legacy).await?;
    assert_eq!(reply.error_code(), Some(METHOD_NOT_FOUND), "legacy: {reply:?}");
    served.assert_still_serves(Some(&session)).await
}

/// A body over the 4 MiB request limit gets 413, in both eras.
#[tokio::test]
async fn oversized_body_gets_413() -> anyhow::Result<()> {
    let served = Served::start().await?;
    let session = served.legacy_session().await?;
    let huge_uri = format!("docs+file:///{}", "a".repeat(5 << 20));
    let modern = served.modern_request(9, "resources/read", json!({"uri": huge_uri}));
    let legacy = json!({"jsonrpc": "2.0", "id": 9, "method": "resources/read", "params": {"uri": huge_uri}});
    for (headers, body) in [(served.modern_headers("resources/read", None), modern), (session.headers(), legacy)] {
        let reply = served.post(&headers, body).await?;
        assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE, "{reply:?}");
    }
    served.assert_still_serves(Some(&session)).await
}

/// The 2026-07-28 HTTP transport is POST only: GET and DELETE without a session get 405 with
/// `Allow: POST`.
#[tokio::test]
async fn get_and_delete_in_the_2026_era_get_405() -> anyhow::Result<()> {
    let served = Served::start().await?;
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let request = served
            .http
            .request(method.clone(), &served.proxy.url)
            .header("Accept", "text/event-stream")
            .header("MCP-Protocol-Version", MODERN);
        let reply = exchange(request).await?;
        assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED, "{method}: {reply:?}");
        assert_eq!(reply.allow.as_deref(), Some("POST"), "{method}: {reply:?}");
    }
    served.assert_still_serves(None).await
}

/// The proxy (one `dir` upstream `docs` holding `a.txt`) and a reqwest client that opens a new
/// connection for every request.
struct Served {
    proxy: InProcessProxy,
    http: reqwest::Client,
    file_uri: String,
    _files: tempfile::TempDir,
}

/// A legacy (2025-11-25) session opened by hand.
struct LegacySession {
    id: String,
    url: String,
}

/// What came back: the status, `Allow`, and the body (for SSE, up to the first JSON-RPC message).
#[derive(Debug)]
struct Reply {
    status: StatusCode,
    allow: Option<String>,
    body: String,
}

impl Served {
    async fn start() -> anyhow::Result<Self> {
        let files = tempfile::tempdir()?;
        std::fs::write(files.path().join("a.txt"), "alpha")?;
        let root = files.path().canonicalize()?;
        let config = format!(
            "[[upstreams]]\nname = \"docs\"\ndir = {}\n",
            crate::support::proxy::toml_str(root.to_str().unwrap())
        );
        let proxy = InProcessProxy::start(&config).await?;
        proxy.wait_up("docs", 1).await?;
        Ok(Self { proxy, http: fresh_client()?, file_uri: "docs+file:///a.txt".to_string(), _files: files })
    }

    /// Headers of a 2026-07-28 request for `method` (`Mcp-Name` when given).
    fn modern_headers(&self, method: &str, name: Option<&str>) -> Vec<(String, String)> {
        let mut headers = vec![("MCP-Protocol-Version".into(), MODERN.into()), ("Mcp-Method".into(), method.into())];
        if let Some(name) = name {
            headers.push(("Mcp-Name".into(), name.into()));
        }
        headers
    }

    /// A 2026-07-28 request: `params` plus the protocol `_meta`.
    fn modern_request(&self, id: u64, method: &str, mut params: Value) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "malformed-http", "version": "0"},
        });
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    /// POST `body` (a JSON value or raw bytes) with the MCP content headers plus `headers`.
    async fn post(&self, headers: &[(String, String)], body: impl Into<Body>) -> anyhow::Result<Reply> {
        let mut request = self
            .http
            .post(&self.proxy.url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .body(body.into().0);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        exchange(request).await
    }

    /// initialize + notifications/initialized, by hand.
    async fn legacy_session(&self) -> anyhow::Result<LegacySession> {
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "malformed-http", "version": "0"}}});
        let response = tokio::time::timeout(
            EXCHANGE_DEADLINE,
            self.http
                .post(&self.proxy.url)
                .header("Accept", "application/json, text/event-stream")
                .header("Content-Type", "application/json")
                .body(initialize.to_string())
                .send(),
        )
        .await
        .context("initialize hung")??;
        let id = response.headers().get("mcp-session-id").context("no Mcp-Session-Id")?.to_str()?.to_owned();
        let reply = read_reply(response).await?;
        anyhow::ensure!(reply.json_rpc().is_some_and(|m| m["result"].is_object()), "initialize: {reply:?}");
        let session = LegacySession { id, url: self.proxy.url.clone() };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let reply = self.post(&session.headers(), initialized).await?;
        anyhow::ensure!(reply.status == StatusCode::ACCEPTED, "initialized: {reply:?}");
        Ok(session)
    }

    /// Nothing was lost: `session` (if any) still reads, and so does a 2026-07-28 request on a
    /// fresh connection.
    async fn assert_still_serves(&self, session: Option<&LegacySession>) -> anyhow::Result<()> {
        if let Some(session) = session {
            let read =
                json!({"jsonrpc": "2.0", "id": 100, "method": "resources/read", "params": {"uri": self.file_uri}});
            let reply = self.post(&session.headers(), read).await?;
            assert_eq!(
                self.read_text(&reply),
                Some("alpha".into()),
                "the legacy session {} still reads: {reply:?}",
                session.url
            );
        }
        let read = self.modern_request(101, "resources/read", json!({"uri": self.file_uri}));
        let headers = self.modern_headers("resources/read", Some(&self.file_uri));
        let reply = self.post(&headers, read).await?;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert_eq!(self.read_text(&reply), Some("alpha".into()), "a fresh connection still reads: {reply:?}");
        Ok(())
    }

    fn read_text(&self, reply: &Reply) -> Option<String> {
        let message = reply.json_rpc()?;
        let content = &message["result"]["contents"][0];
        (content["uri"] == self.file_uri.as_str()).then(|| content["text"].as_str().map(str::to_owned))?
    }
}

impl LegacySession {
    fn headers(&self) -> Vec<(String, String)> {
        vec![("Mcp-Session-Id".into(), self.id.clone()), ("MCP-Protocol-Version".into(), LEGACY.into())]
    }
}

impl Reply {
    /// The JSON-RPC message in the body: the whole body when it is JSON, else the first SSE
    /// `data:` line that parses as JSON.
    fn json_rpc(&self) -> Option<Value> {
        if let Ok(value) = serde_json::from_str::<Value>(&self.body) {
            return Some(value);
        }
        self.body
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .find_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
    }

    fn error_code(&self) -> Option<i64> {
        self.json_rpc()?["error"]["code"].as_i64()
    }
}

/// A request body: JSON text or raw bytes.
struct Body(Vec<u8>);

impl From<Value> for Body {
    fn from(value: Value) -> Self {
        Body(value.to_string().into_bytes())
    }
}

impl From<Vec<u8>> for Body {
    fn from(bytes: Vec<u8>) -> Self {
        Body(bytes)
    }
}

/// A client without connection reuse: every request opens a new connection.
fn fresh_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder().pool_max_idle_per_host(0).build()?)
}

/// Send and read the reply within [`EXCHANGE_DEADLINE`]; a 5xx is a failure.
async fn exchange(request: reqwest::RequestBuilder) -> anyhow::Result<Reply> {
    let response = tokio::time::timeout(EXCHANGE_DEADLINE, request.send()).await.context("no reply: a hang")??;
    let reply = read_reply(response).await?;
    anyhow::ensure!(!reply.status.is_server_error(), "a server error: {reply:?}");
    Ok(reply)
}

/// Read the body to its end, or (SSE) until the first JSON-RPC message, within the deadline.
async fn read_reply(mut response: reqwest::Response) -> anyhow::Result<Reply> {
    let status = response.status();
    let allow = response.headers().get("allow").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut bytes = Vec::new();
    let deadline = tokio::time::Instant::now() + EXCHANGE_DEADLINE;
    loop {
        let chunk =
            tokio::time::timeout_at(deadline, response.chunk()).await.context("the body never ended: a hang")??;
        let Some(chunk) = chunk else { break };
        bytes.extend_from_slice(&chunk);
        let reply = Reply { status, allow: allow.clone(), body: String::from_utf8_lossy(&bytes).into_owned() };
        if reply.json_rpc().is_some_and(|m| m.get("id").is_some()) && reply.body.ends_with('\n') {
            return Ok(reply);
        }
    }
    Ok(Reply { status, allow, body: String::from_utf8_lossy(&bytes).into_owned() })
}
