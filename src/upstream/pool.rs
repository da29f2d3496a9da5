//! Who an upstream session is for ([`SessionKey`]), and what waits for one ([`Reclaimed`]).
//!
//! A full pool (`max_sessions` open) makes room for a new principal by reclaiming the session
//! that went longest without a request, once that is at least `session_idle` ago and none is in
//! flight on it (it holds only subscriptions, or nothing): it is closed and what it held waits
//! here, still held for the same holders, until a session of the same key opens again (its
//! principal's or host session's next request, or the `sessions:<upstream>` sweep once the
//! pool has room). That session makes every held URI again and reports each as changed. With
//! `[cluster]`, what waits for a session that another replica holds now goes there instead
//! (`owners`), each holder told once.
//!
//! Invariant: a waiting hold is made again only on a session of its own key, never another's;
//! a holder that lets go (or whose host session ends) is forgotten here as on an open session.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::client::Declared;
use crate::subscriptions::HolderId;

/// Who a session is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum SessionKey {
    Principal(Arc<str>),
    /// A principal's host session (its holder id).
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

/// The URIs held on one session, each with its holders.
pub(super) type HeldUris = BTreeMap<String, BTreeSet<HolderId>>;

/// What a reclaimed session held, and what it declared upstream (per-host: its host's).
pub(super) struct Waiting {
    pub held: HeldUris,
    pub declared: Option<Declared>,
}

/// The holds of reclaimed sessions, per key, until a session of that key opens again.
#[derive(Default)]
pub(super) struct Reclaimed {
    waiting: Mutex<BTreeMap<SessionKey, Waiting>>,
}

impl Reclaimed {
    /// `key`'s session was closed holding `held`: it waits (with what waited already).
    pub(super) fn park(&self, key: SessionKey, held: HeldUris, declared: Option<Declared>) {
        if held.is_empty() {
            return;
        }
        let mut waiting = self.waiting.lock().expect("reclaimed lock");
        let entry = waiting.entry(key).or_insert_with(|| Waiting { held: HeldUris::new(), declared });
        for (uri, holders) in held {
            entry.held.entry(uri).or_default().extend(holders);
        }
    }

    /// What waits for `key`'s session, taken to be held on it.
    pub(super) fn take(&self, key: &SessionKey) -> Option<Waiting> {
        self.waiting.lock().expect("reclaimed lock").remove(key)
    }

    /// `holder` lets go of `uri` (`None`: of everything it holds).
    pub(super) fn release(&self, holder: HolderId, uri: Option<&str>) {
        let mut waiting = self.waiting.lock().expect("reclaimed lock");
        waiting.retain(|_, waiting| {
            waiting.held.retain(|held, holders| {
                if uri.is_none_or(|uri| uri == held) {
                    holders.remove(&holder);
                }
                !holders.is_empty()
            });
            !waiting.held.is_empty()
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

    /// Every waiting hold: key, declared, holder, URI.
    pub(super) fn all(&self) -> Vec<(SessionKey, Option<Declared>, HolderId, String)> {
        let waiting = self.waiting.lock().expect("reclaimed lock");
        let mut all = Vec::new();
        for (key, waiting) in waiting.iter() {
            for (uri, holders) in &waiting.held {
                all.extend(holders.iter().map(|holder| (key.clone(), waiting.declared, *holder, uri.clone())));
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(pairs: &[(&str, &[HolderId])]) -> HeldUris {
        pairs.iter().map(|(uri, holders)| (uri.to_string(), holders.iter().copied().collect())).collect()
    }

    fn check(reclaimed: &Reclaimed, expected: &[(&str, HolderId, &str)]) {
        let all: Vec<(String, HolderId, String)> = reclaimed
            .all()
            .into_iter()
            .map(|(key, _, holder, uri)| (format!("{}{:?}", key.principal(), key.host()), holder, uri))
            .collect();
        let expected: Vec<(String, HolderId, String)> =
            expected.iter().map(|(key, holder, uri)| (key.to_string(), *holder, uri.to_string())).collect();
        assert_eq!(all, expected);
    }

    #[test]
    fn waiting_holds_are_merged_released_and_ended_with_their_host_session() {
        let reclaimed = Reclaimed::default();
        let (alice, host) = (SessionKey::Principal("alice".into()), SessionKey::Host("bob".into(), 7));
        reclaimed.park(alice.clone(), held(&[("a://1", &[1, 2])]), None);
        reclaimed.park(alice.clone(), held(&[("a://1", &[3]), ("a://2", &[1])]), None);
        reclaimed.park(host.clone(), held(&[("b://1", &[9])]), None);
        reclaimed.park(SessionKey::Principal("carol".into()), HeldUris::new(), None);
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
