//! The fast path (`downstream::fast`) against rmcp's own answers, through the real binary, a
//! real fixture upstream (stdio) and real clients (rmcp's client in both eras, raw HTTP, the
//! Python SDK in legacy mode).
//!
//! How both answers are had from one proxy: the fast path leaves every request that carries an
//! `Origin` header to rmcp, and the proxy allows one origin. So a client sending that `Origin`
//! is served by rmcp, one without it by the fast path — same process, same cursor key, same
//! cache, same session even. The only field that may differ is a 2026-07-28 read's `ttlMs`: the
//! remaining lifetime of the cache entry, which shrinks between any two reads.
//! Which path answered is seen in the proxy's debug event `answered on the fast path`.
//!
//! The Python SDK's client against both paths is `python`.

mod python;

use std::collections::HashMap;
use std::time::Duration;

use crate::support::exposition::Exposition;
use crate::support::fixture::{Era, EventRecorder, FixtureClient};
use crate::support::proxy::{ProxyProcess, fixture_upstream, toml_str};
use crate::support::{DEADLINE, eventually};
use anyhow::Context;
use rmcp::ClientServiceExt;
use rmcp::model::{PaginatedRequestParams, ReadResourceRequestParams};
use rmcp::service::{ClientCacheConfig, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

const ALICE: &str = "alice-token-fast-path-1";
const BOB: &str = "bob-token-fast-path-2";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)];
/// The one `Origin` the proxy allows; requests carrying it are always served by rmcp.
const ORIGIN: &str = "http://localhost:1";
const FAST: &str = "answered on the fast path";
const LEGACY: &str = "2025-11-25";
/// alice may read everything of `fx` but item 0; bob everything.
const ALICE_POLICY: &str = "principals = [\"alice\"]\nallow = [\"fx+**\"]\ndeny = [\"fx+fx://fx/item/0\"]\n";
const BOB_POLICY: &str = "principals = [\"bob\"]\nallow = [\"fx+**\"]\n";

struct Served {
    proxy: ProxyProcess,
    _policies: tempfile::TempDir,
}

