//! A session's own tool list reaches its hosts on every replica: told to the replicas, asked
//! of the owner by one that was not told, and followed by a per-host session's GET stream.

use anyhow::Context;
use serde_json::json;

use super::{ALICE_TOKEN, BOB_TOKEN, TOKENS, config_with, owner, start, start_with};
use crate::support::DEADLINE;
use crate::support::cluster::{Replicas, cluster_when};
use crate::support::proxy::ProxyProcess;
use crate::support::told::{answered, next_heard, told_host, tool_names};

/// A session's own tool list reaches its hosts on every replica: alice's session (on its owner)
/// unlocks `secret` for a call made through another replica; her hosts on both other replicas
/// hear `tools/list_changed`, list `per__secret` and call it (forwarded to the owner), while
/// bob, on the same replica as one of them, lists nothing of it and calling it is an unknown
/// tool.
#[tokio::test(flavor = "multi_thread")]
async fn a_sessions_own_tool_list_reaches_its_hosts_on_every_replica() -> anyhow::Result<()> {
    let (cluster, _policies) = start(3).await?;
    let alice_owner = owner(&cluster, ALICE_TOKEN).await?;
    let (x, y) = (&cluster.replicas[(alice_owner + 1) % 3], &cluster.replicas[(alice_owner + 2) % 3]);
    let (alice_x, mut alice_x_heard) = told_host(&x.url, ALICE_TOKEN).await?;
    let (alice_y, mut alice_y_heard) = told_host(&y.url, ALICE_TOKEN).await?;
    let (bob_x, _bob_heard) = told_host(&x.url, BOB_TOKEN).await?;
    for host in [alice_x.peer(), alice_y.peer(), bob_x.peer()] {
        let names = tool_names(host).await?;
        assert!(names.contains(&"per__unlock".to_string()) && !names.contains(&"per__secret".to_string()), "{names:?}");
    }

    assert_eq!(answered(alice_x.peer(), "per__unlock").await?, Ok("unlocked".into()));
    for heard in [&mut alice_x_heard, &mut alice_y_heard] {
        assert_eq!(next_heard(heard).await?, "tools/list_changed");
    }
    for host in [alice_x.peer(), alice_y.peer()] {
        assert!(tool_names(host).await?.contains(&"per__secret".to_string()), "her session's own tool listed");
        let secret = answered(host, "per__secret").await?.map_err(|e| anyhow::anyhow!("per__secret: {e}"))?;
        assert!(secret.starts_with("the secret of "), "{secret}");
    }
    assert!(!tool_names(bob_x.peer()).await?.contains(&"per__secret".to_string()), "bob lists alice's session");
    let refused = answered(bob_x.peer(), "per__secret").await?.expect_err("bob called alice's session's tool");
    assert!(refused.contains("per__secret"), "{refused}");
    Ok(())
}

/// A replica that was not told a session's own lists asks the owner: alice's session unlocks
/// `secret` (her host through the balancer hears it) before a third replica joins. A host of
/// hers on the newcomer that lists or calls there makes it ask the owner; she is told
/// `tools/list_changed` when the answer comes, then lists `per__secret` and calls it.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_that_was_not_told_a_sessions_own_lists_asks_its_owner() -> anyhow::Result<()> {
    use crate::support::cluster::{SECRET, SECRET_ENV, with_cluster};
    let (config, _policies) = config_with("per-principal")?;
    let cluster = Replicas::start(2, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("per").await?;
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 2)).await?;
    }
    let (alice, mut alice_heard) = told_host(cluster.url(), ALICE_TOKEN).await?;
    assert_eq!(answered(alice.peer(), "per__unlock").await?, Ok("unlocked".into()));
    assert_eq!(next_heard(&mut alice_heard).await?, "tools/list_changed", "her session's own lists are known");
    let owner_pid = answered(alice.peer(), "per__pid").await?.map_err(|e| anyhow::anyhow!("pid: {e}"))?;

    let mut env: Vec<(&str, &str)> = TOKENS.to_vec();
    env.push((SECRET_ENV, SECRET));
    let late = ProxyProcess::start_with(&with_cluster(&config, &cluster.redis.url(), "replica-2"), &[], &env).await?;
    late.wait_offerings("per").await?;
    for replica in cluster.replicas.iter().chain([&late]) {
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 3)).await?;
    }
    let (alice_late, mut alice_late_heard) = told_host(&late.url, ALICE_TOKEN).await?;
    let pid = answered(alice_late.peer(), "per__pid").await?.map_err(|e| anyhow::anyhow!("pid: {e}"))?;
    anyhow::ensure!(pid == owner_pid, "the newcomer took alice's session over (pid {pid}, was {owner_pid})");
    assert_eq!(next_heard(&mut alice_late_heard).await?, "tools/list_changed", "told once the owner answered");
    assert!(tool_names(alice_late.peer()).await?.contains(&"per__secret".to_string()));
    let secret = answered(alice_late.peer(), "per__secret").await?.map_err(|e| anyhow::anyhow!("per__secret: {e}"))?;
    assert!(secret.starts_with("the secret of "), "{secret}");
    Ok(())
}

