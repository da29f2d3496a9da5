//! The open sessions of one upstream ([`OpenSessions`]): each with its stop token and when it
//! was last used (a [`Lease`] per request keeps it busy), closed by host session, by idleness or
//! to make room in a full pool (then its subscriptions wait in `pool`'s `Reclaimed` for its
//! key's next session). Opening one is `sessions`' (`Upstream::open_session`), which holds the
//! lock while it decides.
//!
//! Invariant: a session is in here from its opening to its closing, and a closed one's stop
//! token is cancelled.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::pool::{Reclaimed, SessionKey};
use super::session::Session;

/// The open sessions of one upstream, and the subscriptions of those reclaimed from a full pool.
/// Lock order: `open`, then `reclaimed`.
#[derive(Default)]
pub(super) struct OpenSessions {
    pub(super) open: Mutex<BTreeMap<SessionKey, Entry>>,
    pub(super) reclaimed: Reclaimed,
}

pub(super) struct Entry {
    pub(super) session: Session,
    pub(super) stop: CancellationToken,
    pub(super) usage: Arc<Usage>,
}

/// When a session was last used; a [`Lease`] per request keeps it busy.
pub(super) struct Usage {
    last: Mutex<Instant>,
}

/// A request's lease on a session: it is not closed as idle while leased, and counts as used
/// until the lease ends.
pub struct Lease {
    usage: Arc<Usage>,
}

impl Usage {
    /// Used now.
    pub(super) fn now() -> Arc<Self> {
        Arc::new(Usage { last: Mutex::new(Instant::now()) })
    }
}

impl Lease {
    /// A request's lease on the session of `usage`.
    pub(super) fn on(usage: &Arc<Usage>) -> Self {
        Lease { usage: usage.clone() }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        *self.usage.last.lock().expect("usage lock") = Instant::now();
    }
}

impl OpenSessions {
    pub fn len(&self) -> usize {
        self.open.lock().expect("sessions lock").len()
    }

    /// The open session of `key`, if one is.
    pub(super) fn session(&self, key: &SessionKey) -> Option<Session> {
        self.open.lock().expect("sessions lock").get(key).map(|entry| entry.session.clone())
    }

    /// Every open session, with its key.
    pub(super) fn sessions(&self) -> Vec<(SessionKey, Session)> {
        let open = self.open.lock().expect("sessions lock");
        open.iter().map(|(key, entry)| (key.clone(), entry.session.clone())).collect()
    }

    /// Close every session (the upstream is stopping or starting again).
    pub fn close_all(&self) {
        let closed = std::mem::take(&mut *self.open.lock().expect("sessions lock"));
        closed.values().for_each(|entry| entry.stop.cancel());
        self.reclaimed.clear();
    }

    /// Close the sessions of host session `host`; those there were.
    pub(super) fn close_host(&self, host: u64) -> Vec<Session> {
        self.reclaimed.host_ended(host);
        self.close_where(|key, _| matches!(key, SessionKey::Host(_, h) if *h == host))
    }

    /// Close the sessions unused for `idle` that no request leases; those there were.
    pub(super) fn close_idle(&self, idle: Duration) -> Vec<Session> {
        self.close_where(|_, entry| {
            let busy = Arc::strong_count(&entry.usage) > 1 || entry.session.subscriptions().subscribes_anything();
            !busy && entry.usage.last.lock().expect("usage lock").elapsed() >= idle
        })
    }

    /// Close the sessions `closing` picks; those there were.
    fn close_where(&self, mut closing: impl FnMut(&SessionKey, &Entry) -> bool) -> Vec<Session> {
        let mut open = self.open.lock().expect("sessions lock");
        let mut closed = Vec::new();
        open.retain(|key, entry| {
            let close = closing(key, entry);
            if close {
                entry.stop.cancel();
                closed.push(entry.session.clone());
            }
            !close
        });
        closed
    }

    /// Forget `key`'s session if it is still `session` (one that could not be opened); what it
    /// subscribed waits for the next one.
    pub(super) fn forget(&self, key: &SessionKey, session: &Session) {
        let mut open = self.open.lock().expect("sessions lock");
        if open.get(key).is_some_and(|entry| Arc::ptr_eq(&entry.session.inner, &session.inner))
            && let Some(entry) = open.remove(key)
        {
            entry.stop.cancel();
            self.reclaimed.park(key.clone(), entry.session.subscriptions().take_all(), entry.session.inner.declared);
        }
    }

    /// Make room in a full pool: close the session that went longest without a request, if
    /// that is `idle` ago or more and no request leases it; what it subscribed waits in `reclaimed`.
    pub(super) fn reclaim(&self, open: &mut BTreeMap<SessionKey, Entry>, idle: Duration) -> Option<Session> {
        let last_used = |entry: &Entry| *entry.usage.last.lock().expect("usage lock");
        let (key, _) = open
            .iter()
            .filter(|(_, entry)| Arc::strong_count(&entry.usage) == 1)
            .map(|(key, entry)| (key, last_used(entry)))
            .filter(|(_, last)| last.elapsed() >= idle)
            .min_by_key(|(_, last)| *last)?;
        let key = key.clone();
        let entry = open.remove(&key)?;
        entry.stop.cancel();
        self.reclaimed.park(key, entry.session.subscriptions().take_all(), entry.session.inner.declared);
        Some(entry.session)
    }
}
