//! Who an upstream session is for ([`SessionKey`]), and what waits for one ([`Reclaimed`]).
//!
//! A full pool (`max_sessions` open) makes room for a new principal by reclaiming the session
//! that went longest without a request, once that is at least `session_idle` ago and none is in
//! flight on it (it holds only subscriptions, or nothing): it is closed and what it subscribed waits
//! here, still subscribed for the same subscribers, until a session of the same key opens again (its
//! principal's or host session's next request, or the `sessions:<upstream>` sweep once the
//! pool has room). That session makes every subscribed URI again and reports each as changed. With
//! `[cluster]`, what waits for a session that another replica owns now goes there instead
//! (`owners`), each subscriber told once.
//!
//! Invariant: a waiting subscription is made again only on a session of its own key, never another's;
//! a subscriber that lets go (or whose host session ends) is forgotten here as on an open session.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::client::Declared;
use crate::subscription_table::SubscriberId;

/// Who a session is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum SessionKey {
    Principal(Arc<str>),
    /// A principal's host session (its subscriber id).
    Host(Arc<str>, u64),
}

impl SessionKey {
    pub(super) fn principal(&self) -> &str {
        match self {
            SessionKey::Principal(principal) | SessionKey::Host(principal, _) => principal,
        }
    }

    pub(super) fn host(&self) -> Option<u64> {
        match self {
            SessionKey::Principal(_) => None,
            SessionKey::Host(_, host) => Some(*host),
        }
    }
}

/// The URIs subscribed on one session, each with its subscribers.
pub(super) type SubscribedUris = BTreeMap<String, BTreeSet<SubscriberId>>;

/// What a reclaimed session subscribed, and what it declared upstream (per-host: its host's).
pub(super) struct Waiting {
    pub subscribed: SubscribedUris,
    pub declared: Option<Declared>,
}

/// The subscriptions of reclaimed sessions, per key, until a session of that key opens again.
#[derive(Default)]
pub(super) struct Reclaimed {
    waiting: Mutex<BTreeMap<SessionKey, Waiting>>,
}

impl Reclaimed {
    /// `key`'s session was closed subscribing `subscribed`: it waits (with what waited already).
    pub(super) fn park(&self, key: SessionKey, subscribed: SubscribedUris, declared: Option<Declared>) {
        if subscribed.is_empty() {
            return;
        }
        let mut waiting = self.waiting.lock().expect("reclaimed lock");
        let entry = waiting.entry(key).or_insert_with(|| Waiting { subscribed: SubscribedUris::new(), declared });
        for (uri, subscribers) in subscribed {
            entry.subscribed.entry(uri).or_default().extend(subscribers);
        }
    }

    /// What waits for `key`'s session, taken to be subscribed on it.
    pub(super) fn take(&self, key: &SessionKey) -> Option<Waiting> {
        self.waiting.lock().expect("reclaimed lock").remove(key)
    }

    /// `subscriber` lets go of `uri` (`None`: of everything it subscribes).
    pub(super) fn release(&self, subscriber: SubscriberId, uri: Option<&str>) {
        let mut waiting = self.waiting.lock().expect("reclaimed lock");
        waiting.retain(|_, waiting| {
            waiting.subscribed.retain(|subscribed, subscribers| {
                if uri.is_none_or(|uri| uri == subscribed) {
                    subscribers.remove(&subscriber);
                }
                !subscribers.is_empty()
            });
            !waiting.subscribed.is_empty()
        });
    }

    /// Host session `host` ended: nothing waits for its sessions any more.
    pub(super) fn host_ended(&self, host: u64) {
        self.waiting.lock().expect("reclaimed lock").retain(|key, _| key.host() != Some(host));
    }

    /// Nothing waits any more (the upstream stops).
    pub(super) fn clear(&self) {
        self.waiting.lock().expect("reclaimed lock").clear();
    }

    /// The keys waited for, oldest key order, with what their sessions declared.
    pub(super) fn keys(&self) -> Vec<(SessionKey, Option<Declared>)> {
        let waiting = self.waiting.lock().expect("reclaimed lock");
        waiting.iter().map(|(key, waiting)| (key.clone(), waiting.declared)).collect()
    }

    /// What waits: each key, what its session declared, and what it subscribed.
    pub(super) fn snapshot(&self) -> Vec<(SessionKey, Option<Declared>, SubscribedUris)> {
        let waiting = self.waiting.lock().expect("reclaimed lock");
        waiting.iter().map(|(key, waiting)| (key.clone(), waiting.declared, waiting.subscribed.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscribed(pairs: &[(&str, &[SubscriberId])]) -> SubscribedUris {
        pairs.iter().map(|(uri, subscribers)| (uri.to_string(), subscribers.iter().copied().collect())).collect()
    }

    fn check(reclaimed: &Reclaimed, expected: &[(&str, SubscriberId, &str)]) {
        let each = |(key, _, subscribed): (SessionKey, _, SubscribedUris)| {
            let key = format!("{}{:?}", key.principal(), key.host());
            let each = subscribed
                .into_iter()
                .flat_map(|(uri, subscribers)| subscribers.into_iter().map(move |s| (s, uri.clone())));
            each.map(move |(subscriber, uri)| (key.clone(), subscriber, uri)).collect::<Vec<_>>()
        };
        let all: Vec<(String, SubscriberId, String)> = reclaimed.snapshot().into_iter().flat_map(each).collect();
        let expected: Vec<(String, SubscriberId, String)> =
            expected.iter().map(|(key, subscriber, uri)| (key.to_string(), *subscriber, uri.to_string())).collect();
        assert_eq!(all, expected);
    }

    #[test]
    fn waiting_holds_are_merged_released_and_ended_with_their_host_session() {
        let reclaimed = Reclaimed::default();
        let (alice, host) = (SessionKey::Principal("alice".into()), SessionKey::Host("bob".into(), 7));
        reclaimed.park(alice.clone(), subscribed(&[("a://1", &[1, 2])]), None);
        reclaimed.park(alice.clone(), subscribed(&[("a://1", &[3]), ("a://2", &[1])]), None);
        reclaimed.park(host.clone(), subscribed(&[("b://1", &[9])]), None);
        reclaimed.park(SessionKey::Principal("carol".into()), SubscribedUris::new(), None);
        let all = [
            ("aliceNone", 1, "a://1"),
            ("aliceNone", 2, "a://1"),
            ("aliceNone", 3, "a://1"),
            ("aliceNone", 1, "a://2"),
            ("bobSome(7)", 9, "b://1"),
        ];
        check(&reclaimed, &all);
        reclaimed.release(1, None);
        reclaimed.release(2, Some("a://1"));
        check(&reclaimed, &[("aliceNone", 3, "a://1"), ("bobSome(7)", 9, "b://1")]);
        reclaimed.host_ended(7);
        check(&reclaimed, &[("aliceNone", 3, "a://1")]);
        assert!(reclaimed.take(&alice).is_some() && reclaimed.take(&alice).is_none());
        assert!(reclaimed.keys().is_empty());
    }
}
