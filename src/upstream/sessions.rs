//! Upstream sessions per principal or per host (`session = "per-principal" | "per-host"`): a
//! server that keeps state per session (a login, a browser, a scratch value) gets one
//! [`Session`] of its own per principal, or per host session, besides the shared connection
//! that loads the catalog and carries the proxy's subscriptions.
//!
//! A session is opened on its first use ([`Upstream::session_for`]) and stopped with its
//! upstream. It is closed when its host session ends (per-host, [`Upstream::host_ended`]), or
//! once nothing used it for `session_idle` (the `sessions:<upstream>` sweep). At most
//! `max_sessions` are open per upstream and `max_sessions_per_principal` per principal: past
//! either bound a request gets a clear error at once ([`ProxyError::SessionLimit`]), never a
//! wait. A full pool first reclaims the session longest without a request, once that is
//! `session_idle` ago and none is in flight on it: its subscriptions wait (see `pool`) and come
//! back on its key's next session (`open_sessions`). A request on a session waits (at most `request_timeout`)
//! until the subscriptions made on it are answered (`session_subscriptions`), so a host that subscribes and
//! then makes a change hears of it.
//!
//! A `token_exchange` upstream's session sends a token exchanged for its principal's own JWT
//! (see `credentials`): a request with the JWT it came with, a subscription (and what the
//! session sends on its own) with the JWT of the latest subscription request made on it, one
//! exchange per JWT kept for all the principal's sessions; a principal with
//! no JWT kept, or whose exchange fails, gets a clear error at once and no session.
//!
//! Invariant: a session serves one principal only (per-host: one host session only); a call,
//! read or subscription of another principal never reaches it.

#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::LoggingLevel;
use tokio_util::sync::CancellationToken;

use super::client::Declared;
use super::credentials::{TokenFailure, TokenSource, exchange_source};
use super::open_sessions::{Entry, Lease, OpenSessions, Usage};
use super::pool::SessionKey;
use super::session::Session;
use super::{Connection, Offered, Upstream};
use crate::config::{SessionMode, UpstreamTransport};
use crate::error::ProxyError;
use crate::host::{HostSession, SubjectToken};
use crate::spine::Spine;

/// `[cluster]`: how often the sweep looks whether each session still lives where this replica
/// owns it (`owners`).
const OWNER_CHECK: Duration = Duration::from_secs(1);

/// The connection a request goes on (which it derefs to): the shared upstream's, or a session
/// of its own, held for as long as this lives.
pub enum SessionHandle {
    Shared(Connection),
    Own(Session, Lease),
    /// `[cluster]`: the connection to the replica holding the session (see `owners`).
    AtOwner(Session),
}

impl std::ops::Deref for SessionHandle {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        match self {
            SessionHandle::Shared(connection) => connection,
            SessionHandle::Own(session, _) | SessionHandle::AtOwner(session) => session,
        }
    }
}

impl SessionHandle {
    /// A host's `logging/setLevel` for its session (`Session::pass_log_level`); not for the shared.
    pub async fn pass_log_level(&self, level: Option<LoggingLevel>) {
        if let SessionHandle::Own(session, _) | SessionHandle::AtOwner(session) = self {
            session.pass_log_level(level).await
        }
    }
}

impl Upstream {
    /// The connection for a request of `principal` from host session `host` (none: a stateless
    /// 2026-07-28 request, a read, a completion): this shared upstream unless it has sessions
    /// per principal or per host; then that principal's (or host session's) own, opened now if
    /// need be. A per-host upstream serves a request with no host session on the principal's.
    /// With `[cluster]`, a session another replica owns is that replica's, reached over MCP
    /// (see `owners`); this is the one place that decides where a request runs.
    pub async fn session_for(&self, principal: &str, host: Option<HostSession>) -> Result<SessionHandle, ProxyError> {
        if let Some(at_owner) = self.session_at_owner(principal, host).await {
            return Ok(at_owner);
        }
        self.session_here(principal, host).await
    }

