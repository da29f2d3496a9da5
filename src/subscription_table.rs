//! Who subscribes which upstream URI: reference counts across every downstream session, listen
//! stream and the cache's own subscriptions, and the per-upstream subscribed set derived from
//! them.
//!
//! Pure bookkeeping, no IO. Invariants: an (upstream, URI) is in the subscribed set exactly while
//! at least one subscriber subscribes it; unsubscribing a subscriber from everything ends all it
//! subscribed; a host's subscriber subscribing under [`Caps`] never subscribes more than its cap,
//! nor its principal's subscribers more than theirs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// A host session, a listen stream, the cache, or another replica: anything that subscribes.
pub type SubscriberId = u64;

/// An upstream and one of its (un-namespaced) URIs.
pub type Key = (String, String);

/// Caps on what a host's subscriber may subscribe: per subscriber (a session or listen stream) and, across
/// all of them, per principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub per_subscriber: usize,
    pub per_principal: usize,
}

/// Which cap a subscription would break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverCap {
    Subscriber(usize),
    Principal(usize),
}

/// Who subscribes which (upstream, URI), with reference counts: the bookkeeping behind the
/// upstream subscriptions (`coherence::UpstreamSubscriptions`). Not the hosts' subscriptions
/// service (`proxy::Subscriptions`), which subscribes through it.
///
/// Every key is stored once (an `Arc` shared by the key's entry and each subscriber's set), so a
/// subscription costs a pointer in two sets, not two more copies of the upstream name and URI.
#[derive(Debug, Default)]
pub struct SubscriptionTable {
    by_key: BTreeMap<Arc<Key>, KeySubscribers>,
    by_subscriber: HashMap<SubscriberId, SubscriberKeys>,
    /// Subscriptions of each principal's subscribers (only those subscribing under [`Caps`] count).
    by_principal: HashMap<Arc<str>, usize>,
}

/// The subscribers of one key, sorted. Most keys have one subscriber: a one-element `Vec` is an 8-byte
/// allocation where a `BTreeSet`'s first node is ~100 bytes (a third of a subscription's bookkeeping).
#[derive(Debug, Default)]
struct KeySubscribers(Vec<SubscriberId>);

#[derive(Debug)]
struct SubscriberKeys {
    principal: Option<Arc<str>>,
    keys: BTreeSet<Arc<Key>>,
}

