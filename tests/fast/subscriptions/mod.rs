//! Shared subscriptions and notification fan-out through the proxy, both eras on each side:
//! real upstream processes (the rmcp fixture, the PyPI `mcp` server, the folder server), the
//! real proxy binary, real clients.
//!
//! This module holds the hosts of either era and the steps the tests share; that a host that
//! never reads delays no other is `stuck_host`.

mod stuck_host;

use std::time::Duration;

use anyhow::Context;

use crate::support::fixture::{
    self, Era, FixtureClient, FixtureEvent, HttpFixture, call_json, stats, wait_for_stats, watched,
};
use crate::support::proxy::{ProxyProcess, http_upstream};
use rmcp::model::{
    ReadResourceRequestParams, ServerNotification, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::Subscription;
use serde_json::{Value, json};

/// How long a negative check waits for something that must not arrive.
const QUIET: Duration = Duration::from_millis(700);
/// How long a host may take to hear one edit of a watched file before it is edited again.
const EDIT_HEARD_WITHIN: Duration = Duration::from_millis(500);

/// What a host hears, whatever its era.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Heard {
    Updated(String),
    ListChanged,
}

/// A host connected to the proxy: a legacy session that subscribed, or a modern listen stream.
enum Host {
    Legacy { client: FixtureClient, events: fixture::Events },
    Modern { _client: Box<FixtureClient>, stream: Subscription },
}

impl Host {
    async fn connect(url: &str, era: Era, uris: &[&str], list_changed: bool) -> anyhow::Result<Host> {
        let (client, events) = fixture::connect_http(url, era).await?;
        if era == Era::Legacy {
            for uri in uris {
                #[allow(deprecated)]
                client.subscribe(SubscribeRequestParams::new(*uri)).await?;
            }
            return Ok(Host::Legacy { client, events });
        }
        let mut filter = SubscriptionFilter::builder();
        if list_changed {
            filter = filter.resources_list_changed();
        }
        if !uris.is_empty() {
            filter = filter.resource_subscriptions(uris.iter().copied());
        }
        let stream = client.listen(filter.build()).await?;
        Ok(Host::Modern { _client: Box::new(client), stream })
    }

    /// The next notification within `within`, if any.
    async fn next_within(&mut self, within: Duration) -> Option<Heard> {
        match self {
            Host::Legacy { events, .. } => match tokio::time::timeout(within, events.next()).await {
                Ok(Ok(FixtureEvent::Updated(uri))) => Some(Heard::Updated(uri)),
                Ok(Ok(FixtureEvent::ListChanged)) => Some(Heard::ListChanged),
                _ => None,
            },
            Host::Modern { stream, .. } => loop {
                match tokio::time::timeout(within, stream.next()).await {
                    Ok(Ok(Some(ServerNotification::ResourceUpdatedNotification(n)))) => {
                        return Some(Heard::Updated(n.params.uri));
                    }
                    Ok(Ok(Some(ServerNotification::ResourceListChangedNotification(_)))) => {
                        return Some(Heard::ListChanged);
                    }
                    Ok(Ok(Some(_))) => continue,
                    _ => return None,
                }
            },
        }
    }

    /// Edit `file` until this host hears `updated` for `uri`: the first edits may come before
    /// the proxy's subscription upstream is in place, and go unheard.
    async fn hears_an_edit(&mut self, file: &std::path::Path, uri: &str) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + fixture::DEADLINE;
        let mut edits = 0;
        loop {
            edits += 1;
            std::fs::write(file, format!("edit {edits}"))?;
            match self.next_within(EDIT_HEARD_WITHIN).await {
                Some(Heard::Updated(heard)) if heard == uri => return Ok(()),
                _ if tokio::time::Instant::now() < deadline => continue,
                last => anyhow::bail!("no updated for {uri} after {edits} edits; last heard {last:?}"),
            }
        }
    }

    async fn next(&mut self) -> anyhow::Result<Heard> {
        self.next_within(fixture::DEADLINE).await.ok_or_else(|| anyhow::anyhow!("nothing heard within the deadline"))
    }

    fn legacy_client(&self) -> &FixtureClient {
        match self {
            Host::Legacy { client, .. } => client,
            Host::Modern { .. } => panic!("not a legacy host"),
        }
    }
}

async fn wait_subscribed(side: &FixtureClient, uri: &str, times: usize) -> anyhow::Result<Value> {
    wait_for_stats(side, |s| watched(s).iter().filter(|u| *u == uri).count() == times).await
}

async fn touch(side: &FixtureClient, uri: &str) -> anyhow::Result<()> {
    call_json(side, "touch", json!({ "uri": uri })).await.map(drop)
}