    /// As [`Upstream::session_for`], on this replica whoever owns the session in the cluster:
    /// for a request another replica sent here, which is never sent on again.
    pub async fn session_here(&self, principal: &str, host: Option<HostSession>) -> Result<SessionHandle, ProxyError> {
        let Some(book) = &self.inner.sessions else { return Ok(SessionHandle::Shared((**self).clone())) };
        let (key, declared) = self.key_of(principal, host);
        if self.exchanges() && self.inner.subjects.latest(principal).is_none() {
            return Err(self.no_token(TokenFailure::NoSubject));
        }
        let (session, lease) = self.open_session(book, &key, declared, None)?;
        // A session that could not get its first token is given up (the next request tries
        // anew); a connected one stays: the next request tries its refresh again.
        if let Some(credentials) = session.credentials().filter(|c| c.is_exchange())
            && let Err(failure) = credentials.token().await
        {
            if session.link().is_err() {
                book.forget(&key, &session);
                self.metrics().set_upstream_sessions(self.name(), book.len());
            }
            return Err(self.no_token(failure));
        }
        if session.link().is_err() {
            let opened = tokio::time::timeout(self.config().request_timeout, session.wait_settled()).await;
            if opened.is_err() || session.link().is_err() {
                tracing::warn!(upstream = self.name(), principal, "upstream session could not be opened");
                book.forget(&key, &session);
                self.metrics().set_upstream_sessions(self.name(), book.len());
                return Err(session.down());
            }
        }
        session.subscriptions_settled().await;
        Ok(SessionHandle::Own(session, lease))
    }

    /// Whose session a request of `principal` from host session `host` goes on, and what it
    /// declares upstream.
    pub(super) fn key_of(&self, principal: &str, host: Option<HostSession>) -> (SessionKey, Option<Declared>) {
        match (self.config().sessions.mode, host) {
            (SessionMode::PerHost, Some(host)) => {
                let declared = Declared { sampling: host.sampling, elicitation: host.elicitation };
                (SessionKey::Host(principal.into(), host.id), Some(declared))
            }
            _ => (SessionKey::Principal(principal.into()), None),
        }
    }

    /// Does it exchange each principal's JWT for the token of its sessions?
    fn exchanges(&self) -> bool {
        matches!(&self.config().transport, UpstreamTransport::Http { auth: Some(auth), .. } if auth.token_exchange().is_some())
    }

    /// The error of a request that could get no token, in our words.
    fn no_token(&self, failure: TokenFailure) -> ProxyError {
        ProxyError::UpstreamFailed { upstream: self.name().to_string(), reason: failure.describe() }
    }

    /// Host session `host` ended: its per-host sessions are closed (a stdio child ends).
    pub fn host_ended(&self, host: u64) {
        let Some(book) = &self.inner.sessions else { return };
        self.close_host_at_owners(host);
        let closed = book.close_host(host);
        if !closed.is_empty() {
            tracing::debug!(upstream = self.name(), "host session ended; its upstream session closed");
            self.metrics().set_upstream_sessions(self.name(), book.len());
            self.closed_with_own_offerings(&closed);
        }
    }

    /// Sessions that listed tools or prompts of their own closed: their hosts list the shared
    /// connection's again, and are told (with `[cluster]`, on every replica).
    pub(super) fn closed_with_own_offerings(&self, closed: &[Session]) {
        let Some(events) = self.inner.events.lock().expect("events lock").clone() else { return };
        closed.iter().filter_map(|session| session.own_offerings_now(None)).for_each(|changed| events.send(changed));
    }

    /// What `principal`'s open session (host session `host`'s on a per-host upstream) lists as
    /// its own tools and prompts, once it said they changed; `None` while it has not (or none
    /// is open): the shared connection's lists are its lists.
    /// With `[cluster]`, a session another replica owns lists what that replica says it lists
    /// (asked on the connection to it, opened now if need be: see `owners`).
    pub fn own_offerings(&self, principal: &str, host: Option<u64>) -> Option<Arc<Offered>> {
        if let Some(at_owner) = self.own_offerings_at_owner(principal, host) {
            return at_owner;
        }
        self.own_offerings_here(principal, host)
    }

    /// As [`Upstream::own_offerings`], of a session open on this replica.
    pub fn own_offerings_here(&self, principal: &str, host: Option<u64>) -> Option<Arc<Offered>> {
        let book = self.inner.sessions.as_ref()?;
        let host = host.map(|id| HostSession { id, sampling: false, elicitation: false });
        book.session(&self.key_of(principal, host).0)?.own_offerings()
    }

    /// Does it have sessions per principal or per host (`session` is not `shared`)?
    pub fn has_sessions(&self) -> bool {
        self.inner.sessions.is_some()
    }

    /// The per-principal or per-host sessions open now (0 for a shared upstream).
    pub fn sessions_open(&self) -> usize {
        self.inner.sessions.as_ref().map_or(0, |book| book.len())
    }

