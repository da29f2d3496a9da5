//! Coherence: the one owner of what the read cache may keep and for how long. It owns the
//! generations (a read begun after an `updated` never joins or finds anything older), the
//! cache's watch holds (an entry is "watched" only when the upstream acknowledged its
//! subscription), admission (lifetimes, see `admission`) and the watch book every holder's
//! subscriptions go through (`WatchBook`). The cache itself is a store behind
//! [`crate::cache::Store`]; moka ([`LocalStore`]) is the local one.
//!
//! The read path (`proxy/read.rs`) goes top to bottom: take a [`WatchTicket`] if the URI may be
//! watched, wait for the upstream's acknowledgement, read upstream, hand the result here.
//!
//! Per-URI state is bounded: generations keep a record per notified URI only until nothing
//! older can matter (`horizon`), hints and holds expire with the entries they describe, and a
//! sweep forgets what has expired. The sweep runs in [`Coherence::settle`], which the proxy's
//! `cache-housekeeping` task (on the spine) calls every [`SWEEP_EVERY`]; nothing here spawns.
//! Invariant: a read begun after an `updated` was received never returns older content.

mod admission;
mod clustered;
mod generations;
mod hints;
mod holds;
pub mod shared;
mod watches;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::CacheScope;

pub use self::admission::{Cached, Loaded, content_bytes, lifetime, told_scope, told_ttl, unwatched_ttl};
pub use self::holds::WatchTicket;
// How a read was answered: plain data of the store's floor (`cache`), which hosts label.
pub(crate) use self::watches::WatchBook;
pub use crate::cache::Outcome;
use crate::cache::{Entry, Key, LocalStore, Store};
use crate::config::{CacheConfig, UpstreamCache};
use crate::error::ProxyError;
use crate::metrics::{InvalidationCause, Metrics};
use crate::subscriptions::{HolderId, is_same_or_parent};
use crate::wire::contents_json::contents_json;

/// How often expired per-URI state is forgotten: the housekeeping tick that calls
/// [`Coherence::settle`].
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How long "results of this URI could not be kept" is remembered, at most.
const UNKEPT_FOR: Duration = Duration::from_secs(60);
/// How long a URI's last scope steers its loads (shared or per principal) at least, kept or not.
const SCOPE_KNOWN_FOR: Duration = Duration::from_secs(5);

/// One read, as the coherence layer sees it.
#[derive(Debug, Clone, Copy)]
pub struct ReadRequest<'a> {
    pub upstream: &'a str,
    /// The upstream's connection number: entries of an earlier connection are not used.
    pub epoch: u64,
    /// The normalised, un-namespaced URI.
    pub uri: &'a str,
    pub principal: &'a str,
    pub settings: &'a UpstreamCache,
}

/// A cheap `Clone` handle.
#[derive(Clone)]
pub struct Coherence {
    inner: Arc<Inner>,
}

struct Inner {
    config: CacheConfig,
    store: LocalStore,
    generations: generations::Generations,
    holds: Arc<holds::Holds>,
    /// Whether a URI's last result was public: loads of URIs not known to be public are not
    /// shared across principals.
    public: hints::Hints<bool>,
    /// URIs whose last result could not be kept: their loads do not subscribe first.
    unkept: hints::Hints<()>,
    /// URIs whose subscription the upstream refused: their loads do not ask again for a while.
    refused: hints::Hints<()>,
    /// Expired entries kept for `stale_if_error` while a reload is tried.
    stale: Mutex<HashMap<Key, Arc<Entry>>>,
    metrics: Metrics,
    /// Longest a load may take; with the longest lifetime, how long a generation record matters.
    max_load: Duration,
    /// The cluster's shared tier (Redis), when there is a `[cluster]`: reads then go through
    /// it (see `clustered`) and the local store is its front.
    shared: Option<Arc<shared::SharedTier>>,
}

/// Sizes of the per-URI state, for `/status` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Tracked {
    pub generations: usize,
    pub hints: usize,
    pub holds: usize,
    pub stale: usize,
}

enum LoadError {
    /// Loaded fine, but not to be kept (too big, ttl 0, superseded by an update).
    Uncacheable(Box<Cached>),
    /// Loaded under a principal's key, found public, and kept under the shared key instead.
    StoredShared(Arc<Entry>),
    /// Not loaded: a load that finished meanwhile had kept a fresh entry under the shared key.
    FoundShared(Arc<Entry>),
    Failed(ProxyError),
}

