//! One read cache for the cluster, never stale: three replicas behind haproxy share one
//! upstream (the fixture over HTTP, which counts its reads) and one `redis-server`.
//!
//! - 20 hosts reading the same 100 URIs through the balancer: the upstream reads each about once
//!   for the cluster, not once per replica;
//! - the seeded interleaving of the coherence tests (`CACHE_SEED` replays one): writes made at
//!   the upstream, heard by whichever replica watches, reads spread over the replicas — no read
//!   begun after the cluster recorded an update returns older content;
//! - Redis stopped mid-run and started again: reads are still answered, never stale and never
//!   another principal's, and the shared tier comes back without a restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::join_all;
use serde_json::json;

use crate::support::cluster::Replicas;
use crate::support::eventually;
use crate::support::exposition::Exposition;
use crate::support::fixture::{self, DEADLINE, Era, FixtureClient, HttpFixture, call_json, connect_http_with_token};
use crate::support::proxy::{alice_and_bob_policies, alice_and_bob_under_policies, http_upstream};

const ALICE_TOKEN: &str = "alice-tok-cache-51d0a2";
const BOB_TOKEN: &str = "bob-tok-cache-7e93c4";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
use crate::support::reads::{read, text, upstream_reads};

/// The fixture notifies every change: its reads are kept while watched.
const TRUSTED: &str = "[upstreams.cache]\ntrust_notifications = true";

/// The fixture at `args` behind three replicas; a side client on the fixture itself.
async fn cluster_over(args: &[&str], extra_config: &str) -> anyhow::Result<(Replicas, HttpFixture, FixtureClient)> {
    let upstream = HttpFixture::spawn(args).await?;
    let config = format!("{extra_config}{}", http_upstream("fx", &upstream.url, TRUSTED));
    let cluster = Replicas::start(3, &config, &[]).await?;
    for replica in &cluster.replicas {
        replica.wait_up("fx", 1).await?;
    }
    let (side, _) = fixture::connect_http(&upstream.url, Era::Auto).await?;
    Ok((cluster, upstream, side))
}

/// `event` of the shared tier, summed over the replicas.
async fn shared_events(cluster: &Replicas, event: &str) -> anyhow::Result<f64> {
    let mut total = 0.0;
    for replica in &cluster.replicas {
        let metrics = Exposition::parse(&replica.admin_get("/metrics").await?)?;
        total += metrics.sum("mcp_proxy_cache_shared_events_total", &[("event", event)]);
    }
    Ok(total)
}

