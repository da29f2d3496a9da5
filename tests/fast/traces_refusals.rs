//! Requests turned away before any handler serves them have their SERVER span: rmcp's `400`
//! (headers that disagree with the body, a protocol version it does not know) and `415` (a body
//! that is not JSON) and the session gate's `503` (a session cap); so has a call refused by the
//! handler over the cap on calls in flight. The real proxy binary exporting
//! to the OTLP receiver (`support::otlp`), in front of the fixture over HTTP, driven by raw
//! HTTP requests that carry a host's `traceparent` (in `_meta` when the body has one, else in
//! the header).

use anyhow::Context;
use reqwest::StatusCode;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
use rmcp::service::PeerRequestOptions;
use serde_json::{Value, json};

use crate::support::eventually;
use crate::support::fixture::{DEADLINE, Era, HttpFixture};
use crate::support::otlp::{ReceivedSpan, Receiver, exporting_to, traceparent_ids};
use crate::support::proxy::{ProxyProcess, http_upstream};
use crate::support::raw_http::{self, Reply};
use crate::support::wire;

const MODERN: &str = "2026-07-28";
const ITEM: &str = "fx+fx://fx/item/1";
/// The JSON-RPC code of headers that disagree with the body.
const HEADER_MISMATCH: &str = "-32020";
/// The JSON-RPC code of a call refused over `server.max_calls_per_principal` (invalid request).
const CALL_LIMIT: i64 = -32600;

/// A host's context: trace `n` (32 hex digits), its span `n` (16).
fn host_traceparent(n: u8) -> String {
    format!("00-{:032x}-{:016x}-01", 0xe000 + u32::from(n), 0xf000 + u32::from(n))
}

/// A proxy exporting to `receiver`, `server` (TOML lines of `[server]`), in front of a fixture.
async fn traced_proxy(receiver: &Receiver, server: &str) -> anyhow::Result<(ProxyProcess, HttpFixture)> {
    let upstream = HttpFixture::spawn(&["--era", "legacy"]).await?;
    let config = format!("[server]\n{server}\n\n{}", http_upstream("fx", &upstream.url, ""));
    let env = exporting_to(receiver);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let proxy = ProxyProcess::start_with(&config, &[], &env).await?;
    proxy.wait_up("fx", 1).await?;
    Ok((proxy, upstream))
}

/// A stateless 2026-07-28 read of [`ITEM`] with `traceparent` in its `_meta`, sent with
/// `headers` (added to the `Accept`).
async fn modern_read(url: &str, traceparent: &str, headers: &[(&str, &str)]) -> anyhow::Result<Reply> {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "resources/read",
        "params": {"uri": ITEM, "_meta": modern_meta(traceparent)}});
    post(url, headers, body.to_string()).await
}

/// A stateless 2026-07-28 request's `_meta`, with `traceparent`.
fn modern_meta(traceparent: &str) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "refusals", "version": "0"},
        "traceparent": traceparent})
}

async fn post(url: &str, headers: &[(&str, &str)], body: String) -> anyhow::Result<Reply> {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    raw_http::send(request).await
}

/// The one SERVER span of `traceparent`'s trace, once the receiver has it; it continues the
/// host's span and has no CLIENT span beside it.
async fn refusal_span(receiver: &Receiver, traceparent: &str) -> anyhow::Result<ReceivedSpan> {
    let (trace, host_span) = traceparent_ids(traceparent)?;
    let of_trace = |spans: &[ReceivedSpan], kind: &str| {
        spans.iter().filter(|span| span.trace_id == trace && span.kind == kind).cloned().collect::<Vec<_>>()
    };
    let spans = receiver.wait("the refusal's SERVER span", |s| of_trace(s, "SERVER").len() == 1).await?;
    let server = of_trace(&spans, "SERVER").remove(0);
    assert_eq!(server.parent_span_id, host_span, "the host's trace is continued: {server:#?}");
    assert!(of_trace(&spans, "CLIENT").is_empty(), "nothing went upstream: {spans:#?}");
    assert_eq!(server.attribute("mcp.resource.uri"), None, "{server:#?}");
    Ok(server)
}

fn assert_refused(span: &ReceivedSpan, name: &str, reason: &str, error_type: &str, status: &str) {
    assert_eq!(span.name, name, "{span:#?}");
    assert_eq!(span.attribute("mcp.method.name"), Some(name), "{span:#?}");
    assert_eq!(span.attribute("mcp_proxy.refused"), Some(reason), "{span:#?}");
    assert_eq!(span.attribute("error.type"), Some(error_type), "{span:#?}");
    assert_eq!(span.attribute("http.response.status_code"), Some(status), "{span:#?}");
}

