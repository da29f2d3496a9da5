use std::sync::atomic::AtomicUsize;

use rmcp::model::ResourceContents;

use super::*;

#[derive(Default)]
struct Hooks {
    held: Mutex<Vec<(String, String)>>,
    released: Mutex<Vec<(String, String)>>,
}

impl CacheHooks for Hooks {
    fn hold(&self, upstream: &str, uri: &str) {
        self.held.lock().unwrap().push((upstream.into(), uri.into()));
    }
    fn release(&self, upstream: &str, uri: &str) {
        self.released.lock().unwrap().push((upstream.into(), uri.into()));
    }
    fn inserted(&self, _: &str) {}
    fn removed(&self, _: Removal) {}
    fn superseded(&self) {}
}

fn config() -> CacheConfig {
    CacheConfig {
        enabled: true,
        max_bytes: 1 << 20,
        max_entry_bytes: 64 << 10,
        unwatched_ttl: Duration::from_secs(5),
        max_ttl: Duration::from_secs(3600),
        stale_if_error: Duration::ZERO,
        max_watched_per_upstream: 100,
    }
}

fn cache() -> (ReadCache, Arc<Hooks>) {
    let hooks = Arc::new(Hooks::default());
    (ReadCache::new(config(), hooks.clone()), hooks)
}

fn text(body: &str) -> ReadResourceResult {
    ReadResourceResult::new(vec![ResourceContents::text(body, "u+x://a")])
}

fn loaded(body: &str) -> Loaded {
    Loaded { result: text(body), watched: true, trusted: false }
}

