//! Who is told about which changes: legacy (2025) sessions and 2026-07-28 listen streams.
//!
//! Peers have no identity of their own. A legacy session is recognised by its handshake record
//! (`Peer::peer_info`, one `Arc` per session); a listen stream gets an id when it registers.
//! Invariant: every path in here was vetted by `Root::watchable`, so only changes inside the
//! folder are ever routed.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rmcp::model::InitializeRequestParams;
use rmcp::service::{Peer, RoleServer, SubscriptionSink};

use super::paths::uri_below;

/// All registrations, behind one short-lived lock.
#[derive(Debug, Default)]
pub(super) struct Subscribers {
    state: Mutex<State>,
}

/// One batch of coalesced file-system changes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Change {
    /// Paths whose content (or existence) changed.
    pub(super) updated: BTreeSet<PathBuf>,
    /// Whether the set of files changed.
    pub(super) list_changed: bool,
}

/// Where one notification goes.
#[derive(Debug, Clone)]
pub(super) enum Target {
    Session(u64, Peer<RoleServer>),
    Stream(u64, SubscriptionSink),
}

/// One notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Notice {
    Updated(String),
    ListChanged,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    sessions: HashMap<u64, Session>,
    streams: HashMap<u64, Stream>,
}

#[derive(Debug)]
struct Session {
    peer: Peer<RoleServer>,
    identity: Option<Arc<InitializeRequestParams>>,
    /// (URI as subscribed, path it names).
    watched: Vec<(String, PathBuf)>,
}

#[derive(Debug)]
struct Stream {
    sink: SubscriptionSink,
    list_changed: bool,
    /// Path → the URIs (as in the accepted filter) that name it.
    watched: HashMap<PathBuf, Vec<String>>,
}

impl Subscribers {
    /// Records a legacy session (idempotent); returns its id.
    pub(super) fn session_seen(&self, peer: &Peer<RoleServer>) -> u64 {
        let mut state = self.lock();
        state.sessions.retain(|_, s| !s.peer.is_transport_closed());
        state.session_id(peer)
    }

    /// A legacy `resources/subscribe`.
    pub(super) fn subscribe(&self, peer: &Peer<RoleServer>, uri: String, path: PathBuf) {
        let mut state = self.lock();
        let id = state.session_id(peer);
        let session = state.sessions.get_mut(&id).expect("session just ensured");
        if !session.watched.iter().any(|(u, _)| *u == uri) {
            session.watched.push((uri, path));
        }
    }

    /// A legacy `resources/unsubscribe`.
    pub(super) fn unsubscribe(&self, peer: &Peer<RoleServer>, uri: &str) {
        let mut state = self.lock();
        let id = state.session_id(peer);
        if let Some(session) = state.sessions.get_mut(&id) {
            session.watched.retain(|(u, _)| u != uri);
        }
    }

    /// A listen stream; returns the id to [`Self::remove_stream`] with.
    pub(super) fn add_stream(
        &self,
        sink: SubscriptionSink,
        list_changed: bool,
        watched: HashMap<PathBuf, Vec<String>>,
    ) -> u64 {
        let mut state = self.lock();
        let id = state.fresh_id();
        let stream = Stream { sink, list_changed, watched };
        state.streams.insert(id, stream);
        id
    }

    pub(super) fn remove_stream(&self, id: u64) {
        self.lock().streams.remove(&id);
    }

    /// Drops a target whose peer is gone.
    pub(super) fn forget(&self, target: &Target) {
        let mut state = self.lock();
        match target {
            Target::Session(id, _) => {
                state.sessions.remove(id);
            }
            Target::Stream(id, _) => {
                state.streams.remove(id);
            }
        }
    }

    /// Every notification `change` causes, with its target.
    pub(super) fn deliveries(&self, change: &Change) -> Vec<(Target, Notice)> {
        let state = self.lock();
        let mut out = Vec::new();
        for (id, session) in &state.sessions {
            let target = Target::Session(*id, session.peer.clone());
            for notice in session.notices(change) {
                out.push((target.clone(), notice));
            }
        }
        for (id, stream) in &state.streams {
            let target = Target::Stream(*id, stream.sink.clone());
            for notice in stream.notices(change) {
                out.push((target.clone(), notice));
            }
        }
        out
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// The id of `peer`'s session, registering it if new.
    fn session_id(&mut self, peer: &Peer<RoleServer>) -> u64 {
        let identity = peer.peer_info();
        if let Some(identity) = &identity {
            let known = self
                .sessions
                .iter()
                .find(|(_, s)| s.identity.as_ref().is_some_and(|known| Arc::ptr_eq(known, identity)));
            if let Some((id, _)) = known {
                return *id;
            }
        }
        let id = self.fresh_id();
        let session = Session { peer: peer.clone(), identity, watched: Vec::new() };
        self.sessions.insert(id, session);
        id
    }
}

impl Session {
    /// `updated` for each changed path at or under a watched one (the exact URI when it is
    /// the watched path itself), and `list_changed` whenever the set of files changed.
    fn notices(&self, change: &Change) -> Vec<Notice> {
        let mut uris = BTreeSet::new();
        for path in &change.updated {
            for (uri, watched) in &self.watched {
                if path == watched {
                    uris.insert(uri.clone());
                } else if let Ok(below) = path.strip_prefix(watched) {
                    uris.insert(uri_below(uri, below));
                }
            }
        }
        let mut notices: Vec<Notice> = uris.into_iter().map(Notice::Updated).collect();
        if change.list_changed {
            notices.push(Notice::ListChanged);
        }
        notices
    }
}

impl Stream {
    /// `updated` only for exactly watched paths (rmcp clients end a stream on any other URI).
    fn notices(&self, change: &Change) -> Vec<Notice> {
        let mut notices: Vec<Notice> = change
            .updated
            .iter()
            .filter_map(|path| self.watched.get(path as &Path))
            .flatten()
            .map(|uri| Notice::Updated(uri.clone()))
            .collect();
        if change.list_changed && self.list_changed {
            notices.push(Notice::ListChanged);
        }
        notices
    }
}
