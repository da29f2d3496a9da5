//! The thin read client of streamable HTTP upstreams, end to end: the proxy binary in front of
//! the fixture over HTTP in both eras, and over stdio. The fixture's unlisted
//! `fx://fx/request-id` answers the JSON-RPC id its read came with, which tells who sent it:
//! the thin client's ids are strings with their own prefix, rmcp's are numbers.
//!
//! - HTTP reads go on the thin client in both eras (a 2026-07-28 `input_required` too); stdio
//!   reads stay on rmcp;
//! - a faulty reply fails its read alone with the same errors, and the thin client goes on;
//! - a thin read that times out is cancelled upstream (`notifications/cancelled`), in both eras;
//! - an upstream restarted under the proxy (its session gone) comes back, and reads go on the
//!   thin client of the new connection.

use std::time::Duration;

use rmcp::model::{ReadResourceRequestParams, ReadResourceResponse, ResourceContents};
use serde_json::json;

use crate::support::eventually;
use crate::support::fixture::{self, DEADLINE, Era, FixtureClient, HttpFixture, call_json, wait_for_stats};
use crate::support::proxy::{ProxyProcess, fixture_upstream, http_upstream};

/// The prefix of the thin client's request ids (`upstream::thin::ID_PREFIX`), as JSON.
const THIN_ID: &str = "\"mcp-proxy-read-";
const LIMITS: &str = "max_response_bytes = \"64KiB\"\nrequest_timeout = \"4s\"\nrequired = false";

async fn text(client: &FixtureClient, uri: &str) -> anyhow::Result<String> {
    let read = client.read_resource(ReadResourceRequestParams::new(uri)).await?;
    match read.contents.as_slice() {
        [ResourceContents::TextResourceContents { text, .. }] => Ok(text.clone()),
        other => anyhow::bail!("expected one text for {uri}, got {other:?}"),
    }
}

/// The id the upstream saw on the read of `upstream+fx://fx/request-id`.
async fn request_id(client: &FixtureClient, upstream: &str) -> anyhow::Result<String> {
    text(client, &format!("{upstream}+fx://fx/request-id")).await
}

