//! A call on a session another replica holds ends as one served where it landed: a call its
//! host cancels is cancelled upstream, whichever replica the host asked (the fixture hears
//! `notifications/cancelled` for it while its calls are still held), and a refusal at the owner
//! reaches the host as the replica it asked gives its own (code, message, the kind it counts),
//! and the host's `_meta` reaches the upstream as from a host on the replica holding the session.
//! Two replicas, a real Redis, the fixture over stdio with a session per principal (per host).

use std::collections::BTreeMap;

use anyhow::Context;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ErrorData};
use rmcp::service::{PeerRequestOptions, RequestHandle};
use rmcp::{RoleClient, ServiceError};
use serde_json::json;

use super::{ALICE_TOKEN, TOKENS, owner_of};
use crate::replicas::answered;
use crate::support::cluster::{Replicas, cluster_when, forwards};
use crate::support::fixture::{self, Era, call_json};
use crate::support::proxy::{alice_and_bob_policies, alice_and_bob_under_policies, fixture_upstream};
use crate::support::wire::{self, WireHost, WireLog};
use crate::support::{DEADLINE, eventually};

/// Two replicas serving the fixture as `fx` with its `session` line, alice and bob allowed
/// everything, once each has its tools and reaches the other; the policies' folder lives as
/// long as it is held.
async fn two_replicas(session: &str) -> anyhow::Result<(Replicas, tempfile::TempDir)> {
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let upstream = format!("{}\n{session}\n\n", fixture_upstream("fx", &[]).trim_end());
    let config = alice_and_bob_under_policies("", policies.path(), &upstream);
    let cluster = Replicas::start(2, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("fx").await?;
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 2)).await?;
    }
    Ok((cluster, policies))
}

/// `fx__progress` of `host`, held upstream until calls are released, once its one step was read
/// (the call is in flight at the fixture).
async fn held_call(host: &WireHost, log: &WireLog) -> anyhow::Result<RequestHandle<RoleClient>> {
    let arguments = json!({"count": 1, "held": true}).as_object().cloned().context("an object")?;
    let params = CallToolRequestParams::new("fx__progress").with_arguments(arguments);
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = host.send_request_with_option(request, PeerRequestOptions::no_options()).await?;
    eventually(DEADLINE, "the held call's step read", || async {
        let steps = log.reads().iter().filter(|read| matches!(read, wire::Read::Progress(..))).count();
        if steps == 1 { Ok(()) } else { Err(format!("{steps} steps read")) }
    })
    .await?;
    Ok(handle)
}

/// alice's 2025 host cancels a call held upstream, first on the replica holding her session,
/// then on the other one, which sent it there over MCP: each time the fixture hears
/// `notifications/cancelled` for it (its `calls_cancelled` counts it) while calls are still held,
/// so it was its cancellation that ended the call, not a release.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_cancelled_on_a_replica_not_holding_its_session_is_cancelled_upstream() -> anyhow::Result<()> {
    let (cluster, _policies) = two_replicas("session = \"per-principal\"").await?;
    let (first, _) = wire::connect(&cluster.replicas[0].url, Era::Legacy, Some(ALICE_TOKEN)).await?;
    let pid = call_json(&first, "fx__stats", json!({})).await?["pid"].to_string();
    let owner = owner_of(&cluster, &pid)?;

    for (cancelled, front) in [(1, owner), (2, 1 - owner)] {
        let (host, log) = wire::connect(&cluster.replicas[front].url, Era::Legacy, Some(ALICE_TOKEN)).await?;
        call_json(&host, "fx__hold_calls", json!({"on": true})).await?;
        let held = held_call(&host, &log).await?;
        held.cancel(Some("the host gave up".into())).await?;
        let stats = eventually(DEADLINE, "the held call cancelled upstream", || async {
            let stats = call_json(&host, "fx__stats", json!({})).await?;
            if stats["calls_cancelled"] == cancelled { Ok(stats) } else { Err(anyhow::anyhow!("{stats}")) }
        })
        .await
        .with_context(|| format!("cancelled on replica-{front}, her session on replica-{owner}"))?;
        assert_eq!(stats["calls_held"], json!(true), "ended by its cancellation, calls still held: {stats}");
        call_json(&host, "fx__hold_calls", json!({"on": false})).await?;
    }
    Ok(())
}

