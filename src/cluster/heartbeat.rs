//! The `cluster-heartbeat` task: every `cluster.heartbeat` it renews this replica's key
//! (`<prefix>replica:<id>`, gone by itself `replica_ttl` after the last renewal) and lists the
//! replica keys there are; while Redis is down it tries every half interval, so recovery shows
//! soon. On shutdown it deletes its own key, so the others see it leave at their next beat.
//! The key's value is the URL the others reach this replica at (`owners`; empty when none).

use std::time::Duration;

use futures::TryStreamExt;
use redis::{AsyncCommands, ScanOptions};

use super::Cluster;
use crate::spine::Spine;

/// What the loop waits for.
enum Event {
    /// Time for the next heartbeat.
    Due,
    Shutdown,
}

pub(super) fn spawn(cluster: Cluster, spine: &Spine) {
    let shutdown = spine.shutdown();
    spine.spawn("cluster-heartbeat", async move {
        let mut pause = Duration::ZERO;
        loop {
            let event = tokio::select! {
                _ = shutdown.cancelled() => Event::Shutdown,
                () = tokio::time::sleep(pause) => Event::Due,
            };
            match event {
                Event::Due => {
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        () = beat(&cluster) => {}
                    }
                    pause = interval(&cluster);
                }
                Event::Shutdown => break,
            }
        }
        leave(&cluster).await;
    });
}

/// The pause before the next beat: shorter while Redis is down.
fn interval(cluster: &Cluster) -> Duration {
    let heartbeat = cluster.config().heartbeat;
    if cluster.redis_up() { heartbeat } else { heartbeat / 2 }
}

/// Renew this replica's key and list the others'.
async fn beat(cluster: &Cluster) {
    match tokio::time::timeout(super::COMMAND_TIMEOUT * 2, renew_and_list(cluster)).await {
        Ok(result) => {
            cluster.note(&result);
            if let Ok(replicas) = result {
                cluster.set_addresses(&replicas);
                cluster.set_replicas(replicas.into_iter().map(|(id, _)| id).collect());
            }
        }
        Err(_) => cluster.note_timeout(),
    }
}

/// The replicas alive, with the URL each is reached at (empty: none).
async fn renew_and_list(cluster: &Cluster) -> redis::RedisResult<Vec<(String, String)>> {
    let mut redis = cluster.redis();
    let key = cluster.key(&["replica", cluster.replica_id()]);
    let ttl = cluster.config().replica_ttl.as_millis().max(1) as u64;
    let _: () = redis.pset_ex(&key, cluster.advertised().unwrap_or_default(), ttl).await?;
    let prefix = cluster.key(&["replica", ""]);
    let scan = ScanOptions::default().with_pattern(cluster.key(&["replica", "*"])).with_count(200);
    let keys: Vec<String> = redis.scan_options::<String>(scan).await?.try_collect().await?;
    let urls: Vec<Option<String>> =
        if keys.is_empty() { Vec::new() } else { redis::cmd("MGET").arg(&keys).query_async(&mut redis).await? };
    let ids = keys.iter().map(|key| key.strip_prefix(&prefix));
    Ok(ids.zip(urls).filter_map(|(id, url)| Some((id?.to_string(), url.unwrap_or_default()))).collect())
}

/// Delete this replica's key (best effort, bounded).
async fn leave(cluster: &Cluster) {
    let mut redis = cluster.redis();
    let key = cluster.key(&["replica", cluster.replica_id()]);
    let deleted = tokio::time::timeout(super::COMMAND_TIMEOUT, redis.del::<_, ()>(&key)).await;
    if !matches!(deleted, Ok(Ok(()))) {
        tracing::debug!("cluster: this replica's key could not be removed; it expires by itself");
    }
}
