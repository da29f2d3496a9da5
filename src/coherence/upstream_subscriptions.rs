//! The proxy's upstream subscriptions: one per (upstream, URI), shared by every subscriber
//! behind it (host sessions, listen streams, the cache's [`super::cache_subscriptions`]), whose
//! subscriptions the [`SubscriptionTable`] counts; each upstream's subscribed set (see
//! `crate::upstream`) is kept equal to what is subscribed.
//!
//! Each change reaches the upstream as a delta (one URI added or removed) made under this
//! type's lock, so the subscribed set is never copied per change and changes are applied in the
//! order they were decided. The upstreams come from the registry, which a config reload may
//! change: an upstream that joins again (reconnecting with a changed config) is given every URI
//! of it subscribed ([`UpstreamSubscriptions::attach`]); one that leaves takes its subscriptions
//! with it ([`UpstreamSubscriptions::unsubscribe_upstream`]).
//!
//! An upstream with sessions per principal or per host (`session`) is different: its shared
//! connection is never subscribed. What a host subscribes of it is subscribed on the host's own
//! upstream session (`crate::proxy`'s subscriptions make that session subscription), and let go
//! there when it is unsubscribed here ([`Upstream::session_unsubscribe`]).
//!
//! Invariant: an upstream's subscribed set is exactly the URIs of it that somebody subscribes
//! (none for an upstream with sessions: each of its sessions subscribes what its own subscribers
//! subscribe).

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::subscription_table::{Caps, Key, OverCap, SubscriberId, SubscriptionTable};
use crate::upstream::{Registry, Upstream};

/// Shared by the proxy's subscriptions service and the cache's subscriptions.
pub(crate) struct UpstreamSubscriptions {
    subscriptions: Mutex<SubscriptionTable>,
    upstreams: Registry,
}

impl UpstreamSubscriptions {
    pub fn new(upstreams: Registry) -> Self {
        Self { subscriptions: Mutex::new(SubscriptionTable::new()), upstreams }
    }

    /// `upstream` (just put in the registry) gets every URI of it somebody subscribes.
    pub fn attach(&self, upstream: &str) {
        let subscriptions = self.lock();
        for uri in subscriptions.subscribed_uris(upstream) {
            self.apply(upstream, &uri, true);
        }
    }

    /// `upstream` left: every subscription to one of its URIs ends. Returns what ended.
    pub fn unsubscribe_upstream(&self, upstream: &str) -> BTreeMap<SubscriberId, Vec<String>> {
        let mut subscriptions = self.lock();
        let subscribed = subscriptions.subscribers_in(upstream);
        for (subscriber, uris) in &subscribed {
            for uri in uris {
                if subscriptions.unsubscribe(*subscriber, &(upstream.to_string(), uri.clone())) {
                    self.apply(upstream, uri, false);
                }
            }
        }
        subscribed
    }

    /// Every subscriber of a URI of `upstream`, with the URIs it subscribes there.
    pub fn subscribers_in(&self, upstream: &str) -> BTreeMap<SubscriberId, Vec<String>> {
        self.lock().subscribers_in(upstream)
    }

    pub fn subscribe(&self, subscriber: SubscriberId, upstream: &str, uri: &str) {
        let mut subscriptions = self.lock();
        if subscriptions.subscribe(subscriber, (upstream.to_string(), uri.to_string())) {
            self.apply(upstream, uri, true);
        }
    }

    /// A host's subscription, within `caps` (see [`SubscriptionTable::subscribe_within`]).
    pub fn subscribe_within(
        &self,
        subscriber: SubscriberId,
        principal: &str,
        upstream: &str,
        uri: &str,
        caps: Caps,
    ) -> Result<(), OverCap> {
        let mut subscriptions = self.lock();
        if subscriptions.subscribe_within(subscriber, principal, (upstream.to_string(), uri.to_string()), caps)? {
            self.apply(upstream, uri, true);
        }
        Ok(())
    }

    /// Subscriptions of `principal`'s hosts, across their sessions and listen streams.
    pub fn principal_subscriptions(&self, principal: &str) -> usize {
        self.lock().principal_subscriptions(principal)
    }

