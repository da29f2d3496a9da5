//! Subscriptions follow the session: held on the owner's session whichever replica a host
//! talks to, bounded per principal at one owner, and moved with the session to a new owner.

use anyhow::Context;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

use super::{ALICE_TOKEN, BOB_TOKEN, TOKENS, config_with, owner, sessions, start};
use crate::sessions::next_listened;
use crate::support::cluster::{Replicas, SECRET, cluster_when};
use crate::support::proxy::ProxyProcess;
use crate::support::{DEADLINE, eventually};

/// Subscriptions follow the session: a host whose stream is served by a replica that does not
/// hold its principal's session has its subscription made on the owner's session, and hears
/// that session's changes. alice (a 2025 host: `resources/subscribe`, GET stream) and bob (a
/// 2026-07-28 listen stream) each talk to a replica other than their owner; each hears of the
/// change their own call made, and the cluster still holds exactly one session per principal.
/// The listen stream is announced once the owner's session acknowledged the subscription.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_made_on_another_replica_is_held_on_the_principals_one_session() -> anyhow::Result<()> {
    use crate::support::fixture::{Era, FixtureEvent, connect_http_with_token};
    let per = "per+session://value";
    let (cluster, _policies) = start(3).await?;
    let (alice_owner, bob_owner) = (owner(&cluster, ALICE_TOKEN).await?, owner(&cluster, BOB_TOKEN).await?);
    let elsewhere = |owner: usize| &cluster.replicas[(owner + 1) % cluster.replicas.len()];

    let (alice, mut alice_heard) =
        connect_http_with_token(&elsewhere(alice_owner).url, Era::Legacy, ALICE_TOKEN).await?;
    #[allow(deprecated)]
    alice.subscribe(rmcp::model::SubscribeRequestParams::new(per)).await?;
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(per.into()), "the subscription announced");
    let remembered = CallToolRequestParams::new("per__remember")
        .with_arguments(json!({ "value": "a1" }).as_object().cloned().unwrap_or_default());
    tokio::time::timeout(DEADLINE, alice.peer().call_tool(remembered)).await.context("the call hung")??;
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(per.into()), "alice hears her session's change");

    let bob_replica = elsewhere(bob_owner);
    let (bob, _) = connect_http_with_token(&bob_replica.url, Era::Modern, BOB_TOKEN).await?;
    let filter = rmcp::model::SubscriptionFilter::builder().resource_subscriptions([per.to_owned()]).build();
    let mut bob_heard = bob.listen(filter).await?;
    assert_eq!(next_listened(&mut bob_heard).await?.as_deref(), Some(per), "the stream announces what it holds");
    // The replica's log line is read from its stderr apart from the stream: wait for it.
    let logged = bob_replica.wait_log(&["listen stream announced"]).await?;
    let announced = ["listen stream announced", "\"acknowledged\":1"];
    assert_eq!(
        bob_replica.matching(&announced).len(),
        1,
        "announced once the owner's session acknowledged it: {logged}"
    );
    let remembered = CallToolRequestParams::new("per__remember")
        .with_arguments(json!({ "value": "b1" }).as_object().cloned().unwrap_or_default());
    tokio::time::timeout(DEADLINE, bob.peer().call_tool(remembered)).await.context("the call hung")??;
    assert_eq!(next_listened(&mut bob_heard).await?.as_deref(), Some(per), "bob hears his session's change");

    let all: Vec<&ProxyProcess> = cluster.replicas.iter().collect();
    let open = sessions(&all).await?;
    assert_eq!(open.iter().sum::<u64>(), 2, "one session per principal in the cluster: {open:?}");
    Ok(())
}