/// On a per-host upstream, a host session's own tool list follows it across replicas: two
/// hosts of alice's behind haproxy (round-robin: each request, and each GET stream, lands where
/// it lands); the first unlocks `secret` on its own session. It hears `tools/list_changed` on
/// its GET stream wherever that is, lists `per__secret` and calls it from any replica; her other
/// host lists nothing of it, and calling it is an unknown tool.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_sessions_own_tool_list_follows_it_across_replicas() -> anyhow::Result<()> {
    let (cluster, _policies) = start_with(3, "per-host").await?;
    let (first, mut first_heard) = told_host(cluster.url(), ALICE_TOKEN).await?;
    let (second, _second_heard) = told_host(cluster.url(), ALICE_TOKEN).await?;
    assert_eq!(answered(first.peer(), "per__unlock").await?, Ok("unlocked".into()));
    assert_eq!(next_heard(&mut first_heard).await?, "tools/list_changed");
    for round in 0..3 {
        assert!(tool_names(first.peer()).await?.contains(&"per__secret".to_string()), "listed, round {round}");
        let secret = answered(first.peer(), "per__secret").await?.map_err(|e| anyhow::anyhow!("per__secret: {e}"))?;
        assert!(secret.starts_with("the secret of "), "{secret}");
        assert!(!tool_names(second.peer()).await?.contains(&"per__secret".to_string()), "round {round}");
        let refused = answered(second.peer(), "per__secret").await?.expect_err("another host session called it");
        assert!(refused.contains("per__secret"), "{refused}");
    }
    Ok(())
}

/// A host session's GET stream hears its per-host session's own list change on a replica that
/// served none of its requests: the replica that answered its `initialize` (and nothing since),
/// and one that restored the session for the stream alone. Each session's POSTs go to the other
/// replicas (raw HTTP, so that nothing else lands there); its `unlock` reaches its own upstream
/// session wherever that lives, and `tools/list_changed` reaches the stream.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_sessions_stream_hears_its_own_list_change_on_a_replica_that_served_no_request() -> anyhow::Result<()> {
    use crate::support::raw_http::{self, LEGACY};
    let (cluster, _policies) = start_with(3, "per-host").await?;
    let url = |index: usize| cluster.replicas[index].url.as_str();
    let request = |url: &str, method: reqwest::Method| {
        reqwest::Client::new()
            .request(method, url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .bearer_auth(ALICE_TOKEN)
    };
    // (replica answering initialize, replica serving the stream, replica taking the rest)
    for (opener, streamer, rest) in [(0, 0, 1), (1, 0, 2)] {
        let opened =
            raw_http::send(request(url(opener), reqwest::Method::POST).json(&raw_http::initialize("raw"))).await?;
        let session = opened.session.context("a session id")?;
        let on_session = |url: &str, method: reqwest::Method| {
            request(url, method).header("mcp-protocol-version", LEGACY).header("mcp-session-id", &session)
        };
        let initialized =
            raw_http::send(on_session(url(rest), reqwest::Method::POST).json(&raw_http::initialized())).await?;
        assert_eq!(initialized.status, 202, "{}", initialized.body);
        let mut stream =
            tokio::time::timeout(DEADLINE, on_session(url(streamer), reqwest::Method::GET).send()).await??;
        assert_eq!(stream.status(), 200);
        let unlock = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "per__unlock", "arguments": {}}});
        let unlocked = raw_http::send(on_session(url(rest), reqwest::Method::POST).json(&unlock)).await?;
        assert!(unlocked.body.contains("unlocked"), "unlock: {}", unlocked.body);
        let mut heard = String::new();
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while !heard.contains("notifications/tools/list_changed") {
            let chunk = tokio::time::timeout_at(deadline, stream.chunk()).await.with_context(|| {
                format!("no list change on replica {streamer}'s stream (opened on {opener}): {heard}")
            })??;
            heard.push_str(&String::from_utf8_lossy(&chunk.context("the stream ended")?));
        }
    }
    Ok(())
}
