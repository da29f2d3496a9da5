//! The read cache: moka, bounded in bytes, one upstream load per key at a time, coherent with
//! upstream `updated` notifications.
//!
//! Keys carry the upstream's connection number (a reconnect starts afresh) and a per-URI generation
//! (bumped by every `updated` for the URI or a parent of it). A read looks up the current
//! epoch and generation, so a read that starts after a notification can never be answered
//! with anything loaded before it — neither a cached value nor an in-flight load, which has
//! the old generation in its key. A load that finds its generation moved on when it
//! completes is not kept.
//!
//! Lifetimes: see [`lifetime`]. Private (`cacheScope: private`) results are keyed by principal
//! and loads that may be private are never shared across principals.
//!
//! No MCP here: loads and watch waits are futures the proxy hands in.
//! Invariant: a read begun after an `updated` was received never returns older content.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use moka::future::Cache;
use moka::notification::RemovalCause;
use rmcp::model::{CacheScope, ReadResourceResult, ResourceContents};

use crate::config::CacheConfig;
use crate::error::ProxyError;
use crate::subscriptions::is_same_or_parent;

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
}

/// What a load from upstream produced.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub result: ReadResourceResult,
    /// Whether the upstream is subscribed to this URI for us (so `updated` will arrive).
    pub watched: bool,
    /// The upstream's `trust_notifications` setting.
    pub trusted: bool,
}

/// Removal causes, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    Size,
    Expired,
    Invalidated,
}

/// The proxy's side of the cache: holding upstream subscriptions for cached URIs, and metrics.
pub trait CacheHooks: Send + Sync + 'static {
    /// Keep `uri` of `upstream` subscribed upstream for the cache (first entry of it).
    fn hold(&self, upstream: &str, uri: &str);
    /// The cache holds no entry of `uri` any more.
    fn release(&self, upstream: &str, uri: &str);
    /// A loaded result was kept.
    fn inserted(&self, upstream: &str);
    fn removed(&self, cause: Removal);
    /// A load finished after an `updated` for its URI: its result was not kept.
    fn superseded(&self);
}

/// (upstream, URI).
type UriKey = (Arc<str>, Arc<str>);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    upstream: Arc<str>,
    epoch: u64,
    uri: Arc<str>,
    generation: u64,
    /// `None` for public results, the principal for private ones.
    principal: Option<Arc<str>>,
}

#[derive(Debug)]
struct Entry {
    result: ReadResourceResult,
    fresh_until: Instant,
    /// Past `fresh_until`, until here it may still be served when the upstream fails.
    keep_until: Instant,
    scope: CacheScope,
    watched: bool,
    bytes: u32,
}

/// A cheap `Clone` handle.
#[derive(Clone)]
pub struct ReadCache {
    inner: Arc<Inner>,
}

struct Inner {
    config: CacheConfig,
    entries: Cache<Key, Arc<Entry>>,
    generations: Mutex<BTreeMap<UriKey, u64>>,
    /// (upstream, uri) → whether its last result was public: loads of URIs not known to be
    /// public are not shared across principals.
    public: Mutex<HashMap<UriKey, bool>>,
    /// Live watched entries per (upstream, uri): the cache holds a subscription while > 0.
    watched: Mutex<HashMap<UriKey, usize>>,
    /// URIs whose last result could not be kept for its lifetime (e.g. `ttlMs: 0`): their
    /// next loads do not subscribe upstream first.
    unkept: Mutex<std::collections::HashSet<UriKey>>,
    /// Expired entries kept for `stale_if_error` while a reload is tried.
    stale: Mutex<HashMap<Key, Arc<Entry>>>,
    next_generation: AtomicU64,
    hooks: Arc<dyn CacheHooks>,
}

enum LoadError {
    /// Loaded fine, but not to be kept (too big, ttl 0, superseded by an update).
    Uncacheable(Box<Cached>),
    /// Loaded under a principal's key, found public, and kept under the shared key instead.
    StoredShared(Arc<Entry>),
    Failed(ProxyError),
}