/// A proxy in front of one HTTP fixture of `upstream_era`; returns the proxy, the fixture and a
/// side connection to the fixture for driving changes.
async fn proxy_with_fixture(
    upstream_era: &str,
    extra: &str,
) -> anyhow::Result<(ProxyProcess, HttpFixture, FixtureClient)> {
    let upstream = HttpFixture::spawn(&["--era", upstream_era, "--resources", "4"]).await?;
    let proxy = ProxyProcess::start(&http_upstream("fx", &upstream.url, extra)).await?;
    proxy.wait_up("fx", 1).await?;
    let (side, _) = fixture::connect_http(&upstream.url, Era::Auto).await?;
    Ok((proxy, upstream, side))
}

/// Every pairing of host era and upstream era: subscribe, change upstream, the host hears the
/// namespaced URI; unsubscribe, change, nothing (checked by order: the next thing it hears is a
/// later change to a URI it still holds).
#[tokio::test]
async fn updates_cross_every_pairing_of_eras() -> anyhow::Result<()> {
    for upstream_era in ["legacy", "modern"] {
        for host_era in [Era::Legacy, Era::Modern] {
            let (proxy, _upstream, side) = proxy_with_fixture(upstream_era, "").await?;
            let case = format!("{host_era:?} host, {upstream_era} upstream");
            let mut host =
                Host::connect(&proxy.url, host_era, &["fx+fx://fx/item/1", "fx+fx://fx/item/2"], false).await?;
            wait_subscribed(&side, "fx://fx/item/1", 1).await?;
            wait_subscribed(&side, "fx://fx/item/2", 1).await?;
            touch(&side, "fx://fx/item/1").await?;
            assert_eq!(host.next().await?, Heard::Updated("fx+fx://fx/item/1".into()), "{case}");
            if let Host::Legacy { client, .. } = &host {
                #[allow(deprecated)]
                client.unsubscribe(UnsubscribeRequestParams::new("fx+fx://fx/item/1")).await?;
                wait_subscribed(&side, "fx://fx/item/1", 0).await?;
                touch(&side, "fx://fx/item/1").await?;
                touch(&side, "fx://fx/item/2").await?;
                assert_eq!(host.next().await?, Heard::Updated("fx+fx://fx/item/2".into()), "{case}: unsubscribed");
            }
        }
    }
    Ok(())
}

/// Two hosts on one URI make one upstream subscription; it stays while one holds it and goes
/// when the last leaves — also when that one just disconnects.
#[tokio::test]
async fn one_upstream_subscription_is_shared_by_every_subscriber() -> anyhow::Result<()> {
    let (proxy, _upstream, side) = proxy_with_fixture("legacy", "").await?;
    let uri = "fx+fx://fx/item/3";
    let first = Host::connect(&proxy.url, Era::Legacy, &[uri], false).await?;
    let second = Host::connect(&proxy.url, Era::Legacy, &[uri], false).await?;
    let mut third = Host::connect(&proxy.url, Era::Modern, &[uri], false).await?;
    let held = wait_subscribed(&side, "fx://fx/item/3", 1).await?;
    assert_eq!(held["subscribes"], 1, "one upstream subscribe for three subscribers");

    #[allow(deprecated)]
    first.legacy_client().unsubscribe(UnsubscribeRequestParams::new(uri)).await?;
    drop(third);
    // Still held by the second host: an update still reaches it.
    touch(&side, "fx://fx/item/3").await?;
    let Host::Legacy { client, mut events } = second else { unreachable!() };
    assert_eq!(events.next().await?, FixtureEvent::Updated(uri.into()));
    assert_eq!(stats(&side).await?["unsubscribes"], 0);

    // The last subscriber disconnects without unsubscribing.
    client.cancel().await?;
    let gone = wait_subscribed(&side, "fx://fx/item/3", 0).await?;
    assert_eq!(gone["unsubscribes"], 1);
    third = Host::connect(&proxy.url, Era::Modern, &[], true).await?;
    drop(third);
    Ok(())
}

