//! Admission: how long a loaded result may be kept, and what a host is told about it.
//!
//! The rule (README, "The read cache"): never longer than `cache.max_ttl` nor the upstream's
//! own `[upstreams.cache] max_ttl`; past the upstream's own `ttlMs` (or `cache.unwatched_ttl`
//! when it gives none) only when the upstream is trusted to notify AND acknowledged the
//! subscription for this URI; an unwatched entry at most `cache.unwatched_ttl`.
//! `ttlMs`/`cacheScope` told to 2026-07-28 hosts are what is left of exactly this lifetime.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{CacheScope, ReadResourceResult, ResourceContents};

use super::holds::WatchTicket;
use crate::cache::Entry;
use crate::config::{CacheConfig, UpstreamCache};

/// How a read was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Hit,
    Miss,
    /// Served past its lifetime because the upstream failed (`stale_if_error`).
    Stale,
    /// Not cacheable (too large, ttl 0, input required, or the cache is off).
    Bypass,
}

/// A read's result and what the host may be told about caching it.
#[derive(Debug, Clone)]
pub struct Cached {
    pub result: ReadResourceResult,
    /// Remaining freshness.
    pub ttl: Duration,
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
    pub watch: Option<WatchTicket>,
}

impl Loaded {
    /// A result read without a subscription in place.
    pub fn unwatched(result: ReadResourceResult) -> Self {
        Self { result, watch: None }
    }
}

/// An entry's lifetime; see the module doc.
pub fn lifetime(config: &CacheConfig, upstream: &UpstreamCache, ttl_ms: Option<u64>, watched: bool) -> Duration {
    let mut ttl = upstream.max_ttl.map_or(config.max_ttl, |own| own.min(config.max_ttl));
    if !(watched && upstream.trust_notifications) {
        ttl = ttl.min(ttl_ms.map_or(config.unwatched_ttl, Duration::from_millis));
    }
    if !watched {
        ttl = ttl.min(config.unwatched_ttl);
    }
    ttl
}

/// A new entry for `result`, kept `ttl` (plus `stale_if_error` for upstream trouble).
pub(super) fn entry(config: &CacheConfig, result: ReadResourceResult, ttl: Duration) -> Entry {
    let now = Instant::now();
    let bytes = content_bytes(&result);
    Entry {
        scope: scope_of(&result),
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
        ttl: entry.fresh_until.saturating_duration_since(now),
        scope: entry.scope,
        outcome: Outcome::Hit,
        contents_json: entry.contents_json.clone(),
    }
}

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
