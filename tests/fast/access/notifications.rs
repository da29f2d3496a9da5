//! Notifications reach only hosts whose principal may see the change; a policy change applies
//! to a subscribed host without a restart.

use crate::support::fixture::{
    self, Era, FixtureEvent, HttpFixture, call_json, connect_http_with_token, list_all_resources, wait_for_stats,
};
use crate::support::proxy::{ProxyProcess, http_upstream};
use rmcp::model::{ReadResourceRequestParams, ServerNotification, SubscribeRequestParams, SubscriptionFilter};
use serde_json::json;

use super::*;

/// An `updated` reaches a host only when its principal may see the URI — also when the upstream
/// subscription that brought it is held for another principal (alice holds `multi`, bob holds
/// `multi` too but may not see `multi/b`). Order proves absence: each host's first update is a
/// later, allowed one from the same upstream.
#[tokio::test]
async fn updates_reach_only_principals_who_may_see_the_uri() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let side = world.alpha_side().await?;
    let (alice, mut alice_events) = world.http("alice", Era::Legacy).await?;
    let (bob, mut bob_events) = world.http("bob", Era::Legacy).await?;
    let (bob_modern, _) = world.http("bob", Era::Modern).await?;
    let (carol, mut carol_events) = world.carol(Era::Legacy).await?;
    #[allow(deprecated)]
    {
        alice.subscribe(SubscribeRequestParams::new("alpha+fx://fx/item/0")).await?;
        alice.subscribe(SubscribeRequestParams::new("alpha+fx://fx/multi")).await?;
        bob.subscribe(SubscribeRequestParams::new("alpha+fx://fx/multi")).await?;
        carol.subscribe(SubscribeRequestParams::new("alpha+fx://fx/multi/a")).await?;
    }
    subscribe_error(&bob, "alpha+fx://fx/item/0").await;
    subscribe_error(&carol, "alpha+fx://fx/item/0").await;
    let filter =
        SubscriptionFilter::builder().resource_subscriptions(["alpha+fx://fx/item/0", "alpha+fx://fx/item/1"]).build();
    let mut bob_stream = bob_modern.listen(filter).await?;
    let wanted = ["fx://fx/item/0", "fx://fx/multi", "fx://fx/multi/a", "fx://fx/item/1"];
    wait_for_stats(&side, |s| wanted.iter().all(|uri| watched(s).iter().any(|w| w == uri))).await?;

    for uri in ["fx://fx/item/0", "fx://fx/multi/b", "fx://fx/multi/a", "fx://fx/item/1"] {
        touch(&side, uri).await?;
    }
    // alice may see everything she holds: she hears all three, in order.
    for expected in ["alpha+fx://fx/item/0", "alpha+fx://fx/multi/b", "alpha+fx://fx/multi/a"] {
        assert_eq!(next_updated(&mut alice_events).await?, expected, "alice");
    }
    assert_eq!(next_updated(&mut bob_events).await?, "alpha+fx://fx/multi/a", "bob: nothing of multi/b or item/0");
    assert_eq!(next_stream_updated(&mut bob_stream).await?, "alpha+fx://fx/item/1", "bob's stream: nothing of item/0");
    assert_eq!(next_updated(&mut carol_events).await?, "alpha+fx://fx/multi/a", "carol: nothing of item/0");
    Ok(())
}

