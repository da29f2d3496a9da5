//! A 2026-07-28 listen stream hears every update after its acknowledgement: rmcp's client
//! `listen()` returns on the ack, and an upstream change made right then must reach the host
//! (the proxy registers the stream before rmcp acknowledges it). And nothing else: a stream
//! opened on URIs that nothing changed hears no `updated` for them.

use anyhow::Context;
use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::Subscription;
use serde_json::json;

use crate::support::fixture::{self, Era, FixtureClient, call_json, wait_for_stats, watched};
use crate::support::proxy::{ProxyProcess, http_upstream};

/// Lanes of hosts run at once, each on its own URI, so a host hears only its own lane's touches.
const LANES: usize = 4;
/// Hosts per lane, one after another.
const HOSTS_PER_LANE: usize = 15;

fn upstream_uri(lane: usize) -> String {
    format!("fx://fx/item/{}", lane + 1)
}

fn proxied_uri(lane: usize) -> String {
    format!("fx+{}", upstream_uri(lane))
}

async fn listen(url: &str, uris: &[String]) -> anyhow::Result<(FixtureClient, Subscription)> {
    let (client, _) = fixture::connect_http(url, Era::Modern).await?;
    let filter = SubscriptionFilter::builder().resource_subscriptions(uris.iter().cloned()).build();
    let stream = client.listen(filter).await?;
    Ok((client, stream))
}

/// Waits (up to the deadline) for `updated` of `uri` on `stream`.
async fn hears(stream: &mut Subscription, uri: &str) -> anyhow::Result<()> {
    while next_updated(stream).await? != uri {}
    Ok(())
}

/// The URI of the next `updated` on `stream` (waited for up to the deadline).
async fn next_updated(stream: &mut Subscription) -> anyhow::Result<String> {
    tokio::time::timeout(fixture::DEADLINE, async {
        loop {
            match stream.next().await? {
                Some(ServerNotification::ResourceUpdatedNotification(n)) => return Ok(n.params.uri),
                Some(_) => continue,
                None => anyhow::bail!("listen stream ended"),
            }
        }
    })
    .await
    .context("no updated within the deadline")?
}

/// One lane: each host listens, touches its URI upstream as soon as `listen()` returns, and
/// must hear that update.
async fn lane(url: String, upstream_url: String, lane: usize) -> anyhow::Result<()> {
    let (side, _) = fixture::connect_http(&upstream_url, Era::Auto).await?;
    for host in 0..HOSTS_PER_LANE {
        let (_client, mut stream) = listen(&url, &[proxied_uri(lane)]).await?;
        call_json(&side, "touch", json!({ "uri": upstream_uri(lane) })).await?;
        hears(&mut stream, &proxied_uri(lane)).await.with_context(|| format!("lane {lane}, host {host}"))?;
    }
    Ok(())
}

#[tokio::test]
async fn listen_hosts_hear_an_update_right_after_their_acknowledgement() -> anyhow::Result<()> {
    let upstream = fixture::HttpFixture::spawn(&["--era", "modern", "--resources", "4"]).await?;
    let proxy = ProxyProcess::start(&http_upstream("fx", &upstream.url, "")).await?;
    proxy.wait_up("fx", 1).await?;
    // One host keeps every lane's upstream subscription in place, so what is tested is the
    // proxy's own hand-over, not the upstream subscribing.
    let all: Vec<String> = (0..LANES).map(proxied_uri).collect();
    let _warm = listen(&proxy.url, &all).await?;
    let (side, _) = fixture::connect_http(&upstream.url, Era::Auto).await?;
    wait_for_stats(&side, |s| (0..LANES).all(|lane| watched(s).contains(&upstream_uri(lane)))).await?;
    let lanes = (0..LANES).map(|n| tokio::spawn(lane(proxy.url.clone(), upstream.url.clone(), n)));
    for finished in futures::future::join_all(lanes).await {
        finished??;
    }
    Ok(())
}

/// A URI another host listened to, then let go (so the proxy unsubscribed it upstream), is
/// listened to again with a second one: the new stream hears no `updated` for it at open —
/// nothing changed — so the first it hears is the change made to the second URI, whichever
/// era the upstream speaks (a 2026-07-28 listen stream, 2025 subscriptions).
#[tokio::test]
async fn a_listen_stream_hears_no_updated_at_open_for_what_did_not_change() -> anyhow::Result<()> {
    for era in ["modern", "legacy"] {
        let upstream = fixture::HttpFixture::spawn(&["--era", era, "--resources", "4"]).await?;
        let proxy = ProxyProcess::start(&http_upstream("fx", &upstream.url, "")).await?;
        proxy.wait_up("fx", 1).await?;
        let (side, _) = fixture::connect_http(&upstream.url, Era::Auto).await?;
        let (earlier, stream) = listen(&proxy.url, &[proxied_uri(0)]).await?;
        wait_for_stats(&side, |s| watched(s) == [upstream_uri(0)]).await?;
        drop(stream);
        earlier.cancel().await?;
        wait_for_stats(&side, |s| watched(s).is_empty()).await?;

        let (_host, mut stream) = listen(&proxy.url, &[proxied_uri(0), proxied_uri(1)]).await?;
        wait_for_stats(&side, |s| watched(s).len() == 2).await?;
        call_json(&side, "touch", json!({ "uri": upstream_uri(1) })).await?;
        assert_eq!(next_updated(&mut stream).await?, proxied_uri(1), "{era}: the first updated heard");
    }
    Ok(())
}
