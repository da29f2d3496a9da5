//! What a read's SERVER span says about the cache: a hit on the fast path and how long its
//! entry is still kept, a read that waited on another read of the same entry is `coalesced`, a
//! read with the cache off is `bypass`, a read on a 2025 session names the session by the audit
//! trail's digest alone, and a read refused by a rate limit before routing has its
//! span too. The real proxy binary exporting to the OTLP receiver (`support::otlp`), in front
//! of the fixture over HTTP, driven by stateless 2026-07-28 requests that carry a host's
//! `traceparent`, `tracestate` and `baggage` in `_meta`.

use reqwest::StatusCode;
use serde_json::json;

use crate::support::fixture::{self, Era, HttpFixture, call_json, wait_for_stats};
use crate::support::otlp::{ReceivedSpan, Receiver, exporting_to, traceparent_ids};
use crate::support::proxy::{ProxyProcess, http_upstream};
use crate::support::raw_http::{self, Reply};
use crate::support::reads::upstream_reads;

const MODERN: &str = "2026-07-28";
const UPSTREAM_URI: &str = "fx://fx/item/1";
const ITEM: &str = "fx+fx://fx/item/1";
/// The JSON-RPC code of a refusal by a rate limit.
const RATE_LIMITED: &str = "-32029";

/// A host's context: trace `n` (32 hex digits), its span `n` (16).
fn host_traceparent(n: u8) -> String {
    format!("00-{:032x}-{:016x}-01", 0xc000 + u32::from(n), 0xd000 + u32::from(n))
}

/// A proxy exporting to `receiver`, with `sections` (TOML), in front of a 2025-era fixture.
async fn traced_proxy(receiver: &Receiver, sections: &str) -> anyhow::Result<(ProxyProcess, HttpFixture)> {
    let upstream = HttpFixture::spawn(&["--era", "legacy"]).await?;
    let config = format!("{sections}\n\n{}", http_upstream("fx", &upstream.url, ""));
    let env = exporting_to(receiver);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let proxy = ProxyProcess::start_with(&config, &[], &env).await?;
    proxy.wait_up("fx", 1).await?;
    Ok((proxy, upstream))
}

/// A stateless 2026-07-28 read of [`ITEM`] with `traceparent` in its `_meta`; any status.
async fn read(url: &str, id: u64, traceparent: &str) -> anyhow::Result<Reply> {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "traces", "version": "0"},
        "traceparent": traceparent, "tracestate": "host=1", "baggage": "tenant=t1"});
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "resources/read",
        "params": {"uri": ITEM, "_meta": meta}});
    let request = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", MODERN)
        .header("Mcp-Method", "resources/read")
        .header("Mcp-Name", ITEM)
        .json(&body);
    raw_http::send(request).await
}

/// A 2025-11-25 POST of `body`, on `session` when given.
async fn legacy_post(url: &str, session: Option<&str>, body: serde_json::Value) -> anyhow::Result<Reply> {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", raw_http::LEGACY)
        .json(&body);
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    raw_http::send(request).await
}

fn in_trace<'a>(spans: &'a [ReceivedSpan], trace: &str, kind: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|span| span.trace_id == trace && span.kind == kind).collect()
}

/// What is left of a read's entry's lifetime, as its SERVER span says it (seconds).
fn remaining(span: &ReceivedSpan) -> Option<f64> {
    span.attribute("mcp_proxy.cache.remaining_s").and_then(|s| s.parse().ok())
}