/// Rewriting a policy while a host is subscribed: the host hears `list_changed`, its next list
/// leaves the now-denied resource out, and updates of it stop while the others go on. A policy
/// file that does not parse keeps the old rules in force and is logged.
#[tokio::test]
async fn a_policy_change_applies_to_a_subscribed_host_without_restart() -> anyhow::Result<()> {
    let alpha = HttpFixture::spawn(&["--era", "legacy", "--resources", "3"]).await?;
    let policies = policies_folder(&[("alice.toml", ALICE_POLICY)])?;
    let config = access_config(policies.path(), &http_upstream("alpha", &alpha.url, ""));
    let proxy = ProxyProcess::start_with(&config, &[], &TOKENS).await?;
    proxy.wait_up("alpha", 1).await?;
    let (side, _) = fixture::connect_http(&alpha.url, Era::Legacy).await?;
    let (alice, mut events) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE_TOKEN).await?;
    #[allow(deprecated)]
    for uri in ["alpha+fx://fx/item/0", "alpha+fx://fx/item/1"] {
        alice.subscribe(SubscribeRequestParams::new(uri)).await?;
    }
    wait_for_stats(&side, |s| ["fx://fx/item/0", "fx://fx/item/1"].iter().all(|u| watched(s).iter().any(|w| w == u)))
        .await?;
    touch(&side, "fx://fx/item/1").await?;
    assert_eq!(events.next().await?, FixtureEvent::Updated("alpha+fx://fx/item/1".into()), "before the change");

    let narrowed = format!("{ALICE_POLICY}deny = [\"alpha+fx://fx/item/0\"]\n");
    rewrite_policy(policies.path(), "alice.toml", &narrowed)?;
    assert_eq!(events.next().await?, FixtureEvent::ListChanged, "the host hears its list changed");
    assert_eq!(proxy.wait_policy_reloads(1).await?["outcome"], "applied");
    let (resources, _) = list_all_resources(&alice).await?;
    let listed = set(resources.into_iter().map(|r| r.uri));
    assert!(!listed.contains("alpha+fx://fx/item/0"), "{listed:?}");
    assert!(listed.contains("alpha+fx://fx/item/1"), "{listed:?}");
    // Its forbidden subscription stops: nobody holds item 0 upstream any more.
    wait_for_stats(&side, |s| !watched(s).iter().any(|w| w == "fx://fx/item/0")).await?;
    touch(&side, "fx://fx/item/0").await?;
    touch(&side, "fx://fx/item/1").await?;
    assert_eq!(next_updated(&mut events).await?, "alpha+fx://fx/item/1", "nothing of the now-denied item 0");

    // A file that does not parse: the rules in force stay, and the problem is logged.
    std::fs::write(policies.path().join("broken.toml"), "principals = [\"alice\"\nallow = [")?;
    let refused = proxy.wait_log(&["policy reload refused"]).await?;
    assert!(refused.contains("broken.toml"), "the log names the file: {refused}");
    assert_eq!(proxy.wait_policy_reloads(2).await?["outcome"], "refused", "the rules in force stay");
    let read = alice.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/item/1")).await?;
    assert!(!read.contents.is_empty(), "an allowed read still works");
    let error = read_error(&alice, "alpha+fx://fx/item/0").await;
    assert_eq!(error_shape(&error, "alpha+fx://fx/item/0").0, NOT_FOUND_LEGACY, "the deny still holds");
    let reload = proxy.status().await?["policy_reload"].clone();
    assert_eq!(reload["outcome"], "refused", "the broken file was not applied: {reload}");
    Ok(())
}

/// A read decided once — remembered by the policy set's memo, and served from the cache — is
/// decided by the new rules the moment a reload puts them in force: in both host eras the next
/// read of the now-denied URI gets the not-found answer, and a read still allowed is served.
#[tokio::test]
async fn a_reload_changes_a_remembered_read_decision_at_once() -> anyhow::Result<()> {
    let alpha = HttpFixture::spawn(&["--era", "legacy", "--resources", "3"]).await?;
    let policies = policies_folder(&[("alice.toml", ALICE_POLICY)])?;
    let config = access_config(policies.path(), &http_upstream("alpha", &alpha.url, ""));
    let proxy = ProxyProcess::start_with(&config, &[], &TOKENS).await?;
    proxy.wait_up("alpha", 1).await?;
    let (legacy, _) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE_TOKEN).await?;
    let (modern, _) = connect_http_with_token(&proxy.url, Era::Modern, ALICE_TOKEN).await?;
    for client in [&legacy, &modern] {
        for _ in 0..3 {
            let read = client.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/item/0")).await?;
            assert!(!read.contents.is_empty(), "allowed before the change");
        }
    }

    let narrowed = format!("{ALICE_POLICY}deny = [\"alpha+fx://fx/item/0\"]\n");
    rewrite_policy(policies.path(), "alice.toml", &narrowed)?;
    assert_eq!(proxy.wait_policy_reloads(1).await?["outcome"], "applied");
    for (client, code) in [(&legacy, NOT_FOUND_LEGACY), (&modern, NOT_FOUND_MODERN)] {
        let error = read_error(client, "alpha+fx://fx/item/0").await;
        assert_eq!(error_shape(&error, "alpha+fx://fx/item/0").0, code, "denied at once after the reload");
        let read = client.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/item/1")).await?;
        assert!(!read.contents.is_empty(), "a read the new rules allow is still served");
    }
    Ok(())
}

