//! The shared tier against a real `redis-server` (Debian's, installed by `.ci/`), with several
//! coherence layers standing for replicas: one load per URI for all of them, no read begun
//! after an `updated` (heard by any of them) returns older content, private results stay per
//! principal, an entry whose vouching replica is gone is not served, and Redis stopped and
//! started again: nothing stale, and the tier comes back by itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use rmcp::model::{CacheScope, ReadResourceResult, ResourceContents};

use super::super::shared::{Place, SharedTier};
use super::super::{Cached, Coherence, Loaded, Outcome, ReadRequest, UpstreamSubscriptions};
use crate::cluster::tests::redis_server::Redis;
use crate::cluster::{ClusterKeys, RedisSeal};
use crate::config::{CacheConfig, UpstreamCache};
use crate::error::ProxyError;
use crate::metrics::Metrics;

const REPLICAS: &str = "test:replica:";
const SECRET: &[u8] = b"the test cluster's secret, 32 b.";
const TRUSTED: UpstreamCache =
    UpstreamCache { enabled: true, max_ttl: None, trust_notifications: true, unwatched_ttl: None };

/// One replica's coherence layer, its shared tier under `prefix`; alive (its replica key set).
async fn replica(redis: &Redis, prefix: &str, name: &str) -> Coherence {
    replica_of(redis, (prefix, name), SECRET, Metrics::new()).await
}

/// As [`replica`], of the cluster whose secret is `secret`, counting in `metrics`.
async fn replica_of(redis: &Redis, (prefix, name): (&str, &str), secret: &[u8], metrics: Metrics) -> Coherence {
    replica_with(redis, (prefix, name), secret, metrics, Duration::ZERO).await
}

/// As [`replica_of`], keeping expired entries `stale_if_error`.
async fn replica_with(
    redis: &Redis,
    (prefix, name): (&str, &str),
    secret: &[u8],
    metrics: Metrics,
    stale_if_error: Duration,
) -> Coherence {
    redis.set(&format!("{REPLICAS}{name}"), "1").await;
    let config = ConnectionManagerConfig::new()
        .set_number_of_retries(1)
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(1)));
    let connection = ConnectionManager::new_lazy_with_config(redis.client(), config).unwrap();
    let seal = RedisSeal::new(&ClusterKeys::new(secret), metrics.clone());
    let place = Place { prefix: prefix.to_string(), replicas: REPLICAS.to_string(), replica: name.to_string(), seal };
    let client = redis.client();
    let tier = Arc::new(SharedTier::new((connection, client.get_connection_info()), place, metrics.clone()));
    assert!(tier.recover().await, "the tier reaches Redis");
    let cache = CacheConfig {
        enabled: true,
        max_bytes: 1 << 20,
        max_entry_bytes: 64 << 10,
        unwatched_ttl: Duration::from_secs(60),
        max_ttl: Duration::from_secs(3600),
        stale_if_error,
        max_watched_per_upstream: 1000,
    };
    let book = Arc::new(UpstreamSubscriptions::new(crate::upstream::Registry::default()));
    Coherence::new(cache, book, 7, metrics, Duration::from_secs(5), Some(tier))
}

async fn replicas(redis: &Redis, prefix: &str, count: usize) -> Vec<Coherence> {
    let mut all = Vec::new();
    for i in 0..count {
        all.push(replica(redis, prefix, &format!("r{i}")).await);
    }
    all
}

/// The commands sent to Redis while `reads` runs, in order: its round trips, not what its
/// scripts run inside Redis. Seen by `MONITOR`, up to a marker written after `reads`.
async fn round_trips(redis: &Redis, reads: impl Future<Output = ()>) -> Vec<String> {
    let mut lines = redis.client().get_async_monitor().await.unwrap().into_on_message::<String>();
    reads.await;
    redis.set("marker", "end of reads").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut sent = Vec::new();
    loop {
        let line = tokio::time::timeout_at(deadline, lines.next()).await.expect("the marker in time").unwrap();
        // `<time> [<db> <client address, or lua>] "<COMMAND>" "<argument>"…`
        if line.contains("\"marker\"") {
            return sent;
        }
        if !line.contains(" lua] ") {
            let command = line.split("] \"").nth(1).and_then(|rest| rest.split('"').next()).unwrap();
            sent.push(command.to_uppercase());
        }
    }
}

fn request<'a>(uri: &'a str, principal: &'a str) -> ReadRequest<'a> {
    ReadRequest { upstream: "u", epoch: 0, uri, principal, settings: &TRUSTED }
}