impl Served {
    /// The proxy with bearer principals alice and bob, their policies, lists in pages of 2,
    /// `server_extra` in `[server]`, and one fixture upstream (5 items, cached for an hour;
    /// `session = "shared"`, so its reads are cached across principals).
    async fn start(server_extra: &str) -> anyhow::Result<Self> {
        let policies = tempfile::tempdir()?;
        std::fs::write(policies.path().join("alice.toml"), ALICE_POLICY)?;
        std::fs::write(policies.path().join("bob.toml"), BOB_POLICY)?;
        let config = format!(
            "[server]\npage_size = 2\nallowed_origins = [\"{ORIGIN}\"]\n{server_extra}\n\n\
             [auth]\nmode = \"bearer\"\n\n\
             [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
             [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n\
             [policies]\ndir = {}\n\n{}",
            toml_str(policies.path().to_str().context("utf-8 path")?),
            fixture_upstream("fx", &["--resources", "5", "--ttl-ms", "3600000"]) + "session = \"shared\"\n"
        );
        let proxy = ProxyProcess::start_with(&config, &[], &TOKENS).await?;
        proxy.wait_up("fx", 1).await?;
        Ok(Self { proxy, _policies: policies })
    }

    fn fast_answers(&self) -> usize {
        self.proxy.matching(&[FAST]).len()
    }

    /// An rmcp client of alice in `era`; sending the allowed `Origin` when `via_rmcp`.
    async fn client(&self, era: Era, via_rmcp: bool) -> anyhow::Result<FixtureClient> {
        let mut headers = HashMap::new();
        if via_rmcp {
            headers.insert(http::header::ORIGIN, http::HeaderValue::from_static(ORIGIN));
        }
        let config = StreamableHttpClientTransportConfig::with_uri(self.proxy.url.as_str())
            .auth_header(ALICE)
            .custom_headers(headers)
            .reinit_on_expired_session(false);
        let transport = StreamableHttpClientTransport::from_config(config);
        let (recorder, _events) = EventRecorder::new();
        let connecting = recorder.serve_with_lifecycle(transport, era.lifecycle());
        let client = tokio::time::timeout(DEADLINE, connecting).await.context("connect timed out")??;
        // Every request goes to the proxy: the client keeps no answers.
        client.set_response_cache_config(ClientCacheConfig::disabled()).await;
        Ok(client)
    }

    /// Wait until a 2025 session's handshake has reached the fast path: a list on it is
    /// answered there (bounded by the deadline).
    async fn until_fast(&self, client: &FixtureClient) -> anyhow::Result<()> {
        eventually(DEADLINE, "the session on the fast path", || async {
            let before = self.fast_answers();
            client.list_resource_templates(None).await?;
            match self.fast_answers() > before {
                true => Ok(()),
                false => Err(anyhow::anyhow!("answered by rmcp")),
            }
        })
        .await
    }

    async fn metrics(&self) -> anyhow::Result<Exposition> {
        Exposition::parse(&self.proxy.admin_get("/metrics").await?)
    }
}

/// A result as JSON, or the JSON-RPC error it was.
fn outcome<T: serde::Serialize>(result: Result<T, ServiceError>) -> anyhow::Result<Value> {
    match result {
        Ok(value) => Ok(serde_json::to_value(value)?),
        Err(ServiceError::McpError(error)) => Ok(json!({ "error": error })),
        Err(other) => Err(other.into()),
    }
}

/// Every page of both lists, then reads: a miss, a hit, a denied URI, an unknown namespace,
/// a URI the upstream does not have, a multi-content read. One JSON value per request.
async fn exchange(client: &FixtureClient, miss: &str) -> anyhow::Result<Vec<Value>> {
    let mut answers = Vec::new();
    let mut cursor = None;
    loop {
        let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let mut page = outcome(client.list_resources(params).await)?;
        cursor = page["nextCursor"].as_str().map(str::to_owned);
        // A cursor is sealed with a fresh nonce each time: it differs between two answers; the
        // next page read with it shows it works.
        if cursor.is_some() {
            page["nextCursor"] = json!("<cursor>");
        }
        answers.push(page);
        if cursor.is_none() {
            break;
        }
    }
    let params = Some(PaginatedRequestParams::default());
    let mut templates = outcome(client.list_resource_templates(params).await)?;
    if templates["nextCursor"].is_string() {
        templates["nextCursor"] = json!("<cursor>");
    }
    answers.push(templates);
    for uri in [miss, miss, "fx+fx://fx/item/0", "nope+fx://fx/item/1", "fx+fx://fx/item/99", "fx+fx://fx/multi"] {
        let read = client.read_resource(ReadResourceRequestParams::new(uri)).await;
        let mut answer = outcome(read)?;
        // The entry's remaining lifetime: present on both paths, never equal between two reads.
        if let Some(ttl) = answer.as_object_mut().and_then(|a| a.remove("ttlMs")) {
            anyhow::ensure!(ttl.as_u64().is_some_and(|t| t <= 3_600_000), "{uri}: ttlMs {ttl}");
            answer["ttlMs"] = json!("<remaining lifetime>");
        }
        answers.push(answer);
    }
    Ok(answers)
}

/// Both eras through rmcp clients: the fast path answers every list page, every read (miss,
/// hit, denied, unknown, not found upstream, several contents) exactly as rmcp does, errors and
/// cursors included.
#[tokio::test]
async fn rmcp_clients_get_the_same_answers_from_the_fast_path_as_from_rmcp_in_both_eras() -> anyhow::Result<()> {
    let served = Served::start("").await?;
    for (era, miss) in [(Era::Legacy, "fx+fx://fx/item/1"), (Era::Modern, "fx+fx://fx/item/2")] {
        let fast = served.client(era, false).await?;
        if era == Era::Legacy {
            served.until_fast(&fast).await?;
        }
        let before = served.fast_answers();
        // The fast client reads first: its first read is the miss, rmcp's the hit.
        let answers = exchange(&fast, miss).await?;
        let answered_fast = served.fast_answers() - before;
        assert_eq!(answered_fast, answers.len(), "{era:?}: every request of the fast client took the fast path");
        let rmcp = served.client(era, true).await?;
        let before = served.fast_answers();
        let expected = exchange(&rmcp, miss).await?;
        assert_eq!(served.fast_answers(), before, "{era:?}: a client with an Origin is served by rmcp");
        assert_eq!(answers, expected, "{era:?}: fast path and rmcp disagree");
        // Positive controls: the exchange saw pages, a hit, a denial and a multi-content read.
        assert!(answers.len() >= 10 && answers[0]["nextCursor"].is_string(), "{era:?}: {answers:?}");
        assert!(answers.iter().any(|a| a["error"]["message"].as_str().is_some_and(|m| m.contains("item/0"))));
        assert_eq!(answers.last().expect("reads")["contents"].as_array().map(Vec::len), Some(3), "{era:?}");
        fast.cancel().await?;
        rmcp.cancel().await?;
    }
    Ok(())
}

/// A raw HTTP exchange with the proxy: status, `Content-Type`, body.
#[derive(Debug, PartialEq)]
struct Reply {
    status: u16,
    kind: String,
    body: String,
}

impl Reply {
    /// The JSON-RPC message with an `id`: the whole body, or the SSE event carrying it.
    fn message(&self) -> Option<Value> {
        if let Ok(value) = serde_json::from_str::<Value>(&self.body) {
            return Some(value);
        }
        let mut data = self.body.lines().filter_map(|l| l.strip_prefix("data:"));
        data.find_map(|d| serde_json::from_str::<Value>(d.trim()).ok().filter(|m| m.get("id").is_some()))
    }