/// A host hears only what it asked for: nothing for other URIs, no `updated` without a
/// subscription, no `list_changed` on a stream that did not ask for it.
#[tokio::test]
async fn hosts_hear_only_what_they_asked_for() -> anyhow::Result<()> {
    let (proxy, _upstream, side) = proxy_with_fixture("modern", "").await?;
    let mut holds_a = Host::connect(&proxy.url, Era::Legacy, &["fx+fx://fx/item/0"], false).await?;
    let mut never_subscribed = Host::connect(&proxy.url, Era::Legacy, &[], false).await?;
    let mut stream_without_lists = Host::connect(&proxy.url, Era::Modern, &["fx+fx://fx/item/0"], false).await?;
    let mut stream_with_lists = Host::connect(&proxy.url, Era::Modern, &["fx+fx://fx/item/1"], true).await?;
    wait_subscribed(&side, "fx://fx/item/0", 1).await?;
    wait_subscribed(&side, "fx://fx/item/1", 1).await?;

    touch(&side, "fx://fx/item/2").await?; // nobody holds it
    call_json(&side, "add", json!({"count": 1})).await?; // list changed
    touch(&side, "fx://fx/item/0").await?;

    // Updates are sent at once, list changes after a short debounce: compare as sets.
    let mut heard_by_a = vec![holds_a.next().await?, holds_a.next().await?];
    heard_by_a.sort_by_key(|h| format!("{h:?}"));
    assert_eq!(
        heard_by_a,
        [Heard::ListChanged, Heard::Updated("fx+fx://fx/item/0".into())],
        "its URI and list changes"
    );
    assert_eq!(never_subscribed.next().await?, Heard::ListChanged);
    assert_eq!(stream_without_lists.next().await?, Heard::Updated("fx+fx://fx/item/0".into()));
    assert_eq!(stream_with_lists.next().await?, Heard::ListChanged);
    // Then nothing more for any of them, over one window.
    let (a, never, without, with) = tokio::join!(
        holds_a.next_within(QUIET),
        never_subscribed.next_within(QUIET),
        stream_without_lists.next_within(QUIET),
        stream_with_lists.next_within(QUIET)
    );
    assert_eq!(a, None, "nothing for item 2");
    assert_eq!(never, None, "no updated without a subscription");
    assert_eq!(without, None, "no list_changed on a stream that did not ask");
    assert_eq!(with, None, "nothing for a URI it does not hold");
    Ok(())
}

/// An upstream killed and restarted: the proxy subscribes again, and every subscriber hears one
/// `updated` per held URI, since a change may have been missed while it was gone.
#[tokio::test]
async fn a_restarted_upstream_is_resubscribed_and_subscribers_told() -> anyhow::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let address = format!("127.0.0.1:{port}");
    let mut upstream = HttpFixture::spawn_at(&address, &["--era", "legacy"]).await?;
    let tuning = "reconnect_max = \"500ms\"\nhealth_interval = \"200ms\"";
    let proxy = ProxyProcess::start(&http_upstream("fx", &upstream.url, tuning)).await?;
    proxy.wait_up("fx", 1).await?;
    let mut legacy = Host::connect(&proxy.url, Era::Legacy, &["fx+fx://fx/item/1"], false).await?;
    let mut modern = Host::connect(&proxy.url, Era::Modern, &["fx+fx://fx/item/2"], false).await?;
    let (side, _) = fixture::connect_http(&upstream.url, Era::Legacy).await?;
    wait_subscribed(&side, "fx://fx/item/1", 1).await?;
    wait_subscribed(&side, "fx://fx/item/2", 1).await?;

    let _ = call_json(&side, "exit", json!({"code": 0})).await;
    upstream.wait_exit().await?;
    proxy.wait_down("fx").await?;
    let _restarted = HttpFixture::spawn_at(&address, &["--era", "legacy"]).await?;
    proxy.wait_up("fx", 2).await?;

    // Legacy sessions also hear the list change of the upstream leaving and coming back.
    assert_eq!(next_update(&mut legacy).await?, "fx+fx://fx/item/1");
    assert_eq!(next_update(&mut modern).await?, "fx+fx://fx/item/2");
    let (side, _) = fixture::connect_http(&format!("http://{address}/mcp"), Era::Legacy).await?;
    let again = wait_subscribed(&side, "fx://fx/item/1", 1).await?;
    assert!(watched(&again).contains(&"fx://fx/item/2".to_string()), "{again}");
    Ok(())
}

/// The next `updated` a host hears, passing over list changes.
async fn next_update(host: &mut Host) -> anyhow::Result<String> {
    loop {
        if let Heard::Updated(uri) = host.next().await? {
            return Ok(uri);
        }
    }
}

