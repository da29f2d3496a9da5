//! Who holds which upstream URI: reference counts across every downstream session, listen
//! stream and the cache's own watch, and the per-upstream watch set derived from them.
//!
//! Pure bookkeeping, no IO. Invariants: an (upstream, URI) is in the watch set exactly while at
//! least one holder holds it; releasing a holder releases everything it held; a host's holder
//! held under [`Caps`] never holds more than its cap, nor its principal's holders more than theirs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// A session, a listen stream, or the cache: anything that holds subscriptions.
pub type HolderId = u64;

/// An upstream and one of its (un-namespaced) URIs.
pub type Key = (String, String);

/// Caps on what a host's holder may hold: per holder (a session or listen stream) and, across
/// all of them, per principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub per_holder: usize,
    pub per_principal: usize,
}

/// Which cap a hold would break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverCap {
    Holder(usize),
    Principal(usize),
}

/// Who holds which (upstream, URI), with reference counts: the bookkeeping behind the watch
/// book (`coherence`). Not the hosts' subscriptions service (`proxy::Subscriptions`), which
/// holds through it.
///
/// Every key is stored once (an `Arc` shared by the key's entry and each holder's set), so a
/// hold costs a pointer in two sets, not two more copies of the upstream name and URI.
#[derive(Debug, Default)]
pub struct Holdings {
    by_key: BTreeMap<Arc<Key>, Holders>,
    by_holder: HashMap<HolderId, Held>,
    /// Holds of each principal's holders (only holders held under [`Caps`] count).
    by_principal: HashMap<Arc<str>, usize>,
}

/// The holders of one key, sorted. Most keys have one holder: a one-element `Vec` is an 8-byte
/// allocation where a `BTreeSet`'s first node is ~100 bytes (a third of a hold's bookkeeping).
#[derive(Debug, Default)]
struct Holders(Vec<HolderId>);

#[derive(Debug)]
struct Held {
    principal: Option<Arc<str>>,
    keys: BTreeSet<Arc<Key>>,
}

impl Holdings {
    pub fn new() -> Self {
        Self::default()
    }

    /// `holder` holds `key`, uncapped (the cache's own holds). True when the key was held by
    /// nobody before (the upstream must start watching it).
    pub fn hold(&mut self, holder: HolderId, key: Key) -> bool {
        self.insert(holder, None, key)
    }

    /// A host's `holder`, of `principal`, holds `key` unless that breaks `caps`. Ok(true) when
    /// the key was held by nobody before; holding a held key again is Ok and changes nothing.
    pub fn hold_within(&mut self, holder: HolderId, principal: &str, key: Key, caps: Caps) -> Result<bool, OverCap> {
        let held = self.by_holder.get(&holder);
        if held.is_some_and(|held| held.keys.contains(&key)) {
            return Ok(false);
        }
        if held.map_or(0, |held| held.keys.len()) >= caps.per_holder {
            return Err(OverCap::Holder(caps.per_holder));
        }
        if self.principal_holds(principal) >= caps.per_principal {
            return Err(OverCap::Principal(caps.per_principal));
        }
        Ok(self.insert(holder, Some(principal), key))
    }

    /// Holds of `principal`'s holders, across all of them.
    pub fn principal_holds(&self, principal: &str) -> usize {
        self.by_principal.get(principal).copied().unwrap_or(0)
    }

    /// `holder` lets go of `key`. True when nobody holds it any more.
    pub fn release(&mut self, holder: HolderId, key: &Key) -> bool {
        let Some(held) = self.by_holder.get_mut(&holder) else { return false };
        if !held.keys.remove(key) {
            return false;
        }
        let principal = held.principal.clone();
        if held.keys.is_empty() {
            self.by_holder.remove(&holder);
        }
        self.forget(principal.as_ref(), 1);
        let Some(holders) = self.by_key.get_mut(key) else { return false };
        holders.remove(holder);
        if holders.is_empty() {
            self.by_key.remove(key);
            return true;
        }
        false
    }

