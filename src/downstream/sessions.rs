//! Legacy HTTP session upkeep. rmcp closes a session after its keep-alive passes without a
//! request — even one that is subscribed and only waiting for notifications. The proxy turns
//! that off and keeps its own book of sessions instead: [`super::gate`] enters each session as
//! its `initialize` answer leaves (so a session that never says more is known too), and the
//! reaper closes one holding no subscriptions once it has been silent for
//! `server.session_idle_timeout`, a subscribed one after `server.subscribed_session_idle_timeout`
//! (a bound for hosts that vanished without a word).
//!
//! Invariants: the book holds at most `server.max_sessions` sessions, at most
//! `server.max_sessions_per_principal` of one principal; each entry carries the principal that
//! opened it, and its count in `mcp_proxy_downstream_sessions` lives exactly as long as it does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;

use crate::metrics::SessionGuard;
use crate::proxy::Proxy;
use crate::subscriptions::HolderId;

/// The open legacy sessions: owner, last activity, holder id once it has one.
pub(super) struct SessionBook {
    sessions: Mutex<HashMap<String, Seen>>,
    max_sessions: usize,
    max_per_principal: usize,
}

struct Seen {
    principal: Arc<str>,
    last: Instant,
    holder: Option<HolderId>,
    /// The session finished a handshake that chose a 2025-era version: the fast path may
    /// answer its reads and lists.
    legacy_ready: bool,
    _counted: SessionGuard,
}

/// Why a new session was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OverCap {
    /// `server.max_sessions` sessions are open.
    Total(usize),
    /// The principal has `server.max_sessions_per_principal` sessions open.
    Principal(usize),
}

impl SessionBook {
    pub fn new(max_sessions: usize, max_per_principal: usize) -> Self {
        Self { sessions: Mutex::default(), max_sessions, max_per_principal }
    }

    /// Enter a session rmcp just opened for `principal`, unless that passes a cap.
    pub fn admit(&self, session: &str, principal: &str, counted: SessionGuard) -> Result<(), OverCap> {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        if sessions.len() >= self.max_sessions {
            return Err(OverCap::Total(self.max_sessions));
        }
        let of_principal = sessions.values().filter(|seen| &*seen.principal == principal).count();
        if of_principal >= self.max_per_principal {
            return Err(OverCap::Principal(self.max_per_principal));
        }
        let seen = Seen {
            principal: principal.into(),
            last: Instant::now(),
            holder: None,
            legacy_ready: false,
            _counted: counted,
        };
        sessions.insert(session.to_string(), seen);
        Ok(())
    }

    /// The principal that opened `session`, if the book knows it.
    pub fn owner(&self, session: &str) -> Option<Arc<str>> {
        self.sessions.lock().expect("sessions lock").get(session).map(|seen| seen.principal.clone())
    }

    /// The principal that opened `session`, once it finished a 2025-era handshake.
    pub fn legacy_owner(&self, session: &str) -> Option<Arc<str>> {
        let sessions = self.sessions.lock().expect("sessions lock");
        sessions.get(session).filter(|seen| seen.legacy_ready).map(|seen| seen.principal.clone())
    }

    /// `session` finished its handshake with a 2025-era protocol version.
    pub fn handshake_done(&self, session: &str) {
        if let Some(seen) = self.sessions.lock().expect("sessions lock").get_mut(session) {
            seen.legacy_ready = true;
        }
    }

    /// The session made a request (sessions the book does not know are ignored).
    pub fn touch(&self, session: &str, holder: Option<HolderId>) {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        if let Some(seen) = sessions.get_mut(session) {
            seen.last = Instant::now();
            seen.holder = seen.holder.or(holder);
        }
    }

    /// The session ended; its count in the metric goes with it.
    pub fn forget(&self, session: &str) {
        self.sessions.lock().expect("sessions lock").remove(session);
    }

    /// Sessions due to be closed now.
    fn due(&self, idle: Duration, subscribed_idle: Duration, holds: impl Fn(HolderId) -> bool) -> Vec<String> {
        let now = Instant::now();
        let sessions = self.sessions.lock().expect("sessions lock");
        sessions
            .iter()
            .filter(|(_, seen)| {
                let limit = if seen.holder.is_some_and(&holds) { subscribed_idle } else { idle };
                now.duration_since(seen.last) >= limit
            })
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// Close sessions as they fall due, until `shutdown`.
pub(super) async fn reap(
    book: Arc<SessionBook>,
    manager: Arc<LocalSessionManager>,
    proxy: Proxy,
    shutdown: CancellationToken,
) {
    let server = proxy.config().server.clone();
    let every = (server.session_idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(60));
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let due = book.due(server.session_idle_timeout, server.subscribed_session_idle_timeout, |holder| {
            proxy.holds_anything(holder)
        });
        for session in due {
            tracing::info!(session = %session, "closing idle session");
            let _ = manager.close_session(&Arc::from(session.as_str())).await;
            book.forget(&session);
        }
    }
}
