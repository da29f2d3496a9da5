//! The read cache as a store: entries by key, bounded in bytes, expiring on their own, with one
//! load per key at a time. It decides nothing — lifetimes, generations, watch holds and which
//! key a read uses belong to [`crate::coherence`], its one owner.
//!
//! [`LocalStore`] is moka: get, insert, invalidate a URI and everything under it, flush an
//! upstream (the replicas' shared tier is `coherence::shared`, beside it).
//! [`Outcome`] names how a read was answered (hit, miss, coalesced, stale, bypass), as plain data.
//! Invariant: an entry is never returned after its `keep_until`, nor after an `invalidate`
//! that covers its URI was made (moka hides entries inserted before an invalidation predicate).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::future::Cache;
use moka::notification::RemovalCause;
use rmcp::model::{CacheScope, ReadResourceResult};

use crate::metrics::{EvictionCause, Metrics};
use crate::subscription_table::is_same_or_parent;

/// What an entry is stored under. Generations come from the upstream's notifications as
/// counted by this process, and `epoch` is the connection number; a shared store would
/// replace both with values every replica agrees on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub upstream: Arc<str>,
    pub epoch: u64,
    pub uri: Arc<str>,
    pub generation: u64,
    /// `None` for public results, the principal for private ones.
    pub principal: Option<Arc<str>>,
}

/// How a read was answered (coherence decides; the hosts' side labels it in audit events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Hit,
    Miss,
    /// Answered by another read's load of the same entry, which this one waited on (single
    /// flight): it asked no upstream itself.
    Coalesced,
    /// Served past its lifetime because the upstream failed (`stale_if_error`).
    Stale,
    /// Not cacheable (too large, ttl 0, input required, or the cache is off).
    Bypass,
}

/// One kept result.
#[derive(Debug)]
pub struct Entry {
    pub result: ReadResourceResult,
    pub fresh_until: Instant,
    /// Until here a host may be told the result is fresh (the upstream's own `ttlMs`); never
    /// past `fresh_until`.
    pub told_until: Instant,
    /// Past `fresh_until`, until here it may still be served when the upstream fails.
    pub keep_until: Instant,
    /// Whom the entry may serve: `private` keeps it per principal.
    pub scope: CacheScope,
    /// The size of the contents (text as stored, blobs as base64): what `max_entry_bytes` bounds.
    pub bytes: u32,
    /// `result.contents` as the JSON a reply carries, written once when the entry is kept (a
    /// hit then copies it instead of escaping the text again); `None` until then.
    pub contents_json: Option<Arc<str>>,
}

impl Entry {
    /// What the entry weighs against `max_bytes`: its contents, typed and as JSON.
    pub fn weight(&self) -> u32 {
        let json = self.contents_json.as_ref().map_or(0, |json| json.len());
        self.bytes.saturating_add(u32::try_from(json).unwrap_or(u32::MAX))
    }
}

/// moka, in this process; also runs the single flight (`load_once`).
#[derive(Clone)]
pub struct LocalStore {
    /// foldhash, seeded per process, instead of SipHash: a hit hashes its key twice or more.
    entries: Cache<Key, Arc<Entry>, foldhash::fast::RandomState>,
}

impl LocalStore {
    pub fn new(max_bytes: u64, metrics: Option<Metrics>) -> Self {
        let entries = Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|_, entry: &Arc<Entry>| entry.weight())
            .expire_after(KeepUntil)
            .support_invalidation_closures()
            .eviction_listener(move |_key, _entry, cause| {
                let cause = match cause {
                    RemovalCause::Size => EvictionCause::Size,
                    RemovalCause::Expired => EvictionCause::Expired,
                    RemovalCause::Explicit | RemovalCause::Replaced => return,
                };
                if let Some(metrics) = &metrics {
                    metrics.cache_eviction(cause);
                }
            })
            .build_with_hasher(foldhash::fast::RandomState::default());
        Self { entries }
    }

    /// One `load` per key at a time: concurrent callers with the same key share it.
    pub async fn load_once<E, Fut>(&self, key: Key, load: Fut) -> Result<Arc<Entry>, Arc<E>>
    where
        E: Send + Sync + 'static,
        Fut: Future<Output = Result<Arc<Entry>, E>>,
    {
        self.entries.try_get_with(key, load).await
    }

    pub async fn remove(&self, key: &Key) {
        self.entries.invalidate(key).await;
    }

    /// Drop every entry.
    pub fn clear(&self) {
        self.entries.invalidate_all();
    }

    /// Let moka finish its bookkeeping (evictions, counts).
    pub async fn settle(&self) {
        self.entries.run_pending_tasks().await;
    }

    pub async fn get(&self, key: &Key) -> Option<Arc<Entry>> {
        self.entries.get(key).await
    }

    pub async fn insert(&self, key: Key, entry: Arc<Entry>) {
        self.entries.insert(key, entry).await;
    }

    /// Drop `uri` of `upstream` and everything under it.
    pub fn invalidate(&self, upstream: &str, uri: &str) -> u64 {
        let matches = |key: &Key| *key.upstream == *upstream && is_same_or_parent(uri, &key.uri);
        let dropped = self.entries.iter().filter(|(key, _)| matches(key)).count();
        let (upstream, uri): (Arc<str>, Arc<str>) = (upstream.into(), uri.into());
        let _ = self
            .entries
            .invalidate_entries_if(move |key, _| key.upstream == upstream && is_same_or_parent(&uri, &key.uri));
        dropped as u64
    }

    /// Drop every entry of `upstream` from connections before `epoch`.
    pub fn flush_upstream(&self, upstream: &str, epoch: u64) -> u64 {
        let upstream: Arc<str> = upstream.into();
        let dropped = self.entries.iter().filter(|(key, _)| key.upstream == upstream && key.epoch < epoch).count();
        let _ = self.entries.invalidate_entries_if(move |key, _| key.upstream == upstream && key.epoch < epoch);
        dropped as u64
    }

    /// (entries, weighted bytes).
    pub fn size(&self) -> (u64, u64) {
        (self.entries.entry_count(), self.entries.weighted_size())
    }
}

/// moka expiry: each entry lives until its `keep_until`.
struct KeepUntil;

impl moka::Expiry<Key, Arc<Entry>> for KeepUntil {
    fn expire_after_create(&self, _: &Key, entry: &Arc<Entry>, created_at: Instant) -> Option<Duration> {
        Some(entry.keep_until.saturating_duration_since(created_at))
    }
}
