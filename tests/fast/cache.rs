//! The read cache end to end: the real proxy binary over HTTP in front of real upstreams (the
//! rmcp fixture, which counts its reads per URI; npm server-everything; the PyPI `mcp`
//! `MCPServer`), driven by real rmcp clients in both eras. Upstream reads are counted on a side
//! connection to the fixture (`stats.reads_by_uri`), so every hit and miss claim is a count.
//!
//! "The proxy has the update" is observed, never slept for: a second host holds the URI, and
//! the proxy invalidates before it fans out, so once that host hears `updated` a read is fresh.

use std::time::{Duration, Instant};

use crate::support::eventually;
use crate::support::fixture::{self, DEADLINE, Era, FixtureClient, HttpFixture, call_json, stats, wait_for_stats};
use crate::support::proxy::{ProxyProcess, http_upstream, metric_value};
use crate::support::reads::{Watcher, read, text, upstream_reads, wait_handled_up};
use rmcp::model::CacheScope;
use serde_json::{Value, json};

const ITEM: &str = "fx://fx/item/1";
const PROXIED_ITEM: &str = "fx+fx://fx/item/1";

/// A proxy (with `cache`, a `[cache]` table body) in front of one HTTP fixture started with
/// `fixture_args`; the upstream is `fx`, configured with `upstream_extra`. Returns the proxy,
/// the fixture and a side connection to the fixture for counting reads and driving changes.
async fn proxy_with_fixture(
    fixture_args: &[&str],
    upstream_extra: &str,
    cache: &str,
) -> anyhow::Result<(ProxyProcess, HttpFixture, FixtureClient)> {
    let upstream = HttpFixture::spawn(fixture_args).await?;
    let config = format!("[cache]\n{cache}\n\n{}", http_upstream("fx", &upstream.url, upstream_extra));
    let proxy = ProxyProcess::start(&config).await?;
    wait_handled_up(&proxy, "fx", 1).await?;
    let (side, _) = fixture::connect_http(&upstream.url, Era::Auto).await?;
    Ok((proxy, upstream, side))
}

async fn touch(side: &FixtureClient, uri: &str) -> anyhow::Result<Value> {
    call_json(side, "touch", json!({ "uri": uri })).await
}

async fn hold_reads(side: &FixtureClient, on: bool) -> anyhow::Result<()> {
    call_json(side, "hold_reads", json!({ "on": on })).await.map(drop)
}

/// 100 concurrent reads of one cold URI make one upstream read (single flight); reads after
/// that are hits. The entry outlives the test even if the upstream's subscription is not
/// acknowledged within the read's wait (a loaded machine), which would keep it `unwatched_ttl`.
#[tokio::test]
async fn concurrent_cold_reads_make_one_upstream_read_and_later_reads_hit() -> anyhow::Result<()> {
    let (proxy, _upstream, side) = proxy_with_fixture(&["--era", "legacy"], "", "unwatched_ttl = \"10m\"").await?;
    let mut hosts = Vec::new();
    for _ in 0..4 {
        hosts.push(fixture::connect_http(&proxy.url, Era::Legacy).await?.0);
    }
    let reads = (0..100).map(|i| read(&hosts[i % hosts.len()], PROXIED_ITEM));
    for result in futures::future::join_all(reads).await {
        assert_eq!(text(&result?), "item 1 v1");
    }
    assert_eq!(upstream_reads(&side, ITEM).await?, 1, "100 concurrent cold reads, one upstream read");
    for host in &hosts {
        for _ in 0..5 {
            assert_eq!(text(&read(host, PROXIED_ITEM).await?), "item 1 v1");
        }
    }
    assert_eq!(upstream_reads(&side, ITEM).await?, 1, "repeated reads are hits");
    Ok(())
}

/// The fixture notifies every change of a subscribed URI to every session: it may be trusted.
const TRUSTED: &str = "[upstreams.cache]\ntrust_notifications = true";

