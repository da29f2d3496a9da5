//! Never stale, in front of the fixture and the folder server: the proxy keeps a result only as
//! long as someone who knows said it may be — past the upstream's own `ttlMs` (or the operator's
//! `unwatched_ttl` opt-in when it gives none) only where `trust_notifications` was configured
//! (the folder server's default) and the subscription was acknowledged; by default, an
//! upstream that says nothing is read every time. A subscription the upstream refuses is never
//! believed; per-URI state ages out. (In front of third-party servers that notify only some
//! changes: the interop tier's `never_stale`.)
//!
//! The waits here are the lifetimes under test (an entry expires when its lifetime has passed),
//! never synchronisation.

use std::time::{Duration, Instant};

use crate::support::eventually;
use crate::support::exposition::Exposition;
use crate::support::fixture::{self, Era, HttpFixture, stats};
use crate::support::proxy::{ProxyProcess, http_upstream, toml_str};
use crate::support::reads::{Watcher, outlive, read, text, upstream_reads};
use rmcp::model::{CacheScope, ResourceContents};
use serde_json::Value;

const TRUSTED: &str = "[upstreams.cache]\ntrust_notifications = true";

/// A trusted upstream refuses the subscription for one URI (a 2025 error reply; a 2026-07-28
/// listen acknowledgement that leaves it out): that URI is cached no longer than the
/// `unwatched_ttl` opted into; an acknowledged URI stays cached. The fixture gives no `ttlMs`,
/// so a 2026-07-28 host is told `ttlMs: 0` for both: its own cache would hear no invalidation.
#[tokio::test]
async fn a_refused_subscription_is_never_cached_past_unwatched_ttl() -> anyhow::Result<()> {
    const TTL: Duration = Duration::from_millis(1000);
    for era in ["legacy", "modern"] {
        let upstream = HttpFixture::spawn(&["--era", era, "--refuse-subscribe", "item/1"]).await?;
        let cache = format!("[cache]\nunwatched_ttl = \"{}ms\"\n\n", TTL.as_millis());
        let proxy = ProxyProcess::start(&format!("{cache}{}", http_upstream("fx", &upstream.url, TRUSTED))).await?;
        proxy.wait_up("fx", 1).await?;
        let (side, _) = fixture::connect_http(&upstream.url, Era::Auto).await?;
        let (host, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;

        let refused = read(&host, "fx+fx://fx/item/1").await?;
        let stored_by = Instant::now();
        let acknowledged = read(&host, "fx+fx://fx/item/2").await?;
        assert_eq!(refused.ttl_ms, Some(0), "{era}: refused");
        assert_eq!(acknowledged.ttl_ms, Some(0), "{era}: acknowledged and trusted, kept by the proxy only");

        outlive(stored_by, TTL).await;
        read(&host, "fx+fx://fx/item/1").await?;
        read(&host, "fx+fx://fx/item/2").await?;
        assert_eq!(upstream_reads(&side, "fx://fx/item/1").await?, 2, "{era}: the refused URI was read again");
        assert_eq!(upstream_reads(&side, "fx://fx/item/2").await?, 1, "{era}: the acknowledged one still cached");
    }
    Ok(())
}

/// An upstream that states no lifetime (the 2025 fixture: no `ttlMs`), default config: nothing
/// is kept — every read goes upstream, nothing is subscribed for the cache — and a 2026-07-28
/// host is told `ttlMs: 0`, `cacheScope: private`, so its own cache keeps nothing either.
#[tokio::test]
async fn an_upstream_that_states_no_lifetime_is_read_every_time_by_default() -> anyhow::Result<()> {
    let upstream = HttpFixture::spawn(&["--era", "legacy"]).await?;
    let proxy = ProxyProcess::start(&http_upstream("fx", &upstream.url, "")).await?;
    proxy.wait_up("fx", 1).await?;
    let (side, _) = fixture::connect_http(&upstream.url, Era::Legacy).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    for reads in 1..=3 {
        let result = read(&host, "fx+fx://fx/item/1").await?;
        assert_eq!(text(&result), "item 1 v1");
        assert_eq!((result.ttl_ms, result.cache_scope), (Some(0), Some(CacheScope::Private)), "told nothing more");
        assert_eq!(upstream_reads(&side, "fx://fx/item/1").await?, reads, "read {reads} went upstream");
    }
    assert_eq!(stats(&side).await?["subscribed"], serde_json::json!([]), "no subscription that would keep nothing");
    Ok(())
}

/// The built-in folder server is ours and notifies every change of its files: its reads are kept
/// (a repeated read is a hit) and fresh the moment the proxy hears the change. A host is still
/// told `ttlMs: 0`: it would hear none of the proxy's invalidations.
#[tokio::test]
async fn the_folder_server_is_kept_until_a_file_changes() -> anyhow::Result<()> {
    let folder = tempfile::tempdir()?;
    let file = folder.path().join("note.md");
    std::fs::write(&file, "v1")?;
    let config = format!("[[upstreams]]\nname = \"docs\"\ndir = {}\n", toml_str(&folder.path().display().to_string()));
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("docs", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let uri = "docs+file:///note.md";
    let hits = || async {
        let metrics = Exposition::parse(&proxy.admin_get("/metrics").await?)?;
        anyhow::Ok(metrics.sum("mcp_proxy_cache_hits_total", &[("upstream", "docs")]))
    };

    let first = read(&host, uri).await?;
    assert_eq!((text(&first), first.ttl_ms), ("v1", Some(0)));
    assert_eq!(text(&read(&host, uri).await?), "v1");
    assert_eq!(hits().await?, 1.0, "the second read was a hit");

    let mut watcher = Watcher::subscribe(&proxy.url, uri).await?;
    std::fs::write(&file, "v2")?;
    watcher.heard_update().await?;
    assert_eq!(text(&read(&host, uri).await?), "v2", "fresh once the change was heard");
    assert_eq!(hits().await?, 1.0, "that read went to the folder");
    assert_eq!(text(&read(&host, uri).await?), "v2");
    assert_eq!(hits().await?, 2.0, "and its result is kept in turn");
    Ok(())
}

/// A multi-content read whose other contents have no scheme (or an empty URI): those cannot be
/// namespaced or judged by a policy, so they are dropped — never relabelled as the read URI.
#[tokio::test]
async fn contents_without_a_scheme_in_a_multi_content_read_are_dropped() -> anyhow::Result<()> {
    let upstream = HttpFixture::spawn(&["--era", "legacy"]).await?;
    let proxy = ProxyProcess::start(&http_upstream("fx", &upstream.url, "")).await?;
    proxy.wait_up("fx", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let result = read(&host, "fx+fx://fx/multi-bare").await?;
    assert_eq!(text(&result), "bare a v1", "only the content with a URI of its own: {result:?}");
    let uris: Vec<&str> = result
        .contents
        .iter()
        .map(|content| match content {
            ResourceContents::TextResourceContents { uri, .. } | ResourceContents::BlobResourceContents { uri, .. } => {
                uri.as_str()
            }
            _ => "",
        })
        .collect();
    assert_eq!(uris, ["fx+fx://fx/multi-bare/a"]);
    Ok(())
}

/// Per-URI state ages out: after reads of 400 distinct URIs (half of them missing) and their
/// entries' expiry, `/status` shows no generation records, hints, holds or entries left.
#[tokio::test]
async fn per_uri_state_returns_to_nothing_once_entries_expire() -> anyhow::Result<()> {
    let upstream = HttpFixture::spawn(&["--era", "legacy"]).await?;
    let cache = "[cache]\nunwatched_ttl = \"500ms\"\nmax_ttl = \"500ms\"\n\n";
    let proxy = ProxyProcess::start(&format!("{cache}{}", http_upstream("fx", &upstream.url, ""))).await?;
    proxy.wait_up("fx", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    for batch in 0..10u64 {
        let reads = (0..40u64).map(|i| {
            let id = batch * 40 + i;
            let uri = if id % 2 == 0 { format!("fx+fx://fx/item/{id}") } else { format!("fx+fx://fx/missing/{id}") };
            let host = host.clone();
            async move { read(&host, &uri).await.is_ok() }
        });
        let found = futures::future::join_all(reads).await.into_iter().filter(|ok| *ok).count();
        assert_eq!(found, 20, "half of each batch exists");
    }
    eventually(Duration::from_secs(30), "no per-URI state left", || async {
        let status: Value = serde_json::from_str(&proxy.admin_get("/status").await?)?;
        let cache = &status["cache"];
        let tracked = &cache["tracked"];
        let empty = ["generations", "hints", "holds", "stale"].iter().all(|k| tracked[*k] == 0);
        match empty && cache["entries"] == 0 && status["subscriptions"]["upstream_uris"] == 0 {
            true => Ok(()),
            false => Err(anyhow::anyhow!("{status}")),
        }
    })
    .await
}