    /// `holder` is gone: everything it held is released. Returns the keys nobody holds now.
    pub fn release_all(&mut self, holder: HolderId) -> Vec<Key> {
        let Some(held) = self.by_holder.remove(&holder) else { return Vec::new() };
        self.forget(held.principal.as_ref(), held.keys.len());
        let mut dropped = Vec::new();
        for key in held.keys {
            if let Some(holders) = self.by_key.get_mut(&key) {
                holders.remove(holder);
                if holders.is_empty() {
                    self.by_key.remove(&key);
                    dropped.push(Arc::unwrap_or_clone(key));
                }
            }
        }
        dropped
    }

    /// Who must hear of an `updated` for `uri` of `upstream`: holders of that URI and of every
    /// URI it is a sub-resource of, each with the held URIs that matched.
    pub fn holders_of_update(&self, upstream: &str, uri: &str) -> BTreeMap<HolderId, Vec<String>> {
        let mut found: BTreeMap<HolderId, Vec<String>> = BTreeMap::new();
        for (key, holders) in self.of_upstream(upstream) {
            if is_same_or_parent(&key.1, uri) {
                for holder in holders {
                    found.entry(*holder).or_default().push(key.1.clone());
                }
            }
        }
        found
    }

    /// Every holder of a URI of `upstream`, with the URIs it holds there.
    pub fn holders_in(&self, upstream: &str) -> BTreeMap<HolderId, Vec<String>> {
        let mut found: BTreeMap<HolderId, Vec<String>> = BTreeMap::new();
        for (key, holders) in self.of_upstream(upstream) {
            for holder in holders {
                found.entry(*holder).or_default().push(key.1.clone());
            }
        }
        found
    }

    /// The URIs of `upstream` somebody holds.
    pub fn watched(&self, upstream: &str) -> BTreeSet<String> {
        self.of_upstream(upstream).map(|(key, _)| key.1.clone()).collect()
    }

    /// What `holder` holds.
    pub fn held_by(&self, holder: HolderId) -> Vec<Key> {
        self.by_holder
            .get(&holder)
            .map(|held| held.keys.iter().map(|key| (**key).clone()).collect())
            .unwrap_or_default()
    }

    /// Does `holder` hold anything?
    pub fn holds_anything(&self, holder: HolderId) -> bool {
        self.by_holder.contains_key(&holder)
    }

    /// For `upstream`: (URIs held, holds by holders other than `except`).
    pub fn counts_for(&self, upstream: &str, except: HolderId) -> (usize, usize) {
        self.of_upstream(upstream).fold((0, 0), |(uris, holds), (_, holders)| {
            (uris + 1, holds + holders.iter().filter(|h| **h != except).count())
        })
    }

    /// Number of distinct (upstream, URI) pairs held.
    pub fn key_count(&self) -> usize {
        self.by_key.len()
    }

    /// Number of (holder, key) pairs.
    pub fn hold_count(&self) -> usize {
        self.by_holder.values().map(|held| held.keys.len()).sum()
    }

    fn of_upstream<'a>(&'a self, upstream: &'a str) -> impl Iterator<Item = (&'a Arc<Key>, &'a [HolderId])> {
        let from: Key = (upstream.to_string(), String::new());
        self.by_key
            .range::<Key, _>(from..)
            .take_while(move |(key, _)| key.0 == upstream)
            .map(|(key, holders)| (key, holders.0.as_slice()))
    }

    fn insert(&mut self, holder: HolderId, principal: Option<&str>, key: Key) -> bool {
        let key = match self.by_key.get_key_value(&key) {
            Some((shared, _)) => shared.clone(),
            None => Arc::new(key),
        };
        let principal = principal.map(|name| match self.by_principal.get_key_value(name) {
            Some((shared, _)) => shared.clone(),
            None => Arc::from(name),
        });
        let held = self.by_holder.entry(holder).or_insert_with(|| Held { principal, keys: BTreeSet::new() });
        if !held.keys.insert(key.clone()) {
            return false;
        }
        if let Some(principal) = &held.principal {
            *self.by_principal.entry(principal.clone()).or_default() += 1;
        }
        let holders = self.by_key.entry(key).or_default();
        holders.insert(holder);
        holders.0.len() == 1
    }

    fn forget(&mut self, principal: Option<&Arc<str>>, holds: usize) {
        let Some(principal) = principal else { return };
        if let Some(count) = self.by_principal.get_mut(principal) {
            *count = count.saturating_sub(holds);
            if *count == 0 {
                self.by_principal.remove(principal);
            }
        }
    }
}

