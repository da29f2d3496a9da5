use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use rmcp::model::{CacheScope, ReadResourceResult, ResourceContents};

use super::*;

const CACHE_SUBSCRIBER: SubscriberId = 7;

/// An operator who opted into 5 s for results that come without a `ttlMs` (the shipped default
/// is zero: see `lifetimes`).
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

fn with(config: CacheConfig) -> (Coherence, Arc<UpstreamSubscriptions>) {
    let book = Arc::new(UpstreamSubscriptions::new(crate::upstream::Registry::default()));
    let coherence =
        Coherence::new(config, book.clone(), CACHE_SUBSCRIBER, Metrics::new(), Duration::from_secs(5), None);
    (coherence, book)
}

fn cache() -> (Coherence, Arc<UpstreamSubscriptions>) {
    with(config())
}

const UNTRUSTED: UpstreamCache =
    UpstreamCache { enabled: true, max_ttl: None, trust_notifications: false, unwatched_ttl: None };
const TRUSTED: UpstreamCache = UpstreamCache { trust_notifications: true, ..UNTRUSTED };

fn request<'a>(upstream: &'a str, epoch: u64, uri: &'a str, principal: &'a str) -> ReadRequest<'a> {
    ReadRequest { upstream, epoch, uri, principal, settings: &TRUSTED }
}

fn text(body: &str) -> ReadResourceResult {
    ReadResourceResult::new(vec![ResourceContents::text(body, "u+x://a")])
}

/// A load of `uri` the upstream acknowledged a subscription for.
fn watched(cache: &Coherence, uri: &str, result: ReadResourceResult) -> Loaded {
    Loaded { result, subscription: cache.load_subscription("u", uri, &TRUSTED) }
}

fn body(cached: &Cached) -> String {
    match &cached.result.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("{other:?}"),
    }
}

async fn read_value(cache: &Coherence, upstream: &str, uri: &str, value: &str) -> Cached {
    let loaded = Loaded::unwatched(text(value));
    cache.read(request(upstream, 0, uri, "p"), || async move { Ok(loaded) }).await.unwrap()
}

#[tokio::test]
async fn concurrent_misses_make_one_load_and_then_hit() {
    let (cache, book) = cache();
    let loads = Arc::new(AtomicUsize::new(0));
    let reads = (0..100).map(|_| {
        let (cache, loads) = (cache.clone(), loads.clone());
        async move {
            let loader = cache.clone();
            cache
                .read(request("u", 0, "x://a", "p"), || async move {
                    loads.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    Ok(watched(&loader, "x://a", text("v1")))
                })
                .await
                .unwrap()
        }
    });
    let results = futures::future::join_all(reads).await;
    assert_eq!(loads.load(Ordering::SeqCst), 1);
    assert!(results.iter().all(|r| body(r) == "v1"));
    let again = cache.read(request("u", 0, "x://a", "p"), || async { panic!("must hit") }).await.unwrap();
    assert_eq!(again.outcome, Outcome::Hit);
    assert_eq!(
        book.subscribed_by(CACHE_SUBSCRIBER),
        [("u".to_string(), "x://a".to_string())],
        "one hold for the watched entry"
    );
}

/// Results nobody said may be kept (no `ttlMs`, untrusted, no opt-in) are not kept, yet
/// concurrent readers of the same URI still share one load (all but its reader are coalesced).
#[tokio::test]
async fn results_not_kept_are_still_loaded_once_for_concurrent_readers() {
    let (cache, book) = with(CacheConfig { unwatched_ttl: Duration::ZERO, ..config() });
    let loads = Arc::new(AtomicUsize::new(0));
    let load = |loads: Arc<AtomicUsize>| async move {
        loads.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        Ok(Loaded::unwatched(text("v1")))
    };
    let untrusted = || ReadRequest { settings: &UNTRUSTED, ..request("u", 0, "x://a", "p") };
    let reads = (0..100).map(|_| cache.read(untrusted(), || load(loads.clone())));
    let results = futures::future::join_all(reads).await;
    assert_eq!(loads.load(Ordering::SeqCst), 1, "one upstream read for 100 concurrent readers");
    assert!(results.iter().all(|r| r.as_ref().is_ok_and(|r| body(r) == "v1")));
    let outcomes = |outcome: Outcome| results.iter().filter(|r| r.as_ref().is_ok_and(|r| r.outcome == outcome)).count();
    assert_eq!(
        (outcomes(Outcome::Bypass), outcomes(Outcome::Coalesced)),
        (1, 99),
        "the reader that loaded is a bypass; the others waited on its load"
    );
    let later = cache.read(untrusted(), || load(loads.clone())).await.unwrap();
    assert_eq!((later.outcome, loads.load(Ordering::SeqCst)), (Outcome::Bypass, 2), "not kept: read again");
    assert_eq!(book.counts(), (0, 0), "nothing subscribed for it");
}

