//! One `updated` from a real third-party upstream traced through its fan-out: the npm
//! server-everything over stdio (one shared child), which sends
//! `notifications/resources/updated` for every URI it was subscribed to once its
//! `toggle-subscriber-updates` tool is on (at once, then every 5 s). Three hosts of alice hold one
//! of its documents through the proxy; bob holds the documents' parent but may not see that one.
//! The proxy exports to the test OTLP receiver: each such `updated` is one CONSUMER span with one
//! PRODUCER span per alice's host under it, and none for bob.

use anyhow::Context;
use rmcp::model::{CallToolRequestParams, SubscribeRequestParams, SubscriptionFilter};

use crate::support::fixture::{self, Era, Events, FixtureClient, listened_updated};
use crate::support::otlp::{ReceivedSpan, Receiver, exporting_to};
use crate::support::peers::everything_upstream;
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies};

const ALICE: &str = "alice-token-everything-5c1e";
const BOB: &str = "bob-token-everything-7d2f";
/// The documents' parent: bob holds it.
const DOCS: &str = "ev+demo://resource/static/document";
/// The document alice's hosts hold, which bob may not see.
const ITEM: &str = "ev+demo://resource/static/document/features.md";
const UPDATED: &str = "notifications/resources/updated";

/// A 2025 session of `token` subscribed to `uri`.
async fn subscribed(proxy: &ProxyProcess, token: &str, uri: &str) -> anyhow::Result<(FixtureClient, Events)> {
    let (host, events) = fixture::connect_http_with_token(&proxy.url, Era::Legacy, token).await?;
    #[allow(deprecated)]
    host.subscribe(SubscribeRequestParams::new(uri)).await?;
    Ok((host, events))
}

fn spans_of<'a>(spans: &'a [ReceivedSpan], kind: &str, uri: Option<&str>) -> Vec<&'a ReceivedSpan> {
    let named = |span: &&ReceivedSpan| span.name == UPDATED && span.kind == kind;
    spans
        .iter()
        .filter(named)
        .filter(|span| uri.is_none_or(|uri| span.attribute("mcp.resource.uri") == Some(uri)))
        .collect()
}

fn under<'a>(spans: &'a [ReceivedSpan], parent: &ReceivedSpan) -> Vec<&'a ReceivedSpan> {
    spans_of(spans, "PRODUCER", None).into_iter().filter(|d| d.parent_span_id == parent.span_id).collect()
}

/// Three alice hosts (two 2025 sessions, a 2026-07-28 listen stream) hold a server-everything
/// document, bob its parent; once the tool is on, each host hears the document's `updated`, and
/// the receiver has a CONSUMER span of it (its own trace, the upstream `ev`) with exactly three
/// PRODUCER spans under it, one per alice's host, queued. Bob's subscriber, seen in the deliveries of
/// the parent's own `updated`, is in none of the document's.
#[tokio::test]
async fn one_server_everything_updated_is_one_span_delivered_to_the_three_hosts_that_may_see_it() -> anyhow::Result<()>
{
    let receiver = Receiver::start().await?;
    let bob_rules = format!("allow = [\"{DOCS}\", \"{DOCS}/**\"]\ndeny = [\"{ITEM}\"]\n");
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", &bob_rules)?;
    let upstream =
        format!("[telemetry]\nresource_uris = true\n\n{}", everything_upstream("ev", "session = \"shared\""));
    let config = alice_and_bob_under_policies("", policies.path(), &upstream);
    let mut env = exporting_to(&receiver);
    env.extend([("ALICE_TOKEN", ALICE.to_string()), ("BOB_TOKEN", BOB.to_string())]);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let proxy = ProxyProcess::start_with(&config, &[], &env).await?;
    proxy.wait_up("ev", 1).await?;

    let (first, mut first_heard) = subscribed(&proxy, ALICE, ITEM).await?;
    let (_second, mut second_heard) = subscribed(&proxy, ALICE, ITEM).await?;
    let (_bob, _bob_heard) = subscribed(&proxy, BOB, DOCS).await?;
    let (listener, _) = fixture::connect_http_with_token(&proxy.url, Era::Modern, ALICE).await?;
    let filter = SubscriptionFilter::builder().resource_subscriptions([ITEM.to_string()]).build();
    let mut stream = listener.listen(filter).await?;
    // The upstream holds both URIs before its updates are turned on.
    proxy.wait_log(&["upstream subscriptions applied", "\"upstream\":\"ev\"", "\"watched\":2"]).await?;
    let toggled = first.call_tool(CallToolRequestParams::new("ev__toggle-subscriber-updates")).await?;
    anyhow::ensure!(toggled.is_error != Some(true), "the tool failed: {toggled:?}");
    first_heard.updated(ITEM).await?;
    second_heard.updated(ITEM).await?;
    listened_updated(&mut stream, ITEM).await?;

    let fanned_out = |spans: &[ReceivedSpan]| {
        let item = spans_of(spans, "CONSUMER", Some(ITEM));
        let docs = spans_of(spans, "CONSUMER", Some(DOCS));
        item.iter().any(|updated| under(spans, updated).len() == 3) && docs.iter().any(|u| under(spans, u).len() == 1)
    };
    let spans =
        receiver.wait("the document's updated with three deliveries, the parent's with one", fanned_out).await?;
    let bob_subscriber = spans_of(&spans, "CONSUMER", Some(DOCS))
        .iter()
        .flat_map(|updated| under(&spans, updated))
        .find_map(|delivery| delivery.attribute("mcp_proxy.holder"))
        .context("bob's delivery of the parent's updated")?;
    for updated in spans_of(&spans, "CONSUMER", Some(ITEM)) {
        assert_eq!(updated.parent_span_id, "", "an upstream's updated starts its own trace: {updated:#?}");
        assert_eq!(updated.attribute("mcp_proxy.upstream"), Some("ev"), "{updated:#?}");
        let deliveries = under(&spans, updated);
        for delivery in &deliveries {
            assert_eq!(delivery.trace_id, updated.trace_id, "{delivery:#?}");
            assert_eq!(delivery.attribute("mcp_proxy.delivery"), Some("queued"), "{delivery:#?}");
            assert_ne!(
                delivery.attribute("mcp_proxy.holder"),
                Some(bob_subscriber),
                "bob may not see it: {delivery:#?}"
            );
        }
        // The last `updated` may have been exported before all its deliveries were.
        if deliveries.len() == 3 {
            let mut kinds: Vec<_> = deliveries.iter().filter_map(|d| d.attribute("mcp_proxy.holder.kind")).collect();
            kinds.sort_unstable();
            assert_eq!(kinds, ["listen_stream", "session", "session"], "{deliveries:#?}");
        }
        assert!(deliveries.len() <= 3, "one delivery per alice's host, none for bob: {deliveries:#?}");
    }
    Ok(())
}