/// The version in a fixture item's text (`item N vK`).
fn version_of(text: &str) -> u64 {
    text.rsplit_once(" v").and_then(|(_, v)| v.trim_end_matches('.').parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn twenty_hosts_on_three_replicas_read_each_uri_about_once_upstream() -> anyhow::Result<()> {
    const URIS: u64 = 100;
    const HOSTS: usize = 20;
    let (cluster, _upstream, side) = cluster_over(&["--era", "legacy", "--resources", "100"], "").await?;
    let mut hosts = Vec::new();
    for _ in 0..HOSTS {
        hosts.push(fixture::connect_http(cluster.url(), Era::Modern).await?.0);
    }
    // Each host reads all 100 in its own order (seeded), all hosts at once.
    let reads = hosts.iter().enumerate().map(|(index, host)| async move {
        let mut order: Vec<u64> = (0..URIS).collect();
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(index as u64);
        rand::seq::SliceRandom::shuffle(order.as_mut_slice(), &mut rng);
        for id in order {
            let uri = format!("fx+fx://fx/item/{id}");
            let result = read(host, &uri).await?;
            anyhow::ensure!(text(&result) == format!("item {id} v1"), "{uri}: {result:?}");
        }
        anyhow::Ok(())
    });
    for done in join_all(reads).await {
        done?;
    }
    let stats = fixture::stats(&side).await?;
    let by_uri = stats["reads_by_uri"].as_object().cloned().unwrap_or_default();
    let upstream: u64 =
        (0..URIS).map(|id| by_uri.get(&format!("fx://fx/item/{id}")).and_then(|n| n.as_u64()).unwrap_or(0)).sum();
    println!("{} reads through the balancer, {upstream} upstream", URIS as usize * HOSTS);
    assert!(upstream >= URIS, "every URI was read upstream at least once: {upstream}");
    assert!(
        upstream <= URIS + URIS / 5,
        "about one upstream read per URI for the cluster, not one per replica: {upstream}"
    );
    assert!(shared_events(&cluster, "hit").await? + shared_events(&cluster, "local_hit").await? > 0.0);
    let mut served = Vec::new();
    for replica in &cluster.replicas {
        let metrics = Exposition::parse(&replica.admin_get("/metrics").await?)?;
        served.push(metrics.sum("mcp_proxy_cache_hits_total", &[("upstream", "fx")]));
    }
    assert!(served.iter().all(|hits| *hits > 0.0), "every replica answered from the shared cache: {served:?}");
    Ok(())
}

/// Steps of the seeded test; `COHERENCE_STEPS` runs it longer.
const STEPS: u32 = 200;

#[tokio::test]
async fn randomized_reads_over_replicas_never_return_content_older_than_a_recorded_update() -> anyhow::Result<()> {
    let seed: u64 = std::env::var("CACHE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    let steps: u32 = std::env::var("COHERENCE_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(STEPS);
    println!("seed {seed}, {steps} steps");
    let (cluster, _upstream, side) = cluster_over(&["--era", "legacy"], "").await?;
    let mut hosts = Vec::new();
    for _ in 0..6 {
        hosts.push(fixture::connect_http(cluster.url(), Era::Modern).await?.0);
    }
    const URIS: [&str; 2] = ["fx://fx/item/0", "fx://fx/item/1"];
    // Read once each, so some replica watches them (a change is then heard).
    for uri in URIS {
        read(&hosts[0], &format!("fx+{uri}")).await?;
    }
    // Per URI: the newest version the cluster recorded an update for.
    let floors: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(1), AtomicU64::new(1)]);
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
    let mut tasks = Vec::new();
    for step in 0..steps {
        let lane = rand::RngExt::random_range(&mut rng, 0..URIS.len());
        if rand::RngExt::random_bool(&mut rng, 0.1) {
            // A write at the upstream; once a replica recorded it, every later read sees it.
            let recorded = shared_events(&cluster, "invalidation").await?;
            let touched = call_json(&side, "touch", json!({ "uri": URIS[lane] })).await?;
            let version = touched["version"].as_u64().unwrap_or_else(|| panic!("{touched}"));
            eventually(DEADLINE, "a replica recorded the update", || async {
                let now = shared_events(&cluster, "invalidation").await?;
                if now > recorded { Ok(()) } else { Err(anyhow::anyhow!("seed {seed}, step {step}: not yet")) }
            })
            .await?;
            floors[lane].store(version, Ordering::SeqCst);
            continue;
        }
        let host = hosts[rand::RngExt::random_range(&mut rng, 0..hosts.len())].clone();
        let floors = floors.clone();
        tasks.push(tokio::spawn(async move {
            let floor = floors[lane].load(Ordering::SeqCst);
            let result = read(&host, &format!("fx+{}", URIS[lane])).await?;
            let seen = version_of(text(&result));
            anyhow::ensure!(seen >= floor, "seed {seed}, step {step}: read begun after v{floor} returned v{seen}");
            anyhow::Ok(())
        }));
        if tasks.len() % 8 == 0 {
            // Keep a bounded number of reads in flight.
            for task in tasks.drain(..) {
                task.await??;
            }
        }
    }
    for task in tasks {
        task.await??;
    }
    assert!(shared_events(&cluster, "fill").await? >= 2.0, "the shared tier was used");
    Ok(())
}

/// alice may read both items, bob only item 1; results are private to whoever read them.
#[tokio::test]
async fn redis_stopped_and_restarted_serves_nothing_stale_nor_another_principals_and_recovers() -> anyhow::Result<()> {
    let policies = alice_and_bob_policies("allow = [\"fx+fx://fx/item/*\"]\n", "allow = [\"fx+fx://fx/item/1\"]\n")?;
    let upstream = HttpFixture::spawn(&["--era", "legacy", "--scope", "private", "--ttl-ms", "600000"]).await?;
    let config = alice_and_bob_under_policies("", policies.path(), &http_upstream("fx", &upstream.url, TRUSTED));
    let mut cluster = Replicas::start(3, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        replica.wait_up("fx", 1).await?;
    }
    let (side, _) = fixture::connect_http(&upstream.url, Era::Auto).await?;
    let (alice, _) = connect_http_with_token(cluster.url(), Era::Modern, ALICE_TOKEN).await?;
    let (bob, _) = connect_http_with_token(cluster.url(), Era::Modern, BOB_TOKEN).await?;
    let (mine, theirs) = ("fx+fx://fx/item/1", "fx+fx://fx/item/0");
    let everyone_reads = |version: u64| {
        let (alice, bob) = (alice.clone(), bob.clone());
        async move {
            for _ in 0..3 {
                for host in [&alice, &bob] {
                    let seen = text(&read(host, mine).await?).to_string();
                    anyhow::ensure!(seen == format!("item 1 v{version}"), "stale: {seen}, want v{version}");
                }
                assert_eq!(text(&read(&alice, theirs).await?), "item 0 v1");
                assert!(read(&bob, theirs).await.is_err(), "bob is never answered alice's URI");
            }
            anyhow::Ok(())
        }
    };
    everyone_reads(1).await?;
    assert_eq!(upstream_reads(&side, "fx://fx/item/1").await?, 2, "one load each for alice and bob, cluster-wide");

    cluster.redis.stop().await?;
    call_json(&side, "touch", json!({ "uri": "fx://fx/item/1" })).await?;
    eventually(DEADLINE, "a replica heard the update", || async {
        let mut heard = 0.0;
        for replica in &cluster.replicas {
            let metrics = Exposition::parse(&replica.admin_get("/metrics").await?)?;
            heard += metrics.sum("mcp_proxy_notifications_received_total", &[("upstream", "fx")]);
        }
        if heard >= 1.0 { Ok(()) } else { Err(anyhow::anyhow!("no replica heard it")) }
    })
    .await?;
    everyone_reads(2).await?;
    for replica in &cluster.replicas {
        replica.wait_metric("mcp_proxy_cache_shared_up", &[], |up| up == 0.0).await?;
    }

    cluster.redis.restart().await?;
    for replica in &cluster.replicas {
        replica.wait_metric("mcp_proxy_cache_shared_up", &[], |up| up == 1.0).await?;
    }
    let recorded = shared_events(&cluster, "invalidation").await?;
    call_json(&side, "touch", json!({ "uri": "fx://fx/item/1" })).await?;
    eventually(DEADLINE, "a replica recorded the update", || async {
        let now = shared_events(&cluster, "invalidation").await?;
        if now > recorded { Ok(()) } else { Err(anyhow::anyhow!("not yet")) }
    })
    .await?;
    let (hits, before) = (shared_hits(&cluster).await?, upstream_reads(&side, "fx://fx/item/1").await?);
    everyone_reads(3).await?;
    assert!(shared_hits(&cluster).await? > hits, "the shared tier serves again, without a restart");
    let loads = upstream_reads(&side, "fx://fx/item/1").await? - before;
    assert!(loads <= 2, "one load each for alice and bob again, cluster-wide: {loads}");

    let mut redis = cluster.redis.connection().await?;
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut redis).await?;
    assert!(keys.iter().any(|key| key.contains(":cache:e:")), "entries are in Redis: {keys:?}");
    let named = |key: &String| key.contains("alice") || key.contains("bob") || key.contains("tok-");
    assert!(!keys.iter().any(named), "no principal's name or token in Redis: {keys:?}");
    Ok(())
}

async fn shared_hits(cluster: &Replicas) -> anyhow::Result<f64> {
    Ok(shared_events(cluster, "hit").await? + shared_events(cluster, "local_hit").await?)
}