/// What a finished single-flight load means to each reader of it: a miss (the entry it kept, or
/// kept under the shared key), a hit (found meanwhile), the uncacheable answer, or the failure.
/// A reader whose own load never ran (`joined`: it waited on another reader's) was coalesced.
fn answered<E: std::ops::Deref<Target = Entry>>(
    attempt: Result<E, Arc<LoadError>>,
    joined: bool,
) -> Result<Cached, ProxyError> {
    let coalesced = |cached: Cached| match joined {
        true => Cached { outcome: Outcome::Coalesced, ..cached },
        false => cached,
    };
    answered_alone(attempt).map(coalesced)
}

fn answered_alone<E: std::ops::Deref<Target = Entry>>(
    attempt: Result<E, Arc<LoadError>>,
) -> Result<Cached, ProxyError> {
    let miss = |entry: &Entry| Cached { outcome: Outcome::Miss, ..admission::hit(entry, Instant::now()) };
    match attempt {
        Ok(entry) => Ok(miss(&entry)),
        Err(error) => match &*error {
            LoadError::StoredShared(entry) => Ok(miss(entry)),
            LoadError::FoundShared(entry) => Ok(admission::hit(entry, Instant::now())),
            LoadError::Uncacheable(cached) => Ok((**cached).clone()),
            LoadError::Failed(failure) => Err(failure.clone()),
        },
    }
}

impl Coherence {
    /// `book` is the watch book, `holder` the cache's own holder id in it; loads taking
    /// longer than `max_load` fail (so generation records can be forgotten safely).
    pub(crate) fn new(
        config: CacheConfig,
        book: Arc<WatchBook>,
        holder: HolderId,
        metrics: Metrics,
        max_load: Duration,
        shared: Option<Arc<shared::SharedTier>>,
    ) -> Self {
        let holds = Arc::new(holds::Holds::new(book, holder, config.max_watched_per_upstream));
        let inner = Arc::new(Inner {
            store: LocalStore::new(config.max_bytes, Some(metrics.clone())),
            config,
            generations: Default::default(),
            holds,
            public: hints::Hints::new(),
            unkept: hints::Hints::new(),
            refused: hints::Hints::new(),
            stale: Mutex::default(),
            metrics,
            max_load,
            shared,
        });
        Self { inner }
    }

    pub fn config(&self) -> &CacheConfig {
        &self.inner.config
    }

    /// Should a load of `uri` subscribe upstream first? A ticket when it should (cache on for
    /// the upstream, its results can be kept, the watch cap allows); the load waits for the
    /// acknowledgement and hands the ticket back in [`Loaded`] — or drops it. An upstream not
    /// trusted to notify, with no `unwatched_ttl` opted into, is never watched for the cache:
    /// its acknowledgement would keep nothing longer (only its own `ttlMs` keeps its results).
    pub fn watch(&self, upstream: &str, uri: &str, settings: &UpstreamCache) -> Option<WatchTicket> {
        let on = self.inner.config.enabled && settings.enabled;
        let worth_it =
            settings.trust_notifications || !admission::unwatched_ttl(&self.inner.config, settings).is_zero();
        if !on
            || !worth_it
            || self.inner.unkept.get(upstream, uri).is_some()
            || self.inner.refused.get(upstream, uri).is_some()
        {
            return None;
        }
        self.inner.holds.ticket(upstream, uri)
    }

    /// The upstream refused to subscribe `uri`: its loads read unwatched for a while without
    /// asking again.
    pub fn refused(&self, upstream: &str, uri: &str) {
        let until = Instant::now() + self.inner.config.max_ttl.min(UNKEPT_FOR);
        self.inner.refused.set(upstream, uri, (), until);
    }

