//! Who holds which upstream URI: reference counts across every downstream session, listen
//! stream and the cache's own watch, and the per-upstream watch set derived from them.
//!
//! Pure bookkeeping, no IO. Invariant: an (upstream, URI) is in the watch set exactly while at
//! least one holder holds it; releasing a holder releases everything it held.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A session, a listen stream, or the cache: anything that holds subscriptions.
pub type HolderId = u64;

/// An upstream and one of its (un-namespaced) URIs.
pub type Key = (String, String);

#[derive(Debug, Default)]
pub struct Subscriptions {
    by_key: BTreeMap<Key, BTreeSet<HolderId>>,
    by_holder: HashMap<HolderId, BTreeSet<Key>>,
}

impl Subscriptions {
    pub fn new() -> Self {
        Self::default()
    }

    /// `holder` holds `key`. True when the key was held by nobody before (the upstream must
    /// start watching it).
    pub fn hold(&mut self, holder: HolderId, key: Key) -> bool {
        self.by_holder.entry(holder).or_default().insert(key.clone());
        let holders = self.by_key.entry(key).or_default();
        holders.insert(holder);
        holders.len() == 1
    }

    /// `holder` lets go of `key`. True when nobody holds it any more.
    pub fn release(&mut self, holder: HolderId, key: &Key) -> bool {
        if let Some(keys) = self.by_holder.get_mut(&holder) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_holder.remove(&holder);
            }
        }
        let Some(holders) = self.by_key.get_mut(key) else { return false };
        let was_held = holders.remove(&holder);
        if holders.is_empty() {
            self.by_key.remove(key);
            return was_held;
        }
        false
    }

    /// `holder` is gone: everything it held is released. Returns the keys nobody holds now.
    pub fn release_all(&mut self, holder: HolderId) -> Vec<Key> {
        let keys = self.by_holder.remove(&holder).unwrap_or_default();
        let mut dropped = Vec::new();
        for key in keys {
            if let Some(holders) = self.by_key.get_mut(&key) {
                holders.remove(&holder);
                if holders.is_empty() {
                    self.by_key.remove(&key);
                    dropped.push(key);
                }
            }
        }
        dropped
    }

    /// Who must hear of an `updated` for `uri` of `upstream`: holders of that URI and of every
    /// URI it is a sub-resource of, each with the held URIs that matched.
    pub fn holders_of_update(&self, upstream: &str, uri: &str) -> BTreeMap<HolderId, Vec<String>> {
        let mut found: BTreeMap<HolderId, Vec<String>> = BTreeMap::new();
        let from = (upstream.to_string(), String::new());
        for ((_, held), holders) in self.by_key.range(from..).take_while(|((u, _), _)| u == upstream) {
            if is_same_or_parent(held, uri) {
                for holder in holders {
                    found.entry(*holder).or_default().push(held.clone());
                }
            }
        }
        found
    }

    /// Every holder of a URI of `upstream`, with the URIs it holds there.
    pub fn holders_in(&self, upstream: &str) -> BTreeMap<HolderId, Vec<String>> {
        let mut found: BTreeMap<HolderId, Vec<String>> = BTreeMap::new();
        let from = (upstream.to_string(), String::new());
        for ((_, held), holders) in self.by_key.range(from..).take_while(|((u, _), _)| u == upstream) {
            for holder in holders {
                found.entry(*holder).or_default().push(held.clone());
            }
        }
        found
    }

    /// The URIs of `upstream` somebody holds.
    pub fn watched(&self, upstream: &str) -> BTreeSet<String> {
        let from = (upstream.to_string(), String::new());
        self.by_key.range(from..).take_while(|((u, _), _)| u == upstream).map(|((_, uri), _)| uri.clone()).collect()
    }

    /// What `holder` holds.
    pub fn held_by(&self, holder: HolderId) -> Vec<Key> {
        self.by_holder.get(&holder).map(|keys| keys.iter().cloned().collect()).unwrap_or_default()
    }

    /// For `upstream`: (URIs held, holds by holders other than `except`).
    pub fn counts_for(&self, upstream: &str, except: HolderId) -> (usize, usize) {
        let from = (upstream.to_string(), String::new());
        self.by_key.range(from..).take_while(|((u, _), _)| u == upstream).fold((0, 0), |(uris, holds), (_, holders)| {
            (uris + 1, holds + holders.iter().filter(|h| **h != except).count())
        })
    }

    /// Number of distinct (upstream, URI) pairs held.
    pub fn key_count(&self) -> usize {
        self.by_key.len()
    }

    /// Number of (holder, key) pairs.
    pub fn hold_count(&self) -> usize {
        self.by_holder.values().map(BTreeSet::len).sum()
    }
}

/// `uri` is `held`, or a sub-resource of it: `held` followed by `/`, `#` or `?` (or `held`
/// itself ends with `/`).
pub fn is_same_or_parent(held: &str, uri: &str) -> bool {
    match uri.strip_prefix(held) {
        Some("") => true,
        Some(rest) => held.ends_with('/') || rest.starts_with(['/', '#', '?']),
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
    fn first_hold_starts_and_last_release_stops() {
        let mut subs = Subscriptions::new();
        assert!(subs.hold(1, key("a", "x://1")));
        assert!(!subs.hold(2, key("a", "x://1")));
        assert!(!subs.hold(2, key("a", "x://1")), "holding twice is holding once");
        assert!(!subs.release(1, &key("a", "x://1")));
        assert_eq!(subs.watched("a"), BTreeSet::from(["x://1".to_string()]));
        assert!(subs.release(2, &key("a", "x://1")));
        assert!(subs.watched("a").is_empty());
        assert!(!subs.release(2, &key("a", "x://1")), "releasing what is not held changes nothing");
    }

    #[test]
    fn a_holder_that_goes_releases_everything() {
        let mut subs = Subscriptions::new();
        subs.hold(1, key("a", "x://1"));
        subs.hold(1, key("b", "x://2"));
        subs.hold(2, key("b", "x://2"));
        let mut dropped = subs.release_all(1);
        dropped.sort();
        assert_eq!(dropped, vec![key("a", "x://1")]);
        assert_eq!(subs.held_by(2), vec![key("b", "x://2")]);
        assert_eq!(subs.key_count(), 1);
        assert_eq!(subs.hold_count(), 1);
    }

    #[test]
    fn updates_reach_holders_of_the_uri_and_of_its_parents_only() {
        let mut subs = Subscriptions::new();
        subs.hold(1, key("a", "file:///d"));
        subs.hold(2, key("a", "file:///d/f.md"));
        subs.hold(3, key("a", "file:///dx"));
        subs.hold(4, key("b", "file:///d/f.md"));
        let found = subs.holders_of_update("a", "file:///d/f.md");
        assert_eq!(found.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(found[&1], vec!["file:///d".to_string()]);
        assert!(subs.holders_of_update("a", "file:///other").is_empty());
    }

    #[test]
    fn sub_resource_rule() {
        for (held, uri, expected) in [
            ("x://a", "x://a", true),
            ("x://a", "x://a/b", true),
            ("x://a/", "x://a/b", true),
            ("x://a", "x://a#frag", true),
            ("x://a", "x://ab", false),
            ("x://a/b", "x://a", false),
        ] {
            assert_eq!(is_same_or_parent(held, uri), expected, "{held} {uri}");
        }
    }
}