/// A catalog change only bob can see (beta gains an item) tells bob `list_changed`, and tells
/// neither alice's legacy session nor her 2026 listen stream (which asked for list changes);
/// a change she can see (alpha gains one) tells her on both. Order proves absence: once bob
/// has heard of beta's change, alice's next notification on each is the update of an item she
/// holds, touched after.
#[tokio::test]
async fn list_changed_reaches_only_hosts_whose_visible_list_changed() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let (alpha_side, beta_side) = (world.alpha_side().await?, world.beta_side().await?);
    let (alice, mut alice_events) = world.http("alice", Era::Legacy).await?;
    #[allow(deprecated)]
    alice.subscribe(SubscribeRequestParams::new("alpha+fx://fx/item/1")).await?;
    let (alice_modern, _) = world.http("alice", Era::Modern).await?;
    let filter =
        SubscriptionFilter::builder().resource_subscriptions(["alpha+fx://fx/item/1"]).resources_list_changed().build();
    let mut alice_stream = alice_modern.listen(filter).await?;
    let (_bob, mut bob_events) = world.http("bob", Era::Legacy).await?;
    wait_for_stats(&alpha_side, |s| watched(s).iter().filter(|w| *w == "fx://fx/item/1").count() >= 1).await?;

    call_json(&beta_side, "add", json!({"count": 1})).await?;
    assert_eq!(bob_events.next().await?, FixtureEvent::ListChanged, "bob sees beta: he hears of it");
    touch(&alpha_side, "fx://fx/item/1").await?;
    assert_eq!(
        alice_events.next().await?,
        FixtureEvent::Updated("alpha+fx://fx/item/1".into()),
        "alice's session heard nothing of beta's change"
    );
    let next = next_on_stream(&mut alice_stream).await?;
    assert!(is_updated(&next, "alpha+fx://fx/item/1"), "alice's stream heard nothing of beta's change: {next:?}");

    // Control: a change in what she sees reaches her in both eras.
    call_json(&alpha_side, "add", json!({"count": 1})).await?;
    assert_eq!(alice_events.next().await?, FixtureEvent::ListChanged, "alice's session");
    let next = next_on_stream(&mut alice_stream).await?;
    assert!(matches!(next, ServerNotification::ResourceListChangedNotification(_)), "alice's stream: {next:?}");
    Ok(())
}

/// bob may see alpha's `multi` but not its part `multi/b`. Holding `multi` on a legacy session
/// and on a 2026 listen stream, he hears nothing when `multi/b` changes: not the part (legacy),
/// and not the parent either (the stream, whose filter names `multi`). Order proves absence:
/// the first update on each is `item/1`, touched after; alice, allowed `multi/b`, hears it.
#[tokio::test]
async fn a_change_of_a_denied_part_reaches_no_subscriber_of_its_parent() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let side = world.alpha_side().await?;
    let (alice, mut alice_events) = world.http("alice", Era::Legacy).await?;
    let (bob, mut bob_events) = world.http("bob", Era::Legacy).await?;
    #[allow(deprecated)]
    for (client, uri) in
        [(&alice, "alpha+fx://fx/multi"), (&bob, "alpha+fx://fx/multi"), (&bob, "alpha+fx://fx/item/1")]
    {
        client.subscribe(SubscribeRequestParams::new(uri)).await?;
    }
    let (bob_modern, _) = world.http("bob", Era::Modern).await?;
    let filter =
        SubscriptionFilter::builder().resource_subscriptions(["alpha+fx://fx/multi", "alpha+fx://fx/item/1"]).build();
    let mut bob_stream = bob_modern.listen(filter).await?;
    let acknowledged = bob_stream.acknowledged().resource_subscriptions.clone().unwrap_or_default();
    assert_eq!(acknowledged.len(), 2, "both are bob's to hold: {acknowledged:?}");
    wait_for_stats(&side, |s| ["fx://fx/multi", "fx://fx/item/1"].iter().all(|u| watched(s).iter().any(|w| w == u)))
        .await?;

    touch(&side, "fx://fx/multi/b").await?;
    touch(&side, "fx://fx/item/1").await?;
    assert_eq!(next_updated(&mut alice_events).await?, "alpha+fx://fx/multi/b", "control: alice may see multi/b");
    assert_eq!(next_updated(&mut bob_events).await?, "alpha+fx://fx/item/1", "bob's session: nothing of multi/b");
    assert_eq!(next_stream_updated(&mut bob_stream).await?, "alpha+fx://fx/item/1", "bob's stream: no `multi`");
    Ok(())
}
