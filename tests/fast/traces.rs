//! Traces end to end: the real proxy binary exporting over OTLP/HTTP to a receiver that decodes
//! the official protobuf messages (`support::otlp`), in front of the fixture over HTTP (`web`)
//! and over stdio (`pipe`). The fixture's `fx://fx/traceparent` answers with the trace context
//! its read arrived with, so a test sees what reached the upstream. With nothing configured, the
//! proxy's sockets are read from `/proc` (`support::processes`): none goes towards a collector.

use anyhow::Context;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::fixture::HttpFixture;
use crate::support::otlp::{ReceivedSpan, Receiver, exporting_to, traceparent_ids};
use crate::support::processes;
use crate::support::proxy::{
    ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, fixture_upstream, http_upstream,
};
use crate::support::raw_http::{self, Reply};

const ALICE: &str = "alice-token-traces-5c1d";
const MODERN: &str = "2026-07-28";

/// A host's context: trace `n` (32 hex digits), its span `n` (16).
fn host_traceparent(n: u8) -> String {
    format!("00-{:032x}-{:016x}-01", 0xa000 + u32::from(n), 0xb000 + u32::from(n))
}

/// alice may read everything but `web+fx://fx/item/2`.
async fn traced_proxy(env: &[(&str, String)]) -> anyhow::Result<(ProxyProcess, HttpFixture, tempfile::TempDir)> {
    let web = HttpFixture::spawn(&[]).await?;
    let policies = alice_and_bob_policies("allow = [\"**\"]\ndeny = [\"web+fx://fx/item/2\"]\n", "allow = []\n")?;
    // A 2025-era upstream's answers have no lifetime of their own: kept for `unwatched_ttl`.
    let cache = "[cache]\nunwatched_ttl = \"10m\"\n\n";
    let upstreams = format!("{cache}{}{}", http_upstream("web", &web.url, ""), fixture_upstream("pipe", &[]));
    let config = alice_and_bob_under_policies("", policies.path(), &upstreams);
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // The audit trail on the log (not its own file), where its lines are looked for.
    env.extend([("ALICE_TOKEN", ALICE), ("BOB_TOKEN", "bob-token-traces-77aa"), ("MCP_PROXY_AUDIT__FILE", "-")]);
    let proxy = ProxyProcess::start_with(&config, &[], &env).await?;
    proxy.wait_offerings("web").await?;
    proxy.wait_up("pipe", 1).await?;
    Ok((proxy, web, policies))
}

/// A stateless 2026-07-28 request of alice: `meta` (a `traceparent` in `_meta`) and `header`
/// (the HTTP `traceparent` header), either or both.
async fn modern(
    proxy: &ProxyProcess,
    id: u64,
    method: &str,
    name: &str,
    mut params: Value,
    meta: Option<&str>,
    header: Option<&str>,
) -> anyhow::Result<Reply> {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "traces", "version": "0"}});
    if let Some(traceparent) = meta {
        params["_meta"]["traceparent"] = json!(traceparent);
        params["_meta"]["tracestate"] = json!("host=1");
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut request = reqwest::Client::new()
        .post(&proxy.url)
        .bearer_auth(ALICE)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", MODERN)
        .header("Mcp-Method", method)
        .header("Mcp-Name", name)
        .json(&body);
    if let Some(traceparent) = header {
        request = request.header("traceparent", traceparent);
    }
    let reply = raw_http::send(request).await?;
    anyhow::ensure!(reply.status == StatusCode::OK, "{method} {name}: {reply:?}");
    Ok(reply)
}

async fn read(
    proxy: &ProxyProcess,
    id: u64,
    uri: &str,
    meta: Option<&str>,
    header: Option<&str>,
) -> anyhow::Result<Reply> {
    modern(proxy, id, "resources/read", uri, json!({"uri": uri}), meta, header).await
}

/// The trace context the fixture's `fx://fx/traceparent` read arrived with.
fn seen_upstream(reply: &Reply) -> anyhow::Result<Value> {
    Ok(serde_json::from_str(&reply.contents_text().context("no contents")?)?)
}

/// Both spans of a request that went upstream: its SERVER span and one CLIENT span.
fn both(spans: &[ReceivedSpan], trace: &str) -> bool {
    in_trace(spans, trace, "SERVER").len() == 1 && in_trace(spans, trace, "CLIENT").len() == 1
}

fn in_trace<'a>(spans: &'a [ReceivedSpan], trace: &str, kind: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|span| span.trace_id == trace && span.kind == kind).collect()
}

