//! The book of upstream subscriptions: who (host sessions, listen streams, the cache) holds
//! which upstream URI, and keeping each upstream's watch set equal to what is held.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use crate::subscriptions::{HolderId, Key, Subscriptions};
use crate::upstream::Upstream;

/// Shared by the proxy and the cache's hooks.
pub(crate) struct WatchBook {
    subscriptions: Mutex<Subscriptions>,
    upstreams: Arc<BTreeMap<String, Upstream>>,
}

impl WatchBook {
    pub fn new(upstreams: Arc<BTreeMap<String, Upstream>>) -> Self {
        Self { subscriptions: Mutex::new(Subscriptions::new()), upstreams }
    }

    pub fn hold(&self, holder: HolderId, upstream: &str, uri: &str) {
        let first = self.lock().hold(holder, (upstream.to_string(), uri.to_string()));
        if first {
            self.sync(upstream);
        }
    }

    pub fn release(&self, holder: HolderId, upstream: &str, uri: &str) {
        let last = self.lock().release(holder, &(upstream.to_string(), uri.to_string()));
        if last {
            self.sync(upstream);
        }
    }

    pub fn release_all(&self, holder: HolderId) {
        let dropped = self.lock().release_all(holder);
        let upstreams: BTreeSet<String> = dropped.into_iter().map(|(upstream, _)| upstream).collect();
        for upstream in upstreams {
            self.sync(&upstream);
        }
    }

    /// Holders to tell of an update of `uri` (or a sub-resource of what they hold).
    pub fn holders_of_update(&self, upstream: &str, uri: &str) -> BTreeMap<HolderId, Vec<String>> {
        self.lock().holders_of_update(upstream, uri)
    }

    pub fn held_by(&self, holder: HolderId) -> Vec<Key> {
        self.lock().held_by(holder)
    }

    /// (distinct upstream URIs held, holder×URI pairs).
    pub fn counts(&self) -> (usize, usize) {
        let subscriptions = self.lock();
        (subscriptions.key_count(), subscriptions.hold_count())
    }

    /// Per configured upstream: (name, URIs held upstream, host holds — not counting `except`).
    pub fn per_upstream(&self, except: HolderId) -> Vec<(String, usize, usize)> {
        let subscriptions = self.lock();
        self.upstreams
            .keys()
            .map(|name| {
                let (uris, hosts) = subscriptions.counts_for(name, except);
                (name.clone(), uris, hosts)
            })
            .collect()
    }

    fn sync(&self, upstream: &str) {
        let watched = self.lock().watched(upstream);
        if let Some(upstream) = self.upstreams.get(upstream) {
            upstream.set_watched(watched);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Subscriptions> {
        self.subscriptions.lock().expect("subscriptions lock")
    }
}
