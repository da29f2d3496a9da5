//! Admission: how long a loaded result may be kept, and what a host is told about it.
//!
//! The rule (docs/cache.md): a result is kept only as long as someone who knows
//! said it may be — never longer than `cache.max_ttl` nor the upstream's own
//! `[upstreams.cache] max_ttl`; until invalidated when the upstream is trusted to notify AND
//! acknowledged the subscription for this URI; otherwise for the upstream's own `ttlMs`, or,
//! when it gave none, for the `unwatched_ttl` the operator opted into (zero by default: not
//! kept).
//!
//! What a 2026-07-28 host is told is narrower still: the host's own cache hears none of the
//! proxy's invalidations (unless it subscribed), so it is told no more than what is left of the
//! upstream's own `ttlMs` (none: 0) within the entry's lifetime, and the upstream's own
//! `cacheScope` (none: `private`).
//! Invariant: no host is told a lifetime or scope its upstream did not give.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CacheScope, ReadResourceResult, ResourceContents};

use super::cache_subscriptions::LoadSubscription;
use crate::cache::{Entry, Outcome};
use crate::config::{CacheConfig, UpstreamCache};

/// A read's result and what the host may be told about caching it.
#[derive(Debug, Clone)]
pub struct Cached {
    pub result: ReadResourceResult,
    /// The `ttlMs` a host may be told: what is left of the upstream's own `ttlMs` (none: 0),
    /// never past the entry's lifetime.
    pub ttl: Duration,
    /// What is left of the kept entry's lifetime (its `fresh_until`); zero when the result was
    /// not kept or is served past it.
    pub kept_for: Duration,
    /// The `cacheScope` the upstream gave (none: `private`), before the caller's policy.
    pub scope: CacheScope,
    pub outcome: Outcome,
    /// `result.contents` as JSON, when the result came from a kept entry (see [`Entry`]).
    pub contents_json: Option<Arc<str>>,
}

/// What a load from upstream produced.
pub struct Loaded {
    pub result: ReadResourceResult,
    /// Present when the upstream acknowledged a subscription to this URI for the cache before
    /// it was read (so an `updated` will come).
    pub subscription: Option<LoadSubscription>,
}

impl Loaded {
    /// A result read without a subscription in place.
    pub fn unwatched(result: ReadResourceResult) -> Self {
        Self { result, subscription: None }
    }
}

/// An entry's lifetime; see the module doc.
pub fn lifetime(config: &CacheConfig, upstream: &UpstreamCache, ttl_ms: Option<u64>, watched: bool) -> Duration {
    let bound = upstream.max_ttl.map_or(config.max_ttl, |own| own.min(config.max_ttl));
    if watched && upstream.trust_notifications {
        return bound;
    }
    bound.min(ttl_ms.map_or_else(|| unwatched_ttl(config, upstream), Duration::from_millis))
}

/// The lifetime the operator opted into for `upstream`'s results that carry no `ttlMs`.
pub fn unwatched_ttl(config: &CacheConfig, upstream: &UpstreamCache) -> Duration {
    upstream.unwatched_ttl.unwrap_or(config.unwatched_ttl)
}

/// The `ttlMs` a host may be told of a result kept (or passed on) for `lifetime`: no more
/// than the upstream's own `ttlMs`, which the proxy's notifications cannot shorten for it.
pub fn told_ttl(ttl_ms: Option<u64>, lifetime: Duration) -> Duration {
    lifetime.min(Duration::from_millis(ttl_ms.unwrap_or(0)))
}

/// The `cacheScope` a host may be told of `result`: the upstream's own, `private` when it gave
/// none (a 2025 upstream).
pub fn told_scope(result: &ReadResourceResult) -> CacheScope {
    result.cache_scope.unwrap_or(CacheScope::Private)
}

/// A new entry for `result`, kept `ttl` (plus `stale_if_error` for upstream trouble).
pub(super) fn entry(config: &CacheConfig, result: ReadResourceResult, ttl: Duration) -> Entry {
    let now = Instant::now();
    let bytes = content_bytes(&result);
    Entry {
        scope: scope_of(&result),
        told_until: now + told_ttl(result.ttl_ms, ttl),
        result,
        fresh_until: now + ttl,
        keep_until: now + ttl + config.stale_if_error,
        bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
        contents_json: None,
    }
}

pub(super) fn hit(entry: &Entry, now: Instant) -> Cached {
    Cached {
        result: entry.result.clone(),
        ttl: entry.told_until.saturating_duration_since(now),
        kept_for: entry.fresh_until.saturating_duration_since(now),
        scope: told_scope(&entry.result),
        outcome: Outcome::Hit,
        contents_json: entry.contents_json.clone(),
    }
}

/// Whom the proxy's own entry may serve: everyone unless the upstream said `private`. An
/// upstream that said nothing answered the proxy's one connection, not a principal (policy is
/// decided before the cache), so its result is shared inside the proxy — though a host is
/// told `private` ([`told_scope`]).
pub(super) fn scope_of(result: &ReadResourceResult) -> CacheScope {
    result.cache_scope.unwrap_or(CacheScope::Public)
}

/// The weight of a result: the size of its contents.
pub fn content_bytes(result: &ReadResourceResult) -> u64 {
    result
        .contents
        .iter()
        .map(|content| match content {
            ResourceContents::TextResourceContents { uri, text, .. } => uri.len() + text.len(),
            ResourceContents::BlobResourceContents { uri, blob, .. } => uri.len() + blob.len(),
            _ => 0,
        } as u64)
        .sum::<u64>()
        .max(1)
}