/// A miss, then a hit of the same entry (kept 10 minutes), both with the three trace keys in
/// `_meta`: both answered on the fast path, each with its SERVER span in its host's trace; the
/// hit's says `hit`, has no CLIENT span, and both say how long their entry is still kept.
#[tokio::test]
async fn a_traced_hit_on_the_fast_path_says_hit_and_how_long_its_entry_is_kept() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let (proxy, _upstream) = traced_proxy(&receiver, "[cache]\nunwatched_ttl = \"10m\"").await?;
    for (id, n) in [(1, 5), (2, 6)] {
        let reply = read(&proxy.url, id, &host_traceparent(n)).await?;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    }
    proxy.wait_log_count(&["answered on the fast path", "resources/read"], 2).await?;
    let ((missed, _), (hit, host_span)) =
        (traceparent_ids(&host_traceparent(5))?, traceparent_ids(&host_traceparent(6))?);
    let spans = receiver
        .wait("the miss's and the hit's SERVER spans", |s| {
            in_trace(s, &missed, "SERVER").len() == 1 && in_trace(s, &hit, "SERVER").len() == 1
        })
        .await?;
    let (miss, server) = (in_trace(&spans, &missed, "SERVER")[0], in_trace(&spans, &hit, "SERVER")[0]);
    assert_eq!(miss.attribute("mcp_proxy.cache.outcome"), Some("miss"), "{miss:#?}");
    assert_eq!(server.attribute("mcp_proxy.cache.outcome"), Some("hit"), "{server:#?}");
    assert_eq!(server.parent_span_id, host_span, "{server:#?}");
    assert_eq!(server.attribute("mcp.protocol.version"), Some(MODERN), "{server:#?}");
    assert!(in_trace(&spans, &hit, "CLIENT").is_empty(), "a hit asks no upstream: {spans:#?}");
    for span in [miss, server] {
        let left = remaining(span).unwrap_or_default();
        assert!(left > 0.0 && left <= 600.0, "kept for 10 minutes at most: {span:#?}");
    }
    Ok(())
}

/// With the cache off a read is `bypass`: its SERVER span says so and names no lifetime, and its
/// CLIENT span is the upstream read.
#[tokio::test]
async fn a_read_with_the_cache_off_says_bypass() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let (proxy, _upstream) = traced_proxy(&receiver, "[cache]\nenabled = false").await?;
    let reply = read(&proxy.url, 1, &host_traceparent(7)).await?;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let (trace, _) = traceparent_ids(&host_traceparent(7))?;
    let spans = receiver
        .wait("the read's SERVER and CLIENT spans", |s| {
            in_trace(s, &trace, "SERVER").len() == 1 && in_trace(s, &trace, "CLIENT").len() == 1
        })
        .await?;
    let server = in_trace(&spans, &trace, "SERVER")[0];
    assert_eq!(server.attribute("mcp_proxy.cache.outcome"), Some("bypass"), "{server:#?}");
    assert_eq!(remaining(server), None, "nothing kept: {server:#?}");
    Ok(())
}

/// A read on a 2025 session: its SERVER span in the host's trace names the session by the
/// digest the audit trail uses, never by its id.
#[tokio::test]
async fn a_read_on_a_2025_session_names_its_session_by_digest_only() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let (proxy, _upstream) = traced_proxy(&receiver, "").await?;
    let opened = legacy_post(&proxy.url, None, raw_http::initialize("traces")).await?;
    let session = opened.session.clone().ok_or_else(|| anyhow::anyhow!("no session: {opened:?}"))?;
    legacy_post(&proxy.url, Some(&session), raw_http::initialized()).await?;
    let meta = json!({"traceparent": host_traceparent(8)});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": ITEM, "_meta": meta}});
    let reply = legacy_post(&proxy.url, Some(&session), body).await?;
    assert!(reply.contents_text().is_some_and(|text| text.starts_with("item 1")), "{reply:?}");

    let (trace, host_span) = traceparent_ids(&host_traceparent(8))?;
    let spans = receiver.wait("the read's SERVER span", |s| in_trace(s, &trace, "SERVER").len() == 1).await?;
    let server = in_trace(&spans, &trace, "SERVER")[0];
    assert_eq!(server.parent_span_id, host_span, "{server:#?}");
    assert_eq!(server.attribute("mcp.protocol.version"), Some(raw_http::LEGACY), "{server:#?}");
    let digest = mcp_resource_proxy::audit::session_digest(&session);
    assert_eq!(server.attribute("mcp.session.id"), Some(digest.as_str()), "{server:#?}");
    assert!(!format!("{spans:?}").contains(&session), "the session's id is in no span: {spans:#?}");
    Ok(())
}

