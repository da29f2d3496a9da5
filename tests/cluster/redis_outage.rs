//! The cluster as operators see it: `/status` on each replica lists every replica and Redis's
//! state; Redis stopped shows in `/status`, `/readyz` and the metrics while hosts are still
//! served what needs no Redis; Redis back is seen without restarting anything.

use serde_json::Value;

use super::replicas::{ALICE_TOKEN, TOKENS, config, three_replicas};
use crate::support::cluster::{SECRET, SECRET_ENV, cluster_when, with_cluster};
use crate::support::fixture::{DEADLINE, Era, connect_http_with_token, list_all_resources};
use crate::support::proxy::ProxyProcess;
use crate::support::redis_server::Redis;

const REPLICAS: [&str; 3] = ["replica-0", "replica-1", "replica-2"];

/// GET `path` on `replica`'s admin listener: status code and JSON body.
async fn admin(replica: &ProxyProcess, path: &str) -> anyhow::Result<(u16, Value)> {
    let response = reqwest::get(format!("{}{path}", replica.admin_url().await?)).await?;
    Ok((response.status().as_u16(), response.json().await?))
}

#[tokio::test]
async fn every_replica_shows_the_cluster_and_redis_going_away_and_coming_back() -> anyhow::Result<()> {
    let (mut cluster, _policies) = three_replicas().await?;
    for (replica, id) in cluster.replicas.iter().zip(REPLICAS) {
        let status = replica.status().await?;
        assert_eq!(status["cluster"]["replica"], id, "{status}");
        assert_eq!(status["cluster"]["replicas"], serde_json::json!(REPLICAS), "{status}");
        assert_eq!(status["cluster"]["redis"]["state"], "up", "{status}");
        assert_eq!(status["redis"], "up", "readiness names Redis's state: {status}");
        let text = status.to_string();
        assert!(!text.contains(SECRET), "no secret in /status");
        replica.wait_metric("mcp_proxy_cluster_replicas", &[("replica", id)], |n| n == 3.0).await?;
        replica.wait_metric("mcp_proxy_cluster_redis_up", &[("replica", id)], |n| n == 1.0).await?;
    }
    // Nothing of the secret in Redis: the replicas' keys name the cluster, not the secret.
    let mut redis = cluster.redis.connection().await?;
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut redis).await?;
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(keys.iter().all(|k| k.starts_with("mcp-proxy:") && !k.contains(SECRET)), "{keys:?}");

    cluster.redis.stop().await?;
    for (replica, id) in cluster.replicas.iter().zip(REPLICAS) {
        let shown = cluster_when(replica, |c| c["redis"]["state"] == "down").await?;
        assert!(shown["redis"]["last_error"].is_string(), "{shown}");
        replica.wait_metric("mcp_proxy_cluster_redis_up", &[("replica", id)], |n| n == 0.0).await?;
        replica.wait_metric("mcp_proxy_cluster_redis_failures_total", &[("replica", id)], |n| n >= 1.0).await?;
        // The default: a Redis outage does not take every replica out of the pool at once.
        let (code, ready) = admin(replica, "/readyz").await?;
        assert_eq!((code, &ready["redis"]), (200, &Value::from("down")), "{ready}");
    }
    // Hosts are still served what needs no Redis: paging across replicas included.
    let (alice, _) = connect_http_with_token(cluster.url(), Era::Modern, ALICE_TOKEN).await?;
    let (resources, pages) = tokio::time::timeout(DEADLINE, list_all_resources(&alice)).await??;
    assert_eq!((resources.len(), pages), (7, 4));

    cluster.redis.restart().await?;
    for (replica, id) in cluster.replicas.iter().zip(REPLICAS) {
        let shown = cluster_when(replica, |c| {
            c["redis"]["state"] == "up" && c["replicas"].as_array().is_some_and(|r| r.len() == 3)
        })
        .await?;
        assert!(shown["redis"]["recoveries"].as_u64() >= Some(1), "{shown}");
        replica.wait_metric("mcp_proxy_cluster_redis_up", &[("replica", id)], |n| n == 1.0).await?;
        let said = replica.logs().join("\n");
        assert!(said.contains("Redis is unreachable") && said.contains("Redis is up"), "the outage is logged");
        assert!(!said.contains(SECRET), "no secret in the logs");
    }
    Ok(())
}

/// With `ready_without_redis = false` a replica that cannot reach Redis leaves the pool
/// (`/readyz` 503) and comes back when Redis does.
#[tokio::test]
async fn a_replica_told_to_needs_redis_to_be_ready() -> anyhow::Result<()> {
    let mut redis = Redis::start().await?;
    let (plain, _policies) = config()?;
    let config = format!("{}ready_without_redis = false\n", with_cluster(&plain, &redis.url(), "strict-0"));
    let mut env = TOKENS.to_vec();
    env.push((SECRET_ENV, SECRET));
    let replica = ProxyProcess::start_with(&config, &[], &env).await?;
    replica.wait_up("fx", 1).await?;
    cluster_when(&replica, |c| c["redis"]["state"] == "up").await?;
    assert_eq!(admin(&replica, "/readyz").await?.0, 200);

    redis.stop().await?;
    crate::support::eventually(DEADLINE, "/readyz turns 503", || async {
        let (code, body) = admin(&replica, "/readyz").await?;
        if code == 503 && body["redis"] == "down" { Ok(()) } else { Err(anyhow::anyhow!("{code} {body}")) }
    })
    .await?;

    redis.restart().await?;
    crate::support::eventually(DEADLINE, "/readyz is 200 again", || async {
        let (code, body) = admin(&replica, "/readyz").await?;
        if code == 200 && body["redis"] == "up" { Ok(()) } else { Err(anyhow::anyhow!("{code} {body}")) }
    })
    .await?;
    Ok(())
}
