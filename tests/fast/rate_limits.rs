//! Rate limits, through the real binary in front of the fixture (stdio) and a folder upstream:
//! over HTTP a call or read past its principal's bucket gets `429` with `Retry-After` and the
//! JSON-RPC error (request id, `data.retryAfterMs`) on a 2025 session and a 2026-07-28 stateless
//! request alike, while another principal's requests all succeed; over stdio the JSON-RPC error
//! alone, in both eras; a per-upstream limit refuses only that upstream; tokens come back; one
//! JWT subject has one bucket, whatever groups its tokens carry.
//!
//! Rates are per minute with small bursts, so no token comes back while a test spends them,
//! however slow the machine; the refill test waits for its success with a deadline.

use anyhow::Context;
use reqwest::StatusCode;
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams};
use serde_json::{Value, json};

use crate::support::eventually;
use crate::support::fixture::{DEADLINE, Era, connect_stdio_proxy, error_code};
use crate::support::jwt::{ISSUER, JwksServer, RESOURCE, claims, rsa_a};
use crate::support::proxy::{ProxyProcess, fixture_upstream, toml_str, write_config};
use crate::support::raw_http::{self, LEGACY, Reply};

const ALICE: &str = "alice-token-rate-4b1e";
const BOB: &str = "bob-token-rate-9d2c";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)];
const MODERN: &str = "2026-07-28";
/// How long the refill test waits for its bucket's next token (10 s away at most).
const REFILL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);
/// The JSON-RPC code of a refusal by a rate limit.
const RATE_LIMITED: i64 = -32029;

/// Bearer principals alice and bob, then `rest` (sections, upstreams).
fn config(rest: &str) -> String {
    format!(
        "[auth]\nmode = \"bearer\"\n\n\
         [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n{rest}"
    )
}

/// A folder upstream `docs` holding a.txt ("alpha"); the folder is kept by the caller.
fn folder() -> anyhow::Result<(tempfile::TempDir, String)> {
    let files = tempfile::tempdir()?;
    std::fs::write(files.path().join("a.txt"), "alpha")?;
    let root = files.path().canonicalize()?;
    let upstream = format!("[[upstreams]]\nname = \"docs\"\ndir = {}\n", toml_str(root.to_str().context("utf-8")?));
    Ok((files, upstream))
}

/// Raw MCP over HTTP to one proxy.
struct Host<'a> {
    http: reqwest::Client,
    proxy: &'a ProxyProcess,
    token: &'a str,
    /// The 2025 session, once opened.
    session: Option<String>,
}

impl<'a> Host<'a> {
    fn new(proxy: &'a ProxyProcess, token: &'a str) -> Self {
        Host { http: reqwest::Client::new(), proxy, token, session: None }
    }

    fn post(&self) -> reqwest::RequestBuilder {
        self.http
            .post(&self.proxy.url)
            .bearer_auth(self.token)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
    }

    /// Open a 2025-11-25 session (initialize, initialized).
    async fn open_session(&mut self) -> anyhow::Result<()> {
        let reply = raw_http::send(self.post().json(&raw_http::initialize("rate"))).await?;
        anyhow::ensure!(reply.status == StatusCode::OK, "initialize: {reply:?}");
        let session = reply.session.context("no Mcp-Session-Id")?;
        let initialized = self.in_session(&session).json(&raw_http::initialized());
        anyhow::ensure!(raw_http::send(initialized).await?.status.is_success(), "initialized");
        self.session = Some(session);
        Ok(())
    }

    fn in_session(&self, session: &str) -> reqwest::RequestBuilder {
        self.post().header("Mcp-Session-Id", session).header("MCP-Protocol-Version", LEGACY)
    }

    /// `method` with `params` on the session, request id `id`.
    async fn legacy(&self, id: u64, method: &str, params: Value) -> anyhow::Result<(Reply, Option<String>)> {
        let session = self.session.as_deref().context("no session")?;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        send(self.in_session(session).json(&body)).await
    }

    /// `method` as a stateless 2026-07-28 request naming `name` (`Mcp-Name`), request id `id`.
    async fn modern(
        &self,
        id: u64,
        method: &str,
        name: &str,
        mut params: Value,
    ) -> anyhow::Result<(Reply, Option<String>)> {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "rate", "version": "0"}});
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let request = self
            .post()
            .header("MCP-Protocol-Version", MODERN)
            .header("Mcp-Method", method)
            .header("Mcp-Name", name)
            .json(&body);
        send(request).await
    }

    async fn modern_read(&self, id: u64, uri: &str) -> anyhow::Result<(Reply, Option<String>)> {
        self.modern(id, "resources/read", uri, json!({"uri": uri})).await
    }

    async fn modern_call(&self, id: u64, tool: &str) -> anyhow::Result<(Reply, Option<String>)> {
        self.modern(id, "tools/call", tool, json!({"name": tool, "arguments": {}})).await
    }
}