    /// The open session for `key`, or a new one when the bounds allow it (a full pool reclaims
    /// a session idle of requests, see `pool`). A new session subscribes again what a reclaimed one
    /// of `key` held, and reports all of it as changed once it is subscribed. `standing`: the
    /// JWT of a subscription request to be kept on it, which what the session sends on its
    /// own goes with from now on (`credentials`), set before a new session connects.
    pub(super) fn open_session(
        &self,
        book: &OpenSessions,
        key: &SessionKey,
        declared: Option<Declared>,
        standing: Option<&SubjectToken>,
    ) -> Result<(Session, Lease), ProxyError> {
        let settings = &self.config().sessions;
        let mut open = book.open.lock().expect("sessions lock");
        if let Some(entry) = open.get(key) {
            entry.session.stand_for(standing);
            return Ok((entry.session.clone(), Lease::on(&entry.usage)));
        }
        let over = |limit: usize, setting: &'static str| ProxyError::SessionLimit {
            upstream: self.name().to_string(),
            limit,
            setting,
        };
        let of_principal = open.keys().filter(|k| k.principal() == key.principal()).count();
        if of_principal >= settings.max_per_principal {
            return Err(over(settings.max_per_principal, "max_sessions_per_principal"));
        }
        let (spine, parent_stop) = self.launch().ok_or_else(|| self.down())?;
        let reclaimed = match open.len() >= settings.max {
            true => Some(book.reclaim(&mut open, settings.idle).ok_or_else(|| over(settings.max, "max_sessions"))?),
            false => None,
        };
        let credentials = if self.exchanges() {
            let kept = open.iter().find(|(k, _)| k.principal() == key.principal());
            match kept.and_then(|(_, entry)| entry.session.credentials().map(TokenSource::for_session)) {
                Some(credentials) => Some(credentials),
                None => exchange_source(self.config(), &self.inner.subjects, key.principal()),
            }
        } else {
            self.credentials().cloned()
        };
        let connection = Connection::new(self.config().clone(), self.metrics().clone(), declared, credentials, None);
        let session = Session::new(connection, key.principal().into(), key.host());
        session.stand_for(standing);
        let resumed = book.reclaimed.take(key).map(|waiting| session.subscribe_waiting(waiting.subscribed)).is_some();
        let stop = parent_stop.child_token();
        let events = self.inner.events.lock().expect("events lock").clone();
        session.spawn(&spine, stop.clone(), events, resumed);
        let usage = Usage::now();
        open.insert(key.clone(), Entry { session: session.clone(), stop, usage: usage.clone() });
        let count = open.len();
        drop(open);
        tracing::debug!(upstream = self.name(), principal = key.principal(), resumed, "upstream session opened");
        if let Some(reclaimed) = reclaimed {
            tracing::info!(
                upstream = self.name(),
                "the upstream's sessions were all open: the one longest without a request was reclaimed; its subscriptions wait for its next session"
            );
            self.metrics().upstream_session_reclaimed(self.name());
            self.closed_with_own_offerings(&[reclaimed]);
        }
        self.metrics().set_upstream_sessions(self.name(), count);
        Ok((session, Lease::on(&usage)))
    }

    /// The `sessions:<upstream>` sweep, once the pool has room: sessions whose subscriptions
    /// wait since theirs was reclaimed open again, leaving one place free for a newcomer.
    fn resume_reclaimed(&self, book: &OpenSessions) {
        for (key, declared) in book.reclaimed.keys() {
            if book.len() + 1 >= self.config().sessions.max {
                return;
            }
            if let Err(error) = self.open_session(book, &key, declared, None) {
                tracing::debug!(upstream = self.name(), error = %error, "a reclaimed session's subscriptions still wait");
            }
        }
    }

    /// The spine and stop token of the running supervisor, if it runs.
    pub(super) fn launch(&self) -> Option<(Spine, CancellationToken)> {
        let spine = self.inner.spine.lock().expect("spine lock").clone()?;
        let stop = self.inner.supervisor.lock().expect("supervisor lock").as_ref()?.0.clone();
        (!stop.is_cancelled()).then_some((spine, stop))
    }
}

/// The `sessions:<upstream>` sweep: closes sessions idle for `session_idle`, and (`[cluster]`)
/// moves subscriptions where their sessions live now every [`OWNER_CHECK`], until `stop`.
pub(super) async fn sweep(upstream: Upstream, stop: CancellationToken) {
    let idle = upstream.config().sessions.idle;
    let every = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut owners = tokio::time::interval(OWNER_CHECK);
    owners.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = owners.tick() => {
                upstream.follow_owners();
                continue;
            }
            _ = tick.tick() => {}
        }
        let Some(book) = &upstream.inner.sessions else { return };
        upstream.close_idle_at_owners(idle);
        let closed = book.close_idle(idle);
        if !closed.is_empty() {
            tracing::debug!(upstream = upstream.name(), closed = closed.len(), "idle upstream sessions closed");
            upstream.metrics().set_upstream_sessions(upstream.name(), book.len());
            upstream.closed_with_own_offerings(&closed);
        }
        upstream.resume_reclaimed(book);
    }
}