    /// Read through the cache: a fresh entry, or `load` — which concurrent readers of the same
    /// key share.
    pub async fn read<F, Fut>(&self, request: ReadRequest<'_>, load: F) -> Result<Cached, ProxyError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Loaded, ProxyError>>,
    {
        if !(self.inner.config.enabled && request.settings.enabled) {
            // Boxed, as the load below.
            let loaded = Box::pin(load()).await?;
            let scope = admission::told_scope(&loaded.result);
            let outcome = Outcome::Bypass;
            return Ok(Cached { ttl: Duration::ZERO, scope, result: loaded.result, outcome, contents_json: None });
        }
        if let Some(tier) = &self.inner.shared {
            return self.read_clustered(tier, request, load).await;
        }
        let (shared, private) = self.keys(&request);
        let now = Instant::now();
        for key in [&shared, &private] {
            if let Some(entry) = self.inner.store.get(key).await {
                if entry.fresh_until > now {
                    return Ok(admission::hit(&entry, now));
                }
                // Past its lifetime but kept for stale-if-error: set it aside for a fresh load.
                self.inner.stale.lock().expect("stale lock").insert(key.clone(), entry);
                self.inner.store.remove(key).await;
            }
        }
        let fallback = self.inner.take_stale(&shared, &private);
        let known_public = self.inner.public.get(request.upstream, request.uri).unwrap_or(false);
        let flight = if known_public { shared.clone() } else { private };
        let (inner, settings) = (self.inner.clone(), request.settings.clone());
        let max_load = self.inner.max_load;
        // Set when this reader's own load runs; left unset, it waited on another's.
        let ran = AtomicBool::new(false);
        let ran_here = &ran;
        tracing::debug!(upstream = request.upstream, "read waits for its entry's load (its own or another's)");
        // Boxed: the load (an upstream read through rmcp) is a large future, and a hit, which
        // never gets here, would otherwise carry its size — moved into every box the request's
        // futures are put in on the way (the HTTP middlewares), at every hit.
        let attempt = Box::pin(self.inner.store.load_once(flight.clone(), async move {
            ran_here.store(true, Ordering::Relaxed);
            // A load of this URI that ended between this request's look-up and this flight
            // kept its entry under the shared key before it told of it (see `remember_scope`):
            // found there, it is served without reading upstream again.
            if let Some(entry) = inner.store.get(&shared).await.filter(|entry| entry.fresh_until > Instant::now()) {
                return Err(LoadError::FoundShared(entry));
            }
            let loaded = match tokio::time::timeout(max_load, load()).await {
                Ok(loaded) => loaded.map_err(LoadError::Failed)?,
                Err(_) => return Err(LoadError::Failed(too_slow(&flight))),
            };
            let entry = inner.admit(&flight, &settings, loaded, true)?;
            if flight.principal.is_some() && entry.scope == CacheScope::Public {
                // Public after all: keep it once, under the shared key, before saying so —
                // later readers then find it there instead of loading again.
                inner.store.insert(shared, entry.clone()).await;
                inner.remember_scope(&flight, &entry);
                return Err(LoadError::StoredShared(entry));
            }
            inner.remember_scope(&flight, &entry);
            Ok(entry)
        }));
        let attempt = attempt.await;
        answered(attempt, !ran.load(Ordering::Relaxed)).or_else(|failure| self.stale_or(fallback, &failure))
    }

    /// `upstream` said `uri` changed: drop it and everything under it, and make sure no load
    /// in flight for them is kept or joined. Returns how many entries that drops.
    pub fn invalidate(&self, upstream: &str, uri: &str) -> usize {
        let floor_rose = self.inner.generations.bump(upstream, uri);
        self.inner
            .stale
            .lock()
            .expect("stale lock")
            .retain(|key, _| !(*key.upstream == *upstream && (floor_rose || is_same_or_parent(uri, &key.uri))));
        let dropped = match floor_rose {
            true => self.inner.store.flush_upstream(upstream, u64::MAX),
            false => self.inner.store.invalidate(upstream, uri),
        };
        usize::try_from(dropped).unwrap_or(usize::MAX)
    }

    /// Anything of `upstream` may have changed (events of it were lost, or it was replaced or
    /// removed by a config reload): every key of it changes, so no load in flight is kept or
    /// joined, and its entries are dropped. Returns how many.
    pub fn invalidate_upstream(&self, upstream: &str) -> u64 {
        self.inner.generations.raise_floor(upstream);
        self.inner.stale.lock().expect("stale lock").retain(|key, _| *key.upstream != *upstream);
        self.inner.store.flush_upstream(upstream, u64::MAX)
    }

    /// `upstream` reconnected as connection `epoch`: entries of earlier connections are no
    /// longer read (their keys carry the old number); this frees their memory.
    pub fn flush_upstream(&self, upstream: &str, epoch: u64) -> u64 {
        self.inner.store.flush_upstream(upstream, epoch)
    }

    /// (entries, weighted bytes).
    pub fn size(&self) -> (u64, u64) {
        self.inner.store.size()
    }

    /// Let the store finish its bookkeeping and forget expired per-URI state.
    pub async fn settle(&self) {
        self.inner.store.settle().await;
        self.inner.sweep();
    }

    pub fn tracked(&self) -> Tracked {
        Tracked {
            generations: self.inner.generations.len(),
            hints: self.inner.public.len() + self.inner.unkept.len() + self.inner.refused.len(),
            holds: self.inner.holds.len(),
            stale: self.inner.stale.lock().expect("stale lock").len(),
        }
    }

    fn keys(&self, request: &ReadRequest<'_>) -> (Key, Key) {
        let generation = self.inner.generations.current(request.upstream, request.uri);
        let shared = Key {
            upstream: request.upstream.into(),
            epoch: request.epoch,
            uri: request.uri.into(),
            generation,
            principal: None,
        };
        let private = Key { principal: Some(request.principal.into()), ..shared.clone() };
        (shared, private)
    }

    fn stale_or(&self, fallback: Option<(Key, Arc<Entry>)>, failure: &ProxyError) -> Result<Cached, ProxyError> {
        let upstream_trouble = matches!(
            failure,
            ProxyError::UpstreamDown { .. } | ProxyError::UpstreamTimeout { .. } | ProxyError::UpstreamFailed { .. }
        );
        match fallback {
            Some((key, entry)) if upstream_trouble && entry.keep_until > Instant::now() => {
                let now = Instant::now();
                let cached = Cached { outcome: Outcome::Stale, ttl: Duration::ZERO, ..admission::hit(&entry, now) };
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

    /// Decide whether a loaded result is kept, and for how long.
    /// `local_generation`: whether the flight's generation is this process's (else the shared
    /// tier's, which checks it when storing).
    fn admit(
        &self,
        flight: &Key,
        settings: &UpstreamCache,
        loaded: Loaded,
        local_generation: bool,
    ) -> Result<Arc<Entry>, LoadError> {
        let Loaded { result, watch } = loaded;
        let ttl = lifetime(&self.config, settings, result.ttl_ms, watch.is_some());
        let (upstream, uri) = (&*flight.upstream, &*flight.uri);
        match ttl.is_zero() {
            true => self.unkept.set(upstream, uri, (), Instant::now() + self.config.max_ttl.min(UNKEPT_FOR)),
            false => self.unkept.remove(upstream, uri),
        }
        let mut entry = admission::entry(&self.config, result, ttl);
        let public = entry.scope == CacheScope::Public;
        let superseded = local_generation && self.generations.current(upstream, uri) != flight.generation;
        let shareable = public || flight.principal.is_some();
        if ttl.is_zero() || u64::from(entry.bytes) > self.config.max_entry_bytes || superseded || !shareable {
            self.remember_scope(flight, &entry);
            if superseded {
                self.metrics.cache_invalidation(InvalidationCause::UpdatedDuringLoad, 1);
            }
            let (outcome, ttl) = match superseded {
                true => (Outcome::Miss, Duration::ZERO),
                false => (Outcome::Bypass, admission::told_ttl(entry.result.ttl_ms, ttl)),
            };
            let scope = admission::told_scope(&entry.result);
            let cached = Cached { result: entry.result, ttl, scope, outcome, contents_json: None };
            return Err(LoadError::Uncacheable(Box::new(cached)));
        }
        if let Some(watch) = watch {
            watch.keep_until(entry.keep_until);
        }
        entry.contents_json = contents_json(&entry.result.contents);
        self.metrics.cache_insert(upstream);
        Ok(Arc::new(entry))
    }

    /// Remember whether `entry`'s URI answers the same to everyone, so later loads fly under
    /// the shared key. Told only once the entry is stored where such loads look for it: a load
    /// that learnt "public" before the entry was there would read upstream a second time.
    fn remember_scope(&self, flight: &Key, entry: &Entry) {
        let public = entry.scope == CacheScope::Public;
        let until = entry.keep_until.max(Instant::now() + SCOPE_KNOWN_FOR);
        self.public.set(&flight.upstream, &flight.uri, public, until);
    }

    fn sweep(&self) {
        self.holds.sweep();
        self.public.sweep();
        self.unkept.sweep();
        self.refused.sweep();
        self.stale.lock().expect("stale lock").retain(|_, entry| entry.keep_until > Instant::now());
        // A record matters while an entry stored under an older generation may live, or a load
        // begun before it may still finish.
        let longest = self.config.max_ttl + self.config.stale_if_error + self.max_load;
        self.generations.prune(longest + SWEEP_EVERY);
    }
}

fn too_slow(key: &Key) -> ProxyError {
    ProxyError::UpstreamFailed { upstream: key.upstream.to_string(), reason: "the read took too long".into() }
}

#[cfg(test)]
mod tests;