/// A traced host's read (fast path, HTTP upstream on the thin read, stdio upstream), a cache
/// hit, a denied read, the HTTP header alone, and a tool call (rmcp's path): each a SERVER span
/// continuing the host's trace, and a CLIENT span whose context reached the upstream.
#[tokio::test]
async fn a_traced_host_sees_its_trace_continued_by_the_proxy_and_reaching_the_upstream() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let (proxy, _web, _policies) = traced_proxy(&exporting_to(&receiver)).await?;

    // The fast path, an HTTP upstream: _meta continued, our CLIENT span's context upstream in
    // `_meta` and in the header.
    let host = host_traceparent(1);
    let (trace, host_span) = traceparent_ids(&host)?;
    let seen = seen_upstream(&read(&proxy, 1, "web+fx://fx/traceparent", Some(&host), None).await?)?;
    let upstream_got = seen["meta"].as_str().context("no _meta.traceparent upstream")?.to_string();
    assert_eq!(seen["header"].as_str(), Some(upstream_got.as_str()), "{seen}");
    let (upstream_trace, client_span) = traceparent_ids(&upstream_got)?;
    assert_eq!(upstream_trace, trace, "the upstream request is in the host's trace");
    let spans = receiver.wait("the read's SERVER and CLIENT spans", |s| both(s, &trace)).await?;
    let server = in_trace(&spans, &trace, "SERVER");
    assert_eq!(server.len(), 1, "{spans:#?}");
    let (server, client) = (server[0], in_trace(&spans, &trace, "CLIENT")[0]);
    assert_eq!(server.name, "resources/read");
    assert_eq!(server.parent_span_id, host_span, "the SERVER span's parent is the host's span");
    assert_eq!(server.service, "proxy-under-test");
    assert_eq!(server.attribute("mcp.method.name"), Some("resources/read"));
    assert_eq!(server.attribute("mcp.protocol.version"), Some(MODERN));
    assert_eq!(server.attribute("jsonrpc.request.id"), Some("1"));
    assert_eq!(server.attribute("network.transport"), Some("tcp"));
    assert_eq!(server.attribute("mcp_proxy.cache.outcome"), Some("miss"));
    assert_eq!(server.attribute("mcp_proxy.policy.decision"), Some("allowed"));
    assert_eq!(server.attribute("mcp_proxy.policy.file"), Some("alice.toml"));
    assert_eq!(server.attribute("mcp_proxy.upstream"), Some("web"));
    assert_eq!(server.attribute("mcp.resource.uri"), None, "URIs only when the operator opts in");
    assert_eq!(client.parent_span_id, server.span_id);
    assert_eq!(client.span_id, client_span, "the context upstream is the CLIENT span's");
    assert_eq!(client.attribute("server.address"), Some("127.0.0.1"));
    assert_eq!(client.attribute("mcp_proxy.upstream"), Some("web"));

    // A stdio upstream: our context in its `_meta`.
    let host = host_traceparent(2);
    let (trace, _) = traceparent_ids(&host)?;
    let seen = seen_upstream(&read(&proxy, 2, "pipe+fx://fx/traceparent", Some(&host), None).await?)?;
    let (upstream_trace, client_span) = traceparent_ids(seen["meta"].as_str().context("no _meta over stdio")?)?;
    assert_eq!(upstream_trace, trace);
    assert_eq!(seen["header"], Value::Null, "{seen}");
    let spans = receiver.wait("the stdio read's CLIENT span", |s| both(s, &trace)).await?;
    let client = in_trace(&spans, &trace, "CLIENT")[0];
    assert_eq!(client.span_id, client_span);
    assert_eq!(client.attribute("network.transport"), Some("pipe"));

    // A miss then a hit: the hit's trace has no CLIENT span and says `hit`.
    read(&proxy, 3, "web+fx://fx/item/1", Some(&host_traceparent(3)), None).await?;
    let (missed, _) = traceparent_ids(&host_traceparent(3))?;
    let spans = receiver.wait("the miss's CLIENT span", |s| both(s, &missed)).await?;
    let server = in_trace(&spans, &missed, "SERVER");
    assert_eq!(server.first().and_then(|s| s.attribute("mcp_proxy.cache.outcome")), Some("miss"), "{spans:#?}");
    read(&proxy, 4, "web+fx://fx/item/1", Some(&host_traceparent(4)), None).await?;
    let (hit, _) = traceparent_ids(&host_traceparent(4))?;
    // The denied read after it is exported no earlier than the hit's span (one exporter, in order).
    let denied_reply = read(&proxy, 5, "web+fx://fx/item/2", Some(&host_traceparent(5)), None).await?;
    assert!(denied_reply.message().is_some_and(|m| m.get("error").is_some()), "{denied_reply:?}");
    let (denied, _) = traceparent_ids(&host_traceparent(5))?;
    let spans = receiver
        .wait("the hit's and the denial's SERVER spans", |s| {
            in_trace(s, &hit, "SERVER").len() == 1 && in_trace(s, &denied, "SERVER").len() == 1
        })
        .await?;
    let server = in_trace(&spans, &hit, "SERVER")[0];
    assert_eq!(server.attribute("mcp_proxy.cache.outcome"), Some("hit"), "{server:#?}");
    assert!(in_trace(&spans, &hit, "CLIENT").is_empty(), "a hit asks no upstream: {spans:#?}");
    let server = in_trace(&spans, &denied, "SERVER")[0];
    assert_eq!(server.attribute("mcp_proxy.policy.decision"), Some("denied"), "{server:#?}");
    assert_eq!(server.attribute("mcp_proxy.policy.file"), Some("alice.toml"));
    assert!(server.attribute("error.type").is_some(), "{server:#?}");
    assert!(!format!("{server:?}").contains("item/2"), "a denied read's span names no URI: {server:#?}");
    assert!(in_trace(&spans, &denied, "CLIENT").is_empty());

    // The HTTP header alone continues a 2026-07-28 request's trace; with `_meta` too, `_meta`
    // is the parent and the header a link.
    read(&proxy, 6, "web+fx://fx/item/0", None, Some(&host_traceparent(6))).await?;
    read(&proxy, 7, "web+fx://fx/item/0", Some(&host_traceparent(7)), Some(&host_traceparent(8))).await?;
    let (header_only, header_span) = traceparent_ids(&host_traceparent(6))?;
    let (meta_trace, _) = traceparent_ids(&host_traceparent(7))?;
    let linked = traceparent_ids(&host_traceparent(8))?;
    let spans = receiver
        .wait("the header's SERVER spans", |s| {
            in_trace(s, &header_only, "SERVER").len() == 1 && in_trace(s, &meta_trace, "SERVER").len() == 1
        })
        .await?;
    assert_eq!(in_trace(&spans, &header_only, "SERVER")[0].parent_span_id, header_span);
    assert_eq!(in_trace(&spans, &meta_trace, "SERVER")[0].links, vec![linked]);

    // A tool call (rmcp's handler): `tools/call <tool>`, its CLIENT span its child.
    let host = host_traceparent(9);
    let (trace, _) = traceparent_ids(&host)?;
    modern(&proxy, 9, "tools/call", "web__stats", json!({"name": "web__stats", "arguments": {}}), Some(&host), None)
        .await?;
    let spans = receiver.wait("the call's CLIENT span", |s| both(s, &trace)).await?;
    let server = in_trace(&spans, &trace, "SERVER");
    assert_eq!(server.len(), 1, "{spans:#?}");
    assert_eq!(server[0].name, "tools/call web__stats");
    assert_eq!(server[0].attribute("gen_ai.tool.name"), Some("web__stats"));
    let client = in_trace(&spans, &trace, "CLIENT")[0];
    assert_eq!(client.name, "tools/call stats");
    assert_eq!(client.parent_span_id, server[0].span_id);

    // Audit events and log lines of a traced request carry its ids.
    let line = proxy.wait_log(&["\"target\":\"audit\"", "tools/call", &trace]).await?;
    assert!(line.contains("span_id"), "{line}");
    Ok(())
}

