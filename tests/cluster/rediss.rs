//! `rediss://`: a replica reaches a Redis that speaks only TLS, its certificate verified against
//! the roots the replica trusts (here the test's CA, through `SSL_CERT_FILE`); a replica with
//! only the system's roots never gets to Redis, and `/status` says so.

use super::replicas::{TOKENS, config};
use crate::support::cluster::{SECRET, SECRET_ENV, cluster_when, with_cluster};
use crate::support::proxy::ProxyProcess;
use crate::support::redis_server::Redis;

async fn replica(redis: &Redis, id: &str, ca_file: Option<&str>) -> anyhow::Result<(ProxyProcess, tempfile::TempDir)> {
    let (plain, policies) = config()?;
    let mut env = TOKENS.to_vec();
    env.push((SECRET_ENV, SECRET));
    env.extend(ca_file.map(|file| ("SSL_CERT_FILE", file)));
    let replica = ProxyProcess::start_with(&with_cluster(&plain, &redis.url(), id), &[], &env).await?;
    Ok((replica, policies))
}

#[tokio::test]
async fn a_replica_reaches_a_tls_redis_whose_certificate_it_can_verify() -> anyhow::Result<()> {
    let redis = Redis::start_tls().await?;
    let ca_file = redis.ca_file().display().to_string();
    let (trusting, _policies) = replica(&redis, "tls-0", Some(&ca_file)).await?;
    let shown = cluster_when(&trusting, |c| c["redis"]["state"] == "up").await?;
    assert_eq!(shown["replicas"], serde_json::json!(["tls-0"]), "its heartbeat went through Redis: {shown}");

    let (doubting, _policies) = replica(&redis, "tls-1", None).await?;
    let shown = cluster_when(&doubting, |c| c["redis"]["state"] == "down").await?;
    let error = shown["redis"]["last_error"].as_str().unwrap_or_default().to_lowercase();
    assert!(error.contains("certificate") || error.contains("tls"), "{shown}");
    Ok(())
}