/// Send; the reply and its `Retry-After`.
async fn send(request: reqwest::RequestBuilder) -> anyhow::Result<(Reply, Option<String>)> {
    let mut response = tokio::time::timeout(DEADLINE, request.send()).await.context("no reply")??;
    let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut reply = Reply { status: response.status(), session: None, body: String::new() };
    // To its end, or (an SSE reply on a session) to the first JSON-RPC answer.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while let Some(chunk) = tokio::time::timeout_at(deadline, response.chunk()).await.context("body hung")?? {
        reply.body.push_str(&String::from_utf8_lossy(&chunk));
        if reply.message().is_some_and(|m| m.get("id").is_some()) && reply.body.ends_with('\n') {
            break;
        }
    }
    Ok((reply, retry_after))
}

/// A success: 200 and a JSON-RPC result.
fn assert_ok(what: &str, (reply, _): &(Reply, Option<String>)) {
    assert_eq!(reply.status, StatusCode::OK, "{what}: {reply:?}");
    let message = reply.message().unwrap_or_default();
    assert!(message.get("result").is_some(), "{what}: {message}");
}

/// A refusal: 429, `Retry-After` of whole seconds within `max_secs`, and the JSON-RPC error of
/// request `id` with `data.retryAfterMs`, `data.limit` and `data.scope`. The error's data.
fn assert_limited(what: &str, (reply, retry_after): &(Reply, Option<String>), id: u64, max_secs: u64) -> Value {
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{what}: {reply:?}");
    let secs: u64 = retry_after.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!((1..=max_secs).contains(&secs), "{what}: Retry-After {retry_after:?}");
    let message: Value = serde_json::from_str(&reply.body).unwrap_or_default();
    assert_eq!(message["id"], json!(id), "{what}: {message}");
    assert_eq!(message["error"]["code"], json!(RATE_LIMITED), "{what}: {message}");
    let data = message["error"]["data"].clone();
    let ms = data["retryAfterMs"].as_u64().unwrap_or(0);
    assert!(ms > 0 && ms <= secs * 1000, "{what}: retryAfterMs {ms} within Retry-After {secs}s: {message}");
    data
}

/// alice spends her reads and calls (two each a minute) on a 2025 session and in 2026-07-28
/// stateless requests; past them every request gets 429 + `Retry-After` + the JSON-RPC error,
/// in both eras, and no upstream is asked. bob's reads and calls all succeed meanwhile, and
/// alice is still refused after them. The refusals are counted.
#[tokio::test]
async fn over_the_limit_http_hosts_get_429_with_retry_after_in_both_eras_and_others_are_unaffected()
-> anyhow::Result<()> {
    let (_files, docs) = folder()?;
    let limits = "[rate_limits]\ncalls_per_minute = 2\nreads_per_minute = 2\n\n";
    let text = config(&format!("{limits}{docs}\n{}", fixture_upstream("fx", &[])));
    let proxy = ProxyProcess::start_with(&text, &[], &TOKENS).await?;
    proxy.wait_up("docs", 1).await?;
    proxy.wait_up("fx", 1).await?;
    proxy.wait_offerings("fx").await?;
    let mut alice = Host::new(&proxy, ALICE);
    alice.open_session().await?;
    let bob = Host::new(&proxy, BOB);

    // Reads: one on the session, one stateless; then both eras are refused.
    assert_ok("alice's first read", &alice.legacy(1, "resources/read", json!({"uri": "docs+file:///a.txt"})).await?);
    assert_ok("alice's second read", &alice.modern_read(2, "docs+file:///a.txt").await?);
    let refused = alice.legacy(3, "resources/read", json!({"uri": "docs+file:///a.txt"})).await?;
    let data = assert_limited("alice's third read (2025 session)", &refused, 3, 30);
    assert_eq!((data["limit"].as_str(), data["scope"].as_str()), (Some("reads"), Some("principal")), "{data}");
    assert_limited("alice's fourth read (2026 stateless)", &alice.modern_read(4, "docs+file:///a.txt").await?, 4, 30);

    // Calls: the same, with a tool of the fixture.
    assert_ok(
        "alice's first call",
        &alice.legacy(5, "tools/call", json!({"name": "fx__stats", "arguments": {}})).await?,
    );
    assert_ok("alice's second call", &alice.modern_call(6, "fx__stats").await?);
    let refused = alice.modern_call(7, "fx__stats").await?;
    let data = assert_limited("alice's third call (2026 stateless)", &refused, 7, 30);
    assert_eq!(data["limit"].as_str(), Some("calls"), "{data}");
    let refused = alice.legacy(8, "tools/call", json!({"name": "fx__stats", "arguments": {}})).await?;
    assert_limited("alice's fourth call (2025 session)", &refused, 8, 30);

    // bob has buckets of his own: everything he asks for succeeds while alice is refused.
    assert_ok("bob's first read", &bob.modern_read(1, "docs+file:///a.txt").await?);
    assert_ok("bob's first call", &bob.modern_call(2, "fx__stats").await?);
    assert_ok("bob's second read", &bob.modern_read(3, "fx+fx://fx/item/1").await?);
    assert_ok("bob's second call", &bob.modern_call(4, "fx__stats").await?);
    assert_limited("alice after bob", &alice.modern_read(9, "fx+fx://fx/item/1").await?, 9, 30);

    let reads = [("kind", "reads"), ("scope", "principal"), ("upstream", "docs")];
    proxy.wait_metric("mcp_proxy_rate_limited_total", &reads, |n| n == 2.0).await?;
    let calls = [("kind", "calls"), ("scope", "principal"), ("upstream", "fx")];
    proxy.wait_metric("mcp_proxy_rate_limited_total", &calls, |n| n == 2.0).await?;
    Ok(())
}

