//! The cache's own subscriptions: taken only when they can keep something, let go when a load
//! fails or is refused, never for an upstream with its cache off.

use super::*;

#[tokio::test]
async fn a_uri_whose_results_cannot_be_kept_is_not_watched_again() {
    let (cache, book) = cache();
    let loaded = watched(&cache, "x://z", text("v").with_ttl_ms(0));
    assert!(loaded.subscription.is_some(), "watchable at first");
    let untrusted = ReadRequest { settings: &UNTRUSTED, ..request("u", 0, "x://z", "p") };
    cache.read(untrusted, || async { Ok(loaded) }).await.unwrap();
    assert!(
        cache.load_subscription("u", "x://z", &TRUSTED).is_none(),
        "no subscribe/unsubscribe churn for uncacheable URIs"
    );
    assert!(book.subscribed_by(CACHE_SUBSCRIBER).is_empty(), "the subscription taken for the load was let go");
    cache.invalidate("u", "x://z");
    let kept = || async { Ok(Loaded::unwatched(text("v").with_ttl_ms(60_000))) };
    cache.read(request("u", 0, "x://z", "p"), kept).await.unwrap();
    assert!(cache.load_subscription("u", "x://z", &TRUSTED).is_some(), "watched again once its results can be kept");
}

#[tokio::test]
async fn a_failed_or_refused_load_lets_its_subscription_go_and_a_refusal_is_remembered() {
    let (cache, book) = cache();
    let subscription = cache.load_subscription("u", "x://f", &TRUSTED);
    assert_eq!(book.counts(), (1, 1), "a load holds its URI while it waits");
    let failed = cache.read(request("u", 0, "x://f", "p"), || async move {
        let _subscription = subscription;
        Err(ProxyError::not_found("u+x://f"))
    });
    assert!(failed.await.is_err());
    assert_eq!(book.counts(), (0, 0), "nothing held for a failed load");

    drop(cache.load_subscription("u", "x://r", &TRUSTED));
    cache.refused("u", "x://r");
    assert!(cache.load_subscription("u", "x://r", &TRUSTED).is_none(), "a refused URI is not asked for again at once");
}

#[tokio::test]
async fn an_upstream_with_its_cache_off_is_read_through_and_never_watched() {
    let (cache, book) = cache();
    let off = UpstreamCache { enabled: false, ..TRUSTED };
    assert!(cache.load_subscription("u", "x://a", &off).is_none(), "no subscription for an uncached upstream");
    for value in ["v1", "v2"] {
        let loaded = Loaded::unwatched(text(value));
        let request = ReadRequest { settings: &off, ..request("u", 0, "x://a", "p") };
        let read = cache.read(request, || async { Ok(loaded) }).await.unwrap();
        assert_eq!((body(&read), read.outcome, read.ttl), (value.to_string(), Outcome::Bypass, Duration::ZERO));
    }
    assert_eq!(book.counts(), (0, 0));
}

/// An untrusted upstream's acknowledgement keeps nothing longer: without an opt-in it is not
/// subscribed to for the cache at all; with one (or trusted) it is.
#[test]
fn only_a_subscription_that_can_keep_something_is_taken() {
    let (silent, _) = with(CacheConfig { unwatched_ttl: Duration::ZERO, ..config() });
    assert!(silent.load_subscription("u", "x://a", &UNTRUSTED).is_none(), "untrusted, no opt-in");
    assert!(silent.load_subscription("u", "x://b", &TRUSTED).is_some(), "trusted");
    let opted = UpstreamCache { unwatched_ttl: Some(Duration::from_secs(1)), ..UNTRUSTED };
    assert!(silent.load_subscription("u", "x://c", &opted).is_some(), "opted in: an `updated` ends the entry early");
}
