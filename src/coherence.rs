//! Coherence: the one owner of what the read cache may keep and for how long. It owns the
//! generations (a read begun after an `updated` never joins or finds anything older), the
//! cache's own subscriptions (`CacheSubscriptions`: an entry is "watched", kept on the word of
//! its upstream subscription, only when the upstream acknowledged that subscription), admission
//! (lifetimes, see `admission`) and the upstream subscriptions every subscriber's subscriptions
//! go through (`UpstreamSubscriptions`). The cache itself is a store: moka
//! ([`LocalStore`]) in this process.
//!
//! The read path (`proxy/read.rs`) goes top to bottom: take a [`LoadSubscription`] if the URI may be
//! watched, wait for the upstream's acknowledgement, read upstream, hand the result here.
//! [`Coherence::read`] takes it through one process's store (`local.rs`) or, with `[cluster]`,
//! through the shared tier (`clustered.rs`); both run the same single-flight load (`flight.rs`).
//!
//! Per-URI state is bounded: generations keep a record per notified URI only until nothing
//! older can matter (`horizon`), hints and the cache's subscriptions expire with the entries they describe, and a
//! sweep forgets what has expired. The sweep runs in [`Coherence::settle`], which the proxy's
//! `cache-housekeeping` task (on the spine) calls every [`SWEEP_EVERY`]; nothing here spawns.
//! Invariant: a read begun after an `updated` was received never returns older content.

mod admission;
mod cache_subscriptions;
mod clustered;
mod flight;
mod generations;
mod hints;
mod local;
pub mod shared;
mod upstream_subscriptions;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use self::admission::{Cached, Loaded, content_bytes, lifetime, told_scope, told_ttl, unwatched_ttl};
pub use self::cache_subscriptions::LoadSubscription;
// How a read was answered: plain data of the store's floor (`cache`), which hosts label.
pub(crate) use self::upstream_subscriptions::UpstreamSubscriptions;
pub use crate::cache::Outcome;
use crate::cache::{Entry, Key, LocalStore};
use crate::config::{CacheConfig, UpstreamCache};
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::subscription_table::{SubscriberId, is_same_or_parent};

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
    subscriptions: Arc<cache_subscriptions::CacheSubscriptions>,
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
    /// URIs the cache subscribes (`holds` in `/status`, as before).
    #[serde(rename = "holds")]
    pub subscriptions: usize,
    pub stale: usize,
}

impl Coherence {
    /// `upstream_subscriptions` are the proxy's, `subscriber` the cache's own subscriber id in them; loads taking
    /// longer than `max_load` fail (so generation records can be forgotten safely).
    pub(crate) fn new(
        config: CacheConfig,
        upstream_subscriptions: Arc<UpstreamSubscriptions>,
        subscriber: SubscriberId,
        metrics: Metrics,
        max_load: Duration,
        shared: Option<Arc<shared::SharedTier>>,
    ) -> Self {
        let subscriptions = Arc::new(cache_subscriptions::CacheSubscriptions::new(
            upstream_subscriptions,
            subscriber,
            config.max_watched_per_upstream,
        ));
        let inner = Arc::new(Inner {
            store: LocalStore::new(config.max_bytes, Some(metrics.clone())),
            config,
            generations: Default::default(),
            subscriptions,
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

    /// Should a load of `uri` subscribe upstream first? A [`LoadSubscription`] when it should (cache on for
    /// the upstream, its results can be kept, the watch cap allows); the load waits for the
    /// acknowledgement and hands it back in [`Loaded`] — or drops it. An upstream not
    /// trusted to notify, with no `unwatched_ttl` opted into, is never watched for the cache:
    /// its acknowledgement would keep nothing longer (only its own `ttlMs` keeps its results).
    pub fn load_subscription(&self, upstream: &str, uri: &str, settings: &UpstreamCache) -> Option<LoadSubscription> {
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
        self.inner.subscriptions.for_load(upstream, uri)
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
            let (ttl, kept_for) = (Duration::ZERO, Duration::ZERO);
            return Ok(Cached { ttl, kept_for, scope, result: loaded.result, outcome, contents_json: None });
        }
        if let Some(tier) = &self.inner.shared {
            // Boxed: Redis's futures are large, and a read without `[cluster]` carries none.
            return Box::pin(self.read_clustered(tier, request, load)).await;
        }
        self.read_local(request, load).await
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
    /// longer read (their keys carry the old number); this frees their memory. Returns how many.
    /// With `[cluster]` the keys carry Redis's boot token instead, and the upstream's floor rises
    /// in Redis (see `proxy::events`): every entry of it here goes.
    pub fn flush_upstream(&self, upstream: &str, epoch: u64) -> u64 {
        let below = if self.inner.shared.is_some() { u64::MAX } else { epoch };
        self.inner.store.flush_upstream(upstream, below)
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
            subscriptions: self.inner.subscriptions.len(),
            stale: self.inner.stale.lock().expect("stale lock").len(),
        }
    }
}

impl Inner {
    fn sweep(&self) {
        self.subscriptions.sweep();
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

#[cfg(test)]
mod tests;