/// Over stdio (no HTTP status to set) a call or read past the limit gets the JSON-RPC error
/// with `data.retryAfterMs`, in both eras; what was admitted before it succeeded.
#[tokio::test]
async fn over_the_limit_stdio_hosts_get_the_json_rpc_error_with_retry_after_ms() -> anyhow::Result<()> {
    let (_files, docs) = folder()?;
    let limits = "[rate_limits]\ncalls_per_minute = 1\nreads_per_minute = 1\n\n";
    let dir = tempfile::tempdir()?;
    let path = write_config(dir.path(), &format!("{limits}{docs}\n{}", fixture_upstream("fx", &[])))?;
    for era in [Era::Legacy, Era::Modern] {
        let (client, _events) = connect_stdio_proxy(&path, era).await?;
        // The fixture's tools are offered once it is up: the first call waits for that
        // (an unknown tool would spend the token too, so wait on the list, not on a call).
        eventually(DEADLINE, "fx__stats listed", || async {
            let tools = client.list_all_tools().await.map_err(|e| e.to_string())?;
            tools.iter().any(|t| t.name == "fx__stats").then_some(()).ok_or_else(|| format!("{} tools", tools.len()))
        })
        .await?;
        client.call_tool(CallToolRequestParams::new("fx__stats")).await.context("the first call")?;
        let refused = client.call_tool(CallToolRequestParams::new("fx__stats")).await.expect_err("over the limit");
        assert_refused(era, "call", &refused, "calls");
        let a = "docs+file:///a.txt";
        eventually(DEADLINE, "docs listed", || async {
            let resources = client.list_all_resources().await.map_err(|e| e.to_string())?;
            resources.iter().any(|r| r.uri == a).then_some(()).ok_or_else(|| "not yet".to_string())
        })
        .await?;
        client.read_resource(ReadResourceRequestParams::new(a)).await.context("the first read")?;
        let refused = client.read_resource(ReadResourceRequestParams::new(a)).await.expect_err("over the limit");
        assert_refused(era, "read", &refused, "reads");
        client.cancel().await?;
    }
    Ok(())
}

fn assert_refused(era: Era, what: &str, error: &rmcp::ServiceError, limit: &str) {
    assert_eq!(error_code(error), Some(RATE_LIMITED as i32), "{era:?} {what}: {error}");
    let rmcp::ServiceError::McpError(data) = error else { unreachable!("checked above") };
    let data = data.data.clone().unwrap_or_default();
    assert!(data["retryAfterMs"].as_u64().is_some_and(|ms| ms > 0 && ms <= 60_000), "{era:?} {what}: {data}");
    assert_eq!(data["limit"].as_str(), Some(limit), "{era:?} {what}: {data}");
}