    /// The text of the SSE event's data carrying the JSON-RPC message with an `id`.
    fn message_text(&self) -> Option<&str> {
        let mut data = self.body.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim);
        data.find(|d| serde_json::from_str::<Value>(d).is_ok_and(|m| m.get("id").is_some()))
    }
}

/// Raw POSTs (reqwest) as alice or bob, with or without the allowed `Origin`.
struct Raw<'a> {
    served: &'a Served,
    http: reqwest::Client,
}

impl Raw<'_> {
    async fn post(&self, token: &str, session: Option<&str>, origin: bool, body: Value) -> anyhow::Result<Reply> {
        let mut request = self
            .http
            .post(&self.served.proxy.url)
            .bearer_auth(token)
            .header("Accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(session) = session {
            request = request.header("Mcp-Session-Id", session).header("MCP-Protocol-Version", LEGACY);
        }
        if origin {
            request = request.header("Origin", ORIGIN);
        }
        let response = tokio::time::timeout(DEADLINE, request.send()).await.context("no reply")??;
        let status = response.status().as_u16();
        let kind = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body = tokio::time::timeout(DEADLINE, response.text()).await.context("body hung")??;
        Ok(Reply { status, kind, body: session.map_or(body.clone(), |s| format!("{s}\n{body}")) })
    }

    /// `initialize` + `notifications/initialized` as `token`: the session id.
    async fn open(&self, token: &str) -> anyhow::Result<String> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "fast-path", "version": "0"}}});
        let reply = self.post(token, None, false, init).await?;
        let session = reply.body.lines().next().context("no session")?.to_owned();
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let reply = self.post(token, Some(&session), false, initialized).await?;
        anyhow::ensure!(reply.status == 202, "initialized: {reply:?}");
        Ok(session)
    }

    /// Read on `session` until the fast path answers (its handshake has reached it); bounded.
    async fn until_fast(&self, session: &str) -> anyhow::Result<Reply> {
        eventually(DEADLINE, "the session on the fast path", || async {
            let before = self.served.fast_answers();
            let reply = self.post(ALICE, Some(session), false, call("resources/read", "fx+fx://fx/item/1")).await?;
            match self.served.fast_answers() > before {
                true => Ok(reply),
                false => Err(anyhow::anyhow!("answered by rmcp")),
            }
        })
        .await
    }
}