/// Traces off (`OTEL_SDK_DISABLED`, whatever else is configured): the proxy opens no socket
/// towards the collector, and a host sending a trace context stays on the fast path.
#[tokio::test]
async fn with_traces_off_the_proxy_opens_no_socket_towards_the_collector() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let mut env = exporting_to(&receiver);
    env.push(("OTEL_SDK_DISABLED", "true".into()));
    let (proxy, _web, _policies) = traced_proxy(&env).await?;
    for id in 1..=3 {
        read(&proxy, id, "web+fx://fx/item/1", Some(&host_traceparent(20)), None).await?;
    }
    let seen = seen_upstream(&read(&proxy, 4, "web+fx://fx/traceparent", Some(&host_traceparent(21)), None).await?)?;
    assert_eq!(seen["meta"], Value::Null, "nothing is sent upstream when traces are off: {seen}");
    proxy.wait_log_count(&["answered on the fast path", "resources/read"], 4).await?;
    // A traced proxy's first export connects within its 50 ms batch delay; this one never does.
    let traced = Receiver::start().await?;
    let (traced_proxy, _traced_web, _p) = traced_proxy_for(&traced).await?;
    read(&traced_proxy, 1, "web+fx://fx/item/1", Some(&host_traceparent(22)), None).await?;
    traced.wait("the traced proxy's export", |s| !s.is_empty()).await?;
    assert_eq!(receiver.connections(), 0, "the untraced proxy connected to the collector");
    Ok(())
}