fn body(cached: &Cached) -> String {
    match &cached.result.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn concurrent_misses_make_one_load_and_then_hit() {
    let (cache, hooks) = cache();
    let loads = Arc::new(AtomicUsize::new(0));
    let reads = (0..100).map(|_| {
        let cache = cache.clone();
        let loads = loads.clone();
        async move {
            cache
                .read("u", 0, "x://a", "p", || async move {
                    loads.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    Ok(loaded("v1"))
                })
                .await
                .unwrap()
        }
    });
    let results = futures::future::join_all(reads).await;
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    assert!(results.iter().all(|r| body(r) == "v1"));
    let again = cache.read("u", 0, "x://a", "p", || async { panic!("must hit") }).await.unwrap();
    assert_eq!(again.outcome, Outcome::Hit);
    assert_eq!(hooks.held.lock().unwrap().as_slice(), [("u".to_string(), "x://a".to_string())]);
}

#[tokio::test]
async fn an_update_during_a_load_wins() {
    let (cache, _) = cache();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let slow = {
        let cache = cache.clone();
        tokio::spawn(async move {
            cache
                .read("u", 0, "x://a", "p", || async move {
                    released.await.unwrap();
                    Ok(loaded("old"))
                })
                .await
        })
    };
    // Wait until the load is in flight: the first read registered the URI's generation.
    while cache.inner.generations.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    cache.invalidate("u", "x://a");
    // A read begun after the update does not join the old load.
    let fresh = cache.read("u", 0, "x://a", "p", || async { Ok(loaded("new")) }).await.unwrap();
    assert_eq!(body(&fresh), "new");
    release.send(()).unwrap();
    assert_eq!(body(&slow.await.unwrap().unwrap()), "old", "the reader that began before may see the old value");
    let after = cache.read("u", 0, "x://a", "p", || async { Ok(loaded("newer")) }).await.unwrap();
    assert_ne!(body(&after), "old", "the superseded load was not kept");
}

#[tokio::test]
async fn updates_of_a_parent_invalidate_its_children() {
    let (cache, _) = cache();
    for uri in ["x://d/a", "x://d/b", "x://dx"] {
        cache.read("u", 0, uri, "p", || async { Ok(loaded("v1")) }).await.unwrap();
    }
    assert_eq!(cache.invalidate("u", "x://d"), 2);
    for (uri, expected) in [("x://d/a", Outcome::Miss), ("x://d/b", Outcome::Miss), ("x://dx", Outcome::Hit)] {
        let read = cache.read("u", 0, uri, "p", || async { Ok(loaded("v2")) }).await.unwrap();
        assert_eq!(read.outcome, expected, "{uri}");
    }
}

#[tokio::test]
async fn a_reconnect_flushes_only_that_upstream() {
    let (cache, _) = cache();
    cache.read("u", 0, "x://a", "p", || async { Ok(loaded("v1")) }).await.unwrap();
    cache.read("w", 0, "x://a", "p", || async { Ok(loaded("v1")) }).await.unwrap();
    cache.flush_upstream("u", 1);
    assert_eq!(cache.read("u", 1, "x://a", "p", || async { Ok(loaded("v2")) }).await.unwrap().outcome, Outcome::Miss);
    assert_eq!(cache.read("w", 0, "x://a", "p", || async { Ok(loaded("v2")) }).await.unwrap().outcome, Outcome::Hit);
}

#[tokio::test]
async fn private_results_are_kept_per_principal() {
    let (cache, _) = cache();
    let private = || async {
        Ok(Loaded { result: text("alice's").with_cache_scope(CacheScope::Private), watched: true, trusted: false })
    };
    let first = cache.read("u", 0, "x://a", "alice", private).await.unwrap();
    assert_eq!(first.scope, CacheScope::Private);
    assert_eq!(
        cache.read("u", 0, "x://a", "alice", || async { panic!("alice hits") }).await.unwrap().outcome,
        Outcome::Hit
    );
    let bob = cache.read("u", 0, "x://a", "bob", || async { Ok(loaded("bob's")) }).await.unwrap();
    assert_eq!((body(&bob), bob.outcome), ("bob's".to_string(), Outcome::Miss));
}

#[tokio::test]
async fn the_byte_bound_holds() {
    let (cache, _) = cache();
    let big = "x".repeat(40 << 10);
    for i in 0..260 {
        let uri = format!("x://{i}");
        let big = big.clone();
        cache.read("u", 0, &uri, "p", || async move { Ok(loaded(&big)) }).await.unwrap();
    }
    cache.settle().await;
    let (_, bytes) = cache.size();
    assert!(bytes <= config().max_bytes, "{bytes} > {}", config().max_bytes);
}

#[tokio::test]
async fn some_results_are_never_kept() {
    let (cache, _) = cache();
    let too_big = "x".repeat(65 << 10);
    let read = cache.read("u", 0, "x://big", "p", || async move { Ok(loaded(&too_big)) }).await.unwrap();
    assert_eq!(read.outcome, Outcome::Bypass);
    let zero = || async { Ok(Loaded { result: text("v").with_ttl_ms(0), watched: true, trusted: false }) };
    assert_eq!(cache.read("u", 0, "x://zero", "p", zero).await.unwrap().outcome, Outcome::Bypass);
    assert_eq!(cache.read("u", 0, "x://zero", "p", zero).await.unwrap().outcome, Outcome::Bypass);
    let failed = cache.read("u", 0, "x://err", "p", || async { Err(ProxyError::not_found("u+x://err")) }).await;
    assert!(failed.is_err());
    let ok = cache.read("u", 0, "x://err", "p", || async { Ok(loaded("now")) }).await.unwrap();
    assert_eq!(body(&ok), "now", "errors are not cached");
}

#[test]
fn lifetimes() {
    let c = config();
    let with = |ttl: Option<u64>, watched, trusted| {
        let mut result = text("v");
        result.ttl_ms = ttl;
        lifetime(&c, &Loaded { result, watched, trusted })
    };
    assert_eq!(with(None, true, false), c.max_ttl, "watched, no hint: until invalidated (max_ttl)");
    assert_eq!(with(Some(2000), true, false), Duration::from_secs(2), "the upstream's ttl caps it");
    assert_eq!(with(Some(0), true, true), c.max_ttl, "trusted notifications outrank ttlMs 0");
    assert_eq!(with(None, false, false), c.unwatched_ttl, "unwatched: short");
    assert_eq!(with(Some(1000), false, true), Duration::from_secs(1));
}

/// Seeded interleaving of upstream writes (with their notifications) and concurrent readers:
/// no read begun after a notification returns content older than it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_reads_never_return_content_older_than_a_received_update() {
    let seed: u64 = std::env::var("CACHE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    println!("seed {seed}");
    let (cache, _) = cache();
    let version = Arc::new(AtomicU64::new(0));
    let notified = Arc::new(AtomicU64::new(0));
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
    let mut tasks = Vec::new();
    for step in 0..3000u32 {
        if rand::Rng::random_bool(&mut rng, 0.1) {
            // Upstream write, then its notification arrives.
            let v = version.fetch_add(1, Ordering::SeqCst) + 1;
            cache.invalidate("u", "x://a");
            notified.store(v, Ordering::SeqCst);
            continue;
        }
        let delay = rand::Rng::random_range(&mut rng, 0..3u64);
        let (cache, version, notified) = (cache.clone(), version.clone(), notified.clone());
        tasks.push(tokio::spawn(async move {
            let floor = notified.load(Ordering::SeqCst);
            let read = cache
                .read("u", 0, "x://a", "p", || async move {
                    let v = version.load(Ordering::SeqCst);
                    for _ in 0..delay {
                        tokio::task::yield_now().await;
                    }
                    Ok(loaded(&v.to_string()))
                })
                .await
                .unwrap();
            let seen: u64 = body(&read).parse().unwrap();
            assert!(seen >= floor, "seed {seed}, step {step}: read begun after update {floor} returned {seen}");
        }));
    }
    for task in tasks {
        task.await.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[tokio::test]
async fn stale_if_error_serves_an_expired_entry_but_never_an_invalidated_one() {
    let hooks = Arc::new(Hooks::default());
    let config = CacheConfig { stale_if_error: Duration::from_secs(60), ..config() };
    let cache = ReadCache::new(config, hooks);
    let short = || async { Ok(Loaded { result: text("v1").with_ttl_ms(1), watched: false, trusted: false }) };
    let down = || async { Err(ProxyError::UpstreamDown { upstream: "u".into() }) };
    cache.read("u", 0, "x://a", "p", short).await.unwrap();
    // Let the 1 ms lifetime pass: the expiry is the behaviour under test.
    tokio::time::sleep(Duration::from_millis(5)).await;
    for _ in 0..2 {
        let stale = cache.read("u", 0, "x://a", "p", down).await.unwrap();
        assert_eq!((body(&stale), stale.outcome), ("v1".to_string(), Outcome::Stale), "while the upstream is down");
    }

    cache.read("u", 0, "x://b", "p", short).await.unwrap();
    cache.invalidate("u", "x://b");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let error = cache.read("u", 0, "x://b", "p", down).await.unwrap_err();
    assert_eq!(error.kind(), "upstream_down", "an invalidated entry is never served stale");
    let not_found = || async { Err(ProxyError::not_found("u+x://a")) };
    assert_eq!(
        cache.read("u", 0, "x://a", "p", not_found).await.unwrap_err().kind(),
        "not_found",
        "only upstream trouble"
    );
}

#[tokio::test]
async fn a_uri_whose_results_cannot_be_kept_is_not_watched_again() {
    let (cache, hooks) = cache();
    let zero = || async { Ok(Loaded { result: text("v").with_ttl_ms(0), watched: true, trusted: false }) };
    assert!(cache.may_watch("u", "x://z"));
    cache.read("u", 0, "x://z", "p", zero).await.unwrap();
    assert!(!cache.may_watch("u", "x://z"), "no subscribe/unsubscribe churn for uncacheable URIs");
    assert_eq!(hooks.released.lock().unwrap().as_slice(), [("u".to_string(), "x://z".to_string())]);
    let kept = || async { Ok(Loaded { result: text("v").with_ttl_ms(60_000), watched: false, trusted: false }) };
    cache.read("u", 0, "x://z", "p", kept).await.unwrap();
    assert!(cache.may_watch("u", "x://z"), "watched again once its results can be kept");
}
