//! An upstream's `notifications/resources/updated` traced end to end: the real proxy binary
//! exporting to the OTLP receiver (`support::otlp`), in front of the fixture over HTTP, with
//! real hosts subscribed in both eras (2025 sessions and a 2026-07-28 listen stream). One
//! `updated` is one CONSUMER span, and each host it is queued for one PRODUCER span under it.

use rmcp::model::{SubscribeRequestParams, SubscriptionFilter};
use serde_json::json;

use crate::support::fixture::{
    self, Era, Events, FixtureClient, HttpFixture, call_json, listened_updated, wait_for_stats, watched,
};
use crate::support::otlp::{ReceivedSpan, Receiver, exporting_to};
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, http_upstream};

const ALICE: &str = "alice-token-updated-41be";
const BOB: &str = "bob-token-updated-93c0";
const UPSTREAM_URI: &str = "fx://fx/item/1";
const ITEM: &str = "fx+fx://fx/item/1";
/// A parent of [`ITEM`]: bob holds it, but may not see [`ITEM`] itself.
const PARENT: &str = "fx+fx://fx/item";
const UPDATED: &str = "notifications/resources/updated";

/// alice may see everything; bob the parent and its children but [`ITEM`]. URIs on spans are
/// opted into, so a test sees which URI each delivery named.
async fn traced_proxy(receiver: &Receiver) -> anyhow::Result<(ProxyProcess, HttpFixture, tempfile::TempDir)> {
    let upstream = HttpFixture::spawn(&["--era", "legacy"]).await?;
    let bob = format!("allow = [\"{PARENT}\", \"{PARENT}/**\"]\ndeny = [\"{ITEM}\"]\n");
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", &bob)?;
    let upstreams = format!("[telemetry]\nresource_uris = true\n\n{}", http_upstream("fx", &upstream.url, ""));
    let config = alice_and_bob_under_policies("", policies.path(), &upstreams);
    let mut env: Vec<(&str, String)> = exporting_to(receiver);
    env.extend([("ALICE_TOKEN", ALICE.to_string()), ("BOB_TOKEN", BOB.to_string())]);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let proxy = ProxyProcess::start_with(&config, &[], &env).await?;
    proxy.wait_up("fx", 1).await?;
    Ok((proxy, upstream, policies))
}

/// A 2025 session of `token` subscribed to `uri`.
async fn subscribed(proxy: &ProxyProcess, token: &str, uri: &str) -> anyhow::Result<(FixtureClient, Events)> {
    let (host, events) = fixture::connect_http_with_token(&proxy.url, Era::Legacy, token).await?;
    #[allow(deprecated)]
    host.subscribe(SubscribeRequestParams::new(uri)).await?;
    Ok((host, events))
}

fn updated_spans<'a>(spans: &'a [ReceivedSpan], kind: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|span| span.name == UPDATED && span.kind == kind).collect()
}

/// The `updated` span and its deliveries, once the receiver has one span and `n` under it.
fn fanned_out(spans: &[ReceivedSpan], n: usize) -> bool {
    let consumers = updated_spans(spans, "CONSUMER");
    let under = |parent: &ReceivedSpan| {
        updated_spans(spans, "PRODUCER").iter().filter(|d| d.parent_span_id == parent.span_id).count()
    };
    consumers.len() == 1 && under(consumers[0]) == n
}

/// One `updated` from the fixture, held by alice's two 2025 sessions and her 2026-07-28 listen
/// stream, and by bob's session through a parent he may hold but whose changed child he may not
/// see: one CONSUMER span (the upstream, the entries it invalidated) and exactly three PRODUCER
/// spans under it, one per alice's host, none for bob.
#[tokio::test]
async fn one_upstream_updated_is_one_span_with_a_delivery_span_per_host_that_may_see_it() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let (proxy, upstream, _policies) = traced_proxy(&receiver).await?;
    let (_first, mut first_heard) = subscribed(&proxy, ALICE, ITEM).await?;
    let (_second, mut second_heard) = subscribed(&proxy, ALICE, ITEM).await?;
    let (_bob, _bob_heard) = subscribed(&proxy, BOB, PARENT).await?;
    let (listener, _) = fixture::connect_http_with_token(&proxy.url, Era::Modern, ALICE).await?;
    let filter = SubscriptionFilter::builder().resource_subscriptions([ITEM.to_string()]).build();
    let mut stream = listener.listen(filter).await?;

    let (side, _) = fixture::connect_http(&upstream.url, Era::Auto).await?;
    wait_for_stats(&side, |s| watched(s).iter().any(|uri| uri == UPSTREAM_URI)).await?;
    call_json(&side, "touch", json!({ "uri": UPSTREAM_URI })).await?;
    first_heard.updated(ITEM).await?;
    second_heard.updated(ITEM).await?;
    listened_updated(&mut stream, ITEM).await?;

    let spans = receiver.wait("the updated span and its three deliveries", |s| fanned_out(s, 3)).await?;
    let updated = updated_spans(&spans, "CONSUMER")[0];
    assert_eq!(updated.parent_span_id, "", "an upstream's updated starts its own trace: {updated:#?}");
    assert_eq!(updated.attribute("mcp.method.name"), Some(UPDATED));
    assert_eq!(updated.attribute("mcp_proxy.upstream"), Some("fx"));
    assert_eq!(updated.attribute("mcp.resource.uri"), Some(ITEM), "opted in: {updated:#?}");
    assert!(updated.attribute("mcp_proxy.cache.invalidated").is_some(), "{updated:#?}");
    let deliveries: Vec<_> =
        updated_spans(&spans, "PRODUCER").into_iter().filter(|d| d.parent_span_id == updated.span_id).collect();
    let mut kinds: Vec<_> = deliveries.iter().filter_map(|d| d.attribute("mcp_proxy.holder.kind")).collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["listen_stream", "session", "session"], "{deliveries:#?}");
    for delivery in &deliveries {
        assert_eq!(delivery.trace_id, updated.trace_id);
        assert_eq!(delivery.attribute("mcp_proxy.delivery"), Some("queued"), "{delivery:#?}");
        assert_eq!(delivery.attribute("mcp.resource.uri"), Some(ITEM), "{delivery:#?}");
    }
    let mut subscribers: Vec<_> = deliveries.iter().filter_map(|d| d.attribute("mcp_proxy.holder")).collect();
    subscribers.sort_unstable();
    subscribers.dedup();
    assert_eq!(subscribers.len(), 3, "one delivery per host: {deliveries:#?}");
    assert_eq!(updated_spans(&spans, "PRODUCER").len(), 3, "bob, who may not see it, had none: {spans:#?}");
    Ok(())
}
