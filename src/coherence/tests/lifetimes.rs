//! What the cache keeps for how long, and what a host is told of it.

use super::*;

#[test]
fn lifetimes() {
    // The shipped default: nothing is kept on the proxy's own say.
    let c = CacheConfig { unwatched_ttl: Duration::ZERO, ..config() };
    let own = UpstreamCache { max_ttl: Some(Duration::from_secs(60)), ..TRUSTED };
    let opted = UpstreamCache { unwatched_ttl: Some(Duration::from_secs(30)), ..UNTRUSTED };
    let second = Duration::from_secs(1);
    let cases = [
        (&c, TRUSTED, None, true, c.max_ttl, "trusted and acknowledged: until invalidated (max_ttl)"),
        (&c, TRUSTED, Some(0), true, c.max_ttl, "trusted notifications outrank ttlMs 0"),
        (&c, own.clone(), None, true, Duration::from_secs(60), "the upstream's own max_ttl"),
        (&c, UNTRUSTED, None, true, Duration::ZERO, "untrusted, no ttlMs: not kept even when subscribed"),
        (&c, UNTRUSTED, None, false, Duration::ZERO, "no word from anyone: not kept"),
        (&c, TRUSTED, None, false, Duration::ZERO, "trusted but not acknowledged, no ttlMs: not kept"),
        (&c, UNTRUSTED, Some(2000), true, Duration::from_secs(2), "untrusted: the upstream's ttlMs"),
        (&c, UNTRUSTED, Some(600_000), false, Duration::from_secs(600), "unwatched: the upstream's ttlMs as said"),
        (&c, TRUSTED, Some(1000), false, second, "trusted, unwatched: the upstream's ttlMs"),
        (&c, opted.clone(), None, false, Duration::from_secs(30), "the operator's opt-in for this upstream"),
        (&c, opted.clone(), Some(1000), false, second, "the upstream's own ttlMs outranks the opt-in"),
        (&config(), UNTRUSTED, None, false, config().unwatched_ttl, "the opt-in for every upstream"),
        (&config(), opted, None, false, Duration::from_secs(30), "an upstream's own opt-in outranks the global one"),
    ];
    for (config, settings, ttl_ms, acknowledged, expected, what) in cases {
        assert_eq!(lifetime(config, &settings, ttl_ms, acknowledged), expected, "{what}");
    }
}

/// A host is told only what the upstream gave: what is left of its `ttlMs` (none: 0) and its
/// `cacheScope` (none: `private`) — also when the proxy keeps the entry much longer.
#[tokio::test]
async fn hosts_are_told_only_the_upstreams_own_lifetime_and_scope() {
    let (cache, _) = with(CacheConfig { unwatched_ttl: Duration::ZERO, ..config() });
    let cases = [
        ("x://said", Some(60_000), Some(CacheScope::Public), 60_000, CacheScope::Public),
        ("x://said-private", Some(60_000), Some(CacheScope::Private), 60_000, CacheScope::Private),
        ("x://silent", None, None, 0, CacheScope::Private),
        ("x://zero", Some(0), Some(CacheScope::Public), 0, CacheScope::Public),
    ];
    for (uri, ttl_ms, scope, told_ms, told_scope) in cases {
        let mut result = text("v");
        (result.ttl_ms, result.cache_scope) = (ttl_ms, scope);
        let loaded = watched(&cache, uri, result);
        let miss = cache.read(request("u", 0, uri, "p"), || async { Ok(loaded) }).await.unwrap();
        let hit = cache.read(request("u", 0, uri, "p"), || async { panic!("{uri}: kept (trusted)") }).await.unwrap();
        for (what, cached) in [("miss", &miss), ("hit", &hit)] {
            let told = cached.ttl.as_millis() as u64;
            assert!(
                told <= told_ms && told + 5_000 >= told_ms,
                "{uri} {what}: told {told} ms, upstream said {ttl_ms:?}"
            );
            assert_eq!(cached.scope, told_scope, "{uri} {what}");
        }
    }
    let silent = || async { Ok(Loaded::unwatched(text("v"))) };
    let passed = cache.read(ReadRequest { settings: &UNTRUSTED, ..request("u", 0, "x://p", "p") }, silent);
    let passed = passed.await.unwrap();
    assert_eq!((passed.outcome, passed.ttl, passed.scope), (Outcome::Bypass, Duration::ZERO, CacheScope::Private));
}
