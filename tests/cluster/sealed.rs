//! What the replicas keep in Redis is sealed, against a real `redis-server` shared by three
//! replicas and the fixture upstream over HTTP:
//!
//! - a Redis writer (anyone who can write to Redis, without the cluster secret) puts a body of
//!   its own under the cache entry a replica filled: no replica serves it, each that finds it
//!   counts it (`mcp_proxy_cluster_redis_rejected_total{kind="cache_entry"}`) and reads upstream
//!   instead;
//! - a Redis reader learns nothing a host was served or said: after alice's 2025 session read
//!   and subscribed a URI, no key, field or value in Redis holds the body's text, the URI or
//!   alice's name.

use redis::AsyncCommands;

use crate::support::cluster::Replicas;
use crate::support::exposition::Exposition;
use crate::support::fixture::{self, Era, FixtureClient, HttpFixture, connect_http_with_token};
use crate::support::proxy::{alice_and_bob_policies, alice_and_bob_under_policies, http_upstream};
use crate::support::reads::{read, text, upstream_reads};

const ALICE_TOKEN: &str = "alice-tok-sealed-3b8e61";
const BOB_TOKEN: &str = "bob-tok-sealed-90c4d7";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];

/// The fixture notifies every change: its reads are kept while watched.
const TRUSTED: &str = "[upstreams.cache]\ntrust_notifications = true";

/// The fixture (2025) behind three replicas under alice's and bob's policies; a side client on
/// the fixture itself.
async fn cluster() -> anyhow::Result<(Replicas, HttpFixture, FixtureClient, tempfile::TempDir)> {
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let upstream = HttpFixture::spawn(&["--era", "legacy"]).await?;
    let config = alice_and_bob_under_policies("", policies.path(), &http_upstream("fx", &upstream.url, TRUSTED));
    let cluster = Replicas::start(3, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        replica.wait_up("fx", 1).await?;
    }
    let (side, _) = fixture::connect_http(&upstream.url, Era::Auto).await?;
    Ok((cluster, upstream, side, policies))
}

/// Every key of the cluster's Redis whose name matches `pattern`.
async fn keys(cluster: &Replicas, pattern: &str) -> anyhow::Result<Vec<String>> {
    let mut redis = cluster.redis.connection().await?;
    Ok(redis::cmd("KEYS").arg(pattern).query_async(&mut redis).await?)
}

/// Everything a Redis reader sees: every key's name, then its fields and values, whatever its
/// type, as text (bytes that are not UTF-8 replaced).
async fn everything_in_redis(cluster: &Replicas) -> anyhow::Result<String> {
    let mut redis = cluster.redis.connection().await?;
    let mut seen = String::new();
    for key in keys(cluster, "*").await? {
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(&mut redis).await?;
        let parts: Vec<Vec<u8>> = match kind.as_str() {
            "string" => vec![redis.get(&key).await?],
            "hash" => {
                redis.hgetall::<_, Vec<(Vec<u8>, Vec<u8>)>>(&key).await?.into_iter().flat_map(|(f, v)| [f, v]).collect()
            }
            "set" => redis.smembers(&key).await?,
            "zset" => redis.zrange(&key, 0, -1).await?,
            "list" => redis.lrange(&key, 0, -1).await?,
            _ => Vec::new(),
        };
        seen.push_str(&key);
        seen.push('\n');
        for part in parts {
            seen.push_str(&String::from_utf8_lossy(&part));
            seen.push('\n');
        }
    }
    Ok(seen)
}

/// `mcp_proxy_cluster_redis_rejected_total{kind="cache_entry"}`, summed over the replicas.
async fn rejected_entries(cluster: &Replicas) -> anyhow::Result<f64> {
    let mut total = 0.0;
    for replica in &cluster.replicas {
        let metrics = Exposition::parse(&replica.admin_get("/metrics").await?)?;
        total += metrics.sum("mcp_proxy_cluster_redis_rejected_total", &[("kind", "cache_entry")]);
    }
    Ok(total)
}

/// alice reads a URI on one replica, which fills the shared cache. A Redis writer puts its own
/// body (an entry as the cache stores it, fresh for an hour) under every entry key there is.
/// Read on every replica, the URI is the upstream's: the writer's body is never served, the
/// entry that did not open is counted, and it is read upstream once more (its fill replaces it).
#[tokio::test]
async fn a_redis_writers_entry_is_never_served_and_its_miss_is_counted() -> anyhow::Result<()> {
    let (cluster, _upstream, side, _policies) = cluster().await?;
    let uri = "fx+fx://fx/item/1";
    let (first, _) = connect_http_with_token(&cluster.replicas[0].url, Era::Modern, ALICE_TOKEN).await?;
    assert_eq!(text(&read(&first, uri).await?), "item 1 v1");
    let entries = keys(&cluster, "*:cache:e:*").await?;
    assert!(!entries.is_empty(), "the read filled the shared cache");

    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as u64;
    let (until, forged) = (now_ms + 3_600_000, "forged by a Redis writer");
    let body = serde_json::json!({
        "result": {"contents": [{"uri": uri, "mimeType": "text/plain", "text": forged}]},
        "fresh_until": until, "told_until": now_ms, "keep_until": until, "scope": "public", "bytes": forged.len(),
    });
    let mut redis = cluster.redis.connection().await?;
    for key in &entries {
        let _: () = redis.hset(key, "b", body.to_string()).await?;
    }

    for (index, replica) in cluster.replicas.iter().enumerate().rev() {
        let (host, _) = connect_http_with_token(&replica.url, Era::Modern, ALICE_TOKEN).await?;
        assert_eq!(text(&read(&host, uri).await?), "item 1 v1", "replica {index} served the writer's entry");
    }
    assert!(rejected_entries(&cluster).await? >= 1.0, "the entry that did not open is counted");
    assert_eq!(upstream_reads(&side, "fx://fx/item/1").await?, 2, "read again once, then shared again");
    Ok(())
}

/// alice's 2025 session (its record: principal, client info, subscriptions) reads and
/// subscribes a URI through the balancer, so the shared cache and her session's record are in
/// Redis; a 2026-07-28 host reads it too. Nothing in Redis shows the body, the URI or her name.
#[tokio::test]
async fn a_redis_reader_learns_no_body_uri_or_principal() -> anyhow::Result<()> {
    let (cluster, _upstream, _side, _policies) = cluster().await?;
    let uri = "fx+fx://fx/item/1";
    let (alice, _) = connect_http_with_token(cluster.url(), Era::Legacy, ALICE_TOKEN).await?;
    #[allow(deprecated)]
    alice.subscribe(rmcp::model::SubscribeRequestParams::new(uri)).await?;
    assert_eq!(text(&read(&alice, uri).await?), "item 1 v1");
    let (modern, _) = connect_http_with_token(cluster.url(), Era::Modern, ALICE_TOKEN).await?;
    assert_eq!(text(&read(&modern, uri).await?), "item 1 v1");

    assert!(!keys(&cluster, "*:cache:e:*").await?.is_empty(), "the shared cache holds the read");
    assert!(!keys(&cluster, "*:session:*").await?.is_empty(), "alice's session has its record");
    let seen = everything_in_redis(&cluster).await?;
    for secret in ["item 1 v1", "fx://fx/item/1", "alice", ALICE_TOKEN] {
        assert!(!seen.contains(secret), "{secret:?} is in Redis in clear:\n{seen}");
    }
    Ok(())
}