#[tokio::test]
async fn an_update_during_a_load_wins() {
    let (cache, _) = cache();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (started, in_flight) = tokio::sync::oneshot::channel::<()>();
    let slow = {
        let cache = cache.clone();
        tokio::spawn(async move {
            cache
                .read(request("u", 0, "x://a", "p"), || async move {
                    started.send(()).unwrap();
                    released.await.unwrap();
                    Ok(Loaded::unwatched(text("old")))
                })
                .await
        })
    };
    in_flight.await.unwrap();
    cache.invalidate("u", "x://a");
    // A read begun after the update does not join the old load.
    assert_eq!(body(&read_value(&cache, "u", "x://a", "new").await), "new");
    release.send(()).unwrap();
    assert_eq!(body(&slow.await.unwrap().unwrap()), "old", "the reader that began before may see the old value");
    assert_ne!(body(&read_value(&cache, "u", "x://a", "newer").await), "old", "the superseded load was not kept");
}

#[tokio::test]
async fn updates_of_a_parent_invalidate_its_children() {
    let (cache, _) = cache();
    for uri in ["x://d/a", "x://d/b", "x://dx"] {
        read_value(&cache, "u", uri, "v1").await;
    }
    assert_eq!(cache.invalidate("u", "x://d"), 2);
    for (uri, expected) in [("x://d/a", Outcome::Miss), ("x://d/b", Outcome::Miss), ("x://dx", Outcome::Hit)] {
        assert_eq!(read_value(&cache, "u", uri, "v2").await.outcome, expected, "{uri}");
    }
}

#[tokio::test]
async fn a_reconnect_flushes_only_that_upstream() {
    let (cache, _) = cache();
    read_value(&cache, "u", "x://a", "v1").await;
    read_value(&cache, "w", "x://a", "v1").await;
    cache.flush_upstream("u", 1);
    let loaded = Loaded::unwatched(text("v2"));
    let fresh = cache.read(request("u", 1, "x://a", "p"), || async { Ok(loaded) }).await.unwrap();
    assert_eq!(fresh.outcome, Outcome::Miss);
    assert_eq!(read_value(&cache, "w", "x://a", "v2").await.outcome, Outcome::Hit);
}

/// "Everything of `u` changed" (a lost event, a reload): every entry of `u` goes, a load of
/// `u` in flight is not kept, other upstreams keep theirs.
#[tokio::test]
async fn everything_of_an_upstream_changed_drops_all_of_it_and_its_loads_in_flight() {
    let (cache, _) = cache();
    for uri in ["x://a", "y://b/c"] {
        read_value(&cache, "u", uri, "v1").await;
    }
    read_value(&cache, "w", "x://a", "v1").await;
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let (started, in_flight) = tokio::sync::oneshot::channel::<()>();
    let slow = {
        let cache = cache.clone();
        tokio::spawn(async move {
            cache
                .read(request("u", 0, "z://slow", "p"), || async move {
                    started.send(()).unwrap();
                    released.await.unwrap();
                    Ok(Loaded::unwatched(text("old")))
                })
                .await
        })
    };
    in_flight.await.unwrap();
    assert_eq!(cache.invalidate_upstream("u"), 2);
    release.send(()).unwrap();
    slow.await.unwrap().unwrap();
    for uri in ["x://a", "y://b/c", "z://slow"] {
        assert_eq!(read_value(&cache, "u", uri, "v2").await.outcome, Outcome::Miss, "{uri}");
    }
    assert_eq!(read_value(&cache, "w", "x://a", "v2").await.outcome, Outcome::Hit);
}

