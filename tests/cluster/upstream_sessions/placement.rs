//! Where an upstream session lives: a per-principal session on one replica, its requests
//! forwarded there from every other, and on a new owner once its replica is killed; a per-host
//! session likewise, per host session, closed when its host ends it.

use anyhow::Context;
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams, ResourceContents};
use serde_json::{Value, json};

use super::{ALICE_TOKEN, BOB_TOKEN, Host, ROUNDS, call, host, owner_of, sessions, start, start_with};
use crate::support::cluster::{cluster_when, forwards};
use crate::support::proxy::ProxyProcess;
use crate::support::{DEADLINE, eventually};

/// The session's value as a resource.
async fn read(host: &Host) -> anyhow::Result<String> {
    let read = host.peer().read_resource(ReadResourceRequestParams::new("per+session://value"));
    let result = tokio::time::timeout(DEADLINE, read).await.context("the read hung")??;
    match result.contents.first() {
        Some(ResourceContents::TextResourceContents { text, .. }) => Ok(text.clone()),
        other => anyhow::bail!("no text in {other:?}"),
    }
}

/// `host` keeps `value` and then sees it on every one of `ROUNDS` calls and reads.
async fn keeps_its_own(host: &Host, value: &str) -> anyhow::Result<()> {
    assert_eq!(call(host, "remember", json!({ "value": value })).await?, format!("kept {value}"));
    for round in 0..ROUNDS {
        assert_eq!(call(host, "recall", json!({})).await?, value, "call {round}");
        if round % 3 == 0 {
            assert_eq!(read(host).await?, value, "read {round}");
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_per_principal_session_lives_on_one_replica_and_its_requests_reach_it_from_every_other() -> anyhow::Result<()>
{
    let (cluster, _policies) = start(3).await?;
    let (alice, bob) = (host(cluster.url(), ALICE_TOKEN).await?, host(cluster.url(), BOB_TOKEN).await?);
    keeps_its_own(&alice, "alice's value").await?;
    keeps_its_own(&bob, "bob's value").await?;

    let all: Vec<&ProxyProcess> = cluster.replicas.iter().collect();
    let open = sessions(&all).await?;
    assert_eq!(open.iter().sum::<u64>(), 2, "one session per principal in the cluster: {open:?}");
    assert!(
        forwards(all.iter().copied(), "forwarded").await? >= 1.0,
        "requests reached the owner from another replica"
    );
    assert!(forwards(all.iter().copied(), "served").await? >= 1.0);
    assert_eq!(forwards(all.iter().copied(), "fallback").await?, 0.0);

    // The replica holding alice's session dies; her next calls succeed on a new owner.
    let alice_pid = call(&alice, "pid", json!({})).await?;
    let bob_pid = call(&bob, "pid", json!({})).await?;
    let owner = owner_of(&cluster, &alice_pid)?;
    let bob_owner = owner_of(&cluster, &bob_pid)?;
    let pid = cluster.replicas[owner].pid().context("the owner runs")?;
    let killed = tokio::process::Command::new("kill").args(["-9", &pid.to_string()]).status().await?;
    anyhow::ensure!(killed.success(), "kill -9 {pid}");
    eventually(DEADLINE, "alice's next call succeeds", || call(&alice, "recall", json!({}))).await?;

    let survivors: Vec<&ProxyProcess> =
        cluster.replicas.iter().enumerate().filter(|(i, _)| *i != owner).map(|(_, r)| r).collect();
    for replica in &survivors {
        let gone = |c: &Value| c["reachable"].as_array().is_some_and(|r| r.len() == 2);
        cluster_when(replica, gone).await?;
    }
    keeps_its_own(&alice, "alice's second value").await?;
    let new_pid = call(&alice, "pid", json!({})).await?;
    assert_ne!(new_pid, alice_pid, "a new session on a new owner");
    assert_ne!(owner_of(&cluster, &new_pid)?, owner);
    if bob_owner != owner {
        assert_eq!(call(&bob, "recall", json!({})).await?, "bob's value", "bob's session did not move");
    }
    Ok(())
}

/// Per-host sessions across replicas: a host session's own upstream session lives on one
/// replica (rendezvous over the upstream, the principal and the host session's key, which every
/// replica derives alike from its `Mcp-Session-Id`). Two hosts of alice's behind haproxy
/// (round-robin) each keep their own value whichever replica answers, the cluster holds exactly
/// two sessions, a subscription made wherever the GET stream landed is held on the host's own
/// session (it hears its own change), and when a host ends its session (`DELETE`, on whichever
/// replica) the owner closes that host's upstream session.
#[tokio::test(flavor = "multi_thread")]
async fn a_per_host_session_lives_on_one_replica_and_follows_its_host_across_replicas() -> anyhow::Result<()> {
    use crate::support::fixture::{Era, FixtureEvent, connect_http_with_token};
    let (cluster, _policies) = start_with(3, "per-host").await?;
    let (first, second) = (host(cluster.url(), ALICE_TOKEN).await?, host(cluster.url(), ALICE_TOKEN).await?);
    assert_eq!(call(&first, "remember", json!({ "value": "first" })).await?, "kept first");
    assert_eq!(call(&second, "remember", json!({ "value": "second" })).await?, "kept second");
    for round in 0..ROUNDS {
        assert_eq!(call(&first, "recall", json!({})).await?, "first", "the first host, call {round}");
        assert_eq!(call(&second, "recall", json!({})).await?, "second", "the second host, call {round}");
    }
    let all: Vec<&ProxyProcess> = cluster.replicas.iter().collect();
    let open = sessions(&all).await?;
    assert_eq!(open.iter().sum::<u64>(), 2, "one session per host session in the cluster: {open:?}");
    assert!(
        forwards(all.iter().copied(), "forwarded").await? >= 1.0,
        "requests reached the owner from another replica"
    );
    assert_eq!(forwards(all.iter().copied(), "fallback").await?, 0.0);

    let per = "per+session://value";
    let (third, mut heard) = connect_http_with_token(cluster.url(), Era::Legacy, ALICE_TOKEN).await?;
    #[allow(deprecated)]
    third.subscribe(rmcp::model::SubscribeRequestParams::new(per)).await?;
    assert_eq!(heard.next().await?, FixtureEvent::Updated(per.into()), "the subscription announced");
    let remembered = CallToolRequestParams::new("per__remember")
        .with_arguments(json!({ "value": "third" }).as_object().cloned().unwrap_or_default());
    tokio::time::timeout(DEADLINE, third.peer().call_tool(remembered)).await.context("the call hung")??;
    assert_eq!(heard.next().await?, FixtureEvent::Updated(per.into()), "the host hears its own session's change");
    let open = sessions(&all).await?;
    assert_eq!(open.iter().sum::<u64>(), 3, "the subscription is on the third host's one session: {open:?}");

    first.cancel().await?;
    let closed = || async {
        let open = sessions(&all).await?;
        anyhow::ensure!(open.iter().sum::<u64>() == 2, "open: {open:?}");
        anyhow::Ok(())
    };
    eventually(DEADLINE, "the ended host's upstream session is closed", closed).await?;
    assert_eq!(call(&second, "recall", json!({})).await?, "second", "the other host keeps its session");
    Ok(())
}
