//! Never stale: in front of real servers that advertise `subscribe` but notify only some
//! changes (npm server-everything's dynamic text, npm server-memory's file), the proxy keeps
//! an entry past the upstream's own lifetime (its `ttlMs`, or `cache.unwatched_ttl` when it
//! gives none) only where `trust_notifications` was configured and the subscription was
//! acknowledged. A subscription the upstream refuses is never believed.
//!
//! The waits here are the lifetimes under test (an entry expires when its lifetime has passed),
//! never synchronisation.

use std::time::{Duration, Instant};

use crate::support::fixture::{self, Era};
use crate::support::peers::{memory_upstream, spawn_everything_http};
use crate::support::proxy::{ProxyProcess, http_upstream};
use crate::support::reads::{outlive, read, text};
use serde_json::Value;

const TRUSTED: &str = "[upstreams.cache]\ntrust_notifications = true";

/// `cache.unwatched_ttl`'s default: the lifetime of an upstream that gives no `ttlMs`.
const DEFAULT_UNWATCHED_TTL: Duration = Duration::from_secs(5);

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