#[tokio::test]
async fn http_reads_go_on_the_thin_client_in_both_eras_and_stdio_reads_on_rmcp() -> anyhow::Result<()> {
    let legacy = HttpFixture::spawn(&["--era", "legacy"]).await?;
    let modern = HttpFixture::spawn(&["--era", "modern"]).await?;
    let config = [
        http_upstream("hl", &legacy.url, ""),
        http_upstream("hm", &modern.url, "protocol = \"2026-07-28\""),
        fixture_upstream("sl", &[]),
    ]
    .concat();
    let proxy = ProxyProcess::start(&config).await?;
    for name in ["hl", "hm", "sl"] {
        proxy.wait_up(name, 1).await?;
    }
    let (client, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    for upstream in ["hl", "hm"] {
        let id = request_id(&client, upstream).await?;
        assert!(id.starts_with(THIN_ID), "{upstream}: the read came with id {id}");
        assert_eq!(text(&client, &format!("{upstream}+fx://fx/item/0")).await?, "item 0 v1");
    }
    let id = request_id(&client, "sl").await?;
    assert!(id.parse::<u64>().is_ok(), "a stdio read stays on rmcp (a numeric id): {id}");

    let (modern_host, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let read = modern_host.read_resource_once(ReadResourceRequestParams::new("hm+fx://fx/needs-input"));
    let response = tokio::time::timeout(DEADLINE, read).await??;
    assert!(matches!(response, ReadResourceResponse::InputRequired(_)), "got {response:?}");
    Ok(())
}

#[tokio::test]
async fn a_faulty_reply_to_a_thin_read_fails_that_read_alone() -> anyhow::Result<()> {
    let legacy = HttpFixture::spawn(&["--faults", "--era", "legacy"]).await?;
    let modern = HttpFixture::spawn(&["--faults", "--era", "modern"]).await?;
    let config = [
        http_upstream("hl", &legacy.url, LIMITS),
        http_upstream("hm", &modern.url, &format!("{LIMITS}\nprotocol = \"2026-07-28\"")),
    ]
    .concat();
    let proxy = ProxyProcess::start(&config).await?;
    let (client, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let faults = [
        ("sized/100000", "reply too large"),
        ("fault/invalid_utf8", "not valid UTF-8"),
        ("fault/malformed", "not a valid JSON-RPC message"),
        ("fault/wrong_id", "id no request was waiting for"),
    ];
    for upstream in ["hl", "hm"] {
        proxy.wait_up(upstream, 1).await?;
        for (path, expected) in faults {
            let uri = format!("{upstream}+fx://fx/{path}");
            let error = client.read_resource(ReadResourceRequestParams::new(uri.as_str())).await.expect_err(&uri);
            assert!(error.to_string().contains(expected), "{uri}: {error}");
        }
        let id = request_id(&client, upstream).await?;
        assert!(id.starts_with(THIN_ID), "{upstream}: after the faults, the read came with id {id}");
        let status = proxy.upstream_status(upstream).await?;
        assert_eq!((status["state"].as_str(), status["reconnects"].as_u64()), (Some("up"), Some(0)), "{status}");
    }
    assert!(proxy.matching(&["upstream down"]).is_empty(), "no upstream was dropped: {:?}", proxy.logs());
    Ok(())
}

#[tokio::test]
async fn after_the_upstream_restarts_reads_go_on_the_thin_client_of_the_new_session() -> anyhow::Result<()> {
    let mut first = HttpFixture::spawn(&["--era", "legacy"]).await?;
    let address = first.url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    let extra = "request_timeout = \"4s\"\nreconnect_max = \"250ms\"\nrequired = false";
    let proxy = ProxyProcess::start(&http_upstream("hl", &first.url, extra)).await?;
    proxy.wait_up("hl", 1).await?;
    let (client, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let before = request_id(&client, "hl").await?;
    assert!(before.starts_with(THIN_ID), "the read came with id {before}");

    let (side, _) = fixture::connect_http(&first.url, Era::Legacy).await?;
    let _ = call_json(&side, "exit", json!({"code": 0})).await;
    first.wait_exit().await?;
    let _second = eventually(DEADLINE, "the fixture listening again on its port", || {
        HttpFixture::spawn_at(&address, &["--era", "legacy"])
    })
    .await?;

    // The proxy's session is unknown to the new process: reads fail alone or succeed, never hang,
    // until the proxy has a session of the new process.
    let read_again = eventually(Duration::from_secs(20), "a read after the restart", || async {
        text(&client, "hl+fx://fx/item/7").await
    });
    assert_eq!(read_again.await?, "item 7 v1");
    proxy.wait_up("hl", 2).await?;
    let after = request_id(&client, "hl").await?;
    assert!(after.starts_with(THIN_ID), "after the restart, the read came with id {after}");
    Ok(())
}

#[tokio::test]
async fn a_thin_read_that_times_out_is_cancelled_upstream_in_both_eras() -> anyhow::Result<()> {
    let legacy = HttpFixture::spawn(&["--era", "legacy"]).await?;
    let modern = HttpFixture::spawn(&["--era", "modern"]).await?;
    let extra = "request_timeout = \"400ms\"\nrequired = false";
    let config = [
        http_upstream("hl", &legacy.url, extra),
        http_upstream("hm", &modern.url, &format!("{extra}\nprotocol = \"2026-07-28\"")),
    ]
    .concat();
    let proxy = ProxyProcess::start(&config).await?;
    let (client, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    for (upstream, fixture, era) in [("hl", &legacy, Era::Legacy), ("hm", &modern, Era::Modern)] {
        proxy.wait_up(upstream, 1).await?;
        // The thin client is used once the proxy recorded rmcp's first request.
        assert!(request_id(&client, upstream).await?.starts_with(THIN_ID), "{upstream}: not on the thin client");
        let (side, _) = fixture::connect_http(&fixture.url, era).await?;
        call_json(&side, "hold_reads", json!({"on": true})).await?;
        let held = text(&client, &format!("{upstream}+fx://fx/item/3")).await;
        assert!(held.is_err(), "{upstream}: a held read must time out, got {held:?}");
        // Still held upstream: only the cancellation ends the read there.
        let stats = wait_for_stats(&side, |s| s["reads_in_flight"] == 0).await?;
        assert_eq!((&stats["reads_held"], &stats["reads_cancelled"]), (&json!(true), &json!(1)), "{upstream}: {stats}");
        call_json(&side, "hold_reads", json!({"on": false})).await?;
        assert_eq!(text(&client, &format!("{upstream}+fx://fx/item/3")).await?, "item 3 v1");
    }
    Ok(())
}