fn text(body: &str) -> ReadResourceResult {
    ReadResourceResult::new(vec![ResourceContents::text(body, "u+x://a")])
}

fn body(cached: &Cached) -> String {
    match &cached.result.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("{other:?}"),
    }
}

/// Read `uri` on `cache`; a load (counted in `loads`) returns `value`, watched.
async fn read(cache: &Coherence, uri: &str, principal: &str, value: &str, loads: &AtomicUsize) -> Cached {
    let loader = cache.clone();
    let load = || async move {
        loads.fetch_add(1, Ordering::SeqCst);
        Ok(Loaded { result: text(value), subscription: loader.load_subscription("u", uri, &TRUSTED) })
    };
    cache.read(request(uri, principal), load).await.unwrap()
}

#[tokio::test]
async fn a_uri_read_on_three_replicas_is_loaded_once() {
    let redis = Redis::start().await;
    let all = replicas(&redis, "t1:", 3).await;
    let loads = AtomicUsize::new(0);
    for round in 0..3 {
        for (i, cache) in all.iter().enumerate() {
            for uri in ["x://a", "x://b/c"] {
                let cached = read(cache, uri, "p", "v1", &loads).await;
                assert_eq!(body(&cached), "v1");
                if round + i > 0 {
                    assert_eq!(cached.outcome, Outcome::Hit, "round {round}, replica {i}, {uri}");
                }
            }
        }
    }
    assert_eq!(loads.load(Ordering::SeqCst), 2, "one load per URI for the cluster");
}

#[tokio::test]
async fn a_miss_costs_two_round_trips_to_redis_and_a_hit_one() {
    let redis = Redis::start().await;
    let cache = replica(&redis, "t9:", "r0").await;
    let loads = AtomicUsize::new(0);
    // The scripts are in Redis before counting (the first call of one may take two round trips).
    read(&cache, "x://warm", "p", "v1", &loads).await;
    let miss = round_trips(&redis, async {
        assert_eq!(read(&cache, "x://m", "p", "v1", &loads).await.outcome, Outcome::Miss);
    })
    .await;
    assert_eq!(miss, ["EVALSHA", "EVALSHA"], "the look (which claims the load), the fill (which lets go of it)");
    let hit = round_trips(&redis, async {
        assert_eq!(read(&cache, "x://m", "p", "v1", &loads).await.outcome, Outcome::Hit);
    })
    .await;
    assert_eq!(hit, ["EVALSHA"], "the look alone: the entry is served from the local store");
}

#[tokio::test]
async fn an_update_heard_by_one_replica_is_fresh_on_every_other() {
    let redis = Redis::start().await;
    let all = replicas(&redis, "t2:", 3).await;
    let loads = AtomicUsize::new(0);
    for cache in &all {
        assert_eq!(body(&read(cache, "x://d/e", "p", "v1", &loads).await), "v1");
    }
    // A change of a parent counts for the URI, as on one replica.
    all[0].invalidate_everywhere("u", "x://d").await;
    for (i, cache) in all.iter().enumerate() {
        assert_eq!(body(&read(cache, "x://d/e", "p", "v2", &loads).await), "v2", "replica {i}");
    }
    assert_eq!(loads.load(Ordering::SeqCst), 2, "one load before, one after");
}

#[tokio::test]
async fn private_results_stay_with_their_principal() {
    let redis = Redis::start().await;
    let all = replicas(&redis, "t3:", 2).await;
    let loads = AtomicUsize::new(0);
    let private = |who: &str| {
        let mut result = text(&format!("for {who}"));
        result.cache_scope = Some(CacheScope::Private);
        result.ttl_ms = Some(60_000);
        result
    };
    for (cache, who) in [(&all[0], "alice"), (&all[1], "bob"), (&all[1], "alice"), (&all[0], "bob")] {
        let result = private(who);
        let load = || async {
            loads.fetch_add(1, Ordering::SeqCst);
            Ok(Loaded::unwatched(result))
        };
        let cached = cache.read(request("x://mine", who), load).await.unwrap();
        assert_eq!(body(&cached), format!("for {who}"), "{who} sees only their own");
    }
    assert_eq!(loads.load(Ordering::SeqCst), 2, "one load per principal, shared by the replicas");
}

