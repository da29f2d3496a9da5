//! An event-queue overflow through real processes: the fixture over stdio sends a burst of
//! `notifications/resources/updated` (its `updated_burst` tool, for items 0..200) into a proxy
//! whose event queue holds one event (`server.event_queue = 1`), so events are dropped and the
//! lost URIs kept. Hosts hear `updated` only for lost URIs they hold: the host holding item 7
//! hears it, the host holding items 250 and 251 (outside the burst) hears nothing of 250 — not
//! the "everything may have changed" fallback.

#![allow(deprecated)] // resources/subscribe is the 2025 era's.

use serde_json::json;

use rmcp::model::SubscribeRequestParams;

use crate::support::fixture::{self, Era, FixtureEvent, call_json};
use crate::support::proxy::{ProxyProcess, fixture_upstream};

/// Bursts sent at most before the overflow must have been seen (one is expected to do).
const BURSTS: usize = 5;

#[tokio::test(flavor = "multi_thread")]
async fn an_overflow_tells_subscribers_only_of_the_lost_uris_they_hold() -> anyhow::Result<()> {
    let upstream = fixture_upstream("fx", &["--era", "legacy", "--resources", "300"]);
    let config = format!("[server]\nevent_queue = 1\n\n{upstream}protocol = \"2025-11-25\"\n");
    let proxy = ProxyProcess::start_with_offerings(&config, &[], &["fx"]).await?;
    let (held, mut held_events) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    held.subscribe(SubscribeRequestParams::new("fx+fx://fx/item/7")).await?;
    let (unrelated, mut unrelated_events) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    for uri in ["fx+fx://fx/item/250", "fx+fx://fx/item/251"] {
        unrelated.subscribe(SubscribeRequestParams::new(uri)).await?;
    }

    for _ in 0..BURSTS {
        let sent = call_json(&held, "fx__updated_burst", json!({"count": 200})).await?;
        assert_eq!(sent["sent"], 200, "{sent}");
        if !proxy.matching(&["event queue full"]).is_empty() {
            break;
        }
    }
    let overflow = proxy.wait_log(&["event queue full", "updated events were dropped"]).await?;
    assert!(overflow.contains("fx"), "names the upstream: {overflow}");

    // The host of item 7 hears it (whether its event was queued or lost), and nothing else.
    assert_eq!(held_events.next().await?, FixtureEvent::Updated("fx+fx://fx/item/7".into()));
    // A real change of item 251 after the burst: the unrelated host hears it, and nothing of
    // item 250 before it (the overflow was handled first).
    call_json(&held, "fx__touch", json!({"uri": "fx://fx/item/251"})).await?;
    let sentinel = FixtureEvent::Updated("fx+fx://fx/item/251".into());
    let mut heard = Vec::new();
    loop {
        let event = unrelated_events.next().await?;
        if event == sentinel {
            break;
        }
        heard.push(event);
    }
    assert!(heard.is_empty(), "the unrelated host heard only the real change: {heard:?}");
    while let Some(event) = held_events.try_next() {
        assert_eq!(event, FixtureEvent::Updated("fx+fx://fx/item/7".into()), "only what it holds");
    }
    for host in [held, unrelated] {
        host.cancel().await?;
    }
    Ok(())
}