impl SubscriptionTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// `subscriber` subscribes `key`, uncapped (the cache's own subscriptions). True when nobody
    /// subscribed the key before (the upstream must subscribe it).
    pub fn subscribe(&mut self, subscriber: SubscriberId, key: Key) -> bool {
        self.insert(subscriber, None, key)
    }

    /// A host's `subscriber`, of `principal`, subscribes `key` unless that breaks `caps`. Ok(true)
    /// when nobody subscribed the key before; subscribing a subscribed key again is Ok and changes
    /// nothing.
    pub fn subscribe_within(
        &mut self,
        subscriber: SubscriberId,
        principal: &str,
        key: Key,
        caps: Caps,
    ) -> Result<bool, OverCap> {
        let subscribed = self.by_subscriber.get(&subscriber);
        if subscribed.is_some_and(|subscribed| subscribed.keys.contains(&key)) {
            return Ok(false);
        }
        if subscribed.map_or(0, |subscribed| subscribed.keys.len()) >= caps.per_subscriber {
            return Err(OverCap::Subscriber(caps.per_subscriber));
        }
        if self.principal_subscriptions(principal) >= caps.per_principal {
            return Err(OverCap::Principal(caps.per_principal));
        }
        Ok(self.insert(subscriber, Some(principal), key))
    }

    /// Subscriptions of `principal`'s subscribers, across all of them.
    pub fn principal_subscriptions(&self, principal: &str) -> usize {
        self.by_principal.get(principal).copied().unwrap_or(0)
    }

    /// `subscriber` unsubscribes `key`. True when nobody subscribes it any more.
    pub fn unsubscribe(&mut self, subscriber: SubscriberId, key: &Key) -> bool {
        let Some(subscribed) = self.by_subscriber.get_mut(&subscriber) else { return false };
        if !subscribed.keys.remove(key) {
            return false;
        }
        let principal = subscribed.principal.clone();
        if subscribed.keys.is_empty() {
            self.by_subscriber.remove(&subscriber);
        }
        self.forget(principal.as_ref(), 1);
        let Some(subscribers) = self.by_key.get_mut(key) else { return false };
        subscribers.remove(subscriber);
        if subscribers.is_empty() {
            self.by_key.remove(key);
            return true;
        }
        false
    }

    /// `subscriber` is gone: everything it subscribed ends. Returns the keys nobody subscribes now.
    pub fn unsubscribe_all(&mut self, subscriber: SubscriberId) -> Vec<Key> {
        let Some(subscribed) = self.by_subscriber.remove(&subscriber) else { return Vec::new() };
        self.forget(subscribed.principal.as_ref(), subscribed.keys.len());
        let mut dropped = Vec::new();
        for key in subscribed.keys {
            if let Some(subscribers) = self.by_key.get_mut(&key) {
                subscribers.remove(subscriber);
                if subscribers.is_empty() {
                    self.by_key.remove(&key);
                    dropped.push(Arc::unwrap_or_clone(key));
                }
            }
        }
        dropped
    }

    /// Who must hear of an `updated` for `uri` of `upstream`: subscribers of that URI and of every
    /// URI it is a sub-resource of, each with the subscribed URIs that matched.
    pub fn subscribers_of_update(&self, upstream: &str, uri: &str) -> BTreeMap<SubscriberId, Vec<String>> {
        let mut found: BTreeMap<SubscriberId, Vec<String>> = BTreeMap::new();
        for (key, subscribers) in self.of_upstream(upstream) {
            if is_same_or_parent(&key.1, uri) {
                for subscriber in subscribers {
                    found.entry(*subscriber).or_default().push(key.1.clone());
                }
            }
        }
        found
    }

    /// Every subscriber of a URI of `upstream`, with the URIs it subscriptions there.
    pub fn subscribers_in(&self, upstream: &str) -> BTreeMap<SubscriberId, Vec<String>> {
        let mut found: BTreeMap<SubscriberId, Vec<String>> = BTreeMap::new();
        for (key, subscribers) in self.of_upstream(upstream) {
            for subscriber in subscribers {
                found.entry(*subscriber).or_default().push(key.1.clone());
            }
        }
        found
    }

    /// The URIs of `upstream` somebody subscriptions.
    pub fn subscribed_uris(&self, upstream: &str) -> BTreeSet<String> {
        self.of_upstream(upstream).map(|(key, _)| key.1.clone()).collect()
    }

    /// What `subscriber` subscriptions.
    pub fn subscribed_by(&self, subscriber: SubscriberId) -> Vec<Key> {
        self.by_subscriber
            .get(&subscriber)
            .map(|subscribed| subscribed.keys.iter().map(|key| (**key).clone()).collect())
            .unwrap_or_default()
    }

    /// Does `subscriber` subscribe anything?
    pub fn subscribes_anything(&self, subscriber: SubscriberId) -> bool {
        self.by_subscriber.contains_key(&subscriber)
    }

    /// For `upstream`: (URIs subscribed, subscriptions of subscribers other than `except`).
    pub fn counts_for(&self, upstream: &str, except: SubscriberId) -> (usize, usize) {
        self.of_upstream(upstream).fold((0, 0), |(uris, subscriptions), (_, subscribers)| {
            (uris + 1, subscriptions + subscribers.iter().filter(|h| **h != except).count())
        })
    }

    /// Number of distinct (upstream, URI) pairs subscribed.
    pub fn key_count(&self) -> usize {
        self.by_key.len()
    }

    /// Number of (subscriber, key) pairs.
    pub fn subscription_count(&self) -> usize {
        self.by_subscriber.values().map(|subscribed| subscribed.keys.len()).sum()
    }

    fn of_upstream<'a>(&'a self, upstream: &'a str) -> impl Iterator<Item = (&'a Arc<Key>, &'a [SubscriberId])> {
        let from: Key = (upstream.to_string(), String::new());
        self.by_key
            .range::<Key, _>(from..)
            .take_while(move |(key, _)| key.0 == upstream)
            .map(|(key, subscribers)| (key, subscribers.0.as_slice()))
    }

    fn insert(&mut self, subscriber: SubscriberId, principal: Option<&str>, key: Key) -> bool {
        let key = match self.by_key.get_key_value(&key) {
            Some((shared, _)) => shared.clone(),
            None => Arc::new(key),
        };
        let principal = principal.map(|name| match self.by_principal.get_key_value(name) {
            Some((shared, _)) => shared.clone(),
            None => Arc::from(name),
        });
        let subscribed =
            self.by_subscriber.entry(subscriber).or_insert_with(|| SubscriberKeys { principal, keys: BTreeSet::new() });
        if !subscribed.keys.insert(key.clone()) {
            return false;
        }
        if let Some(principal) = &subscribed.principal {
            *self.by_principal.entry(principal.clone()).or_default() += 1;
        }
        let subscribers = self.by_key.entry(key).or_default();
        subscribers.insert(subscriber);
        subscribers.0.len() == 1
    }

    fn forget(&mut self, principal: Option<&Arc<str>>, subscriptions: usize) {
        let Some(principal) = principal else { return };
        if let Some(count) = self.by_principal.get_mut(principal) {
            *count = count.saturating_sub(subscriptions);
            if *count == 0 {
                self.by_principal.remove(principal);
            }
        }
    }
}