/// Nothing configured (no `[telemetry]`, no `OTEL_*` variable in the proxy's environment): reads,
/// a tool call and a traced host's read are served, nothing of the trace goes upstream, and every
/// TCP socket the proxy holds is one of its listeners, a connection accepted on one, or a
/// connection to the upstream — none towards a collector (4317, 4318) or anywhere else.
#[tokio::test]
async fn with_nothing_configured_the_proxy_opens_no_socket_but_its_own_and_the_upstreams() -> anyhow::Result<()> {
    let (proxy, web, _policies) = traced_proxy(&[]).await?;
    let pid = proxy.pid().context("the proxy's pid")?;
    let inherited = processes::environment_names(pid)?;
    let telemetry: Vec<&String> =
        inherited.iter().filter(|name| name.starts_with("OTEL_") || name.starts_with("MCP_PROXY_TELEMETRY")).collect();
    assert!(telemetry.is_empty(), "the proxy was given telemetry settings: {telemetry:?}");

    for id in 1..=2 {
        read(&proxy, id, "web+fx://fx/item/1", None, None).await?;
    }
    modern(&proxy, 3, "tools/call", "web__stats", json!({"name": "web__stats", "arguments": {}}), None, None).await?;
    let seen = seen_upstream(&read(&proxy, 4, "web+fx://fx/traceparent", Some(&host_traceparent(40)), None).await?)?;

    let ours = [port_of(&proxy.url)?, port_of(&proxy.admin_url().await?)?];
    let upstream = port_of(&web.url)?;
    let sockets = processes::tcp_sockets(pid)?;
    let listening: Vec<u16> = sockets.iter().filter(|s| s.listening).map(|s| s.local_port).collect();
    assert_eq!(listening.iter().filter(|port| ours.contains(port)).count(), 2, "its listeners: {sockets:?}");
    for socket in &sockets {
        let accepted = ours.contains(&socket.local_port);
        assert!(![4317, 4318].contains(&socket.remote_port), "a connection to a collector: {socket:?}");
        assert!(accepted || socket.remote_port == upstream, "a socket neither ours nor the upstream's: {socket:?}");
    }
    assert!(sockets.iter().any(|s| s.remote_port == upstream), "no connection to the upstream: {sockets:?}");
    assert_eq!(seen["meta"], Value::Null, "no trace context upstream: {seen}");
    assert_eq!(seen["header"], Value::Null, "no traceparent header upstream: {seen}");
    Ok(())
}

/// The port of `url` (`http://HOST:PORT[/path]`).
fn port_of(url: &str) -> anyhow::Result<u16> {
    let address = url.trim_start_matches("http://").split('/').next().unwrap_or_default();
    Ok(address.rsplit_once(':').context("no port")?.1.parse()?)
}

async fn traced_proxy_for(receiver: &Receiver) -> anyhow::Result<(ProxyProcess, HttpFixture, tempfile::TempDir)> {
    traced_proxy(&exporting_to(receiver)).await
}

/// An HTTP upstream gets our CLIENT span's context in the W3C `traceparent` header as well as
/// in `_meta`, on requests that go through rmcp's transport (a tool call) as on the thin read.
#[tokio::test]
async fn an_http_upstream_gets_the_traceparent_header_matching_meta_on_a_call_and_a_read() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let (proxy, _web, _policies) = traced_proxy(&exporting_to(&receiver)).await?;
    let call = json!({"name": "web__traceparent", "arguments": {}});
    let host = host_traceparent(30);
    let reply = modern(&proxy, 1, "tools/call", "web__traceparent", call, Some(&host), None).await?;
    let text = reply.message().and_then(|m| m["result"]["content"][0]["text"].as_str().map(str::to_owned));
    let called: Value = serde_json::from_str(&text.context("no text in the call's result")?)?;
    let host = host_traceparent(31);
    let read: Value = seen_upstream(&read(&proxy, 2, "web+fx://fx/traceparent", Some(&host), None).await?)?;
    for (id, seen) in [(30, called), (31, read)] {
        let meta = seen["meta"].as_str().with_context(|| format!("no _meta.traceparent upstream: {seen}"))?;
        assert_eq!(seen["header"].as_str(), Some(meta), "the header is _meta's: {seen}");
        let (trace, _) = traceparent_ids(&host_traceparent(id))?;
        let spans = receiver.wait("the request's CLIENT span", |s| both(s, &trace)).await?;
        let client = in_trace(&spans, &trace, "CLIENT")[0];
        assert_eq!(traceparent_ids(meta)?, (trace, client.span_id.clone()), "our CLIENT span's context");
    }
    Ok(())
}
