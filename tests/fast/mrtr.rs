//! 2026-07-28 multi round-trip requests (MRTR) through the proxy: an upstream read that answers
//! `input_required` reaches a 2026-07-28 host as it was sent, is never cached, and fails cleanly
//! (an error, not a hang) for a legacy host. The upstream is the rmcp fixture, whose unlisted
//! `fx://fx/needs-input` asks 2026-07-28 readers for input and counts every read.
//!
//! What is under test crosses the MCP wire, so both sides run in process: the library's proxy
//! (`support::inproc`) and the fixture library, each serving HTTP on 127.0.0.1:0.

use crate::support::fixture::{self, DEADLINE, Era, FixtureClient, InProcess, error_code, stats, wait_for_stats};
use crate::support::inproc::InProcessProxy;
use crate::support::proxy::http_upstream;
use rmcp::model::{InputRequest, ReadResourceRequestParams, ReadResourceResponse, ResourceContents};
use serde_json::Value;

const NEEDS_INPUT: &str = "fx://fx/needs-input";
const NEEDS_INPUT_THROUGH_PROXY: &str = "fx+fx://fx/needs-input";
/// The fixture's `requestState` for `fx://fx/needs-input` (`catalog::NEEDS_INPUT_STATE`).
const NEEDS_INPUT_STATE: &str = "fixture-needs-input:1";

/// A 2026-07-28 host reading an MRTR resource gets the upstream's `input_required` result as it
/// was sent — its elicitation and its `requestState` — and every such read goes upstream.
#[tokio::test]
async fn input_required_reaches_a_modern_host_and_is_never_cached() -> anyhow::Result<()> {
    let (proxy, _upstream, side) = proxy_with_modern_fixture().await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    for round in 1..=2 {
        let response = read_once(&host, NEEDS_INPUT_THROUGH_PROXY).await?;
        let ReadResourceResponse::InputRequired(needs) = response else {
            panic!("read {round}: expected input_required, got {response:?}");
        };
        assert_eq!(
            needs.request_state.as_deref(),
            Some(NEEDS_INPUT_STATE),
            "read {round}: requestState passed through"
        );
        let requests = needs.input_requests.as_ref().expect("input requests passed through");
        assert_eq!(requests.keys().collect::<Vec<_>>(), ["confirm"], "read {round}");
        assert!(matches!(requests["confirm"], InputRequest::Elicitation(_)), "read {round}: {:?}", requests["confirm"]);
    }
    let counted = stats(&side).await?;
    assert_eq!(upstream_reads(&counted, NEEDS_INPUT), 2, "two host reads, two upstream reads: {counted}");
    assert_eq!(counted["input_required"], 2, "{counted}");
    Ok(())
}

/// Nothing of an `input_required` answer is kept — not even the upstream subscription a cold
/// read takes before it reads: once the read is answered, the upstream is no longer asked to
/// watch the URI.
#[tokio::test]
async fn an_input_required_read_leaves_no_upstream_watch_behind() -> anyhow::Result<()> {
    let (proxy, _upstream, side) = proxy_with_modern_fixture().await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let response = read_once(&host, NEEDS_INPUT_THROUGH_PROXY).await?;
    assert!(matches!(response, ReadResourceResponse::InputRequired(_)), "{response:?}");
    let released =
        wait_for_stats(&side, |s| !s["listen_uris"].as_array().is_some_and(|u| u.contains(&NEEDS_INPUT.into())));
    let released = released.await.map_err(|e| anyhow::anyhow!("the upstream still watches {NEEDS_INPUT}: {e}"))?;
    assert_eq!(upstream_reads(&released, NEEDS_INPUT), 1, "{released}");
    Ok(())
}

/// A legacy host cannot be asked for input: its read of the same resource fails with a JSON-RPC
/// error within the deadline, and its session keeps working.
#[tokio::test]
async fn input_required_is_an_error_for_a_legacy_host() -> anyhow::Result<()> {
    let (proxy, _upstream, side) = proxy_with_modern_fixture().await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let params = ReadResourceRequestParams::new(NEEDS_INPUT_THROUGH_PROXY);
    let answer = tokio::time::timeout(DEADLINE, host.read_resource_once(params)).await;
    let error = match answer {
        Err(_) => panic!("the legacy host's read hung for {DEADLINE:?}"),
        Ok(Ok(response)) => panic!("a legacy host was answered {response:?}"),
        Ok(Err(error)) => error,
    };
    assert!(error_code(&error).is_some(), "a JSON-RPC error, not a broken connection: {error}");

    let ReadResourceResponse::Complete(read) = read_once(&host, "fx+fx://fx/item/1").await? else {
        panic!("a plain read after the failed one did not complete");
    };
    let ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else {
        panic!("expected text: {:?}", read.contents);
    };
    assert_eq!(text, "item 1 v1", "the session still works");
    let counted = stats(&side).await?;
    assert_eq!(upstream_reads(&counted, NEEDS_INPUT), 1, "{counted}");
    Ok(())
}

/// A proxy in front of one HTTP fixture spoken to in the 2026-07-28 era, and a side connection
/// to the fixture for its counters.
async fn proxy_with_modern_fixture() -> anyhow::Result<(InProcessProxy, InProcess, FixtureClient)> {
    let upstream = fixture::serve_in_process(&["--era", "modern"]).await?;
    let proxy = InProcessProxy::start(&http_upstream("fx", &upstream.url, "protocol = \"2026-07-28\"")).await?;
    proxy.wait_up("fx", 1).await?;
    let (side, _) = fixture::connect_http(&upstream.url, Era::Modern).await?;
    Ok((proxy, upstream, side))
}

/// One `resources/read`, MRTR rounds not driven, within the deadline.
async fn read_once(host: &FixtureClient, uri: &str) -> anyhow::Result<ReadResourceResponse> {
    let read = host.read_resource_once(ReadResourceRequestParams::new(uri));
    Ok(tokio::time::timeout(DEADLINE, read).await??)
}

/// How many reads of `uri` the fixture served.
fn upstream_reads(stats: &Value, uri: &str) -> u64 {
    stats["reads_by_uri"][uri].as_u64().unwrap_or(0)
}