/// `uri` is `subscribed`, or a sub-resource of it: `subscribed` followed by `/`, `#` or `?` (or `subscribed`
/// itself ends with `/`).
impl KeySubscribers {
    fn insert(&mut self, subscriber: SubscriberId) {
        if let Err(at) = self.0.binary_search(&subscriber) {
            if self.0.is_empty() {
                // A `Vec`'s first growth would make room for four.
                self.0.reserve_exact(1);
            }
            self.0.insert(at, subscriber);
        }
    }

    fn remove(&mut self, subscriber: SubscriberId) {
        if let Ok(at) = self.0.binary_search(&subscriber) {
            self.0.remove(at);
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

pub fn is_same_or_parent(subscribed: &str, uri: &str) -> bool {
    match uri.strip_prefix(subscribed) {
        Some("") => true,
        Some(rest) => subscribed.ends_with('/') || rest.starts_with(['/', '#', '?']),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(upstream: &str, uri: &str) -> Key {
        (upstream.into(), uri.into())
    }

    #[test]
    fn first_subscribe_starts_and_last_unsubscribe_stops() {
        let mut subs = SubscriptionTable::new();
        assert!(subs.subscribe(1, key("a", "x://1")));
        assert!(!subs.subscribe(2, key("a", "x://1")));
        assert!(!subs.subscribe(2, key("a", "x://1")), "subscribing twice is subscribing once");
        assert!(!subs.unsubscribe(1, &key("a", "x://1")));
        assert_eq!(subs.subscribed_uris("a"), BTreeSet::from(["x://1".to_string()]));
        assert!(subs.unsubscribe(2, &key("a", "x://1")));
        assert!(subs.subscribed_uris("a").is_empty());
        assert!(!subs.unsubscribe(2, &key("a", "x://1")), "unsubscribing what is not subscribed changes nothing");
    }

    #[test]
    fn a_subscriber_that_goes_releases_everything() {
        let mut subs = SubscriptionTable::new();
        subs.subscribe(1, key("a", "x://1"));
        subs.subscribe(1, key("b", "x://2"));
        subs.subscribe(2, key("b", "x://2"));
        let mut dropped = subs.unsubscribe_all(1);
        dropped.sort();
        assert_eq!(dropped, vec![key("a", "x://1")]);
        assert_eq!(subs.subscribed_by(2), vec![key("b", "x://2")]);
        assert_eq!(subs.key_count(), 1);
        assert_eq!(subs.subscription_count(), 1);
    }

    #[test]
    fn caps_count_per_subscriber_and_across_a_principals_subscribers() {
        let caps = Caps { per_subscriber: 2, per_principal: 3 };
        let mut subs = SubscriptionTable::new();
        assert_eq!(subs.subscribe_within(1, "bob", key("a", "x://1"), caps), Ok(true));
        assert_eq!(subs.subscribe_within(1, "bob", key("a", "x://2"), caps), Ok(true));
        assert_eq!(
            subs.subscribe_within(1, "bob", key("a", "x://1"), caps),
            Ok(false),
            "subscribed again: no new subscription"
        );
        assert_eq!(subs.subscribe_within(1, "bob", key("a", "x://3"), caps), Err(OverCap::Subscriber(2)));
        assert_eq!(subs.subscribe_within(2, "bob", key("a", "x://1"), caps), Ok(false));
        assert_eq!(subs.subscribe_within(2, "bob", key("a", "x://3"), caps), Err(OverCap::Principal(3)));
        assert_eq!(subs.subscribe_within(3, "alice", key("a", "x://3"), caps), Ok(true), "others are not affected");
        assert!(subs.subscribe(4, key("a", "x://4")), "the cache is not capped");
        assert_eq!(subs.principal_subscriptions("bob"), 3);
        assert!(!subs.unsubscribe(1, &key("a", "x://1")));
        assert_eq!(subs.subscribe_within(2, "bob", key("a", "x://3"), caps), Ok(false), "a released place is free");
        subs.unsubscribe_all(2);
        assert_eq!(subs.principal_subscriptions("bob"), 1);
        subs.unsubscribe_all(1);
        assert_eq!(subs.principal_subscriptions("bob"), 0);
        assert!(!subs.by_principal.contains_key("bob"), "nothing left of a principal without subscriptions");
    }

    #[test]
    fn many_subscribers_of_one_key_leave_in_any_order() {
        let mut subs = SubscriptionTable::new();
        let subscribers = [5, 3, 9, 1, 7];
        for subscriber in subscribers {
            subs.subscribe(subscriber, key("a", "x://1"));
        }
        subs.subscribe(3, key("a", "x://1"));
        let expected: BTreeMap<SubscriberId, Vec<String>> =
            [1, 3, 5, 7, 9].into_iter().map(|subscriber| (subscriber, vec!["x://1".to_string()])).collect();
        assert_eq!(subs.subscribers_of_update("a", "x://1"), expected);
        assert_eq!(subs.counts_for("a", 9), (1, 4));
        for subscriber in [9, 1, 5, 3] {
            assert!(!subs.unsubscribe(subscriber, &key("a", "x://1")), "subscriber {subscriber} was not the last");
        }
        assert!(!subs.unsubscribe(3, &key("a", "x://1")), "released twice");
        assert_eq!(subs.counts_for("a", 0), (1, 1));
        assert!(subs.unsubscribe(7, &key("a", "x://1")));
        assert_eq!(subs.key_count(), 0);
    }

    #[test]
    fn updates_reach_subscribers_of_the_uri_and_of_its_parents_only() {
        let mut subs = SubscriptionTable::new();
        subs.subscribe(1, key("a", "file:///d"));
        subs.subscribe(2, key("a", "file:///d/f.md"));
        subs.subscribe(3, key("a", "file:///dx"));
        subs.subscribe(4, key("b", "file:///d/f.md"));
        let found = subs.subscribers_of_update("a", "file:///d/f.md");
        assert_eq!(found.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(found[&1], vec!["file:///d".to_string()]);
        assert!(subs.subscribers_of_update("a", "file:///other").is_empty());
    }

    #[test]
    fn sub_resource_rule() {
        for (subscribed, uri, expected) in [
            ("x://a", "x://a", true),
            ("x://a", "x://a/b", true),
            ("x://a/", "x://a/b", true),
            ("x://a", "x://a#frag", true),
            ("x://a", "x://ab", false),
            ("x://a/b", "x://a", false),
        ] {
            assert_eq!(is_same_or_parent(subscribed, uri), expected, "{subscribed} {uri}");
        }
    }
}