/// A burst of upstream `list_changed` becomes one downstream `list_changed`, sent once the
/// catalog already has the new resource.
#[tokio::test]
async fn a_burst_of_list_changes_is_one_notification_after_the_catalog_has_it() -> anyhow::Result<()> {
    let (proxy, _upstream, side) = proxy_with_fixture("legacy", "").await?;
    let mut host = Host::connect(&proxy.url, Era::Legacy, &[], false).await?;
    let mut stream = Host::connect(&proxy.url, Era::Modern, &[], true).await?;
    call_json(&side, "add", json!({"count": 1})).await?;
    call_json(&side, "list_changed_burst", json!({"count": 50})).await?;
    for host in [&mut host, &mut stream] {
        assert_eq!(host.next().await?, Heard::ListChanged);
        assert_eq!(host.next_within(QUIET).await, None, "one list_changed for the whole burst");
    }
    let (client, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let (resources, _) = fixture::list_all_resources(&client).await?;
    assert!(resources.iter().any(|r| r.uri == "fx+fx://fx/item/4"), "the new item is listed");
    Ok(())
}

/// The folder server end to end: editing a file reaches subscribed hosts as `updated` for its
/// namespaced URI; adding one reaches them as `list_changed`, and the next list has it.
#[tokio::test]
async fn folder_changes_reach_hosts() -> anyhow::Result<()> {
    let folder = tempfile::tempdir()?;
    let root = folder.path().canonicalize()?;
    std::fs::write(root.join("notes.md"), "first")?;
    let config =
        format!("[[upstreams]]\nname = \"docs\"\ndir = {}\n", crate::support::proxy::toml_str(root.to_str().unwrap()));
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("docs", 1).await?;
    let uri = "docs+file:///notes.md".to_string();
    for era in [Era::Legacy, Era::Modern] {
        let mut host = Host::connect(&proxy.url, era, &[uri.as_str()], true).await?;
        host.hears_an_edit(&root.join("notes.md"), &uri).await.with_context(|| format!("{era:?}"))?;
        let added = format!("added-{era:?}.md");
        std::fs::write(root.join(&added), "new")?;
        loop {
            match host.next().await? {
                Heard::ListChanged => break,
                Heard::Updated(_) => continue,
            }
        }
        let (client, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
        let (resources, _) = fixture::list_all_resources(&client).await?;
        assert!(resources.iter().any(|r| r.uri.ends_with(&added)), "{era:?}: {added} listed");
        let read = client.read_resource(ReadResourceRequestParams::new(uri.clone())).await?;
        assert!(!read.contents.is_empty());
    }
    Ok(())
}

/// A legacy session that only waits for notifications is not closed for being quiet (rmcp's
/// own keep-alive would close it); a quiet session holding nothing is.
#[tokio::test]
async fn quiet_subscribed_sessions_live_and_quiet_idle_ones_are_closed() -> anyhow::Result<()> {
    let upstream = HttpFixture::spawn(&["--era", "legacy"]).await?;
    let config = format!("[server]\nsession_idle_timeout = \"500ms\"\n\n{}", http_upstream("fx", &upstream.url, ""));
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("fx", 1).await?;
    let (side, _) = fixture::connect_http(&upstream.url, Era::Legacy).await?;
    let mut subscribed = Host::connect(&proxy.url, Era::Legacy, &["fx+fx://fx/item/1"], false).await?;
    let idle = Host::connect(&proxy.url, Era::Legacy, &[], false).await?;
    wait_subscribed(&side, "fx://fx/item/1", 1).await?;
    // The idle timeout passing is the behaviour under test, not a synchronisation; the reaper
    // stops counting a session once it has closed it.
    let legacy_http = [("transport", "http"), ("era", "2025")];
    proxy.wait_metric("mcp_proxy_downstream_sessions", &legacy_http, |n| n == 1.0).await?;
    touch(&side, "fx://fx/item/1").await?;
    assert_eq!(subscribed.next().await?, Heard::Updated("fx+fx://fx/item/1".into()), "still subscribed");
    let closed = idle.legacy_client().list_resources(None).await;
    assert!(closed.is_err(), "the idle session was closed: {closed:?}");
    Ok(())
}

/// A per-host upstream (`session = "per-host"`): a 2026-07-28 listen stream hears each
/// `updated` exactly once, whatever the upstream's era. The stream waits on the first change,
/// then on a later marker (a change of another URI it holds), and nothing may come between.
#[tokio::test]
async fn a_listen_stream_hears_each_update_of_a_per_host_upstream_once() -> anyhow::Result<()> {
    for upstream_era in ["legacy", "modern"] {
        let (proxy, _upstream, side) = proxy_with_fixture(upstream_era, "session = \"per-host\"").await?;
        let (changed, marker) = ("fx+fx://fx/item/1", "fx+fx://fx/item/2");
        let mut host = Host::connect(&proxy.url, Era::Modern, &[changed, marker], false).await?;
        wait_subscribed(&side, "fx://fx/item/1", 1).await?;
        wait_subscribed(&side, "fx://fx/item/2", 1).await?;
        touch(&side, "fx://fx/item/1").await?;
        assert_eq!(host.next().await?, Heard::Updated(changed.into()), "{upstream_era} upstream");
        touch(&side, "fx://fx/item/2").await?;
        let mut between = Vec::new();
        loop {
            match host.next().await? {
                Heard::Updated(uri) if uri == marker => break,
                other => between.push(other),
            }
        }
        assert_eq!(between, [], "{upstream_era} upstream: heard again before the marker");
    }
    Ok(())
}