impl ReadCache {
    pub fn new(config: CacheConfig, hooks: Arc<dyn CacheHooks>) -> Self {
        let inner = Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| {
            let weak = weak.clone();
            let entries = Cache::builder()
                .max_capacity(config.max_bytes)
                .weigher(|_, entry: &Arc<Entry>| entry.bytes)
                .expire_after(KeepUntil)
                .support_invalidation_closures()
                .eviction_listener(move |key: Arc<Key>, entry: Arc<Entry>, cause| {
                    if let Some(inner) = weak.upgrade() {
                        inner.on_removed(&key, &entry, cause);
                    }
                })
                .build();
            Inner {
                config: config.clone(),
                entries,
                generations: Mutex::default(),
                public: Mutex::default(),
                watched: Mutex::default(),
                stale: Mutex::default(),
                unkept: Mutex::default(),
                next_generation: AtomicU64::new(1),
                hooks,
            }
        });
        Self { inner }
    }

    pub fn config(&self) -> &CacheConfig {
        &self.inner.config
    }

    /// Read `uri` of `upstream` for `principal`: from the cache, or through `load` — which
    /// concurrent readers of the same key share.
    /// `epoch` is the upstream's connection number: entries of an earlier connection are not
    /// used (updates may have been missed while it was away).
    pub async fn read<F, Fut>(
        &self,
        upstream: &str,
        epoch: u64,
        uri: &str,
        principal: &str,
        load: F,
    ) -> Result<Cached, ProxyError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Loaded, ProxyError>>,
    {
        if !self.inner.config.enabled {
            let loaded = load().await?;
            return Ok(Cached {
                ttl: Duration::ZERO,
                scope: scope_of(&loaded.result),
                result: loaded.result,
                outcome: Outcome::Bypass,
            });
        }
        let (shared, private) = self.keys(upstream, epoch, uri, principal);
        let now = Instant::now();
        for key in [&shared, &private] {
            if let Some(entry) = self.inner.entries.get(key).await {
                if entry.fresh_until > now {
                    return Ok(hit(&entry, now));
                }
                // Past its lifetime but kept for stale-if-error: set it aside, make way for a
                // fresh load.
                self.inner.stale.lock().expect("stale lock").insert(key.clone(), entry);
                self.inner.entries.invalidate(key).await;
            }
        }
        let fallback = self.inner.take_stale(&shared, &private);
        let known_public = self.known_public(upstream, uri);
        let flight = if known_public { shared.clone() } else { private };
        let generation = flight.generation;
        let inner = self.inner.clone();
        let attempt = self.inner.entries.try_get_with(flight.clone(), async move {
            let loaded = load().await.map_err(LoadError::Failed)?;
            let entry = inner.admit(&flight, generation, loaded)?;
            let public = entry.scope == CacheScope::Public;
            if flight.principal.is_some() && public {
                // Public after all: keep it once, under the shared key, before saying so —
                // later readers then find it there instead of loading again.
                inner.entries.insert(shared, entry.clone()).await;
                inner.mark_public(&flight, true);
                return Err(LoadError::StoredShared(entry));
            }
            inner.mark_public(&flight, public);
            Ok(entry)
        });
        match attempt.await {
            Ok(entry) => Ok(Cached { outcome: Outcome::Miss, ..hit(&entry, Instant::now()) }),
            Err(error) => match &*error {
                LoadError::StoredShared(entry) => Ok(Cached { outcome: Outcome::Miss, ..hit(entry, Instant::now()) }),
                LoadError::Uncacheable(cached) => Ok((**cached).clone()),
                LoadError::Failed(failure) => self.stale_or(fallback, failure),
            },
        }
    }

    /// `upstream` said `uri` changed: drop it and everything under it, and make sure no load
    /// in flight for them is kept.
    /// Returns how many entries that drops.
    pub fn invalidate(&self, upstream: &str, uri: &str) -> usize {
        let next = self.inner.next_generation.fetch_add(1, Ordering::Relaxed);
        let upstream_key: Arc<str> = upstream.into();
        let mut bumped = 0;
        {
            let mut generations = self.inner.generations.lock().expect("generations lock");
            let from = (upstream_key.clone(), Arc::<str>::from(uri));
            for ((u, candidate), generation) in generations.range_mut(from..) {
                if *u != upstream_key || !candidate.starts_with(uri) {
                    break;
                }
                if is_same_or_parent(uri, candidate) {
                    *generation = next;
                    bumped += 1;
                }
            }
            generations.entry((upstream_key.clone(), uri.into())).or_insert(next);
        }
        self.inner
            .stale
            .lock()
            .expect("stale lock")
            .retain(|key, _| !(*key.upstream == *upstream && is_same_or_parent(uri, &key.uri)));
        let owned = uri.to_string();
        let _ = self
            .inner
            .entries
            .invalidate_entries_if(move |key, _| key.upstream == upstream_key && is_same_or_parent(&owned, &key.uri));
        bumped
    }

    /// `upstream` reconnected as connection `epoch`: entries of earlier connections are no
    /// longer read (their keys carry the old number); this frees their memory.
    /// Returns how many entries that drops.
    pub fn flush_upstream(&self, upstream: &str, epoch: u64) -> u64 {
        let upstream: Arc<str> = upstream.into();
        let dropped =
            self.inner.entries.iter().filter(|(key, _)| key.upstream == upstream && key.epoch < epoch).count();
        let _ = self.inner.entries.invalidate_entries_if(move |key, _| key.upstream == upstream && key.epoch < epoch);
        dropped as u64
    }

    /// A load held a subscription for `uri` but will not cache it watched: let the hold go
    /// unless a cached entry still needs it.
    pub fn release_if_unused(&self, upstream: &str, uri: &str) {
        self.inner.unwatch_if_unused(&upstream.into(), &uri.into());
    }

    /// (entries, weighted bytes).
    pub fn size(&self) -> (u64, u64) {
        (self.inner.entries.entry_count(), self.inner.entries.weighted_size())
    }

    /// Let moka finish its bookkeeping (evictions, counts); for tests and status.
    pub async fn settle(&self) {
        self.inner.entries.run_pending_tasks().await;
    }

    /// May a new entry of `uri` be watched (subscribed upstream)? Yes when it already is, or
    /// while `upstream` has fewer than `max_watched_per_upstream` watched URIs.
    pub fn may_watch(&self, upstream: &str, uri: &str) -> bool {
        let key = (Arc::<str>::from(upstream), Arc::<str>::from(uri));
        if self.inner.unkept.lock().expect("unkept lock").contains(&key) {
            return false;
        }
        let watched = self.inner.watched.lock().expect("watched lock");
        watched.contains_key(&key)
            || watched.keys().filter(|(u, _)| &**u == upstream).count() < self.inner.config.max_watched_per_upstream
    }

    fn keys(&self, upstream: &str, epoch: u64, uri: &str, principal: &str) -> (Key, Key) {
        let upstream: Arc<str> = upstream.into();
        let uri: Arc<str> = uri.into();
        let generation = *self
            .inner
            .generations
            .lock()
            .expect("generations lock")
            .entry((upstream.clone(), uri.clone()))
            .or_insert(0);
        let shared = Key { upstream, epoch, uri, generation, principal: None };
        let private = Key { principal: Some(principal.into()), ..shared.clone() };
        (shared, private)
    }

    fn known_public(&self, upstream: &str, uri: &str) -> bool {
        let key = (Arc::<str>::from(upstream), Arc::<str>::from(uri));
        self.inner.public.lock().expect("public lock").get(&key).copied().unwrap_or(false)
    }

    fn stale_or(&self, fallback: Option<(Key, Arc<Entry>)>, failure: &ProxyError) -> Result<Cached, ProxyError> {
        let upstream_trouble = matches!(
            failure,
            ProxyError::UpstreamDown { .. } | ProxyError::UpstreamTimeout { .. } | ProxyError::UpstreamFailed { .. }
        );
        match fallback {
            Some((key, entry)) if upstream_trouble && entry.keep_until > Instant::now() => {
                let cached = Cached { outcome: Outcome::Stale, ttl: Duration::ZERO, ..hit(&entry, Instant::now()) };
                // Still the best there is while the upstream is in trouble.
                self.inner.stale.lock().expect("stale lock").insert(key, entry);
                Ok(cached)
            }
            _ => Err(failure.clone()),
        }
    }
}