/// One principal's subscriptions cannot take the owner's connections from every other host:
/// each subscription held at another replica is a stream of the one HTTP/2 connection that
/// replica keeps to the owner, and a replica keeps at most 64 of one principal open at one
/// owner. Three replicas behind the balancer: alice makes 1,100 subscriptions (two host
/// sessions, under the per-session cap) through it, each request sent (`X-Replica-Route`) to a
/// replica that does not own her session: 64 are held at the owner (each announced to her host
/// once the owner's session acknowledged it), the replica has at most 2 connections open to the
/// owner meanwhile (its sockets, counted in the kernel's tables), any subscription refused says
/// which bound (a 2025 session's past the bound is kept in its record, unheld), and a fresh
/// host of bob's is connected and served its tools by the owner within a second.
#[tokio::test(flavor = "multi_thread")]
async fn one_principals_subscriptions_held_at_another_replica_are_bounded() -> anyhow::Result<()> {
    use crate::support::fixture::{Era, FixtureEvent, connect_http_config, connect_http_with_token};
    use mcp_resource_proxy::upstream::MAX_SUBSCRIPTIONS_PER_OWNER;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let (cluster, _policies) = start(3).await?;
    let alice_owner = owner(&cluster, ALICE_TOKEN).await?;
    let owner_port: u16 = cluster.replicas[alice_owner]
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.strip_suffix("/mcp"))
        .context("a port")?
        .parse()?;
    let elsewhere = (alice_owner + 1) % cluster.replicas.len();
    let front = cluster.replicas[elsewhere].pid().context("the replica runs")?;
    // Through the balancer, every request of alice's hosts sent to that one replica.
    let routed = std::collections::HashMap::from([(
        http::HeaderName::from_static("x-replica-route"),
        http::HeaderValue::from_str(&elsewhere.to_string())?,
    )]);
    let (mut accepted, mut hosts) = (Vec::new(), Vec::new());
    for session in 0..2 {
        let config = StreamableHttpClientTransportConfig::with_uri(cluster.url())
            .auth_header(ALICE_TOKEN)
            .custom_headers(routed.clone());
        let (alice, heard) = connect_http_config(config, Era::Legacy).await?;
        let mut held = Vec::new();
        for n in 0..550 {
            let uri = format!("per+session://value/{session}/{n}");
            #[allow(deprecated)]
            let subscribed = alice.subscribe(rmcp::model::SubscribeRequestParams::new(uri.clone())).await;
            match subscribed {
                Ok(()) => held.push(uri),
                Err(error) => {
                    let text = error.to_string();
                    assert!(text.contains("held at another replica"), "a refusal names the bound: {text}");
                }
            }
        }
        accepted.push(held);
        hosts.push((alice, heard)); // open while the rest is counted: its holds stay
    }
    let total: usize = accepted.iter().map(Vec::len).sum();
    assert!(total >= MAX_SUBSCRIPTIONS_PER_OWNER, "{total} accepted");
    // Each hold acknowledged at the owner is announced to its host: wait for the bound's worth,
    // the first host's first.
    let mut announced = std::collections::HashSet::new();
    for ((_, heard), held) in hosts.iter_mut().zip(&accepted) {
        let wanted = (announced.len() + held.len()).min(MAX_SUBSCRIPTIONS_PER_OWNER);
        while announced.len() < wanted {
            if let FixtureEvent::Updated(uri) = heard.next().await? {
                announced.insert(uri);
            }
        }
    }
    let open = connections_to(front, owner_port)?;
    assert!((1..=2).contains(&open), "{open} connections at the owner for one principal's {total} subscriptions");
    let within = std::time::Duration::from_secs(1);
    let started = std::time::Instant::now();
    let (bob, _) = connect_http_with_token(&cluster.replicas[alice_owner].url, Era::Modern, BOB_TOKEN).await?;
    let connected = started.elapsed();
    let tools = tokio::time::timeout(within.saturating_sub(connected), bob.peer().list_all_tools())
        .await
        .with_context(|| format!("the owner did not answer a fresh host within 1 s (connected in {connected:?})"))??;
    let (listed, answered) = (started.elapsed() - connected, started.elapsed());
    eprintln!("a fresh host on the owner: connected in {connected:?}, listed in {listed:?} ({open} held connections)");
    assert!(answered <= within, "a fresh host answered in {answered:?} (connected in {connected:?})");
    assert!(tools.iter().any(|tool| tool.name == "per__recall"), "{tools:?}");
    Ok(())
}

/// Connections process `pid` has established to `port` (its sockets, found in the kernel's
/// tables, IPv4 and IPv6).
fn connections_to(pid: u32, port: u16) -> anyhow::Result<usize> {
    let mut sockets = std::collections::HashSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(link) = std::fs::read_link(fd?.path()) else { continue };
        let link = link.to_string_lossy().into_owned();
        if let Some(inode) = link.strip_prefix("socket:[").and_then(|rest| rest.strip_suffix(']')) {
            sockets.insert(inode.to_owned());
        }
    }
    let mut count = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let remote_port =
                fields.get(2).and_then(|a| a.rsplit(':').next()).and_then(|p| u16::from_str_radix(p, 16).ok());
            let established = fields.get(3) == Some(&"01");
            if remote_port == Some(port) && established && fields.get(9).is_some_and(|inode| sockets.contains(*inode)) {
                count += 1;
            }
        }
    }
    Ok(count)
}

