//! Progress of a routed tool call reaches the host before the call's result, in both eras and
//! against upstreams of both eras. The fixture's `progress` tool sends its steps back to back
//! and answers at once, so the last step and the result race every time; the host logs what it
//! reads in wire order (`support::wire`), before rmcp's own tasks could reorder it. A call's
//! `_meta` reaches the upstream without the host's own keys (its progress token, the protocol's).

use anyhow::Context;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::service::PeerRequestOptions;
use serde_json::json;

use crate::support::fixture::{self, DEADLINE, Era};
use crate::support::inproc::InProcessProxy;
use crate::support::proxy::http_upstream;
use crate::support::{eventually, wire};

/// Steps per call, and calls per (host era, upstream era).
const STEPS: u64 = 20;
const CALLS: usize = 5;

/// Every step the upstream sent before its result is read by the host before the result, in
/// order, under the host's own token: rmcp 2025 and 2026-07-28 hosts, 2025 and 2026-07-28
/// upstreams.
#[tokio::test]
async fn every_progress_step_reaches_the_host_before_the_result() -> anyhow::Result<()> {
    let legacy = fixture::serve_in_process(&["--era", "legacy"]).await?;
    let modern = fixture::serve_in_process(&["--era", "modern"]).await?;
    let config = format!(
        "{}\n{}",
        http_upstream("fl", &legacy.url, ""),
        http_upstream("fm", &modern.url, "protocol = \"2026-07-28\"")
    );
    let proxy = InProcessProxy::start(&config).await?;
    eventually(DEADLINE, "both upstreams' tools listed", || async {
        let snapshot = proxy.proxy.tools().snapshot();
        match ["fl", "fm"].iter().all(|u| snapshot.tool(u, &format!("{u}__progress")).is_some()) {
            true => Ok(()),
            false => Err("not yet"),
        }
    })
    .await?;
    let steps: Vec<f64> = (1..=STEPS).map(|step| step as f64).collect();
    for era in [Era::Legacy, Era::Modern] {
        let (host, log) = wire::connect(&proxy.url, era, None).await?;
        for upstream in ["fl", "fm"] {
            for call in 0..CALLS {
                let arguments = json!({"count": STEPS}).as_object().cloned().expect("object");
                let params = CallToolRequestParams::new(format!("{upstream}__progress")).with_arguments(arguments);
                let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
                let handle = host.send_request_with_option(request, PeerRequestOptions::no_options()).await?;
                let (id, token) = (handle.id.clone(), handle.progress_token.clone());
                let answer = tokio::time::timeout(DEADLINE, handle.await_response()).await??;
                assert!(matches!(answer, ServerResult::CallToolResult(_)), "{answer:?}");
                let seen = log.progress_before_answer(&token, &id).context("the answer was not read")?;
                assert_eq!(
                    seen, steps,
                    "{era:?} host, upstream {upstream}, call {call}: progress read before the result"
                );
            }
        }
    }
    Ok(())
}

/// A host's `_meta` goes upstream with its call, without the keys that are the host's own: its
/// `progressToken` and the protocol's `io.modelcontextprotocol/` keys.
#[tokio::test]
async fn a_calls_meta_reaches_the_upstream_without_the_hosts_own_keys() -> anyhow::Result<()> {
    let upstream = fixture::serve_in_process(&[]).await?;
    let proxy = InProcessProxy::start(&http_upstream("fx", &upstream.url, "")).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let meta = json!({
        "example.com/note": "for the server",
        "progressToken": 7,
        "io.modelcontextprotocol/clientInfo": {"name": "host", "version": "1"},
    });
    let mut params = CallToolRequestParams::new("fx__traceparent");
    params.meta = Some(serde_json::from_value(meta)?);
    let keys = fixture::meta_keys_seen(&host.call_tool(params).await?)?;
    assert!(keys.iter().any(|key| key == "example.com/note"), "the host's own key went upstream: {keys:?}");
    assert!(!keys.iter().any(|k| k.starts_with("io.modelcontextprotocol/")), "{keys:?}");
    Ok(())
}