/// `text` (a JSON message) with its `nextCursor`'s value, if any, as `"<cursor>"`: a cursor is
/// sealed with a fresh nonce each time, so two answers never carry the same one.
fn without_cursor(text: &str) -> String {
    const KEY: &str = "\"nextCursor\":\"";
    let Some(start) = text.find(KEY).map(|at| at + KEY.len()) else { return text.to_owned() };
    let Some(length) = text[start..].find('"') else { return text.to_owned() };
    format!("{}<cursor>{}", &text[..start], &text[start + length..])
}

fn call(method: &str, uri: &str) -> Value {
    let params = if method == "resources/read" { json!({ "uri": uri }) } else { json!({}) };
    json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
}

/// A 2025 session: each reply of the fast path is one SSE event holding the message rmcp sends
/// on the same session; an unknown session and another principal's session get rmcp's 404 on
/// both paths.
#[tokio::test]
async fn a_2025_session_gets_rmcps_messages_as_one_sse_event_and_the_session_checks_hold() -> anyhow::Result<()> {
    let served = Served::start("").await?;
    let raw = Raw { served: &served, http: reqwest::Client::new() };
    let session = raw.open(ALICE).await?;
    raw.until_fast(&session).await?;
    let requests = [
        call("resources/read", "fx+fx://fx/item/1"),
        call("resources/read", "fx+fx://fx/multi"),
        call("resources/read", "fx+fx://fx/item/0"),
        call("resources/read", "nope+fx://fx/item/1"),
        call("resources/list", ""),
        call("resources/templates/list", ""),
        // Shapes the fast path's typed parse leaves to rmcp's parse: still answered there, alike.
        json!({"jsonrpc": "2.0", "id": 7.0, "method": "resources/read", "params": {"uri": "fx+fx://fx/item/1"}}),
        json!({"jsonrpc": "2.0", "id": "s-7", "method": "resources/list", "params": {"cursor": null, "other": 1}}),
        json!({"params": {"_meta": {"progressToken": 1}, "uri": "fx+fx://fx/item/1"}, "method": "resources/read",
            "id": 8, "jsonrpc": "2.0"}),
    ];
    for request in requests {
        let before = served.fast_answers();
        let fast = raw.post(ALICE, Some(&session), false, request.clone()).await?;
        assert_eq!(served.fast_answers(), before + 1, "{request}: answered on the fast path");
        let rmcp = raw.post(ALICE, Some(&session), true, request.clone()).await?;
        assert_eq!(served.fast_answers(), before + 1, "{request}: with an Origin, rmcp answers");
        assert_eq!((fast.status, fast.kind.as_str()), (200, "text/event-stream"), "{request}: {fast:?}");
        let data = fast.body.strip_prefix("data: ").and_then(|b| b.strip_suffix("\n\n"));
        let data = data.with_context(|| format!("{request}: not one SSE event: {:?}", fast.body))?;
        assert!(!data.contains('\n'), "{request}: one data line");
        let data = without_cursor(data);
        let rmcp_text = rmcp.message_text().map(without_cursor);
        assert_eq!(
            Some(serde_json::from_str::<Value>(&data)?),
            rmcp_text.as_deref().map(serde_json::from_str::<Value>).transpose()?,
            "{request}"
        );
        // Byte for byte, too: a hit's contents come from the cache entry's JSON, spliced in.
        assert_eq!(Some(data), rmcp_text, "{request}: the same bytes");
    }
    let denied = raw.post(ALICE, Some(&session), false, call("resources/read", "fx+fx://fx/item/0")).await?;
    assert_eq!(denied.message().context("message")?["error"]["code"], -32002, "denied looks like not found");

    let read = call("resources/read", "fx+fx://fx/item/1");
    for (token, session) in [(ALICE, "no-such-session"), (BOB, session.as_str())] {
        let before = served.fast_answers();
        let fast = raw.post(token, Some(session), false, read.clone()).await?;
        let rmcp = raw.post(token, Some(session), true, read.clone()).await?;
        assert_eq!(served.fast_answers(), before, "refused before the fast path");
        assert_eq!(fast, rmcp);
        assert_eq!((fast.status, fast.body.as_str()), (404, "Not Found: Session not found"), "{token} on {session}");
    }
    Ok(())
}

