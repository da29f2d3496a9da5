//! The read cache's series: hits, misses, inserts, evictions, invalidations, its size, and the
//! cluster's shared tier.

use super::labels::upstream_label;
use super::{EvictionCause, InvalidationCause, Metrics, SharedCacheEvent, saturate};

impl Metrics {
    pub fn cache_hit(&self, upstream: &str) {
        self.inner.cache_hits.with_label_values(&[upstream_label(upstream)]).inc();
    }

    pub fn cache_miss(&self, upstream: &str) {
        self.inner.cache_misses.with_label_values(&[upstream_label(upstream)]).inc();
    }

    pub fn cache_insert(&self, upstream: &str) {
        self.inner.cache_inserts.with_label_values(&[upstream_label(upstream)]).inc();
    }

    pub fn cache_eviction(&self, cause: EvictionCause) {
        self.inner.cache_evictions.with_label_values(&[cause.label()]).inc();
    }

    /// `entries` cache entries were dropped as possibly stale.
    pub fn cache_invalidation(&self, cause: InvalidationCause, entries: u64) {
        self.inner.cache_invalidations.with_label_values(&[cause.label()]).inc_by(entries);
    }

    /// Something happened in the shared cache tier.
    pub fn shared_cache(&self, event: SharedCacheEvent) {
        self.inner.cache_shared.with_label_values(&[event.label()]).inc();
    }

    pub fn set_shared_cache_up(&self, up: bool) {
        self.inner.cache_shared_up.set(i64::from(up));
    }

    /// The cache's current size (moka's `entry_count` and `weighted_size`).
    pub fn set_cache_size(&self, entries: u64, weighted_bytes: u64) {
        self.inner.cache_entries.set(saturate(entries));
        self.inner.cache_weighted_bytes.set(saturate(weighted_bytes));
    }
}