/// Hosts of alice's at most, each a session of its own, until a refusal of each kind was seen.
const HOSTS: usize = 24;

/// With sessions per host and `max_sessions_per_principal = 1` (on each replica), alice's 2025
/// hosts on replica-0 open one session on each replica; past that, each next host's call is
/// refused where its session would live: on replica-0 itself, or on replica-1, which answers
/// replica-0 over MCP (counted there as a `failed` forward). Both reach the host alike: -32600
/// naming the upstream and the setting, `data.kind` `over_limit`; and replica-0 counts every
/// refusal as `over_limit`, none as `upstream_failed`.
#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_at_the_owner_reaches_the_host_as_the_replica_it_asked_gives_its_own() -> anyhow::Result<()> {
    let (cluster, _policies) = two_replicas("session = \"per-host\"\nmax_sessions_per_principal = 1").await?;
    let front = &cluster.replicas[0];
    // Each host lives to the end: its session (if it got one) stays open.
    let mut hosts = Vec::new();
    let mut refused: BTreeMap<bool, ErrorData> = BTreeMap::new();
    let mut refusals = 0.0;
    while refused.len() < 2 && hosts.len() < HOSTS {
        let (host, _) = wire::connect(&front.url, Era::Legacy, Some(ALICE_TOKEN)).await?;
        let failed_before = forwards([front], "failed").await?;
        match host.call_tool(CallToolRequestParams::new("fx__stats")).await {
            Ok(_) => {}
            Err(ServiceError::McpError(error)) => {
                let sent_over_mcp = forwards([front], "failed").await? > failed_before;
                refused.entry(sent_over_mcp).or_insert(error);
                refusals += 1.0;
            }
            Err(other) => return Err(other.into()),
        }
        hosts.push(host);
    }
    let here = refused.get(&false).context("no refusal on replica-0 itself")?;
    let there = refused.get(&true).context("no refusal from replica-1 over MCP")?;
    let shape = |error: &ErrorData| (error.code.0, error.message.to_string(), error.data.clone());
    assert_eq!(shape(there), shape(here), "the owner's refusal as replica-0 gives its own");
    assert_eq!(here.code.0, -32600, "{here:?}");
    assert!(here.message.contains("upstream `fx`") && here.message.contains("max_sessions_per_principal"), "{here:?}");
    assert_eq!(here.data.as_ref().map(|data| data["kind"].clone()), Some(json!("over_limit")), "{here:?}");
    assert_eq!(answered(front, "tools/call", "over_limit").await?, refusals, "each refusal counted by its kind");
    assert_eq!(answered(front, "tools/call", "upstream_failed").await?, 0.0);
    Ok(())
}

/// alice's host on the replica not holding her session calls with a `_meta` key of its own: the
/// upstream session at the other replica hears it, as from a host there, and none of the
/// protocol's keys the hop itself carries.
#[tokio::test(flavor = "multi_thread")]
async fn a_hosts_meta_reaches_the_upstream_through_the_replica_holding_the_session() -> anyhow::Result<()> {
    let (cluster, _policies) = two_replicas("session = \"per-principal\"").await?;
    let (first, _) = wire::connect(&cluster.replicas[0].url, Era::Legacy, Some(ALICE_TOKEN)).await?;
    let pid = call_json(&first, "fx__stats", json!({})).await?["pid"].to_string();
    let front = 1 - owner_of(&cluster, &pid)?;
    let (host, _) = wire::connect(&cluster.replicas[front].url, Era::Legacy, Some(ALICE_TOKEN)).await?;
    let mut params = CallToolRequestParams::new("fx__traceparent");
    params.meta = Some(serde_json::from_value(json!({"example.com/note": "for the server"}))?);
    let keys = fixture::meta_keys_seen(&host.call_tool(params).await?)?;
    assert!(keys.iter().any(|key| key == "example.com/note"), "the host's key at the upstream: {keys:?}");
    assert!(!keys.iter().any(|k| k.starts_with("io.modelcontextprotocol/")), "{keys:?}");
    Ok(())
}