/// Two reads of one cold entry while the upstream holds the first: one upstream read; the
/// first read's span says `miss` and has the CLIENT span, the second's says `coalesced` and has
/// none (it asked no upstream, it waited on the first).
#[tokio::test]
async fn a_read_that_waited_on_another_read_of_its_entry_says_coalesced() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let (proxy, upstream) = traced_proxy(&receiver, "[cache]\nunwatched_ttl = \"10m\"").await?;
    let (side, _) = fixture::connect_http(&upstream.url, Era::Auto).await?;
    call_json(&side, "hold_reads", json!({ "on": true })).await?;
    let (first, second) = (host_traceparent(1), host_traceparent(2));
    let loading = tokio::spawn({
        let (url, first) = (proxy.url.clone(), first.clone());
        async move { read(&url, 1, &first).await }
    });
    wait_for_stats(&side, |s| s["reads_in_flight"] == 1).await?;
    let waiting = tokio::spawn({
        let (url, second) = (proxy.url.clone(), second.clone());
        async move { read(&url, 2, &second).await }
    });
    // Both reads are past the cache's look-up: the second waits on the first's load.
    proxy.wait_log_count(&["read waits for its entry's load"], 2).await?;
    call_json(&side, "hold_reads", json!({ "on": false })).await?;
    for reply in [loading.await??, waiting.await??] {
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert!(reply.contents_text().is_some_and(|text| text.starts_with("item 1")), "{reply:?}");
    }
    assert_eq!(upstream_reads(&side, UPSTREAM_URI).await?, 1, "two reads, one upstream read");

    let ((first, _), (second, _)) = (traceparent_ids(&first)?, traceparent_ids(&second)?);
    let spans = receiver
        .wait("both reads' SERVER spans and the first's CLIENT span", |s| {
            in_trace(s, &first, "SERVER").len() == 1
                && in_trace(s, &first, "CLIENT").len() == 1
                && in_trace(s, &second, "SERVER").len() == 1
        })
        .await?;
    let outcome = |trace: &str| in_trace(&spans, trace, "SERVER")[0].attribute("mcp_proxy.cache.outcome");
    assert_eq!(outcome(&first), Some("miss"), "{spans:#?}");
    assert_eq!(outcome(&second), Some("coalesced"), "{spans:#?}");
    assert!(in_trace(&spans, &second, "CLIENT").is_empty(), "a coalesced read asks no upstream: {spans:#?}");
    Ok(())
}

/// A read over the rate limit is answered `429` before routing, yet has its SERVER span: in
/// the host's trace, with the refusal's reason, `error.type` (the JSON-RPC code) and the HTTP
/// status, and no CLIENT span.
#[tokio::test]
async fn a_read_refused_by_the_rate_limit_has_its_server_span() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let (proxy, _upstream) = traced_proxy(&receiver, "[rate_limits]\nreads_per_minute = 1\nreads_burst = 1").await?;
    let admitted = read(&proxy.url, 1, &host_traceparent(3)).await?;
    assert_eq!(admitted.status, StatusCode::OK, "{admitted:?}");
    let refused = read(&proxy.url, 2, &host_traceparent(4)).await?;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{refused:?}");

    let (trace, host_span) = traceparent_ids(&host_traceparent(4))?;
    let spans = receiver.wait("the refused read's SERVER span", |s| in_trace(s, &trace, "SERVER").len() == 1).await?;
    let server = in_trace(&spans, &trace, "SERVER")[0];
    assert_eq!(server.name, "resources/read");
    assert_eq!(server.parent_span_id, host_span, "the host's trace is continued: {server:#?}");
    assert_eq!(server.attribute("mcp_proxy.refused"), Some("rate_limited"), "{server:#?}");
    assert_eq!(server.attribute("error.type"), Some(RATE_LIMITED), "{server:#?}");
    assert_eq!(server.attribute("http.response.status_code"), Some("429"), "{server:#?}");
    assert_eq!(server.attribute("jsonrpc.request.id"), Some("2"), "{server:#?}");
    assert_eq!(server.attribute("mcp.resource.uri"), None, "{server:#?}");
    assert!(in_trace(&spans, &trace, "CLIENT").is_empty(), "{spans:#?}");
    Ok(())
}
