//! Never stale: in front of real servers that advertise `subscribe` but notify only some
//! changes (npm server-everything's dynamic text, npm server-memory's file), the proxy keeps
//! an entry past the upstream's own lifetime (its `ttlMs`, or `cache.unwatched_ttl` when it
//! gives none) only where `trust_notifications` was configured and the subscription was
//! acknowledged. A subscription the upstream refuses is never believed.
//!
//! The waits here are the lifetimes under test (an entry expires when its lifetime has passed),
//! never synchronisation.

use std::time::{Duration, Instant};

use crate::support::fixture::{self, Era, FixtureClient, HttpFixture, stats};
use crate::support::peers::{memory_stdio_command, spawn_everything_http};
use crate::support::proxy::{ProxyProcess, http_upstream, toml_str};
use rmcp::RoleClient;
use rmcp::model::{ReadResourceRequestParams, ReadResourceResult, ResourceContents};
use rmcp::service::Peer;
use serde_json::Value;

/// `cache.unwatched_ttl`'s default: the lifetime of an upstream that gives no `ttlMs`.
const DEFAULT_UNWATCHED_TTL: Duration = Duration::from_secs(5);

async fn read(host: &Peer<RoleClient>, uri: &str) -> anyhow::Result<ReadResourceResult> {
    Ok(host.read_resource(ReadResourceRequestParams::new(uri)).await?)
}

fn text(result: &ReadResourceResult) -> &str {
    match result.contents.as_slice() {
        [ResourceContents::TextResourceContents { text, .. }] => text,
        other => panic!("expected one text content, got {other:?}"),
    }
}

/// Let `lifetime` pass since `since` (plus a margin): the lifetime is the behaviour under test.
/// `since` is taken after the read that stored the entry returned, so the entry is older.
async fn outlive(since: Instant, lifetime: Duration) {
    tokio::time::sleep((lifetime + Duration::from_millis(200)).saturating_sub(since.elapsed())).await; // the TTL is under test
}

const TRUSTED: &str = "[upstreams.cache]\ntrust_notifications = true";

