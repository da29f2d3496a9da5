//! Reading through the proxy and knowing when it has an update, for the cache tests of both tiers:
//! a read and its one text, the fixture's own count of reads per URI, a host that holds a URI to
//! hear its `updated`, "the proxy handled an upstream coming up", and letting a lifetime pass.
use std::time::{Duration, Instant};

use super::fixture::{self, Era, FixtureClient, FixtureEvent, stats};
use super::proxy::ProxyProcess;
use rmcp::RoleClient;
use rmcp::model::{ReadResourceRequestParams, ReadResourceResult, ResourceContents, SubscribeRequestParams};
use rmcp::service::Peer;

/// Wait until the proxy has *handled* `upstream` coming up for the `times`-th time, not just
/// logged it: the `upstream up` line is written before the event reaches the event loop, which
/// flushes the upstream's cache entries and then pokes the `list_changed` debounce. So the first
/// debounced `list_changed sent to hosts` logged after that line comes after the flush.
/// (Still a log wait: a counter of "up handled" alone is reached before the upstream's
/// subscription keeper has made its first, empty pass, so a read right after it could be
/// flushed by that pass's `may have changed`. The keeper's pass has no observable yet.)
pub async fn wait_handled_up(proxy: &ProxyProcess, upstream: &str, times: u64) -> anyhow::Result<()> {
    proxy.wait_up(upstream, times).await?;
    let tag = format!("\"upstream\":\"{upstream}\"");
    proxy.wait_log_count(&["\"upstream up\"", &tag], times as usize).await?;
    let logs = proxy.logs();
    let up_line = logs
        .iter()
        .enumerate()
        .filter(|(_, line)| line.contains("\"upstream up\"") && line.contains(&tag))
        .nth(times as usize - 1)
        .map(|(at, _)| at)
        .expect("waited for it");
    let fired_before = logs[..up_line].iter().filter(|line| line.contains("list_changed sent to hosts")).count();
    proxy.wait_log_count(&["list_changed sent to hosts"], fired_before + 1).await.map(drop)
}

/// How often the fixture has served `uri`.
pub async fn upstream_reads(side: &FixtureClient, uri: &str) -> anyhow::Result<u64> {
    Ok(stats(side).await?["reads_by_uri"][uri].as_u64().unwrap_or(0))
}

pub async fn read(host: &Peer<RoleClient>, uri: &str) -> anyhow::Result<ReadResourceResult> {
    Ok(host.read_resource(ReadResourceRequestParams::new(uri)).await?)
}

/// The text of a one-content text result.
pub fn text(result: &ReadResourceResult) -> &str {
    match result.contents.as_slice() {
        [ResourceContents::TextResourceContents { text, .. }] => text,
        other => panic!("expected one text content, got {other:?}"),
    }
}

/// A legacy host that subscribed to `uri` through the proxy, to learn when the proxy has an
/// update (see the module doc).
pub struct Watcher {
    _client: FixtureClient,
    events: fixture::Events,
    uri: String,
}

impl Watcher {
    pub async fn subscribe(proxy_url: &str, uri: &str) -> anyhow::Result<Self> {
        let (client, events) = fixture::connect_http(proxy_url, Era::Legacy).await?;
        #[allow(deprecated)]
        client.subscribe(SubscribeRequestParams::new(uri)).await?;
        Ok(Self { _client: client, events, uri: uri.to_owned() })
    }

    /// Wait (at most [`DEADLINE`]) until this host hears `updated` for its URI.
    pub async fn heard_update(&mut self) -> anyhow::Result<()> {
        loop {
            match self.events.next().await? {
                FixtureEvent::Updated(uri) if uri == self.uri => return Ok(()),
                FixtureEvent::Updated(_) | FixtureEvent::ListChanged => continue,
            }
        }
    }
}
/// Let `lifetime` pass since `since` (plus a margin): the lifetime is the behaviour under test.
/// `since` is taken after the read that stored the entry returned, so the entry is older.
pub async fn outlive(since: Instant, lifetime: Duration) {
    tokio::time::sleep((lifetime + Duration::from_millis(200)).saturating_sub(since.elapsed())).await; // the TTL is under test
}
