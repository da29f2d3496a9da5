//! Every counter a scripted workload moves, with the right labels.

use crate::support::exposition::Exposition;
use crate::support::fixture::{self, Era, list_all_resources};
use crate::support::proxy::{ProxyProcess, http_upstream};
use anyhow::ensure;
use rmcp::model::SubscribeRequestParams;
use serde_json::Value;

use crate::support::observe::*;

/// Metrics after a scripted workload, as deltas from a scrape before it: reads that miss and
/// hit, a not-found read, a denied read and a list hiding a denied resource, a subscription and
/// one `updated`, one upstream restart. Every expected series is checked and every mismatch
/// reported at once.
#[tokio::test]
async fn metrics_count_a_scripted_workload_with_the_right_labels() -> anyhow::Result<()> {
    const ITEMS: u64 = 3;
    const REREADS: u64 = 2;
    let mut fx = RestartableFixture::spawn(&["--era", "legacy"]).await?;
    let policies = policies_folder()?;
    // The fixture notifies every change: trusted, its reads are kept (its results carry no `ttlMs`).
    let fx_upstream =
        http_upstream("fx", &fx.url(), &format!("{TUNING}\n[upstreams.cache]\ntrust_notifications = true"));
    let config = format!("{}{fx_upstream}", policies_section(policies.path()));
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("fx", 1).await?;
    scrape_until(&proxy, "fx up", |m| up(m, "fx") == Some(1.0)).await?;
    let before = scrape(&proxy).await?;

    let (reader, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let (subscriber, mut heard) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let mut served_bytes = 0;
    for _ in 0..=REREADS {
        for id in 0..ITEMS {
            served_bytes += text_bytes(&read(&reader, &item(id)).await?);
        }
    }
    ensure!(read(&reader, MISSING).await.is_err(), "{MISSING} was read");
    ensure!(read(&reader, DENIED).await.is_err(), "{DENIED} was read despite the policy");
    let (listed, pages) = list_all_resources(&reader).await?;
    ensure!(pages == 1 && !listed.iter().any(|r| r.uri == DENIED), "{pages} pages: {listed:?}");

    #[allow(deprecated)]
    subscriber.subscribe(SubscribeRequestParams::new(item(0))).await?;
    // Sampled gauges, set on the same tick: one host holds item 0; upstream, the proxy holds
    // each item it cached (item 0 shared with the host) — and nothing for the missing URI.
    let sampled = scrape_until(&proxy, "the host's subscription", |m| {
        m.value("mcp_proxy_downstream_subscriptions", &[("upstream", "fx")]) == Some(1.0)
    })
    .await?;
    let held_upstream = sampled.value("mcp_proxy_upstream_subscriptions", &[("upstream", "fx")]);
    let side = fx.side().await?;
    touch_once_subscribed(&side, "fx://fx/item/0").await?;
    wait_updated(&mut heard, &item(0)).await?;

    fx.stop().await?;
    scrape_until(&proxy, "fx down", |m| up(m, "fx") == Some(0.0)).await?;
    // A restart takes a while: let one reconnection attempt fail before the upstream is back.
    proxy.wait_log_count(&["upstream down", "\"upstream\":\"fx\""], 2).await?;
    fx.start().await?;
    proxy.wait_up("fx", 2).await?;
    scrape_until(&proxy, "fx up again", |m| up(m, "fx") == Some(1.0)).await?;
    // Updates may have been missed meanwhile: the proxy tells the host item 0 may have changed.
    wait_updated(&mut heard, &item(0)).await?;
    // The event loop counts the reconnect's invalidations on its own time: scrape once they are in
    // (the exact figure is checked below with every other series).
    let flushed = |m: &Exposition| m.value("mcp_proxy_cache_invalidations_total", &[("cause", "reconnect")]);
    let flushed_before = flushed(&before).unwrap_or(0.0);
    let after = scrape_until(&proxy, "the reconnect's invalidations", |m| {
        flushed(m).unwrap_or(0.0) >= flushed_before + (ITEMS - 1) as f64
    })
    .await?;

    let reads = ITEMS * (REREADS + 1);
    let version = env!("CARGO_PKG_VERSION");
    let fx_label = [("upstream", "fx")];
    let expected: Vec<Expected> = vec![
        ("mcp_proxy_cache_misses_total", fx_label.to_vec(), ITEMS as f64),
        ("mcp_proxy_cache_hits_total", fx_label.to_vec(), (ITEMS * REREADS) as f64),
        ("mcp_proxy_cache_inserts_total", fx_label.to_vec(), ITEMS as f64),
        (
            "mcp_proxy_upstream_requests_total",
            vec![("upstream", "fx"), ("method", "resources/read"), ("outcome", "ok")],
            ITEMS as f64,
        ),
        ("mcp_proxy_downstream_requests_total", vec![("method", "resources/read"), ("outcome", "ok")], reads as f64),
        // The missing URI and the denied one answer alike.
        ("mcp_proxy_downstream_requests_total", vec![("method", "resources/read"), ("outcome", "not_found")], 2.0),
        ("mcp_proxy_downstream_request_duration_seconds_count", vec![("method", "resources/read")], (reads + 2) as f64),
        ("mcp_proxy_downstream_requests_total", vec![("method", "resources/list"), ("outcome", "ok")], 1.0),
        ("mcp_proxy_downstream_requests_total", vec![("method", "resources/subscribe"), ("outcome", "ok")], 1.0),
        ("mcp_proxy_served_bytes_total", fx_label.to_vec(), served_bytes as f64),
        ("mcp_proxy_policy_denials_total", vec![("action", "read"), ("policy", POLICY_FILE)], 1.0),
        // The list hid the blob because of a rule in that file, too.
        ("mcp_proxy_policy_denials_total", vec![("action", "list"), ("policy", POLICY_FILE)], 1.0),
        // The upstream sent one `updated`; the proxy's own "may have changed" after the
        // reconnect is no notification from the upstream, and invalidates for the reconnect.
        ("mcp_proxy_notifications_received_total", vec![("upstream", "fx"), ("kind", "updated")], 1.0),
        ("mcp_proxy_cache_invalidations_total", vec![("cause", "updated")], 1.0),
        // The host heard two: the upstream's and the proxy's after the reconnect.
        ("mcp_proxy_notifications_delivered_total", vec![("kind", "updated")], 2.0),
        // Items 1 and 2 were cached when the upstream went away (item 0 was invalidated).
        ("mcp_proxy_cache_invalidations_total", vec![("cause", "reconnect")], (ITEMS - 1) as f64),
        // One restart: the upstream came back once, however many attempts that took.
        ("mcp_proxy_upstream_reconnects_total", fx_label.to_vec(), 1.0),
        ("mcp_proxy_downstream_sessions", vec![("transport", "http"), ("era", "2025")], 2.0),
        ("mcp_proxy_build_info", vec![("version", version)], 0.0),
    ];
    let mut mismatches = moved(&before, &after, &expected);
    if held_upstream != Some(ITEMS as f64) {
        mismatches.push(format!(
            "mcp_proxy_upstream_subscriptions{{upstream=\"fx\"}} is {held_upstream:?}, expected {ITEMS}"
        ));
    }
    // The upstream's tools were listed at each connect, counted under the version it negotiated.
    let tools_lists = ("mcp_client_operation_duration_seconds_count", [("mcp_method_name", "tools/list")]);
    let by_version: Vec<(&str, f64)> = after
        .matching(tools_lists.0, &tools_lists.1)
        .map(|sample| (sample.labels["mcp_protocol_version"].as_str(), sample.value))
        .collect();
    if by_version.is_empty() || by_version.iter().any(|(version, _)| !version.starts_with("2025-")) {
        mismatches.push(format!("{} for tools/list by protocol version: {by_version:?}", tools_lists.0));
    }
    if after.value("mcp_proxy_build_info", &[("version", version)]) != Some(1.0) {
        mismatches.push(format!("mcp_proxy_build_info{{version={version:?}}} is not 1"));
    }
    let status: Value = serde_json::from_str(&proxy.admin_get("/status").await?)?;
    let reconnects = after.value("mcp_proxy_upstream_reconnects_total", &fx_label);
    if upstream_status(&status, "fx")?["reconnects"].as_f64() != reconnects {
        mismatches.push(format!("/status fx reconnects differs from the counter {reconnects:?}: {status}"));
    }
    assert!(mismatches.is_empty(), "metrics that did not move as they should:\n{}", mismatches.join("\n"));
    Ok(())
}

/// Each expected `(family, labels, delta)` against two scrapes; one line per mismatch. A series
/// missing before counts as 0; missing after is a mismatch (wrong or missing labels).
/// (metric, labels, by how much it must move).
type Expected<'a> = (&'a str, Vec<(&'a str, &'a str)>, f64);

fn moved(before: &Exposition, after: &Exposition, expected: &[Expected]) -> Vec<String> {
    let mut mismatches = Vec::new();
    for (family, labels, delta) in expected {
        let shown = format!("{family}{labels:?}");
        match after.value(family, labels) {
            None => {
                let present: Vec<String> = after.matching(family, &[]).map(|s| s.identity()).collect();
                mismatches.push(format!("{shown}: no such series; {family} has {present:?}"));
            }
            Some(now) => {
                let was = before.value(family, labels).unwrap_or(0.0);
                if now - was != *delta {
                    mismatches.push(format!("{shown}: moved by {} (from {was} to {now}), expected {delta}", now - was));
                }
            }
        }
    }
    mismatches
}