/// A subscription follows the session when its owner dies: alice's hold, made on a replica
/// other than her owner, moves with her session once the owner is killed (`kill -9`). She is
/// told once that the URI may have changed (a change could have come while it moved), then
/// hears her new session's changes; the survivors hold one session for her.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_follows_its_session_to_a_new_owner() -> anyhow::Result<()> {
    use crate::support::fixture::{Era, FixtureEvent, connect_http_with_token};
    let per = "per+session://value";
    let (cluster, _policies) = start(3).await?;
    let alice_owner = owner(&cluster, ALICE_TOKEN).await?;
    let serving = (alice_owner + 1) % cluster.replicas.len();
    let (alice, mut alice_heard) =
        connect_http_with_token(&cluster.replicas[serving].url, Era::Legacy, ALICE_TOKEN).await?;
    #[allow(deprecated)]
    alice.subscribe(rmcp::model::SubscribeRequestParams::new(per)).await?;
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(per.into()), "the subscription announced");

    let pid = cluster.replicas[alice_owner].pid().context("the owner runs")?;
    let killed = tokio::process::Command::new("kill").args(["-9", &pid.to_string()]).status().await?;
    anyhow::ensure!(killed.success(), "kill -9 {pid}");
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(per.into()), "told once when the hold moved");
    let remembered = CallToolRequestParams::new("per__remember")
        .with_arguments(json!({ "value": "a2" }).as_object().cloned().unwrap_or_default());
    tokio::time::timeout(DEADLINE, alice.peer().call_tool(remembered)).await.context("the call hung")??;
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(per.into()), "alice hears her new session");
    let survivors: Vec<&ProxyProcess> =
        cluster.replicas.iter().enumerate().filter(|(i, _)| *i != alice_owner).map(|(_, r)| r).collect();
    let open = sessions(&survivors).await?;
    assert_eq!(open.iter().sum::<u64>(), 1, "one session for alice among the survivors: {open:?}");
    Ok(())
}

/// A subscription waiting since its session was reclaimed from a full pool follows the session
/// to a new owner too. One replica, `max_sessions = 1`: bob subscribes (his session holds it),
/// alice's call once bob's session is idle reclaims it (his hold waits for his next session)
/// and alice subscribes (the pool stays full). A second replica joins, which owns bob's session
/// from then on (rendezvous over `replica-0` and `replica-1`) while alice's stays: bob is told
/// once that the URI may have changed, and hears the change his next call makes on his session
/// at the newcomer. (Before, the waiting hold stayed where it was, waiting for a place in the
/// full pool, and bob heard nothing more.)
#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_waiting_in_a_full_pool_follows_its_session_to_a_new_owner() -> anyhow::Result<()> {
    use crate::support::cluster::{SECRET_ENV, with_cluster};
    use crate::support::fixture::{Era, FixtureEvent, connect_http_with_token};
    let per = "per+session://value";
    let (config, _policies) = config_with("per-principal")?;
    let config = config.replacen(
        "session = \"per-principal\"\n",
        "session = \"per-principal\"\nmax_sessions = 1\nsession_idle = \"1s\"\n",
        1,
    );
    let cluster = Replicas::start(1, &config, &TOKENS).await?;
    let first = &cluster.replicas[0];
    first.wait_offerings("per").await?;
    let (bob, mut bob_heard) = connect_http_with_token(&first.url, Era::Legacy, BOB_TOKEN).await?;
    #[allow(deprecated)]
    bob.subscribe(rmcp::model::SubscribeRequestParams::new(per)).await?;
    let announced = bob_heard.next().await.context("the subscription announced")?;
    assert_eq!(announced, FixtureEvent::Updated(per.into()));
    let (alice, _alice_heard) = connect_http_with_token(&first.url, Era::Legacy, ALICE_TOKEN).await?;
    let pid = || alice.peer().call_tool(CallToolRequestParams::new("per__pid"));
    eventually(DEADLINE, "alice's call reclaims bob's idle session", pid).await?;
    #[allow(deprecated)]
    alice.subscribe(rmcp::model::SubscribeRequestParams::new(per)).await?;
    assert_eq!(sessions(&[first]).await?, [1], "one place, alice's");

    let mut env: Vec<(&str, &str)> = TOKENS.to_vec();
    env.push((SECRET_ENV, SECRET));
    let late = ProxyProcess::start_with(&with_cluster(&config, &cluster.redis.url(), "replica-1"), &[], &env).await?;
    late.wait_offerings("per").await?;
    cluster_when(first, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 2)).await?;
    let told = bob_heard.next().await.context("bob told once when his waiting hold moved")?;
    assert_eq!(told, FixtureEvent::Updated(per.into()));
    let remembered = CallToolRequestParams::new("per__remember")
        .with_arguments(json!({ "value": "b2" }).as_object().cloned().unwrap_or_default());
    tokio::time::timeout(DEADLINE, bob.peer().call_tool(remembered)).await.context("the call hung")??;
    let heard = bob_heard.next().await.context("bob hears his session at the newcomer")?;
    assert_eq!(heard, FixtureEvent::Updated(per.into()));
    assert_eq!(sessions(&[first, &late]).await?, [1, 1], "alice's session stays, bob's is the newcomer's");
    Ok(())
}
