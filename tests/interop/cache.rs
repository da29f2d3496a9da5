//! The read cache in front of third-party upstreams (npm server-everything, the PyPI `mcp`
//! `MCPServer`), driven by real rmcp clients: what they tell about lifetimes and updates is kept.
//! "The proxy has the update" is observed (a second host hears `updated`), never slept for.

use crate::support::eventually;
use crate::support::fixture::{self, DEADLINE, Era, call_json};
use crate::support::peers::{spawn_everything_http, spawn_py_server_http};
use crate::support::proxy::{ProxyProcess, http_upstream};
use crate::support::reads::{Watcher, read, text, wait_handled_up};
use rmcp::model::CacheScope;
use serde_json::json;

/// npm server-everything's dynamic text resource (it embeds the time of the read, to the
/// second), with the operator's opt-in `[upstreams.cache] unwatched_ttl` (the server gives no
/// `ttlMs` and is not trusted: by default nothing of it is kept, see `never_stale`): within
/// that lifetime, once the upstream itself would answer differently, the proxy still answers
/// with the text it cached.
#[tokio::test]
async fn server_everything_dynamic_text_is_served_from_cache_within_an_opted_in_lifetime() -> anyhow::Result<()> {
    let everything = spawn_everything_http();
    let opt_in = "[upstreams.cache]\nunwatched_ttl = \"10m\"";
    let proxy = ProxyProcess::start(&http_upstream("web", &everything.url, opt_in)).await?;
    wait_handled_up(&proxy, "web", 1).await?;
    let (reader, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let first = text(&read(&reader, "web+demo://resource/dynamic/text/1").await?).to_owned();
    assert!(first.starts_with("Resource 1: "), "{first}");

    // Poll the upstream directly until its own answer has moved on (next second).
    let (direct, _) = fixture::connect_http(&everything.url, Era::Legacy).await?;
    eventually(DEADLINE, "server-everything's own answer moves on", || async {
        let now = read(&direct, "demo://resource/dynamic/text/1").await?;
        if text(&now) != first { Ok(()) } else { Err(anyhow::anyhow!("it kept answering {first:?}")) }
    })
    .await?;
    let second = read(&reader, "web+demo://resource/dynamic/text/1").await?;
    assert_eq!(text(&second), first, "the second read through the proxy is the cached one");
    Ok(())
}

/// A PyPI `mcp` `MCPServer` upstream in the 2026-07-28 era (reads carry `ttlMs: 60000`,
/// `cacheScope: public`): a note is cached; `bump` on a side connection changes it and notifies;
/// once a subscribed host heard it, the next read through the proxy is the new version.
#[tokio::test]
async fn a_python_sdk_upstream_invalidates_on_updated() -> anyhow::Result<()> {
    let py = spawn_py_server_http(&[]);
    let proxy = ProxyProcess::start(&http_upstream("py", &py.url, "protocol = \"2026-07-28\"")).await?;
    wait_handled_up(&proxy, "py", 1).await?;
    let (reader, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let first = read(&reader, "py+py://note/1").await?;
    assert_eq!(text(&first), "note 1 v1");
    let told = first.ttl_ms.expect("ttlMs");
    assert!(told > 0 && told <= 60_000, "ttlMs {told}: capped by the upstream's 60000");
    assert_eq!(first.cache_scope, Some(CacheScope::Public));
    assert_eq!(text(&read(&reader, "py+py://note/1").await?), "note 1 v1");

    let mut watcher = Watcher::subscribe(&proxy.url, "py+py://note/1").await?;
    // The side connection bumps in a 2025 session: the Python SDK sends the listen streams'
    // `updated` for a tool call made in a session (a stateless 2026-07-28 call's context does
    // not reach them reliably: it is the upstream's own path, not the proxy's under test).
    let (side, _) = fixture::connect_http(&py.url, Era::Legacy).await?;
    let bumped = call_json(&side, "bump", json!({"id": 1})).await?;
    assert_eq!(bumped["version"], 2, "{bumped}");
    watcher.heard_update().await?;
    assert_eq!(text(&read(&reader, "py+py://note/1").await?), "note 1 v2");
    Ok(())
}