#[tokio::test]
async fn private_results_are_kept_per_principal() {
    let (cache, _) = cache();
    let private = || async { Ok(Loaded::unwatched(text("alice's").with_cache_scope(CacheScope::Private))) };
    let first = cache.read(request("u", 0, "x://a", "alice"), private).await.unwrap();
    assert_eq!(first.scope, CacheScope::Private);
    let again = cache.read(request("u", 0, "x://a", "alice"), || async { panic!("alice hits") }).await.unwrap();
    assert_eq!(again.outcome, Outcome::Hit);
    let bobs = || async { Ok(Loaded::unwatched(text("bob's"))) };
    let bob = cache.read(request("u", 0, "x://a", "bob"), bobs).await.unwrap();
    assert_eq!((body(&bob), bob.outcome), ("bob's".to_string(), Outcome::Miss));
}

#[tokio::test]
async fn the_byte_bound_holds() {
    let (cache, _) = cache();
    let big = "x".repeat(40 << 10);
    for i in 0..260 {
        read_value(&cache, "u", &format!("x://{i}"), &big).await;
    }
    cache.settle().await;
    let (_, bytes) = cache.size();
    assert!(bytes <= config().max_bytes, "{bytes} > {}", config().max_bytes);
}

/// A kept entry carries its contents as JSON (weighed with them); results not kept do not.
#[tokio::test]
async fn kept_entries_carry_their_contents_as_json() {
    let (cache, _) = cache();
    let miss = read_value(&cache, "u", "x://a", "say \"hi\"\n").await;
    let hit = read_value(&cache, "u", "x://a", "unused").await;
    let json = serde_json::to_string(&miss.result.contents).unwrap();
    assert_eq!((miss.outcome, miss.contents_json.as_deref()), (Outcome::Miss, Some(json.as_str())));
    assert_eq!((hit.outcome, hit.contents_json.as_deref()), (Outcome::Hit, Some(json.as_str())));
    cache.settle().await;
    assert_eq!(cache.size().1, content_bytes(&hit.result) + json.len() as u64);
    let too_big = read_value(&cache, "u", "x://big", &"x".repeat(65 << 10)).await;
    assert_eq!((too_big.outcome, too_big.contents_json), (Outcome::Bypass, None));
}

#[tokio::test]
async fn some_results_are_never_kept() {
    let (cache, _) = cache();
    let too_big = "x".repeat(65 << 10);
    assert_eq!(read_value(&cache, "u", "x://big", &too_big).await.outcome, Outcome::Bypass);
    let zero = || async { Ok(Loaded::unwatched(text("v").with_ttl_ms(0))) };
    for _ in 0..2 {
        assert_eq!(cache.read(request("u", 0, "x://zero", "p"), zero).await.unwrap().outcome, Outcome::Bypass);
    }
    let failed = cache.read(request("u", 0, "x://err", "p"), || async { Err(ProxyError::not_found("u+x://err")) });
    assert!(failed.await.is_err());
    assert_eq!(body(&read_value(&cache, "u", "x://err", "now").await), "now", "errors are not cached");
}

/// Steps of the seeded coherence test; `COHERENCE_STEPS` runs it longer.
const STEPS: u32 = 3000;

