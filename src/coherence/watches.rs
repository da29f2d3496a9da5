//! The book of upstream subscriptions: who (host sessions, listen streams, the cache) holds
//! which upstream URI, and keeping each upstream's watch set equal to what is held.
//!
//! Each change reaches the upstream as a delta (one URI added or removed) made under the
//! book's lock, so the watch set is never copied per change and changes are applied in the
//! order they were decided. The upstreams come from the registry, which a config reload may
//! change: an upstream that joins again (reconnecting with a changed config) is given every URI
//! of it held ([`WatchBook::attach`]); one that leaves takes its holds with it
//! ([`WatchBook::release_upstream`]).
//!
//! An upstream with sessions per principal or per host (`session`) is different: its shared
//! connection is never subscribed. What a host holds of it is held on the host's own upstream
//! session (`crate::proxy`'s subscriptions make that hold), and let go there when the book
//! lets go of it ([`Upstream::session_release`]).
//!
//! Invariant: an upstream's watch set is exactly the URIs of it that somebody holds (none for
//! an upstream with sessions: each of its sessions watches what its own holders hold).

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::subscriptions::{Caps, HolderId, Holdings, Key, OverCap};
use crate::upstream::{Registry, Upstream};

/// Shared by the proxy and the cache's holds.
pub(crate) struct WatchBook {
    subscriptions: Mutex<Holdings>,
    upstreams: Registry,
}

impl WatchBook {
    pub fn new(upstreams: Registry) -> Self {
        Self { subscriptions: Mutex::new(Holdings::new()), upstreams }
    }

    /// `upstream` (just put in the registry) gets every URI of it somebody holds.
    pub fn attach(&self, upstream: &str) {
        let subscriptions = self.lock();
        for uri in subscriptions.watched(upstream) {
            self.apply(upstream, &uri, true);
        }
    }

    /// `upstream` left: every hold of one of its URIs is released. Returns what was released.
    pub fn release_upstream(&self, upstream: &str) -> BTreeMap<HolderId, Vec<String>> {
        let mut subscriptions = self.lock();
        let held = subscriptions.holders_in(upstream);
        for (holder, uris) in &held {
            for uri in uris {
                if subscriptions.release(*holder, &(upstream.to_string(), uri.clone())) {
                    self.apply(upstream, uri, false);
                }
            }
        }
        held
    }

    /// Every holder of a URI of `upstream`, with the URIs it holds there.
    pub fn holders_in(&self, upstream: &str) -> BTreeMap<HolderId, Vec<String>> {
        self.lock().holders_in(upstream)
    }

    pub fn hold(&self, holder: HolderId, upstream: &str, uri: &str) {
        let mut subscriptions = self.lock();
        if subscriptions.hold(holder, (upstream.to_string(), uri.to_string())) {
            self.apply(upstream, uri, true);
        }
    }

    /// A host's hold, within `caps` (see [`Holdings::hold_within`]).
    pub fn hold_within(
        &self,
        holder: HolderId,
        principal: &str,
        upstream: &str,
        uri: &str,
        caps: Caps,
    ) -> Result<(), OverCap> {
        let mut subscriptions = self.lock();
        if subscriptions.hold_within(holder, principal, (upstream.to_string(), uri.to_string()), caps)? {
            self.apply(upstream, uri, true);
        }
        Ok(())
    }

    /// Holds of `principal`'s hosts, across their sessions and listen streams.
    pub fn principal_holds(&self, principal: &str) -> usize {
        self.lock().principal_holds(principal)
    }

    /// Does `holder` hold anything?
    pub fn holds_anything(&self, holder: HolderId) -> bool {
        self.lock().holds_anything(holder)
    }

    pub fn release(&self, holder: HolderId, upstream: &str, uri: &str) {
        let mut subscriptions = self.lock();
        if subscriptions.release(holder, &(upstream.to_string(), uri.to_string())) {
            self.apply(upstream, uri, false);
        }
        if let Some(upstream) = self.with_sessions(upstream) {
            upstream.session_release(holder, uri);
        }
    }

    pub fn release_all(&self, holder: HolderId) {
        let mut subscriptions = self.lock();
        let held = subscriptions.held_by(holder);
        for (upstream, uri) in subscriptions.release_all(holder) {
            self.apply(&upstream, &uri, false);
        }
        let upstreams: std::collections::BTreeSet<&str> = held.iter().map(|(upstream, _)| upstream.as_str()).collect();
        for upstream in upstreams.into_iter().filter_map(|name| self.with_sessions(name)) {
            upstream.session_release_all(holder);
        }
    }

    /// `upstream`, when it has sessions per principal or per host.
    fn with_sessions(&self, upstream: &str) -> Option<Upstream> {
        self.upstreams.get(upstream).filter(Upstream::has_sessions)
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
            .snapshot()
            .keys()
            .map(|name| {
                let (uris, hosts) = subscriptions.counts_for(name, except);
                (name.clone(), uris, hosts)
            })
            .collect()
    }

    /// Called with the book locked, so deltas reach the upstream in the order decided.
    fn apply(&self, upstream: &str, uri: &str, watched: bool) {
        if let Some(upstream) = self.upstreams.get(upstream).filter(|upstream| !upstream.has_sessions()) {
            upstream.set_watching(uri, watched);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Holdings> {
        self.subscriptions.lock().expect("subscriptions lock")
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;
    use crate::metrics::Metrics;
    use crate::upstream::Upstream;

    fn book_with(name: &str) -> (WatchBook, Upstream) {
        let text = format!("[[upstreams]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:1/mcp\"\n");
        let config = Config::from_toml(&text, Path::new("/"), &|_| None).expect("config");
        let upstream = Upstream::new(config.upstreams[0].clone(), Metrics::new());
        (WatchBook::new(Registry::new([upstream.clone()])), upstream)
    }

    /// 5,000 subscribes on one holder: each reaches the upstream as a delta, the watch set is
    /// never copied whole, and letting the holder go empties it.
    #[test]
    fn each_subscribe_changes_the_watch_set_without_copying_it() {
        let (book, upstream) = book_with("a");
        let started = std::time::Instant::now();
        for i in 0..5_000 {
            book.hold(1, "a", &format!("x://{i}"));
        }
        let took = started.elapsed();
        println!("5000 holds on one holder: {took:?}");
        assert_eq!(upstream.watch_set_len(), 5_000);
        assert_eq!(upstream.watch_set_copies(), 0, "no change copied the set");
        book.hold(2, "a", "x://0");
        book.release_all(1);
        assert_eq!(upstream.watch_set_len(), 1, "x://0 is still held by holder 2");
        assert_eq!(book.counts(), (1, 1));
    }
}