    /// Does `subscriber` subscribe anything?
    pub fn subscribes_anything(&self, subscriber: SubscriberId) -> bool {
        self.lock().subscribes_anything(subscriber)
    }

    pub fn unsubscribe(&self, subscriber: SubscriberId, upstream: &str, uri: &str) {
        let mut subscriptions = self.lock();
        if subscriptions.unsubscribe(subscriber, &(upstream.to_string(), uri.to_string())) {
            self.apply(upstream, uri, false);
        }
        if let Some(upstream) = self.with_sessions(upstream) {
            upstream.session_unsubscribe(subscriber, Some(uri));
        }
    }

    pub fn unsubscribe_all(&self, subscriber: SubscriberId) {
        let mut subscriptions = self.lock();
        let subscribed = subscriptions.subscribed_by(subscriber);
        for (upstream, uri) in subscriptions.unsubscribe_all(subscriber) {
            self.apply(&upstream, &uri, false);
        }
        let upstreams: std::collections::BTreeSet<&str> =
            subscribed.iter().map(|(upstream, _)| upstream.as_str()).collect();
        for upstream in upstreams.into_iter().filter_map(|name| self.with_sessions(name)) {
            upstream.session_unsubscribe(subscriber, None);
        }
    }

    /// `upstream`, when it has sessions per principal or per host.
    fn with_sessions(&self, upstream: &str) -> Option<Upstream> {
        self.upstreams.get(upstream).filter(Upstream::has_sessions)
    }

    /// Subscribers to tell of an update of `uri` (or a sub-resource of what they subscribe).
    pub fn subscribers_of_update(&self, upstream: &str, uri: &str) -> BTreeMap<SubscriberId, Vec<String>> {
        self.lock().subscribers_of_update(upstream, uri)
    }

    pub fn subscribed_by(&self, subscriber: SubscriberId) -> Vec<Key> {
        self.lock().subscribed_by(subscriber)
    }

    /// (distinct upstream URIs subscribed, subscriber×URI pairs).
    pub fn counts(&self) -> (usize, usize) {
        let subscriptions = self.lock();
        (subscriptions.key_count(), subscriptions.subscription_count())
    }

    /// Per configured upstream: (name, URIs subscribed upstream, host subscriptions — not counting
    /// `except`).
    pub fn per_upstream(&self, except: SubscriberId) -> Vec<(String, usize, usize)> {
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

    /// Called with the table locked, so deltas reach the upstream in the order decided.
    fn apply(&self, upstream: &str, uri: &str, subscribed: bool) {
        if let Some(upstream) = self.upstreams.get(upstream).filter(|upstream| !upstream.has_sessions()) {
            upstream.set_subscribed(uri, subscribed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SubscriptionTable> {
        self.subscriptions.lock().expect("upstream subscriptions lock")
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;
    use crate::metrics::Metrics;
    use crate::upstream::Upstream;

    fn subscriptions_with(name: &str) -> (UpstreamSubscriptions, Upstream) {
        let text = format!("[[upstreams]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:1/mcp\"\n");
        let config = Config::from_toml(&text, Path::new("/"), &|_| None).expect("config");
        let upstream = Upstream::new(config.upstreams[0].clone(), Metrics::new());
        (UpstreamSubscriptions::new(Registry::new([upstream.clone()])), upstream)
    }

    /// 5,000 subscribes of one subscriber: each reaches the upstream as a delta, the subscribed set is
    /// never copied whole, and letting the subscriber go empties it.
    #[test]
    fn each_subscribe_changes_the_subscribed_set_without_copying_it() {
        let (subscriptions, upstream) = subscriptions_with("a");
        let started = std::time::Instant::now();
        for i in 0..5_000 {
            subscriptions.subscribe(1, "a", &format!("x://{i}"));
        }
        let took = started.elapsed();
        println!("5000 subscriptions of one subscriber: {took:?}");
        assert_eq!(upstream.subscribed_set_len(), 5_000);
        assert_eq!(upstream.subscribed_set_copies(), 0, "no change copied the set");
        subscriptions.subscribe(2, "a", "x://0");
        subscriptions.unsubscribe_all(1);
        assert_eq!(upstream.subscribed_set_len(), 1, "x://0 is still subscribed by subscriber 2");
        assert_eq!(subscriptions.counts(), (1, 1));
    }
}