/// Seeded interleaving of upstream writes (with their notifications) and concurrent readers:
/// no read begun after a notification returns content older than it. `CACHE_SEED` replays a
/// seed; `COHERENCE_STEPS` sets the length (default [`STEPS`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_reads_never_return_content_older_than_a_received_update() {
    let seed: u64 = std::env::var("CACHE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    let steps: u32 = std::env::var("COHERENCE_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(STEPS);
    println!("seed {seed}, {steps} steps");
    let (cache, _) = cache();
    let version = Arc::new(AtomicU64::new(0));
    let notified = Arc::new(AtomicU64::new(0));
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
    let mut tasks = Vec::new();
    for step in 0..steps {
        if rand::RngExt::random_bool(&mut rng, 0.1) {
            // Upstream write, then its notification arrives.
            let v = version.fetch_add(1, Ordering::SeqCst) + 1;
            cache.invalidate("u", "x://a");
            notified.store(v, Ordering::SeqCst);
            continue;
        }
        let delay = rand::RngExt::random_range(&mut rng, 0..3u64);
        let (cache, version, notified) = (cache.clone(), version.clone(), notified.clone());
        tasks.push(tokio::spawn(async move {
            let floor = notified.load(Ordering::SeqCst);
            let loader = cache.clone();
            let read = cache
                .read(request("u", 0, "x://a", "p"), || async move {
                    let subscription = loader.load_subscription("u", "x://a", &TRUSTED);
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
        }));
    }
    for task in tasks {
        task.await.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

#[tokio::test]
async fn stale_if_error_serves_an_expired_entry_but_never_an_invalidated_one() {
    let (cache, _) = with(CacheConfig { stale_if_error: Duration::from_secs(60), ..config() });
    let short = || async { Ok(Loaded::unwatched(text("v1").with_ttl_ms(1))) };
    let down = || async { Err(ProxyError::UpstreamDown { upstream: "u".into(), cause: None }) };
    cache.read(request("u", 0, "x://a", "p"), short).await.unwrap();
    // Let the 1 ms lifetime pass: the expiry is the behaviour under test.
    tokio::time::sleep(Duration::from_millis(5)).await;
    for _ in 0..2 {
        let stale = cache.read(request("u", 0, "x://a", "p"), down).await.unwrap();
        assert_eq!((body(&stale), stale.outcome), ("v1".to_string(), Outcome::Stale), "while the upstream is down");
    }

    cache.read(request("u", 0, "x://b", "p"), short).await.unwrap();
    cache.invalidate("u", "x://b");
    tokio::time::sleep(Duration::from_millis(5)).await;
    let error = cache.read(request("u", 0, "x://b", "p"), down).await.unwrap_err();
    assert_eq!(error.kind(), "upstream_down", "an invalidated entry is never served stale");
    let not_found = || async { Err(ProxyError::not_found("u+x://a")) };
    let error = cache.read(request("u", 0, "x://a", "p"), not_found).await.unwrap_err();
    assert_eq!(error.kind(), "not_found", "only upstream trouble");
}

/// Per-URI state does not outlive the entries: 100,000 distinct URIs read (and 1,000
/// notified) leave nothing tracked once their entries and records have expired.
#[tokio::test]
async fn per_uri_state_ages_out_with_the_entries() {
    let config = CacheConfig {
        unwatched_ttl: Duration::from_millis(50),
        max_ttl: Duration::from_millis(50),
        max_bytes: 64 << 20,
        max_watched_per_upstream: 1_000_000,
        ..config()
    };
    let (cache, book) = with(config);
    for i in 0..100_000u32 {
        let uri = format!("x://many/{i}");
        let loader = cache.clone();
        let load = || async move { Ok(watched(&loader, &uri, text("v"))) };
        cache.read(request("u", 0, &format!("x://many/{i}"), "p"), load).await.unwrap();
        if i % 100 == 0 {
            cache.invalidate("u", &format!("x://many/{i}"));
        }
    }
    let busy = cache.tracked();
    assert!(busy.generations >= 1000 && busy.subscriptions >= 1000, "{busy:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        cache.settle().await;
        let tracked = cache.tracked();
        if tracked == (Tracked { generations: 0, hints: 0, subscriptions: 0, stale: 0 }) && cache.size().0 == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "still tracked after expiry: {tracked:?}, {:?}", cache.size());
        tokio::time::sleep(Duration::from_millis(100)).await; // poll interval; the loop ends at its deadline
    }
    assert_eq!(book.counts(), (0, 0), "every hold was let go");
}

/// The sweep runs once, in `settle`, which the proxy's housekeeping task calls on the spine:
/// making a cache starts no task of its own.
#[tokio::test]
async fn a_cache_starts_no_task_of_its_own() {
    let tasks = tokio::runtime::Handle::current().metrics();
    let before = tasks.num_alive_tasks();
    let (_cache, _book) = cache();
    assert_eq!(tasks.num_alive_tasks(), before, "no sweeper beside the housekeeping task's");
}

mod lifetimes;
mod subscriptions;
