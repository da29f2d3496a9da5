//! Legacy HTTP session upkeep. rmcp closes a session after its keep-alive passes without a
//! request — even one that is subscribed and only waiting for notifications. The proxy turns
//! that off and keeps its own book of sessions instead: [`super::gate`] enters each session as
//! its `initialize` answer leaves (so a session that never says more is known too), and the
//! reaper closes one holding no subscriptions once it has been silent for
//! `server.session_idle_timeout`, a subscribed one after `server.subscribed_session_idle_timeout`
//! (a bound for hosts that vanished without a word). A session that made no request since its
//! `initialize` (the `initialized` notification is none) and never opened its GET stream costs
//! memory for nothing: it is closed sooner, after `server.unused_session_idle_timeout`.
//!
//! Invariants: the book holds at most `server.max_sessions` sessions, at most
//! `server.max_sessions_per_principal` of one principal; each entry carries the principal that
//! opened it, and its count in `mcp_proxy_downstream_sessions` lives exactly as long as it does;
//! a session is marked used (for good) by its first request or GET stream after `initialize`.

#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rmcp::model::LoggingLevel;

use super::relay::LogLevel;
use crate::metrics::SessionGuard;
use crate::subscription_table::SubscriberId;

/// The open legacy sessions: owner, last activity, subscriber id once it has one.
pub(super) struct SessionBook {
    sessions: Mutex<HashMap<String, Seen>>,
    max_sessions: usize,
    max_per_principal: usize,
    /// `[cluster]`: the caps are kept cluster-wide by the records, not here.
    shared_caps: bool,
    /// Woken whenever a session's subscriber id becomes known (see [`SessionBook::wait_subscriber`]).
    subscribers: tokio::sync::Notify,
    /// `[cluster]`: levels session news brought, by record key, while no handler here filtered
    /// that session's messages yet (one being restored); taken by the first to register within
    /// [`EARLY_LEVEL_FOR`]. Locked inside `sessions`.
    early_levels: Mutex<HashMap<String, (LoggingLevel, Instant)>>,
}

/// How long a level session news brought waits for a handler restored here (its record was
/// read before the level was set; its handler registers a moment later).
const EARLY_LEVEL_FOR: Duration = Duration::from_secs(10);

struct Seen {
    principal: Arc<str>,
    last: Instant,
    subscriber: Option<SubscriberId>,
    /// The session made a request, or opened its GET stream, after its `initialize`.
    used: bool,
    /// The session finished a handshake that chose a 2025-era version: the fast path may
    /// answer its reads and lists.
    legacy_ready: bool,
    /// `[cluster]`: a GET stream of the session was served by this replica (its event ids are
    /// this replica's to resume).
    streamed_here: bool,
    /// `[cluster]`: when the session's record was last told of its activity.
    pushed: Instant,
    /// `[cluster]`: the log level its handler here filters by (set again by session news).
    level: Option<LogLevel>,
    _counted: SessionGuard,
}