impl Inner {
    /// The expired entry set aside for `shared` or `private`, if any (taken out: a successful
    /// load replaces it; a failed one puts it back).
    fn take_stale(&self, shared: &Key, private: &Key) -> Option<(Key, Arc<Entry>)> {
        let mut stale = self.stale.lock().expect("stale lock");
        stale.retain(|_, entry| entry.keep_until > Instant::now());
        [shared, private].into_iter().find_map(|key| stale.remove(key).map(|entry| (key.clone(), entry)))
    }

    /// Decide whether a loaded result is kept, and under which key.
    fn admit(&self, flight: &Key, generation: u64, loaded: Loaded) -> Result<Arc<Entry>, LoadError> {
        let scope = scope_of(&loaded.result);
        let ttl = lifetime(&self.config, &loaded);
        let bytes = content_bytes(&loaded.result);
        let pair = (flight.upstream.clone(), flight.uri.clone());
        match ttl.is_zero() {
            true => self.unkept.lock().expect("unkept lock").insert(pair),
            false => self.unkept.lock().expect("unkept lock").remove(&pair),
        };
        let superseded = self.current_generation(flight) != generation;
        let shareable = scope == CacheScope::Public || flight.principal.is_some();
        if ttl.is_zero() || bytes > self.config.max_entry_bytes || superseded || !shareable {
            if loaded.watched {
                self.unwatch_if_unused(&flight.upstream, &flight.uri);
            }
            if superseded {
                self.hooks.superseded();
            }
            self.mark_public(flight, scope == CacheScope::Public);
            let outcome = if superseded { Outcome::Miss } else { Outcome::Bypass };
            let ttl = if superseded { Duration::ZERO } else { ttl };
            return Err(LoadError::Uncacheable(Box::new(Cached { result: loaded.result, ttl, scope, outcome })));
        }
        let now = Instant::now();
        if loaded.watched {
            self.watch(&flight.upstream, &flight.uri);
        }
        self.hooks.inserted(&flight.upstream);
        Ok(Arc::new(Entry {
            result: loaded.result,
            fresh_until: now + ttl,
            keep_until: now + ttl + self.config.stale_if_error,
            scope,
            watched: loaded.watched,
            bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
        }))
    }