/// Reads and lists on the fast path move the same metrics as on rmcp's (requests by method
/// and outcome, their durations, cache hits, policy denials) and count as activity for the
/// idle reaper: a session reading only through the fast path outlives its idle timeout, and is
/// closed once it falls silent.
#[tokio::test]
async fn fast_path_requests_are_counted_and_keep_their_session_from_the_idle_reaper() -> anyhow::Result<()> {
    let served = Served::start("session_idle_timeout = \"1s\"").await?;
    let raw = Raw { served: &served, http: reqwest::Client::new() };
    let session = raw.open(ALICE).await?;
    raw.until_fast(&session).await?;
    let read = call("resources/read", "fx+fx://fx/item/1");
    let ok = [("method", "resources/read"), ("outcome", "ok")];
    let before = served.metrics().await?;
    let fast_before = served.fast_answers();
    // Active for three idle timeouts, a request every 200 ms, each on the fast path.
    let started = tokio::time::Instant::now();
    let mut reads = 0.0;
    while started.elapsed() < Duration::from_secs(3) {
        let reply = raw.post(ALICE, Some(&session), false, read.clone()).await?;
        assert_eq!(reply.message().context("message")?["result"]["contents"][0]["uri"], "fx+fx://fx/item/1");
        reads += 1.0;
        // Pacing, not synchronisation: the session's activity is spread over three idle timeouts.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    raw.post(ALICE, Some(&session), false, call("resources/read", "fx+fx://fx/item/0")).await?;
    raw.post(ALICE, Some(&session), false, call("resources/list", "")).await?;
    assert_eq!(served.fast_answers() - fast_before, reads as usize + 2, "all on the fast path");
    let after = served.metrics().await?;
    let delta = |name: &str, labels: &[(&str, &str)]| after.sum(name, labels) - before.sum(name, labels);
    assert_eq!(delta("mcp_proxy_downstream_requests_total", &ok), reads);
    assert_eq!(
        delta("mcp_proxy_downstream_request_duration_seconds_count", &[("method", "resources/read")]),
        reads + 1.0
    );
    let not_found = [("method", "resources/read"), ("outcome", "not_found")];
    assert_eq!(delta("mcp_proxy_downstream_requests_total", &not_found), 1.0);
    let list = [("method", "resources/list"), ("outcome", "ok")];
    assert_eq!(delta("mcp_proxy_downstream_requests_total", &list), 1.0);
    assert_eq!(delta("mcp_proxy_cache_hits_total", &[("upstream", "fx")]), reads);
    assert_eq!(delta("mcp_proxy_policy_denials_total", &[("action", "read")]), 1.0);
    // Silent now: the reaper closes it within a few idle timeouts (watched on the admin
    // listener, which is no activity of the session).
    let legacy = [("transport", "http"), ("era", "2025")];
    assert_eq!(after.sum("mcp_proxy_downstream_sessions", &legacy), 1.0, "the session is open");
    eventually(DEADLINE, "the silent session closed", || async {
        match served.metrics().await?.sum("mcp_proxy_downstream_sessions", &legacy) {
            0.0 => Ok(()),
            open => Err(anyhow::anyhow!("{open} open")),
        }
    })
    .await?;
    let closed = raw.post(ALICE, Some(&session), false, read).await?;
    assert_eq!((closed.status, closed.body.as_str()), (404, "Not Found: Session not found"));
    Ok(())
}