/// `[cluster]`: put by the gate on a request that opens a session; the handler answering its
/// `initialize` registers the session's outlet at once and leaves its subscriber id here, so the
/// book knows it although `notifications/initialized` may land on another replica (a GET stream
/// served here then waits for no handler that will never come).
#[derive(Clone, Default)]
pub(crate) struct OpenedSubscriber {
    pub subscriber: Arc<OnceLock<SubscriberId>>,
    /// The handler's host key, which the gate sets once the session's id is known.
    pub host_key: Arc<OnceLock<crate::fanout::HostKey>>,
    /// The handler's log level, which session news sets when `logging/setLevel` lands on
    /// another replica before this one served a request of the session.
    pub log_level: Arc<OnceLock<LogLevel>>,
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
        Self {
            sessions: Mutex::default(),
            max_sessions,
            max_per_principal,
            shared_caps: false,
            subscribers: tokio::sync::Notify::new(),
            early_levels: Mutex::default(),
        }
    }

    /// `[cluster]`: the caps are the cluster's (see [`SessionBook::caps`]), checked elsewhere.
    pub fn with_shared_caps(mut self) -> Self {
        self.shared_caps = true;
        self
    }

    /// `server.max_sessions` and `server.max_sessions_per_principal`.
    pub fn caps(&self) -> (usize, usize) {
        (self.max_sessions, self.max_per_principal)
    }

    /// Enter a session rmcp just opened for `principal`, unless that passes a cap.
    pub fn admit(&self, session: &str, principal: &str, counted: SessionGuard) -> Result<(), OverCap> {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        if self.shared_caps {
            sessions.insert(session.to_string(), Seen::new(principal, counted));
            return Ok(());
        }
        if sessions.len() >= self.max_sessions {
            return Err(OverCap::Total(self.max_sessions));
        }
        let of_principal = sessions.values().filter(|seen| &*seen.principal == principal).count();
        if of_principal >= self.max_per_principal {
            return Err(OverCap::Principal(self.max_per_principal));
        }
        sessions.insert(session.to_string(), Seen::new(principal, counted));
        Ok(())
    }

    /// `[cluster]`: enter a session another replica opened (the caps are the cluster's, kept
    /// in Redis); nothing when the book knows it already.
    pub fn admit_restored(&self, session: &str, principal: &str, counted: SessionGuard) {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        let seen = sessions.entry(session.to_string()).or_insert_with(|| Seen::new(principal, counted));
        seen.used = true;
    }

    /// The session's subscriber id on this replica, waiting (at most `timeout`) until its handler
    /// registered one.
    pub async fn wait_subscriber(&self, session: &str, timeout: Duration) -> Option<SubscriberId> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let woken = self.subscribers.notified();
            let known = self.sessions.lock().expect("sessions lock").get(session).map(|seen| seen.subscriber);
            match known {
                None => return None,
                Some(Some(subscriber)) => return Some(subscriber),
                Some(None) => {}
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return None;
            }
        }
    }

    /// `[cluster]`: a GET stream of `session` is served here now; whether one was before.
    pub fn streamed(&self, session: &str) -> bool {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        sessions.get_mut(session).is_some_and(|seen| std::mem::replace(&mut seen.streamed_here, true))
    }

    /// `[cluster]`: sessions active since their record was last told, marked told.
    pub fn to_push(&self) -> Vec<String> {
        let now = Instant::now();
        let mut sessions = self.sessions.lock().expect("sessions lock");
        let mut due = Vec::new();
        for (id, seen) in sessions.iter_mut() {
            if seen.last > seen.pushed {
                seen.pushed = now;
                due.push(id.clone());
            }
        }
        due
    }

    /// The session ids the book holds for which `matches` is true.
    pub fn find(&self, matches: impl Fn(&str) -> bool) -> Vec<String> {
        self.sessions.lock().expect("sessions lock").keys().filter(|id| matches(id)).cloned().collect()
    }

    /// `[cluster]`: the session was active elsewhere; its idle time starts again.
    pub fn refresh(&self, session: &str) {
        if let Some(seen) = self.sessions.lock().expect("sessions lock").get_mut(session) {
            seen.last = Instant::now();
            seen.pushed = seen.last;
        }
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
    pub fn touch(&self, session: &str, subscriber: Option<SubscriberId>) {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        if let Some(seen) = sessions.get_mut(session) {
            seen.last = Instant::now();
            if seen.subscriber.is_none() && subscriber.is_some() {
                seen.subscriber = subscriber;
                self.subscribers.notify_waiters();
            }
        }
    }

    /// The session made a request (not a notification) or opened its GET stream: from now on
    /// only the idle timeouts apply to it.
    pub fn used(&self, session: &str) {
        if let Some(seen) = self.sessions.lock().expect("sessions lock").get_mut(session) {
            seen.used = true;
        }
    }

    /// `[cluster]`: the log level `session`'s handler here filters by (kept once), set to what
    /// session news brought for its record key `record_key` while it had none.
    pub fn keep_level(&self, session: &str, record_key: &str, level: &LogLevel) {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        let Some(seen) = sessions.get_mut(session).filter(|seen| seen.level.is_none()) else { return };
        seen.level = Some(level.clone());
        let early = self.early_levels.lock().expect("early levels lock").remove(record_key);
        if let Some((heard, _)) = early.filter(|(_, at)| at.elapsed() < EARLY_LEVEL_FOR) {
            *level.lock().expect("log level lock") = Some(heard);
        }
    }

    /// `[cluster]`: session news set `level` for the session keyed `record_key` (`key_of` names
    /// a session's key): its handlers here filter by it; with none yet, the first to register
    /// soon takes it ([`SessionBook::keep_level`]).
    pub fn news_level(&self, record_key: &str, key_of: impl Fn(&str) -> String, level: LoggingLevel) {
        let sessions = self.sessions.lock().expect("sessions lock");
        let mut held = false;
        for seen in
            sessions.iter().filter(|(id, _)| key_of(id) == record_key).filter_map(|(_, seen)| seen.level.as_ref())
        {
            *seen.lock().expect("log level lock") = Some(level);
            held = true;
        }
        if !held {
            let mut early = self.early_levels.lock().expect("early levels lock");
            early.retain(|_, (_, at)| at.elapsed() < EARLY_LEVEL_FOR);
            early.insert(record_key.to_owned(), (level, Instant::now()));
        }
    }

    /// The session ended; its count in the metric goes with it.
    pub fn forget(&self, session: &str) {
        self.sessions.lock().expect("sessions lock").remove(session);
    }

    /// Sessions due to be closed now for having been silent past their idle timeout, or never
    /// used since their `initialize` and silent for `unused` (zero: off).
    pub fn due(
        &self,
        (idle, subscribed_idle, unused): (Duration, Duration, Duration),
        holds: impl Fn(SubscriberId) -> bool,
    ) -> Vec<String> {
        let now = Instant::now();
        let sessions = self.sessions.lock().expect("sessions lock");
        sessions
            .iter()
            .filter(|(_, seen)| {
                let limit = if seen.subscriber.is_some_and(&holds) { subscribed_idle } else { idle };
                let silent = now.duration_since(seen.last);
                silent >= limit || (!unused.is_zero() && !seen.used && silent >= unused)
            })
            .map(|(id, _)| id.clone())
            .collect()
    }
}

impl Seen {
    fn new(principal: &str, counted: SessionGuard) -> Self {
        let now = Instant::now();
        Seen {
            principal: principal.into(),
            last: now,
            subscriber: None,
            used: false,
            legacy_ready: false,
            streamed_here: false,
            pushed: now,
            level: None,
            _counted: counted,
        }
    }
}