    /// Remember whether results of this URI are public (so later loads may be shared).
    fn mark_public(&self, key: &Key, public: bool) {
        self.public.lock().expect("public lock").insert((key.upstream.clone(), key.uri.clone()), public);
    }

    fn current_generation(&self, key: &Key) -> u64 {
        let generations = self.generations.lock().expect("generations lock");
        *generations.get(&(key.upstream.clone(), key.uri.clone())).unwrap_or(&0)
    }

    fn watch(&self, upstream: &Arc<str>, uri: &Arc<str>) {
        let mut watched = self.watched.lock().expect("watched lock");
        let count = watched.entry((upstream.clone(), uri.clone())).or_insert(0);
        *count += 1;
        if *count == 1 {
            self.hooks.hold(upstream, uri);
        }
    }

    /// The load held a subscription for an entry that was not kept: let it go unless another
    /// entry of the URI still needs it.
    fn unwatch_if_unused(&self, upstream: &Arc<str>, uri: &Arc<str>) {
        let watched = self.watched.lock().expect("watched lock");
        if !watched.contains_key(&(upstream.clone(), uri.clone())) {
            self.hooks.release(upstream, uri);
        }
    }

    fn on_removed(&self, key: &Key, entry: &Entry, cause: RemovalCause) {
        self.hooks.removed(match cause {
            RemovalCause::Size => Removal::Size,
            RemovalCause::Expired => Removal::Expired,
            RemovalCause::Explicit | RemovalCause::Replaced => Removal::Invalidated,
        });
        if !entry.watched {
            return;
        }
        let mut watched = self.watched.lock().expect("watched lock");
        let pair = (key.upstream.clone(), key.uri.clone());
        if let Some(count) = watched.get_mut(&pair) {
            *count -= 1;
            if *count == 0 {
                watched.remove(&pair);
                self.hooks.release(&key.upstream, &key.uri);
            }
        }
    }
}

/// An entry's lifetime:
/// - never longer than `cache.max_ttl`, nor than the upstream's `ttlMs` when it sent one —
///   unless the entry is watched and the upstream is trusted (`trust_notifications`), when
///   `updated` alone ends it (up to `max_ttl`);
/// - an unwatched entry (upstream cannot notify, or past the watch cap) lives at most
///   `cache.unwatched_ttl` (0 = not cached);
/// - `input_required` results never reach the cache.
pub fn lifetime(config: &CacheConfig, loaded: &Loaded) -> Duration {
    let upstream_ttl = loaded.result.ttl_ms.map(Duration::from_millis);
    let mut ttl = config.max_ttl;
    if let Some(upstream_ttl) = upstream_ttl
        && !(loaded.watched && loaded.trusted)
    {
        ttl = ttl.min(upstream_ttl);
    }
    if !loaded.watched {
        ttl = ttl.min(config.unwatched_ttl);
    }
    ttl
}

fn hit(entry: &Entry, now: Instant) -> Cached {
    Cached {
        result: entry.result.clone(),
        ttl: entry.fresh_until.saturating_duration_since(now),
        scope: entry.scope,
        outcome: Outcome::Hit,
    }
}

fn scope_of(result: &ReadResourceResult) -> CacheScope {
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

/// moka expiry: each entry lives until its `keep_until`.
struct KeepUntil;

impl moka::Expiry<Key, Arc<Entry>> for KeepUntil {
    fn expire_after_create(&self, _: &Key, entry: &Arc<Entry>, created_at: Instant) -> Option<Duration> {
        Some(entry.keep_until.saturating_duration_since(created_at))
    }
}

#[cfg(test)]
mod tests;
