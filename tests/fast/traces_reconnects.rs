//! A request whose upstream connection breaks under it says so on its CLIENT span: the real
//! proxy binary exporting to the OTLP receiver (`support::otlp`), in front of the fixture over
//! stdio, whose child exits while it holds a traced read; the supervisor then reconnects.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::eventually;
use crate::support::fixture::{self, DEADLINE, Era, call_json};
use crate::support::otlp::{ReceivedSpan, Receiver, exporting_to, traceparent_ids};
use crate::support::proxy::{ProxyProcess, fixture_upstream};
use crate::support::raw_http::{self, Reply};

const MODERN: &str = "2026-07-28";
const ITEM: &str = "fx+fx://fx/item/1";
const RECONNECT: &str = "mcp_proxy.upstream.reconnect";

/// A stateless 2026-07-28 read of [`ITEM`] with `traceparent` in its `_meta`.
async fn read(url: &str, traceparent: &str) -> anyhow::Result<Reply> {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "reconnects", "version": "0"},
        "traceparent": traceparent});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": ITEM, "_meta": meta}});
    let request = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", MODERN)
        .header("Mcp-Method", "resources/read")
        .header("Mcp-Name", ITEM)
        .json(&body);
    raw_http::send(request).await
}

/// A read held by the stdio fixture when its child exits: the host gets `upstream_down`, the
/// read's CLIENT span has `error.type` `upstream_down` and the event
/// `mcp_proxy.upstream.reconnect` (reason `connection_broken`), and the supervisor does
/// reconnect.
#[tokio::test]
async fn a_read_whose_upstream_connection_broke_has_a_reconnect_event() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let config =
        format!("{}session = \"shared\"\nreconnect_max = \"500ms\"\n", fixture_upstream("fx", &["--era", "legacy"]));
    let env = exporting_to(&receiver);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let proxy = ProxyProcess::start_with(&config, &[], &env).await?;
    proxy.wait_up("fx", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    call_json(&host, "fx__hold_reads", json!({"on": true})).await?;

    let traceparent = "00-0000000000000000000000000000a001-000000000000b001-01";
    let held = tokio::spawn({
        let url = proxy.url.clone();
        async move { read(&url, traceparent).await }
    });
    eventually(DEADLINE, "the read held by the fixture", || async {
        let stats = call_json(&host, "fx__stats", json!({})).await?;
        anyhow::ensure!(stats["reads_in_flight"] == 1, "{stats}");
        Ok(())
    })
    .await?;
    call_json(&host, "fx__exit", json!({"code": 0})).await?;
    let reply = held.await??;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let error = reply.message().map(|m: Value| m["error"].clone()).unwrap_or_default();
    assert!(error.is_object(), "the read failed: {reply:?}");
    proxy.wait_up("fx", 2).await?;

    let (trace, _) = traceparent_ids(traceparent)?;
    let client =
        |spans: &[ReceivedSpan]| spans.iter().find(|span| span.trace_id == trace && span.kind == "CLIENT").cloned();
    let spans = receiver.wait("the read's CLIENT span", |s| client(s).is_some()).await?;
    let span = client(&spans).expect("waited for");
    assert_eq!(span.attribute("error.type"), Some("upstream_down"), "{span:#?}");
    let event = span.event(RECONNECT).unwrap_or_else(|| panic!("no {RECONNECT} event: {span:#?}"));
    assert_eq!(event.get("mcp_proxy.reconnect.reason").map(String::as_str), Some("connection_broken"), "{span:#?}");
    Ok(())
}