/// `uri` is `held`, or a sub-resource of it: `held` followed by `/`, `#` or `?` (or `held`
/// itself ends with `/`).
impl Holders {
    fn insert(&mut self, holder: HolderId) {
        if let Err(at) = self.0.binary_search(&holder) {
            if self.0.is_empty() {
                // A `Vec`'s first growth would make room for four.
                self.0.reserve_exact(1);
            }
            self.0.insert(at, holder);
        }
    }

    fn remove(&mut self, holder: HolderId) {
        if let Ok(at) = self.0.binary_search(&holder) {
            self.0.remove(at);
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

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
        let mut subs = Holdings::new();
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
        let mut subs = Holdings::new();
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
    fn caps_count_per_holder_and_across_a_principals_holders() {
        let caps = Caps { per_holder: 2, per_principal: 3 };
        let mut subs = Holdings::new();
        assert_eq!(subs.hold_within(1, "bob", key("a", "x://1"), caps), Ok(true));
        assert_eq!(subs.hold_within(1, "bob", key("a", "x://2"), caps), Ok(true));
        assert_eq!(subs.hold_within(1, "bob", key("a", "x://1"), caps), Ok(false), "held again: no new hold");
        assert_eq!(subs.hold_within(1, "bob", key("a", "x://3"), caps), Err(OverCap::Holder(2)));
        assert_eq!(subs.hold_within(2, "bob", key("a", "x://1"), caps), Ok(false));
        assert_eq!(subs.hold_within(2, "bob", key("a", "x://3"), caps), Err(OverCap::Principal(3)));
        assert_eq!(subs.hold_within(3, "alice", key("a", "x://3"), caps), Ok(true), "others are not affected");
        assert!(subs.hold(4, key("a", "x://4")), "the cache is not capped");
        assert_eq!(subs.principal_holds("bob"), 3);
        assert!(!subs.release(1, &key("a", "x://1")));
        assert_eq!(subs.hold_within(2, "bob", key("a", "x://3"), caps), Ok(false), "a released place is free");
        subs.release_all(2);
        assert_eq!(subs.principal_holds("bob"), 1);
        subs.release_all(1);
        assert_eq!(subs.principal_holds("bob"), 0);
        assert!(!subs.by_principal.contains_key("bob"), "nothing left of a principal without holds");
    }

    #[test]
    fn many_holders_of_one_key_leave_in_any_order() {
        let mut subs = Holdings::new();
        let holders = [5, 3, 9, 1, 7];
        for holder in holders {
            subs.hold(holder, key("a", "x://1"));
        }
        subs.hold(3, key("a", "x://1"));
        let expected: BTreeMap<HolderId, Vec<String>> =
            [1, 3, 5, 7, 9].into_iter().map(|holder| (holder, vec!["x://1".to_string()])).collect();
        assert_eq!(subs.holders_of_update("a", "x://1"), expected);
        assert_eq!(subs.counts_for("a", 9), (1, 4));
        for holder in [9, 1, 5, 3] {
            assert!(!subs.release(holder, &key("a", "x://1")), "holder {holder} was not the last");
        }
        assert!(!subs.release(3, &key("a", "x://1")), "released twice");
        assert_eq!(subs.counts_for("a", 0), (1, 1));
        assert!(subs.release(7, &key("a", "x://1")));
        assert_eq!(subs.key_count(), 0);
    }

    #[test]
    fn updates_reach_holders_of_the_uri_and_of_its_parents_only() {
        let mut subs = Holdings::new();
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