/// rmcp's `400`s, each a SERVER span in the host's trace saying why: `Mcp-Method` that
/// disagrees with the body (`header_mismatch`, the JSON-RPC code), a protocol version header it
/// does not know (`unsupported_protocol_version`, the status: its answer is plain text), and a
/// body that is not JSON (rmcp's `415`: `bad_body`, named `_OTHER`: it has no method).
#[tokio::test]
async fn requests_refused_with_400_before_routing_have_their_server_span() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let (proxy, _upstream) = traced_proxy(&receiver, "").await?;

    let mismatch = host_traceparent(1);
    let modern = [("MCP-Protocol-Version", MODERN), ("Mcp-Name", ITEM)];
    let reply = modern_read(&proxy.url, &mismatch, &[modern[0], modern[1], ("Mcp-Method", "resources/list")]).await?;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{reply:?}");
    let span = refusal_span(&receiver, &mismatch).await?;
    assert_refused(&span, "resources/read", "header_mismatch", HEADER_MISMATCH, "400");
    assert_eq!(span.attribute("jsonrpc.request.id"), Some("7"), "{span:#?}");

    let version = host_traceparent(2);
    let headers = [("MCP-Protocol-Version", "1999-01-01"), ("traceparent", version.as_str())];
    let list = json!({"jsonrpc": "2.0", "id": 8, "method": "resources/list", "params": {}});
    let reply = post(&proxy.url, &headers, list.to_string()).await?;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{reply:?}");
    let span = refusal_span(&receiver, &version).await?;
    assert_refused(&span, "resources/list", "unsupported_protocol_version", "400", "400");

    let garbage = host_traceparent(3);
    let headers = [("MCP-Protocol-Version", MODERN), ("traceparent", garbage.as_str())];
    let reply = post(&proxy.url, &headers, "{not json".to_string()).await?;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{reply:?}");
    let span = refusal_span(&receiver, &garbage).await?;
    assert_refused(&span, "_OTHER", "bad_body", "415", "415");
    Ok(())
}

/// An `initialize` past `server.max_sessions_per_principal` is answered `503` by the session
/// gate, and is a SERVER span in the host's trace: `initialize`, `session_limit`, the status.
#[tokio::test]
async fn a_session_refused_over_its_cap_has_its_server_span() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let (proxy, _upstream) = traced_proxy(&receiver, "max_sessions_per_principal = 1").await?;
    let opened = post(&proxy.url, &[], raw_http::initialize("first").to_string()).await?;
    assert_eq!(opened.status, StatusCode::OK, "{opened:?}");

    let refused_trace = host_traceparent(4);
    let headers = [("traceparent", refused_trace.as_str())];
    let refused = post(&proxy.url, &headers, raw_http::initialize("second").to_string()).await?;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE, "{refused:?}");
    let span = refusal_span(&receiver, &refused_trace).await?;
    assert_refused(&span, "initialize", "session_limit", "503", "503");
    assert_eq!(span.attribute("jsonrpc.request.id"), Some("0"), "{span:#?}");
    Ok(())
}

/// With `server.max_calls_per_principal = 1` and one call held by the fixture (`progress` with a
/// hold, seen in flight by its progress step), the principal's next call is refused at once, and
/// its SERVER span says so: `tools/call <tool>` in the host's trace, `call_limit`, `error.type`
/// the JSON-RPC code, and no CLIENT span (nothing went upstream).
#[tokio::test]
async fn a_call_refused_over_the_in_flight_cap_has_its_server_span() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let (proxy, _upstream) = traced_proxy(&receiver, "max_calls_per_principal = 1").await?;
    let (holder, holder_log) = wire::connect(&proxy.url, Era::Legacy, None).await?;
    let held = json!({"count": 1, "hold_ms": 60_000}).as_object().cloned().context("an object")?;
    let held = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("fx__progress").with_arguments(held),
    ));
    let _held = holder.send_request_with_option(held, PeerRequestOptions::no_options()).await?;
    eventually(DEADLINE, "the held call in flight (its progress step read)", || async {
        let steps = holder_log.reads().iter().filter(|read| matches!(read, wire::Read::Progress(..))).count();
        if steps == 1 { Ok(()) } else { Err(format!("{steps} steps read")) }
    })
    .await?;

    let refused_trace = host_traceparent(5);
    let params = json!({"name": "fx__progress", "arguments": {"count": 0}, "_meta": modern_meta(&refused_trace)});
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params});
    let headers = [("MCP-Protocol-Version", MODERN), ("Mcp-Method", "tools/call"), ("Mcp-Name", "fx__progress")];
    let reply = post(&proxy.url, &headers, call.to_string()).await?;
    let error = reply.message().map(|message| message["error"].clone()).unwrap_or_default();
    assert_eq!(error["code"].as_i64(), Some(CALL_LIMIT), "refused over the cap: {reply:?}");
    assert!(error["message"].as_str().is_some_and(|m| m.contains("max_calls_per_principal")), "{reply:?}");

    let span = refusal_span(&receiver, &refused_trace).await?;
    assert_eq!(span.name, "tools/call fx__progress", "{span:#?}");
    assert_eq!(span.attribute("gen_ai.tool.name"), Some("fx__progress"), "{span:#?}");
    assert_eq!(span.attribute("jsonrpc.request.id"), Some("9"), "{span:#?}");
    assert_eq!(span.attribute("mcp_proxy.refused"), Some("call_limit"), "{span:#?}");
    assert_eq!(span.attribute("error.type"), Some(CALL_LIMIT.to_string().as_str()), "{span:#?}");
    Ok(())
}