/// server-everything over HTTP, default config: its dynamic text (a timestamp) read through the
/// proxy is fresh once `unwatched_ttl` has passed, and a 2026-07-28 host is told no longer
/// lifetime than that. The same server configured as trusted keeps the cached text.
#[tokio::test]
async fn server_everything_dynamic_text_is_fresh_past_its_lifetime_unless_trusted() -> anyhow::Result<()> {
    let everything = spawn_everything_http();
    let config =
        format!("{}{}", http_upstream("web", &everything.url, ""), http_upstream("trusted", &everything.url, TRUSTED));
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("web", 1).await?;
    proxy.wait_up("trusted", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;

    let first = read(&host, "web+demo://resource/dynamic/text/1").await?;
    let stored_by = Instant::now();
    let trusted_first = read(&host, "trusted+demo://resource/dynamic/text/1").await?;
    assert!(text(&first).starts_with("Resource 1: "), "{}", text(&first));
    let told = first.ttl_ms.expect("2026-07-28 results carry ttlMs");
    assert!(told <= DEFAULT_UNWATCHED_TTL.as_millis() as u64, "told ttlMs {told}: longer than unwatched_ttl");
    let trusted_told = trusted_first.ttl_ms.expect("ttlMs");
    assert!(trusted_told > DEFAULT_UNWATCHED_TTL.as_millis() as u64, "trusted and acknowledged: {trusted_told}");

    outlive(stored_by, DEFAULT_UNWATCHED_TTL).await;
    let second = read(&host, "web+demo://resource/dynamic/text/1").await?;
    assert_ne!(text(&second), text(&first), "past its lifetime the proxy read the upstream again");
    let trusted_second = read(&host, "trusted+demo://resource/dynamic/text/1").await?;
    assert_eq!(text(&trusted_second), text(&trusted_first), "trusted: kept until an `updated` (none came)");
    Ok(())
}

/// A `[[upstreams]]` entry running server-memory over stdio on `file`.
fn memory_upstream(name: &str, file: &std::path::Path, extra: &str) -> String {
    let (program, args) = memory_stdio_command();
    let args: Vec<String> = args.iter().map(|a| toml_str(a)).collect();
    format!(
        "[[upstreams]]\nname = \"{name}\"\ncommand = {}\nargs = [{}]\nenv = {{ MEMORY_FILE_PATH = {} }}\n{extra}\n\n",
        toml_str(&program),
        args.join(", "),
        toml_str(&file.display().to_string()),
    )
}

/// server-memory, default config: after a second process changed its file (server-memory
/// notifies only its own writes), a read through the proxy past `unwatched_ttl` shows the new
/// entity. A second upstream on the same file, configured as trusted, keeps the old graph.
#[tokio::test]
async fn server_memory_changed_by_another_process_is_fresh_past_its_lifetime_unless_trusted() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("memory.jsonl");
    std::fs::write(&file, "")?;
    let config = format!("{}{}", memory_upstream("mem", &file, ""), memory_upstream("kept", &file, TRUSTED));
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("mem", 1).await?;
    proxy.wait_up("kept", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;

    let before = read(&host, "mem+memory://knowledge-graph").await?;
    let stored_by = Instant::now();
    let kept_before = read(&host, "kept+memory://knowledge-graph").await?;
    let graph: Value = serde_json::from_str(text(&before))?;
    assert_eq!(graph["entities"], serde_json::json!([]), "{graph}");

    // The second process: a write to the file the server reads on every read.
    let entity = r#"{"type":"entity","name":"Ada","entityType":"person","observations":["wrote this"]}"#;
    std::fs::write(&file, entity)?;
    outlive(stored_by, DEFAULT_UNWATCHED_TTL).await;

    let after: Value = serde_json::from_str(text(&read(&host, "mem+memory://knowledge-graph").await?))?;
    assert_eq!(after["entities"][0]["name"], "Ada", "past its lifetime the proxy read the file's change: {after}");
    let kept_after = read(&host, "kept+memory://knowledge-graph").await?;
    assert_eq!(text(&kept_after), text(&kept_before), "trusted: the cached graph is kept (no `updated` came)");
    Ok(())
}

/// How often the fixture has served `uri`.
async fn upstream_reads(side: &FixtureClient, uri: &str) -> anyhow::Result<u64> {
    Ok(stats(side).await?["reads_by_uri"][uri].as_u64().unwrap_or(0))
}

/// A trusted upstream refuses the subscription for one URI (a 2025 error reply; a 2026-07-28
/// listen acknowledgement that leaves it out): that URI is cached no longer than
/// `unwatched_ttl` and a 2026-07-28 host is told so; an acknowledged URI stays cached.
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
        let told = refused.ttl_ms.expect("ttlMs");
        assert!(told <= TTL.as_millis() as u64, "{era}: refused, told ttlMs {told}");
        let told = acknowledged.ttl_ms.expect("ttlMs");
        assert!(told > TTL.as_millis() as u64, "{era}: acknowledged and trusted, told ttlMs {told}");

        outlive(stored_by, TTL).await;
        read(&host, "fx+fx://fx/item/1").await?;
        read(&host, "fx+fx://fx/item/2").await?;
        assert_eq!(upstream_reads(&side, "fx://fx/item/1").await?, 2, "{era}: the refused URI was read again");
        assert_eq!(upstream_reads(&side, "fx://fx/item/2").await?, 1, "{era}: the acknowledged one still cached");
    }
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
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status: Value = serde_json::from_str(&proxy.admin_get("/status").await?)?;
        let cache = &status["cache"];
        let tracked = &cache["tracked"];
        let empty = ["generations", "hints", "holds", "stale"].iter().all(|k| tracked[*k] == 0);
        if empty && cache["entries"] == 0 && status["subscriptions"]["upstream_uris"] == 0 {
            break;
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "per-URI state left: {status}");
        tokio::time::sleep(Duration::from_millis(200)).await; // poll interval; the loop ends at its deadline
    }
    Ok(())
}
