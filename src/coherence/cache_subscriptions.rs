//! The cache's own subscriptions: one per (upstream, URI) it subscribes through the
//! [`UpstreamSubscriptions`], kept while a load is waiting on it or an entry kept because it is
//! subscribed may still be served.
//!
//! A load gets a [`LoadSubscription`]; keeping the entry extends the subscription to the entry's
//! `keep_until`; one dropped otherwise (load failed, not kept, subscription not in place) lets
//! the subscription go unless something else still needs it. Expired ones go on the sweep.
//! Invariant: the cache's subscriber subscribes (upstream, URI) exactly while this map has it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::upstream_subscriptions::UpstreamSubscriptions;
use crate::subscription_table::SubscriberId;

pub(super) struct CacheSubscriptions {
    upstream_subscriptions: Arc<UpstreamSubscriptions>,
    subscriber: SubscriberId,
    cap: usize,
    /// upstream → URI → subscription.
    state: Mutex<HashMap<Arc<str>, ByUri>>,
}

type ByUri = HashMap<Arc<str>, CacheSubscription>;

#[derive(Default)]
struct CacheSubscription {
    /// Loads holding a [`LoadSubscription`] of it.
    pending: u32,
    /// The last `keep_until` of an entry kept because it is subscribed.
    until: Option<Instant>,
}

impl CacheSubscription {
    fn needed(&self, now: Instant) -> bool {
        self.pending > 0 || self.until.is_some_and(|until| until > now)
    }
}

/// A load's claim on the upstream subscription of its URI.
pub struct LoadSubscription {
    subscriptions: Arc<CacheSubscriptions>,
    upstream: Arc<str>,
    uri: Arc<str>,
    done: bool,
}

impl LoadSubscription {
    /// The load's entry is kept, subscribed, until `until`.
    pub(super) fn keep_until(mut self, until: Instant) {
        self.done = true;
        self.subscriptions.finish(&self.upstream, &self.uri, Some(until));
    }
}

impl Drop for LoadSubscription {
    fn drop(&mut self) {
        if !self.done {
            self.subscriptions.finish(&self.upstream, &self.uri, None);
        }
    }
}

impl CacheSubscriptions {
    pub fn new(upstream_subscriptions: Arc<UpstreamSubscriptions>, subscriber: SubscriberId, cap: usize) -> Self {
        Self { upstream_subscriptions, subscriber, cap, state: Mutex::default() }
    }

    /// Subscribe `uri` for a load: yes when it is subscribed already or `upstream` is below the cap.
    pub fn for_load(self: &Arc<Self>, upstream: &str, uri: &str) -> Option<LoadSubscription> {
        let mut state = self.state.lock().expect("cache subscriptions lock");
        let by_uri = state.entry(upstream.into()).or_default();
        let (upstream, uri): (Arc<str>, Arc<str>) = match by_uri.get_key_value(uri) {
            Some((uri, _)) => (upstream.into(), uri.clone()),
            None if by_uri.len() < self.cap => {
                self.upstream_subscriptions.subscribe(self.subscriber, upstream, uri);
                (upstream.into(), uri.into())
            }
            None => return None,
        };
        by_uri.entry(uri.clone()).or_default().pending += 1;
        Some(LoadSubscription { subscriptions: self.clone(), upstream, uri, done: false })
    }

    fn finish(&self, upstream: &str, uri: &str, until: Option<Instant>) {
        let mut state = self.state.lock().expect("cache subscriptions lock");
        let Some(by_uri) = state.get_mut(upstream) else { return };
        let Some(subscription) = by_uri.get_mut(uri) else { return };
        subscription.pending -= 1;
        subscription.until = subscription.until.max(until);
        if !subscription.needed(Instant::now()) {
            by_uri.remove(uri);
            self.upstream_subscriptions.unsubscribe(self.subscriber, upstream, uri);
        }
    }

    /// Let go of subscriptions no load and no live entry needs.
    pub fn sweep(&self) {
        let now = Instant::now();
        let mut state = self.state.lock().expect("cache subscriptions lock");
        for (upstream, by_uri) in state.iter_mut() {
            by_uri.retain(|uri, subscription| {
                let keep = subscription.needed(now);
                if !keep {
                    self.upstream_subscriptions.unsubscribe(self.subscriber, upstream, uri);
                }
                keep
            });
            if by_uri.capacity() > 64 && by_uri.len() < by_uri.capacity() / 4 {
                by_uri.shrink_to_fit();
            }
        }
        state.retain(|_, by_uri| !by_uri.is_empty());
    }

    /// URIs subscribed (all upstreams).
    pub fn len(&self) -> usize {
        self.state.lock().expect("cache subscriptions lock").values().map(HashMap::len).sum()
    }
}