/// `[upstreams.rate_limits]` on `docs` alone: alice's second read of docs is refused (scope
/// `upstream`), while her reads of `fx` and bob's read of docs succeed.
#[tokio::test]
async fn a_per_upstream_limit_refuses_only_that_upstream_for_that_principal() -> anyhow::Result<()> {
    let (_files, docs) = folder()?;
    let text =
        config(&format!("{docs}[upstreams.rate_limits]\nreads_per_minute = 1\n\n{}", fixture_upstream("fx", &[])));
    let proxy = ProxyProcess::start_with(&text, &[], &TOKENS).await?;
    proxy.wait_up("docs", 1).await?;
    proxy.wait_up("fx", 1).await?;
    let (alice, bob) = (Host::new(&proxy, ALICE), Host::new(&proxy, BOB));
    assert_ok("alice's first docs read", &alice.modern_read(1, "docs+file:///a.txt").await?);
    let data = assert_limited("alice's second docs read", &alice.modern_read(2, "docs+file:///a.txt").await?, 2, 60);
    assert_eq!((data["scope"].as_str(), data["upstream"].as_str()), (Some("upstream"), Some("docs")), "{data}");
    for id in 3..8 {
        assert_ok("alice's fx read", &alice.modern_read(id, "fx+fx://fx/item/1").await?);
    }
    assert_ok("bob's docs read", &bob.modern_read(1, "docs+file:///a.txt").await?);
    let labels = [("kind", "reads"), ("scope", "upstream"), ("upstream", "docs")];
    proxy.wait_metric("mcp_proxy_rate_limited_total", &labels, |n| n == 1.0).await?;
    Ok(())
}

/// A refused read succeeds again once its bucket has a token: one read every 10 s, burst 1 —
/// the refusal's `retryAfterMs` says at most 10 s, and the test waits for the success with a
/// deadline well past that (refused polls spend nothing).
#[tokio::test]
async fn tokens_refill_and_a_refused_principal_is_served_again() -> anyhow::Result<()> {
    let (_files, docs) = folder()?;
    let text = config(&format!("[rate_limits]\nreads_per_minute = 6\nreads_burst = 1\n\n{docs}"));
    let proxy = ProxyProcess::start_with(&text, &[], &TOKENS).await?;
    proxy.wait_up("docs", 1).await?;
    let alice = Host::new(&proxy, ALICE);
    assert_ok("the first read", &alice.modern_read(1, "docs+file:///a.txt").await?);
    let refused = alice.modern_read(2, "docs+file:///a.txt").await?;
    let data = assert_limited("the second read", &refused, 2, 10);
    assert!(data["retryAfterMs"].as_u64().is_some_and(|ms| ms <= 10_000), "{data}");
    let read = eventually(REFILL_DEADLINE, "a read admitted again", || async {
        let (reply, _) = alice.modern_read(3, "docs+file:///a.txt").await.map_err(|e| e.to_string())?;
        match reply.status {
            StatusCode::OK => Ok(reply),
            status => Err(status.to_string()),
        }
    })
    .await?;
    assert_eq!(read.contents_text().as_deref(), Some("alpha"), "{read:?}");
    Ok(())
}

/// One JWT subject presenting three tokens that carry different groups ([a], [b], [c]) gets one
/// bucket's worth of reads (3 a minute), not one per group set: taking turns with the three
/// tokens, the fourth read is refused, and every token is refused after it.
#[tokio::test]
async fn one_subject_has_one_bucket_whatever_groups_its_tokens_carry() -> anyhow::Result<()> {
    let (_files, docs) = folder()?;
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let jwt = format!(
        "[auth.jwt]\nresource = {}\nissuer = {}\njwks_url = {}\ngroups_claim = \"groups\"\n\n",
        toml_str(RESOURCE),
        toml_str(ISSUER),
        toml_str(&jwks.url)
    );
    let text = config(&format!("{jwt}[rate_limits]\nreads_per_minute = 3\n\n{docs}"));
    let proxy = ProxyProcess::start_with(&text, &[], &TOKENS).await?;
    proxy.wait_up("docs", 1).await?;
    let tokens: Vec<String> = ["a", "b", "c"].iter().map(|group| rsa_a().sign(&claims("carol", &[group]))).collect();
    let hosts: Vec<Host> = tokens.iter().map(|token| Host::new(&proxy, token)).collect();

    let mut admitted = 0;
    for id in 1..=9 {
        let host = &hosts[(id as usize - 1) % hosts.len()];
        let (reply, retry_after) = host.modern_read(id, "docs+file:///a.txt").await?;
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            assert_limited("carol past her bucket", &(reply, retry_after), id, 60);
            break;
        }
        assert_ok("carol's read", &(reply, retry_after));
        admitted += 1;
    }
    assert_eq!(admitted, 3, "one bucket's worth of reads, whatever the token's groups");
    for (n, host) in hosts.iter().enumerate() {
        let id = 20 + n as u64;
        assert_limited("every token of carol's after", &host.modern_read(id, "docs+file:///a.txt").await?, id, 60);
    }
    // Another principal is not touched by carol's bucket.
    assert_ok("bob's read", &Host::new(&proxy, BOB).modern_read(30, "docs+file:///a.txt").await?);
    Ok(())
}