#[tokio::test]
async fn an_entry_whose_vouching_replica_is_gone_is_not_served() {
    let redis = Redis::start().await;
    let all = replicas(&redis, "t4:", 2).await;
    let loads = AtomicUsize::new(0);
    read(&all[0], "x://v", "p", "v1", &loads).await;
    assert_eq!(read(&all[1], "x://v", "p", "v1", &loads).await.outcome, Outcome::Hit, "vouched by r0");
    redis.del(&format!("{REPLICAS}r0")).await;
    let after = read(&all[1], "x://v", "p", "v2", &loads).await;
    assert_eq!((body(&after), after.outcome), ("v2".to_string(), Outcome::Miss), "r0 is gone: read again");
    assert_eq!(loads.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn stale_if_error_serves_an_entry_expired_on_any_replica_but_never_an_invalidated_one() {
    let redis = Redis::start().await;
    let mut all = Vec::new();
    for name in ["r0", "r1"] {
        all.push(replica_with(&redis, ("t12:", name), SECRET, Metrics::new(), Duration::from_secs(60)).await);
    }
    let short = |value: &'static str| move || async move { Ok(Loaded::unwatched(text(value).with_ttl_ms(1))) };
    let down = || async { Err(ProxyError::UpstreamDown { upstream: "u".into(), cause: None }) };
    all[0].read(request("x://a", "p"), short("v1")).await.unwrap();
    all[0].read(request("x://b", "p"), short("v1")).await.unwrap();
    all[0].invalidate_everywhere("u", "x://b").await;
    // Let the 1 ms lifetimes pass: the expiry is the behaviour under test.
    tokio::time::sleep(Duration::from_millis(5)).await;
    for (i, cache) in all.iter().chain(all.iter()).enumerate() {
        let stale = cache.read(request("x://a", "p"), down).await.unwrap();
        assert_eq!((body(&stale), stale.outcome), ("v1".to_string(), Outcome::Stale), "read {i}: upstream down");
        let error = cache.read(request("x://b", "p"), down).await.unwrap_err();
        assert_eq!(error.kind(), "upstream_down", "read {i}: an invalidated entry is never served stale");
    }
    let not_found = || async { Err(ProxyError::not_found("u+x://a")) };
    let error = all[1].read(request("x://a", "p"), not_found).await.unwrap_err();
    assert_eq!(error.kind(), "not_found", "only upstream trouble");
}

/// A load an update overtook is not kept on any tier, and neither is anything for it: its
/// upstream subscription is let go of and no insert is counted (as on one process).
#[tokio::test]
async fn a_load_an_update_overtook_keeps_no_subscription_and_counts_no_insert() {
    let redis = Redis::start().await;
    let metrics = Metrics::new();
    let reader = replica_of(&redis, ("t10:", "r0"), SECRET, metrics.clone()).await;
    let updater = replica(&redis, "t10:", "r1").await;
    let (loader, updater) = (&reader, &updater);
    let load = || async move {
        let subscription = loader.load_subscription("u", "x://a", &TRUSTED);
        assert!(subscription.is_some(), "the load subscribes first");
        updater.invalidate_everywhere("u", "x://a").await;
        Ok(Loaded { result: text("v1"), subscription })
    };
    let read = reader.read(request("x://a", "p"), load).await.unwrap();
    assert_eq!((body(&read), read.outcome), ("v1".to_string(), Outcome::Miss));
    reader.settle().await;
    assert_eq!(reader.tracked().subscriptions, 0, "no subscription kept for what was not kept");
    let exposition = metrics.render();
    let inserts = exposition.lines().filter(|line| line.starts_with("mcp_proxy_cache_inserts_total"));
    let inserted: f64 = inserts.map(|line| line.rsplit(' ').next().unwrap().parse::<f64>().unwrap()).sum();
    assert_eq!(inserted, 0.0, "no insert counted:\n{exposition}");
}

/// A reconnect's flush frees this replica's entries of that upstream, as on one process, and
/// counts them.
#[tokio::test]
async fn a_reconnect_flushes_the_upstreams_entries_here() {
    let redis = Redis::start().await;
    let cache = replica(&redis, "t11:", "r0").await;
    let loads = AtomicUsize::new(0);
    read(&cache, "x://a", "p", "v1", &loads).await;
    cache.settle().await;
    assert_eq!(cache.size().0, 1);
    assert_eq!(cache.flush_upstream("u", 1), 1, "the entry of the old connection is dropped");
    cache.settle().await;
    assert_eq!(cache.size().0, 0);
}

#[tokio::test]
async fn redis_stopped_and_started_again_serves_nothing_stale_and_recovers() {
    let mut redis = Redis::start().await;
    let all = replicas(&redis, "t5:", 2).await;
    let loads = AtomicUsize::new(0);
    read(&all[0], "x://r", "p", "v1", &loads).await;
    assert_eq!(read(&all[1], "x://r", "p", "v1", &loads).await.outcome, Outcome::Hit);

    redis.stop();
    // The change is heard while Redis is away: it cannot be recorded there.
    all[0].invalidate_everywhere("u", "x://r").await;
    for cache in &all {
        let cached = read(cache, "x://r", "p", "v2", &loads).await;
        assert_eq!((body(&cached), cached.outcome), ("v2".to_string(), Outcome::Bypass), "read upstream");
    }
    let tier = |i: usize| all[i].shared_tier().unwrap().clone();
    assert!(!tier(0).is_up() && !tier(1).is_up());

    redis.run().await;
    for (i, name) in ["r0", "r1"].into_iter().enumerate() {
        redis.set(&format!("{REPLICAS}{name}"), "1").await;
        assert!(tier(i).recover().await, "replica {i} finds Redis back by itself");
    }
    let before = loads.load(Ordering::SeqCst);
    for cache in &all {
        assert_eq!(body(&read(cache, "x://r", "p", "v2", &loads).await), "v2");
    }
    assert_eq!(loads.load(Ordering::SeqCst), before + 1, "shared again: one load for both");
}

/// What a Redis writer can do to an entry: replace its body with one of its own (forged, or an
/// older release's in clear), or copy another key's entry over it. Neither opens: each read is a
/// miss, counted, loaded again, and its fill takes the place. An entry another cluster sealed
/// (another secret) does not open either.
#[tokio::test]
async fn an_entry_that_does_not_open_is_a_miss_counted_and_loaded_again() {
    let redis = Redis::start().await;
    let metrics = Metrics::new();
    let writer = replica(&redis, "t7:", "r0").await;
    let reader = replica_of(&redis, ("t7:", "r1"), SECRET, metrics.clone()).await;
    let loads = AtomicUsize::new(0);
    read(&writer, "x://a", "p", "a1", &loads).await;
    read(&writer, "x://b", "p", "b1", &loads).await;
    let entries = redis.keys("t7:e:*").await;
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(entries.iter().all(|key| !key.contains("x://")), "a URI in a key: {entries:?}");

    let forged = concat!(
        r#"{"result":{"contents":[{"uri":"x://a","text":"forged"}]},"#,
        r#""fresh_until":99999999999999,"told_until":0,"keep_until":99999999999999,"scope":"public","bytes":6}"#
    );
    let moved = redis.hget(&entries[1], "b").await;
    redis.hset(&entries[0], "b", &moved).await;
    redis.hset(&entries[1], "b", forged.as_bytes()).await;
    let third = replica(&redis, "t7:", "r3").await;
    for (uri, fresh) in [("x://a", "a2"), ("x://b", "b2")] {
        let cached = read(&reader, uri, "p", fresh, &loads).await;
        assert_eq!((body(&cached), cached.outcome), (fresh.to_string(), Outcome::Miss), "{uri}");
        let again = read(&third, uri, "p", "never loaded", &loads).await;
        assert_eq!((body(&again), again.outcome), (fresh.to_string(), Outcome::Hit), "{uri}: its fill took the place");
    }
    assert_eq!(rejected(&metrics), 2.0);

    let foreign = replica_of(&redis, ("t7:", "r2"), b"another cluster's secret, 32 b..", Metrics::new()).await;
    assert_eq!(body(&read(&foreign, "x://a", "p", "theirs", &loads).await), "theirs");
    assert_eq!(loads.load(Ordering::SeqCst), 5, "two loads, two again, one of the other cluster");
}

/// `mcp_proxy_cluster_redis_rejected_total{kind="cache_entry"}` in `metrics`.
fn rejected(metrics: &Metrics) -> f64 {
    let exposition = metrics.render();
    let series = "mcp_proxy_cluster_redis_rejected_total{kind=\"cache_entry\"} ";
    let line = exposition.lines().find(|line| line.starts_with(series)).expect("the series is there from the start");
    line[series.len()..].parse().unwrap()
}

/// Steps of the seeded test; `COHERENCE_STEPS` runs it longer.
const STEPS: u32 = 1500;

/// The seeded interleaving of `coherence::tests`, across three replicas sharing one Redis:
/// writes notified on a random replica, reads on random ones; no read begun after a
/// notification returns content older than it. `CACHE_SEED` replays a seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_reads_across_replicas_never_return_content_older_than_a_received_update() {
    let seed: u64 = std::env::var("CACHE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    let steps: u32 = std::env::var("COHERENCE_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(STEPS);
    println!("seed {seed}, {steps} steps");
    let redis = Redis::start().await;
    let all = replicas(&redis, "t6:", 3).await;
    let version = Arc::new(AtomicU64::new(0));
    let notified = Arc::new(AtomicU64::new(0));
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
    let mut tasks = Vec::new();
    for step in 0..steps {
        let cache = all[rand::RngExt::random_range(&mut rng, 0..all.len())].clone();
        let uri = ["x://a", "x://a/b"][rand::RngExt::random_range(&mut rng, 0..2)];
        if rand::RngExt::random_bool(&mut rng, 0.1) {
            // Upstream write, then its notification arrives at one replica.
            let v = version.fetch_add(1, Ordering::SeqCst) + 1;
            cache.invalidate_everywhere("u", "x://a").await;
            notified.store(v, Ordering::SeqCst);
            continue;
        }
        let delay = rand::RngExt::random_range(&mut rng, 0..3u64);
        let (version, notified) = (version.clone(), notified.clone());
        tasks.push(tokio::spawn(async move {
            let floor = notified.load(Ordering::SeqCst);
            let loader = cache.clone();
            let read = cache
                .read(request(uri, "p"), || async move {
                    let subscription = loader.load_subscription("u", uri, &TRUSTED);
                    let v = version.load(Ordering::SeqCst);
                    for _ in 0..delay {
                        tokio::task::yield_now().await;
                    }
                    Ok(Loaded { result: text(&v.to_string()), subscription })
                })
                .await
                .unwrap();
            let seen: u64 = body(&read).parse().unwrap();
            assert!(seen >= floor, "seed {seed}, step {step}: read begun after update {floor} returned {seen}");
            read.outcome
        }));
    }
    let mut hits = 0;
    for task in tasks {
        hits += usize::from(task.await.unwrap_or_else(|e| panic!("seed {seed}: {e}")) == Outcome::Hit);
    }
    assert!(hits > 0, "the tier was used at all");
}

#[tokio::test]
async fn a_look_goes_on_a_socket_the_reading_task_drives() {
    let redis = Redis::start().await;
    let cache = replica(&redis, "t10:", "r0").await;
    let loads = AtomicUsize::new(0);
    for _ in 0..3 {
        read(&cache, "x://s", "p", "v1", &loads).await;
    }
    let looks = look_sockets(&redis).await;
    assert_eq!(looks.len(), 1, "one socket for reads one at a time: {looks:?}");
    assert!(looks[0].contains(" cmd=evalsha "), "the last look went on it: {looks:?}");
}

/// Redis restarted while no read was under way: the look sockets left idle are to the Redis
/// that went. The first read finds it gone (the tier down, read upstream); once the tier is
/// found up again, no read fails on another of them.
#[tokio::test]
async fn after_redis_restarts_one_read_finds_it_gone_and_none_once_the_tier_is_up() {
    let mut redis = Redis::start().await;
    let cache = replica(&redis, "t11:", "r0").await;
    let loads = AtomicUsize::new(0);
    let uris = ["x://s/1", "x://s/2", "x://s/3", "x://s/4"];
    futures::future::join_all(uris.map(|uri| read(&cache, uri, "p", "v1", &loads))).await;
    assert_eq!(look_sockets(&redis).await.len(), uris.len(), "a socket for each read under way");

    redis.stop();
    redis.run().await;
    redis.set(&format!("{REPLICAS}r0"), "1").await;
    let tier = cache.shared_tier().unwrap().clone();
    let mut bypassed = 0;
    for _ in 0..2 * uris.len() {
        if read(&cache, "x://s/1", "p", "v2", &loads).await.outcome == Outcome::Bypass {
            bypassed += 1;
            assert!(tier.recover().await, "the tier finds Redis back at its first try");
        }
    }
    assert_eq!(bypassed, 1, "the first read alone found Redis gone");
}

/// The look sockets open to `redis`, as `CLIENT LIST` shows them.
async fn look_sockets(redis: &Redis) -> Vec<String> {
    let mut connection = redis.client().get_multiplexed_async_connection().await.unwrap();
    let clients: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut connection).await.unwrap();
    clients.lines().filter(|line| line.contains(" name=mcp-proxy-look ")).map(str::to_string).collect()
}