/// A host that never subscribed reads X (cached); the upstream changes X and notifies; the next
/// read returns the new content, with exactly one more upstream read. For a trusted 2025
/// upstream (no `ttlMs`: kept on its acknowledged subscription) and an untrusted 2026-07-28 one
/// (kept on its own `ttlMs`, ended early by the `updated`).
#[tokio::test]
async fn an_upstream_update_makes_the_next_read_fresh_with_one_more_upstream_read() -> anyhow::Result<()> {
    let eras: [(&str, &[&str], &str); 2] = [
        ("legacy", &["--era", "legacy"], TRUSTED),
        ("2026-07-28", &["--era", "modern", "--ttl-ms", "600000", "--scope", "public"], ""),
    ];
    for (era, args, trust) in eras {
        let (proxy, _upstream, side) = proxy_with_fixture(args, trust, "").await?;
        let (reader, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
        assert_eq!(text(&read(&reader, PROXIED_ITEM).await?), "item 1 v1", "{era}");
        assert_eq!(text(&read(&reader, PROXIED_ITEM).await?), "item 1 v1", "{era}");
        assert_eq!(upstream_reads(&side, ITEM).await?, 1, "{era}: the second read is a hit");

        let mut watcher = Watcher::subscribe(&proxy.url, PROXIED_ITEM).await?;
        // The untrusted upstream's URI was not subscribed for the cache: the host's subscription
        // must be in place upstream before the change, or the change is not notified at all.
        let holds = |s: &Value, key: &str| s[key].as_array().is_some_and(|uris| uris.contains(&json!(ITEM)));
        let subscribed = |s: &Value| holds(s, "subscribed") || holds(s, "listen_uris");
        wait_for_stats(&side, subscribed).await?;
        let touched = touch(&side, ITEM).await?;
        assert_eq!(touched["version"], 2, "{era}: {touched}");
        watcher.heard_update().await?;

        assert_eq!(text(&read(&reader, PROXIED_ITEM).await?), "item 1 v2", "{era}: fresh after the update");
        assert_eq!(upstream_reads(&side, ITEM).await?, 2, "{era}: exactly one more upstream read");
        assert_eq!(text(&read(&reader, PROXIED_ITEM).await?), "item 1 v2", "{era}");
        assert_eq!(upstream_reads(&side, ITEM).await?, 2, "{era}: the new content is cached in turn");
    }
    Ok(())
}

/// A read blocked in the upstream while an `updated` for its URI arrives: whatever it loaded is
/// not kept (though the trusted upstream's results otherwise are), so the next read goes
/// upstream again and returns the new version.
#[tokio::test]
async fn a_read_in_flight_across_an_update_is_not_kept() -> anyhow::Result<()> {
    let (proxy, _upstream, side) = proxy_with_fixture(&["--era", "legacy"], TRUSTED, "").await?;
    let mut watcher = Watcher::subscribe(&proxy.url, PROXIED_ITEM).await?;
    wait_for_stats(&side, |s| s["subscribed"].as_array().is_some_and(|uris| uris.contains(&json!(ITEM)))).await?;
    let (reader, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;

    hold_reads(&side, true).await?;
    let blocked = {
        let reader = reader.peer().clone();
        tokio::spawn(async move { read(&reader, PROXIED_ITEM).await })
    };
    wait_for_stats(&side, |s| s["reads_in_flight"] == 1).await?;
    touch(&side, ITEM).await?;
    watcher.heard_update().await?;
    hold_reads(&side, false).await?;
    // The fixture renders the version when the hold lifts, so this read already says v2; what
    // matters is that its result was loaded under the generation the update superseded.
    let first = tokio::time::timeout(DEADLINE, blocked).await???;
    assert!(text(&first).starts_with("item 1 v"), "{first:?}");
    assert_eq!(upstream_reads(&side, ITEM).await?, 1);

    assert_eq!(text(&read(&reader, PROXIED_ITEM).await?), "item 1 v2");
    assert_eq!(upstream_reads(&side, ITEM).await?, 2, "the read after the update went upstream again");
    assert_eq!(text(&read(&reader, PROXIED_ITEM).await?), "item 1 v2");
    assert_eq!(upstream_reads(&side, ITEM).await?, 2, "and its result is kept");
    Ok(())
}

/// An upstream that went away and came back may have changed anything meanwhile: all of its
/// entries are dropped. The upstream cannot notify and `unwatched_ttl` is an hour, so neither an
/// `updated` nor a TTL can explain the miss — only the reconnect flush.
#[tokio::test]
async fn a_reconnected_upstream_starts_with_no_cached_entries() -> anyhow::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let address = format!("127.0.0.1:{port}");
    let args = ["--era", "legacy", "--no-subscribe"];
    let mut upstream = HttpFixture::spawn_at(&address, &args).await?;
    let tuning = "reconnect_max = \"500ms\"\nhealth_interval = \"200ms\"";
    let config = format!("[cache]\nunwatched_ttl = \"1h\"\n\n{}", http_upstream("fx", &upstream.url, tuning));
    let proxy = ProxyProcess::start(&config).await?;
    wait_handled_up(&proxy, "fx", 1).await?;
    let (side, _) = fixture::connect_http(&upstream.url, Era::Legacy).await?;
    let (reader, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    read(&reader, PROXIED_ITEM).await?;
    read(&reader, PROXIED_ITEM).await?;
    assert_eq!(upstream_reads(&side, ITEM).await?, 1, "cached before the restart");

    let _ = call_json(&side, "exit", json!({"code": 0})).await;
    upstream.wait_exit().await?;
    proxy.wait_down("fx").await?;
    let _restarted = HttpFixture::spawn_at(&address, &args).await?;
    wait_handled_up(&proxy, "fx", 2).await?;

    let (side, _) = fixture::connect_http(&format!("http://{address}/mcp"), Era::Legacy).await?;
    assert_eq!(text(&read(&reader, PROXIED_ITEM).await?), "item 1 v1");
    assert_eq!(upstream_reads(&side, ITEM).await?, 1, "the first read after the reconnect went upstream");
    read(&reader, PROXIED_ITEM).await?;
    assert_eq!(upstream_reads(&side, ITEM).await?, 1, "and is cached again");
    Ok(())
}

/// An upstream that cannot notify and gives no `ttlMs`, with the operator's opt-in
/// `unwatched_ttl`: a read within it hits, a read after it misses. The 2026-07-28 host is told
/// `ttlMs: 0`: the lifetime is the operator's, not the upstream's.
#[tokio::test]
async fn entries_of_an_upstream_that_cannot_notify_expire_after_unwatched_ttl() -> anyhow::Result<()> {
    // Long enough that two reads on a busy machine fit well within it.
    const TTL: Duration = Duration::from_millis(1000);
    let cache = format!("unwatched_ttl = \"{}ms\"", TTL.as_millis());
    let (proxy, _upstream, side) = proxy_with_fixture(&["--era", "legacy", "--no-subscribe"], "", &cache).await?;
    let (reader, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;

    let started = Instant::now();
    read(&reader, PROXIED_ITEM).await?;
    let stored_by = Instant::now();
    let hit = read(&reader, PROXIED_ITEM).await?;
    let within = started.elapsed();
    assert!(within < TTL, "two reads took {within:?}, longer than the TTL under test: inconclusive");
    assert_eq!(upstream_reads(&side, ITEM).await?, 1, "a read within the TTL hits");
    assert_eq!(hit.ttl_ms, Some(0), "told no lifetime the upstream did not give");

    // Not synchronisation: the TTL is the behaviour under test. The entry was stored before the
    // first read returned, so it has expired once TTL has passed since then.
    tokio::time::sleep(TTL.saturating_sub(stored_by.elapsed()) + Duration::from_millis(10)).await; // the TTL is under test
    read(&reader, PROXIED_ITEM).await?;
    assert_eq!(upstream_reads(&side, ITEM).await?, 2, "a read after the TTL misses");
    Ok(())
}

/// Ten times `max_bytes` of distinct contents read through the proxy: the cache's weighted size,
/// as `/metrics` and `/status` report it, stays within `max_bytes`, and is not simply empty.
#[tokio::test]
async fn the_cache_stays_within_max_bytes() -> anyhow::Result<()> {
    const MAX_BYTES: u64 = 1 << 20;
    const TEXT_BYTES: u64 = 64 << 10;
    let items = 10 * MAX_BYTES / TEXT_BYTES;
    // An upstream that cannot notify keeps 160 subscriptions out of the picture; an hour-long
    // `unwatched_ttl` keeps expiry out of it.
    let cache = "max_bytes = \"1MiB\"\nunwatched_ttl = \"1h\"";
    let fixture_args = ["--era", "legacy", "--no-subscribe", "--text-bytes", "65536"];
    let (proxy, _upstream, side) = proxy_with_fixture(&fixture_args, "", cache).await?;
    let mut hosts = Vec::new();
    for _ in 0..4 {
        hosts.push(fixture::connect_http(&proxy.url, Era::Legacy).await?.0);
    }
    let uris: Vec<String> = (0..items).map(|id| format!("fx+fx://fx/item/{id}")).collect();
    let mut read_bytes = 0;
    for (batch, uris) in uris.chunks(8).enumerate() {
        let reads = uris.iter().map(|uri| read(&hosts[batch % hosts.len()], uri));
        for result in futures::future::join_all(reads).await {
            read_bytes += text(&result?).len() as u64;
        }
    }
    assert!(read_bytes >= 10 * MAX_BYTES, "read {read_bytes} bytes");
    assert_eq!(stats(&side).await?["reads"], items, "every item was read upstream once");

    let status: Value = serde_json::from_str(&proxy.admin_get("/status").await?)?;
    let weighted = status["cache"]["weighted_bytes"].as_u64().expect("cache.weighted_bytes in /status");
    assert!(weighted > 0 && weighted <= MAX_BYTES, "/status weighted_bytes {weighted}: {status}");
    assert!(status["cache"]["entries"].as_u64().is_some_and(|n| n > 0), "{status}");

    // The gauge is sampled: wait until a sample shows the cache holding something.
    let gauge = eventually(DEADLINE, "the weighted-bytes gauge shows the cache holding something", || async {
        let metrics = proxy.admin_get("/metrics").await?;
        let gauge = metric_value(&metrics, "mcp_proxy_cache_weighted_bytes")
            .unwrap_or_else(|| panic!("no mcp_proxy_cache_weighted_bytes in /metrics:\n{metrics}"));
        if gauge > 0.0 { Ok(gauge) } else { Err(anyhow::anyhow!("it is {gauge}")) }
    })
    .await?;
    assert!(gauge <= MAX_BYTES as f64, "mcp_proxy_cache_weighted_bytes {gauge} > {MAX_BYTES}");
    Ok(())
}

/// 2026-07-28 hosts are told how long a result stays fresh (`ttlMs`, positive on a hit of a
/// watched entry, never more than the upstream's own `ttlMs`) and for whom (`cacheScope`);
/// 2025 hosts get neither field.
#[tokio::test]
async fn read_results_carry_cache_hints_for_2026_hosts_only() -> anyhow::Result<()> {
    const UPSTREAM_TTL_MS: u64 = 60_000;
    let ttl = UPSTREAM_TTL_MS.to_string();
    let args = ["--era", "modern", "--ttl-ms", ttl.as_str(), "--scope", "public"];
    let (proxy, _upstream, side) = proxy_with_fixture(&args, "", "").await?;
    let (modern, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let (legacy, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;

    let miss = read(&modern, PROXIED_ITEM).await?;
    let hit = read(&modern, PROXIED_ITEM).await?;
    assert_eq!(upstream_reads(&side, ITEM).await?, 1, "the second read is a hit");
    for (what, result) in [("miss", &miss), ("hit", &hit)] {
        let told = result.ttl_ms.unwrap_or_else(|| panic!("{what}: no ttlMs"));
        assert!(told > 0 && told <= UPSTREAM_TTL_MS, "{what}: ttlMs {told} within (0, {UPSTREAM_TTL_MS}]");
        assert_eq!(result.cache_scope, Some(CacheScope::Public), "{what}");
    }
    assert!(hit.ttl_ms <= miss.ttl_ms, "the hit is told what remains: {:?} after {:?}", hit.ttl_ms, miss.ttl_ms);

    let old = read(&legacy, PROXIED_ITEM).await?;
    assert_eq!(text(&old), "item 1 v1");
    assert_eq!((old.ttl_ms, old.cache_scope), (None, None), "a 2025 result has no cache hints");
    assert_eq!(upstream_reads(&side, ITEM).await?, 1, "the 2025 host was served from the same entry");
    Ok(())
}
