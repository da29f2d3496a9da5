//! Upstream sessions per principal or per host (`session = "per-principal" | "per-host"`): a
//! server that keeps state per session (a login, a browser, a scratch value) gets one
//! connection of its own per principal, or per host session, besides the shared one that loads
//! the catalog and holds the proxy's subscriptions.
//!
//! A session is opened on its first use ([`Upstream::session_for`]) as a connection like the
//! shared one (a stdio upstream: one child process per session), supervised on the spine as
//! `session:<upstream>` and stopped with its upstream. It is closed when its host session ends
//! (per-host, [`Upstream::host_ended`]), or once nothing used it for `session_idle` (the
//! `sessions:<upstream>` sweep). At most `max_sessions` are open per upstream and
//! `max_sessions_per_principal` per principal: past either bound a request gets a clear error
//! at once ([`ProxyError::SessionLimit`]), never a wait. A full pool first reclaims the session
//! longest without a request, once that is `session_idle` ago and none is in flight on it: its
//! subscriptions wait (see `pool`) and come back on its key's next session.
//!
//! Subscriptions go on the subscriber's own session ([`Upstream::session_hold`]): a 2025
//! host's `resources/subscribe` on its principal's (per-host: its host session's), a
//! 2026-07-28 listen stream's on its principal's. Each session keeps what is held on it and for
//! whom ([`Holds`]); its `updated` goes, as [`super::UpstreamEvent::SessionUpdated`], to those
//! holders only. Its first connection reports nothing it did not hear (nothing was watched
//! before it); after a reconnect every URI held on it is reported as changed. A request on a
//! session waits (at most `request_timeout`) until the subscriptions held on it are answered,
//! so a host that subscribes and then makes a change hears of it. A session holding a
//! subscription is not closed as idle (only reclaimed from a full pool). A reload that replaces the upstream makes every hold again on
//! the new one's sessions ([`Upstream::hold_again`]), each on the session its new mode gives
//! it (a per-principal hold of a host becomes its principal's under `per-host`). The shared
//! connection is never subscribed for such an upstream. With `[cluster]`, a hold is made where
//! its session lives, possibly another replica (`held_elsewhere`); a per-host session is keyed
//! there by a digest of its host's `Mcp-Session-Id` (the same on every replica), not a holder id.
//! A session that says its tools or prompts changed lists them again, keeps them as its own
//! ([`Upstream::own_offerings`]) and its hosts are told
//! ([`super::UpstreamEvent::SessionOfferingsChanged`]); they list and call as it lists, every
//! other host as the shared connection does (with `[cluster]`, on every replica:
//! `offered_elsewhere`). Everything else such a connection says on its own
//! (resources' `list_changed`, up, down) reaches no host: the resource catalog stays the shared
//! connection's. A per-host session declares to the upstream only what its host declared
//! (sampling, elicitation); a per-principal one, like the shared connection, declares both and
//! the relay refuses a host that lacks one. What it sends for a routed call (progress, log messages, sampling,
//! elicitation) reaches that call's host, as on the shared one: each session has its own
//! relay book.
//!
//! A `token_exchange` upstream's session sends a token exchanged for its principal's own JWT
//! (see `credentials`): a request with the JWT it came with, a subscription (and what the
//! session sends on its own) with the JWT of the latest subscription request held on it, one
//! exchange per JWT kept for all the principal's sessions; a principal with
//! no JWT kept, or whose exchange fails, gets a clear error at once and no session.
//!
//! Invariant: a session serves one principal only (per-host: one host session only); a call,
//! read or subscription of another principal never reaches it, and what it says reaches only
//! the holders on it.

#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{LoggingLevel, SetLevelRequestParams};
use tokio_util::sync::CancellationToken;

use super::client::Declared;
use super::credentials::{TokenFailure, TokenSource, exchange_source};
use super::pool::{HeldUris, Reclaimed, SessionKey};
use super::{Offered, Upstream, UpstreamEvent, Watching};
use crate::cluster::forward::HostOf;
use crate::config::{SessionMode, UpstreamTransport};
use crate::error::ProxyError;
use crate::host::{HostSession, SubjectToken};
use crate::protocol::Era;
use crate::spine::Spine;
use crate::subscriptions::{HolderId, is_same_or_parent};

impl From<HostOf> for HostSession {
    fn from(host: HostOf) -> Self {
        HostSession { id: host.key, sampling: host.sampling, elicitation: host.elicitation }
    }
}

impl From<HostSession> for HostOf {
    fn from(host: HostSession) -> Self {
        HostOf { key: host.id, sampling: host.sampling, elicitation: host.elicitation }
    }
}

/// One URI held on a session, for `holder` of `principal` (on host session `host` when the
/// session is that host's).
pub struct SessionHold {
    principal: Arc<str>,
    host: Option<HostSession>,
    holder: HolderId,
    uri: String,
}

/// The open sessions of one upstream, and the holds of those reclaimed from a full pool.
/// Lock order: `open`, then `reclaimed`.
#[derive(Default)]
pub(super) struct SessionBook {
    open: Mutex<BTreeMap<SessionKey, Entry>>,
    reclaimed: Reclaimed,
}

struct Entry {
    upstream: Upstream,
    stop: CancellationToken,
    usage: Arc<Usage>,
}

/// When a session was last used; a [`Lease`] per request holds it busy.
struct Usage {
    last: Mutex<Instant>,
}

/// A request's hold on a session: it is not closed as idle while held, and counts as used
/// until the hold ends.
pub struct Lease {
    usage: Option<Arc<Usage>>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(usage) = &self.usage {
            *usage.last.lock().expect("usage lock") = Instant::now();
        }
    }
}

/// What hosts hold on one session (per-principal or per-host): each URI it watches upstream,
/// with the holders it is watched for. Only they hear what the session says of it.
#[derive(Default)]
pub(super) struct Holds {
    held: Mutex<BTreeMap<String, BTreeSet<HolderId>>>,
}

impl Holds {
    /// `holder` holds `uri`; true when nobody did before (it is to be watched).
    fn hold(&self, holder: HolderId, uri: &str) -> bool {
        let mut held = self.held.lock().expect("holds lock");
        let holders = held.entry(uri.to_string()).or_default();
        holders.insert(holder) && holders.len() == 1
    }

    /// `holder` lets go of `uri`; true when nobody holds it now (it is no longer watched).
    fn release(&self, holder: HolderId, uri: &str) -> bool {
        let mut held = self.held.lock().expect("holds lock");
        let Some(holders) = held.get_mut(uri) else { return false };
        if !holders.remove(&holder) || !holders.is_empty() {
            return false;
        }
        held.remove(uri);
        true
    }

    /// `holder` lets go of everything; the URIs nobody holds now.
    fn release_all(&self, holder: HolderId) -> Vec<String> {
        let mut held = self.held.lock().expect("holds lock");
        let mut unheld = Vec::new();
        held.retain(|uri, holders| {
            let gone = holders.remove(&holder) && holders.is_empty();
            if gone {
                unheld.push(uri.clone());
            }
            !gone
        });
        unheld
    }

    /// Everything held here, taken away (the session is reclaimed).
    fn take_all(&self) -> HeldUris {
        std::mem::take(&mut *self.held.lock().expect("holds lock"))
    }

    /// Hold again what a reclaimed session of the same key held (before it connects).
    fn restore(&self, held: HeldUris) {
        let mut mine = self.held.lock().expect("holds lock");
        for (uri, holders) in held {
            mine.entry(uri).or_default().extend(holders);
        }
    }

    fn holds_anything(&self) -> bool {
        !self.held.lock().expect("holds lock").is_empty()
    }

    /// Who must hear of an update of `uri`: holders of it or of a URI it is a sub-resource
    /// of, each with the held URIs that matched.
    pub(super) fn holders_of(&self, uri: &str) -> BTreeMap<HolderId, Vec<String>> {
        let mut found: BTreeMap<HolderId, Vec<String>> = BTreeMap::new();
        for (held, holders) in self.held.lock().expect("holds lock").iter() {
            if is_same_or_parent(held, uri) {
                for holder in holders {
                    found.entry(*holder).or_default().push(held.clone());
                }
            }
        }
        found
    }

    /// Every URI held here, with its holders.
    pub(super) fn all(&self) -> BTreeMap<HolderId, Vec<String>> {
        let mut found: BTreeMap<HolderId, Vec<String>> = BTreeMap::new();
        for (held, holders) in self.held.lock().expect("holds lock").iter() {
            for holder in holders {
                found.entry(*holder).or_default().push(held.clone());
            }
        }
        found
    }
}

/// The connection a request goes on: the shared upstream, or a session of its own, held for
/// as long as this lives.
pub struct SessionHandle {
    upstream: Upstream,
    _lease: Lease,
}

impl std::ops::Deref for SessionHandle {
    type Target = Upstream;
    fn deref(&self) -> &Upstream {
        &self.upstream
    }
}

impl SessionBook {
    pub fn len(&self) -> usize {
        self.open.lock().expect("sessions lock").len()
    }

    /// Close every session (the upstream is stopping or starting again).
    pub fn close_all(&self) {
        let closed = std::mem::take(&mut *self.open.lock().expect("sessions lock"));
        closed.values().for_each(|entry| entry.stop.cancel());
        self.reclaimed.clear();
    }

    /// Close the sessions of host session `host`; those there were.
    fn close_host(&self, host: u64) -> Vec<Upstream> {
        self.reclaimed.host_ended(host);
        self.close_where(|key, _| matches!(key, SessionKey::Host(_, h) if *h == host))
    }

    /// Close the sessions unused for `idle` that no request holds; those there were.
    fn close_idle(&self, idle: Duration) -> Vec<Upstream> {
        self.close_where(|_, entry| {
            let busy = Arc::strong_count(&entry.usage) > 1 || entry.upstream.inner.holds.holds_anything();
            !busy && entry.usage.last.lock().expect("usage lock").elapsed() >= idle
        })
    }

    /// Close the sessions `closing` picks; those there were.
    fn close_where(&self, mut closing: impl FnMut(&SessionKey, &Entry) -> bool) -> Vec<Upstream> {
        let mut open = self.open.lock().expect("sessions lock");
        let mut closed = Vec::new();
        open.retain(|key, entry| {
            let close = closing(key, entry);
            if close {
                entry.stop.cancel();
                closed.push(entry.upstream.clone());
            }
            !close
        });
        closed
    }

    /// Forget `key`'s session if it is still `upstream` (a session that could not be opened);
    /// what it held waits for the next one.
    fn forget(&self, key: &SessionKey, upstream: &Upstream) {
        let mut open = self.open.lock().expect("sessions lock");
        if open.get(key).is_some_and(|entry| Arc::ptr_eq(&entry.upstream.inner, &upstream.inner))
            && let Some(entry) = open.remove(key)
        {
            entry.stop.cancel();
            let held = entry.upstream.inner.holds.take_all();
            self.reclaimed.park(key.clone(), held, entry.upstream.inner.declared);
        }
    }

    /// Make room in a full pool: close the session that went longest without a request, if
    /// that is `idle` ago or more and no request holds it; what it held waits in `reclaimed`.
    fn reclaim(&self, open: &mut BTreeMap<SessionKey, Entry>, idle: Duration) -> Option<Upstream> {
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
        let held = entry.upstream.inner.holds.take_all();
        self.reclaimed.park(key, held, entry.upstream.inner.declared);
        Some(entry.upstream)
    }
}

impl Upstream {
    /// The connection for a request of `principal` from host session `host` (none: a stateless
    /// 2026-07-28 request, a read, a completion): this shared upstream unless it has sessions
    /// per principal or per host; then that principal's (or host session's) own, opened now if
    /// need be. A per-host upstream serves a request with no host session on the principal's.
    pub async fn session_for(&self, principal: &str, host: Option<HostSession>) -> Result<SessionHandle, ProxyError> {
        let Some(book) = &self.inner.sessions else {
            return Ok(SessionHandle { upstream: self.clone(), _lease: Lease { usage: None } });
        };
        let (key, declared) = self.key_of(principal, host);
        if self.exchanges() && self.inner.subjects.latest(principal).is_none() {
            return Err(self.no_token(TokenFailure::NoSubject));
        }
        let (session, usage) = self.open_session(book, &key, declared, None)?;
        let handle = SessionHandle { upstream: session.clone(), _lease: Lease { usage: Some(usage) } };
        // A session that could not get its first token is given up (the next request tries
        // anew); a connected one stays: the next request tries its refresh again.
        if let Some(credentials) = session.inner.credentials.as_ref().filter(|c| c.is_exchange())
            && let Err(failure) = credentials.token().await
        {
            if session.link().is_err() {
                book.forget(&key, &session);
                self.inner.metrics.set_upstream_sessions(self.name(), book.len());
            }
            return Err(self.no_token(failure));
        }
        if session.link().is_err() {
            let opened = tokio::time::timeout(self.inner.config.request_timeout, session.wait_settled()).await;
            if opened.is_err() || session.link().is_err() {
                tracing::warn!(upstream = self.name(), principal, "upstream session could not be opened");
                book.forget(&key, &session);
                self.inner.metrics.set_upstream_sessions(self.name(), book.len());
                return Err(session.down());
            }
        }
        session.subscriptions_settled().await;
        Ok(handle)
    }

    /// Before a host's call or prompt on this session: the host's `logging/setLevel` (`level`),
    /// when it set one, is passed on to a 2025 upstream that declared `logging`, once per
    /// connection and level. A per-host session is told its host's level; a per-principal one
    /// only a level more verbose than it was told (each host's own filter still applies to what
    /// it is relayed, so none gets fewer messages than it asked for). A no-op on the shared
    /// connection, which is every host's.
    pub async fn pass_log_level(&self, level: Option<LoggingLevel>) {
        let (Some(level), true) = (level, self.is_session()) else { return };
        let Ok(link) = self.link() else { return };
        if link.era != Era::Legacy || link.capabilities.logging.is_none() {
            return;
        }
        let per_host = self.inner.declared.is_some();
        let connection = self.connection();
        {
            let mut told = self.inner.log_level.lock().expect("log level lock");
            let tell = match *told {
                Some((on, before)) if on == connection => match per_host {
                    true => before != level,
                    false => rank(level) < rank(before),
                },
                _ => true,
            };
            if !tell {
                return;
            }
            *told = Some((connection, level));
        }
        let set = link.peer.set_level(SetLevelRequestParams::new(level));
        if !matches!(tokio::time::timeout(self.inner.config.request_timeout, set).await, Ok(Ok(()))) {
            tracing::debug!(upstream = self.name(), "the upstream session did not take logging/setLevel");
        }
    }

    /// Wait (at most the request timeout) until the upstream answered the subscription of every
    /// URI held on this session: a request goes after what its holders subscribed before it
    /// (a host that subscribes, then calls a tool that changes it, hears of the change).
    async fn subscriptions_settled(&self) {
        let offered = self.link().is_ok_and(|link| {
            link.capabilities.resources.as_ref().is_some_and(|resources| resources.subscribe == Some(true))
        });
        if !offered || !self.inner.holds.holds_anything() {
            return;
        }
        let (mut watched, mut applied) = (self.inner.watched.subscribe(), self.inner.applied.subscribe());
        let settled = async {
            loop {
                let answered = {
                    let (watched, applied) = (watched.borrow_and_update(), applied.borrow_and_update());
                    watched.iter().all(|uri| applied.acknowledged.contains(uri) || applied.refused.contains(uri))
                };
                if answered {
                    return;
                }
                tokio::select! {
                    changed = watched.changed() => if changed.is_err() { return },
                    changed = applied.changed() => if changed.is_err() { return },
                }
            }
        };
        if tokio::time::timeout(self.inner.config.request_timeout, settled).await.is_err() {
            tracing::debug!(
                upstream = self.name(),
                "session's subscriptions not answered in time; the request goes on"
            );
        }
    }

    /// `holder` (a host session or listen stream of `principal`, coming on host session `host`
    /// when it has one) subscribes `uri` (un-namespaced) of this upstream: on a per-principal
    /// or per-host upstream the subscription is made on that principal's (host session's) own
    /// session, opened now if need be, and only its holders hear what that session says of it.
    /// A no-op on a shared upstream (the watch book subscribes the shared connection). With
    /// `[cluster]`, a per-principal hold follows the principal's session to the replica that
    /// holds it (`held_elsewhere`). `subject`: the JWT the subscription request came with; a
    /// `token_exchange` session subscribes with a token exchanged for it (`credentials`).
    pub fn session_hold(
        &self,
        principal: &str,
        host: Option<HostSession>,
        holder: HolderId,
        uri: &str,
        subject: Option<&SubjectToken>,
    ) -> Result<(), ProxyError> {
        if let Some(forwarder) = self.follows_owner() {
            return self.hold_following(&forwarder.clone(), principal, host, holder, uri, subject);
        }
        self.hold_here(principal, host, holder, uri, subject)
    }

    /// Hold `uri` for `holder` on this replica's session of `principal` (host session `host`),
    /// for a subscription request that came with `subject`.
    pub(super) fn hold_here(
        &self,
        principal: &str,
        host: Option<HostSession>,
        holder: HolderId,
        uri: &str,
        subject: Option<&SubjectToken>,
    ) -> Result<(), ProxyError> {
        let Some(book) = &self.inner.sessions else { return Ok(()) };
        let (key, declared) = self.key_of(principal, host);
        // Its subscription (and a new session's handshake) goes with this request's JWT.
        let (session, usage) = self.open_session(book, &key, declared, subject)?;
        // A subscription is a request: the session counts as used when it is made.
        let _lease = Lease { usage: Some(usage) };
        if session.inner.holds.hold(holder, uri) {
            session.set_watching(uri, true);
        }
        Ok(())
    }

    /// Wait (at most `timeout`) until the connection holding `principal`'s subscriptions
    /// (host session `host`'s on a per-host upstream) answered the one of `uri`: this upstream
    /// when it is shared, else that session, which must be open already (a subscription opened
    /// it). The shared connection of a per-session upstream never subscribes, so waiting on it
    /// would only time out.
    /// With `[cluster]`, a hold that follows the principal's session to its owner is waited
    /// on wherever it is.
    pub async fn wait_held(
        &self,
        principal: &str,
        host: Option<HostSession>,
        uri: &str,
        timeout: Duration,
    ) -> Watching {
        if let Some(watching) = self.wait_following(principal, host, uri, timeout).await {
            return watching;
        }
        self.wait_on_session(principal, host, uri, timeout).await
    }

    /// As [`Upstream::wait_held`], on this replica's session only.
    pub(super) async fn wait_on_session(
        &self,
        principal: &str,
        host: Option<HostSession>,
        uri: &str,
        timeout: Duration,
    ) -> Watching {
        let Some(book) = &self.inner.sessions else { return self.wait_watching(uri, timeout).await };
        let (key, _) = self.key_of(principal, host);
        let session = book.open.lock().expect("sessions lock").get(&key).map(|entry| entry.upstream.clone());
        match session {
            Some(session) => session.wait_watching(uri, timeout).await,
            None => Watching::NotInTime,
        }
    }

    /// Every hold on its sessions, for whom: a reload that replaces it makes them again on its
    /// successor ([`Upstream::hold_again`]).
    pub fn session_holds(&self) -> Vec<SessionHold> {
        let Some(book) = &self.inner.sessions else { return Vec::new() };
        let open = book.open.lock().expect("sessions lock");
        let mut holds = Vec::new();
        for (key, entry) in open.iter() {
            let host = host_session(key, entry.upstream.inner.declared);
            for (holder, uris) in entry.upstream.inner.holds.all() {
                let principal: Arc<str> = key.principal().into();
                holds.extend(uris.into_iter().map(|uri| SessionHold {
                    principal: principal.clone(),
                    host,
                    holder,
                    uri,
                }));
            }
        }
        drop(open);
        let waiting = book.reclaimed.all().into_iter().map(|(key, declared, holder, uri)| SessionHold {
            principal: key.principal().into(),
            host: host_session(&key, declared),
            holder,
            uri,
        });
        holds.extend(waiting);
        let following = self.inner.following.all().into_iter();
        holds.extend(following.map(|(principal, host, holder, uri)| SessionHold { principal, host, holder, uri }));
        holds
    }

    /// Make `holds` (those of the upstream this one replaces) on this one's sessions, each on
    /// the session its mode gives it now (none when it is shared: the watch book subscribes the
    /// shared connection). One that cannot be made (past a session cap) is logged.
    pub fn hold_again(&self, holds: Vec<SessionHold>) {
        for hold in holds {
            if let Err(error) = self.session_hold(&hold.principal, hold.host, hold.holder, &hold.uri, None) {
                tracing::warn!(
                    upstream = self.name(),
                    principal = %hold.principal,
                    error = %error,
                    "a subscription on an upstream session was not made again after the reload"
                );
            }
        }
    }

    /// `holder` lets go of `uri` on whichever session it held it.
    pub fn session_release(&self, holder: HolderId, uri: &str) {
        self.inner.following.release(holder, Some(uri));
        self.release_here(holder, uri);
    }

    /// `holder` lets go of `uri` on this replica's sessions.
    pub(super) fn release_here(&self, holder: HolderId, uri: &str) {
        if let Some(book) = &self.inner.sessions {
            book.reclaimed.release(holder, Some(uri));
        }
        self.each_session(|session| {
            if session.inner.holds.release(holder, uri) {
                session.set_watching(uri, false);
            }
        });
    }

    /// `holder` is gone: what it held on this upstream's sessions is let go.
    pub fn session_release_all(&self, holder: HolderId) {
        self.inner.following.release(holder, None);
        if let Some(book) = &self.inner.sessions {
            book.reclaimed.release(holder, None);
        }
        self.each_session(|session| {
            for uri in session.inner.holds.release_all(holder) {
                session.set_watching(&uri, false);
            }
        });
    }

    fn each_session(&self, mut each: impl FnMut(&Upstream)) {
        let Some(book) = &self.inner.sessions else { return };
        let sessions: Vec<Upstream> =
            book.open.lock().expect("sessions lock").values().map(|entry| entry.upstream.clone()).collect();
        sessions.iter().for_each(&mut each);
    }

    /// Whose session a request of `principal` from host session `host` goes on, and what it
    /// declares upstream.
    fn key_of(&self, principal: &str, host: Option<HostSession>) -> (SessionKey, Option<Declared>) {
        match (self.inner.config.sessions.mode, host) {
            (SessionMode::PerHost, Some(host)) => {
                let declared = Declared { sampling: host.sampling, elicitation: host.elicitation };
                (SessionKey::Host(principal.into(), host.id), Some(declared))
            }
            _ => (SessionKey::Principal(principal.into()), None),
        }
    }

    /// Does it exchange each principal's JWT for the token of its sessions?
    fn exchanges(&self) -> bool {
        matches!(&self.inner.config.transport, UpstreamTransport::Http { auth: Some(auth), .. } if auth.token_exchange().is_some())
    }

    /// The error of a request that could get no token, in our words.
    fn no_token(&self, failure: TokenFailure) -> ProxyError {
        ProxyError::UpstreamFailed { upstream: self.name().to_string(), reason: failure.describe() }
    }

    /// Host session `host` ended: its per-host sessions are closed (a stdio child ends).
    pub fn host_ended(&self, host: u64) {
        let Some(book) = &self.inner.sessions else { return };
        self.forget_own_elsewhere(host);
        let closed = book.close_host(host);
        if !closed.is_empty() {
            tracing::debug!(upstream = self.name(), "host session ended; its upstream session closed");
            self.inner.metrics.set_upstream_sessions(self.name(), book.len());
            self.closed_with_own_offerings(&closed);
        }
    }

    /// Sessions that listed tools or prompts of their own closed: their hosts list the shared
    /// connection's again, and are told (with `[cluster]`, on every replica).
    fn closed_with_own_offerings(&self, closed: &[Upstream]) {
        let Some(events) = self.inner.events.lock().expect("events lock").clone() else { return };
        for session in closed {
            let Some((principal, host)) = session.inner.whose.clone() else { continue };
            if session.inner.own_offerings.lock().expect("offerings lock").take().is_none() {
                continue;
            }
            let upstream = self.name().to_string();
            events.send(UpstreamEvent::SessionOfferingsChanged {
                upstream,
                principal,
                host,
                tools: true,
                prompts: true,
            });
        }
    }

    /// What `principal`'s open session (host session `host`'s on a per-host upstream) lists as
    /// its own tools and prompts, once it said they changed; `None` while it has not (or none
    /// is open): the shared connection's lists are its lists.
    /// With `[cluster]`, a session another replica holds lists what that replica said (see
    /// `offered_elsewhere`).
    pub fn own_offerings(&self, principal: &str, host: Option<u64>) -> Option<Arc<Offered>> {
        if let Some(elsewhere) = self.own_offerings_elsewhere(principal, host) {
            return elsewhere;
        }
        self.own_offerings_here(principal, host)
    }

    /// As [`Upstream::own_offerings`], of a session open on this replica.
    pub(super) fn own_offerings_here(&self, principal: &str, host: Option<u64>) -> Option<Arc<Offered>> {
        let book = self.inner.sessions.as_ref()?;
        let key = match (self.inner.config.sessions.mode, host) {
            (SessionMode::PerHost, Some(host)) => SessionKey::Host(principal.into(), host),
            _ => SessionKey::Principal(principal.into()),
        };
        let session = book.open.lock().expect("sessions lock").get(&key).map(|entry| entry.upstream.clone())?;
        session.inner.own_offerings.lock().expect("offerings lock").clone()
    }

    /// A session's tools and prompts as it lists them now: kept as its own, and its hosts told
    /// (which lists changed) when they differ from what it listed before.
    pub(super) fn keep_own_offerings(&self, offered: Offered) -> Option<UpstreamEvent> {
        let (principal, host) = self.inner.whose.clone()?;
        let before = self.inner.own_offerings.lock().expect("offerings lock").replace(Arc::new(offered.clone()));
        let (tools, prompts) = match before.as_deref() {
            Some(before) => (before.tools != offered.tools, before.prompts != offered.prompts),
            None => (true, true),
        };
        let upstream = self.name().to_string();
        (tools || prompts).then_some(UpstreamEvent::SessionOfferingsChanged {
            upstream,
            principal,
            host,
            tools,
            prompts,
        })
    }

    /// `[cluster]`: how requests and subscriptions reach the replica holding a principal's
    /// session (set once, before it is spawned).
    pub fn set_forwarder(&self, forwarder: crate::cluster::forward::Forwarder) {
        let _ = self.inner.forwarder.set(forwarder);
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
    /// a session idle of requests, see `pool`). A new session holds again what a reclaimed one
    /// of `key` held, and reports all of it as changed once it is subscribed. `standing`: the
    /// JWT of a subscription request to be held on it, which what the session sends on its
    /// own goes with from now on (`credentials`), set before a new session connects.
    fn open_session(
        &self,
        book: &SessionBook,
        key: &SessionKey,
        declared: Option<Declared>,
        standing: Option<&SubjectToken>,
    ) -> Result<(Upstream, Arc<Usage>), ProxyError> {
        let settings = &self.inner.config.sessions;
        let mut open = book.open.lock().expect("sessions lock");
        if let Some(entry) = open.get(key) {
            entry.upstream.stand_for(standing);
            return Ok((entry.upstream.clone(), entry.usage.clone()));
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
            match kept.and_then(|(_, entry)| entry.upstream.inner.credentials.as_ref().map(TokenSource::for_session)) {
                Some(credentials) => Some(credentials),
                None => exchange_source(&self.inner.config, &self.inner.subjects, key.principal()),
            }
        } else {
            self.inner.credentials.clone()
        };
        let session = Upstream::session_of(self, (key.principal().into(), key.host()), declared, credentials);
        session.stand_for(standing);
        let resumed = book.reclaimed.take(key).map(|waiting| session.hold_waiting(waiting.held)).is_some();
        let stop = parent_stop.child_token();
        let events = self.inner.events.lock().expect("events lock").clone();
        session.spawn_session(&spine, stop.clone(), events, resumed);
        let usage = Arc::new(Usage { last: Mutex::new(Instant::now()) });
        open.insert(key.clone(), Entry { upstream: session.clone(), stop, usage: usage.clone() });
        let count = open.len();
        drop(open);
        tracing::debug!(upstream = self.name(), principal = key.principal(), resumed, "upstream session opened");
        if let Some(reclaimed) = reclaimed {
            tracing::info!(
                upstream = self.name(),
                "the upstream's sessions were all open: the one longest without a request was reclaimed; its subscriptions wait for its next session"
            );
            self.inner.metrics.upstream_session_reclaimed(self.name());
            self.closed_with_own_offerings(&[reclaimed]);
        }
        self.inner.metrics.set_upstream_sessions(self.name(), count);
        Ok((session, usage))
    }

    /// What this session sends on its own goes with a token exchanged for `subject` from now
    /// on, when it is given and the session exchanges tokens.
    fn stand_for(&self, subject: Option<&SubjectToken>) {
        if let (Some(credentials), Some(subject)) = (self.inner.credentials.as_ref(), subject) {
            credentials.stand_for(subject);
        }
    }

    /// Hold `held` (what a reclaimed session of the same key held) on this new session, before
    /// it connects.
    fn hold_waiting(&self, held: HeldUris) {
        held.keys().for_each(|uri| self.set_watching(uri, true));
        self.inner.holds.restore(held);
    }

    /// The `sessions:<upstream>` sweep, once the pool has room: sessions whose subscriptions
    /// wait since theirs was reclaimed open again, leaving one place free for a newcomer.
    fn resume_reclaimed(&self, book: &SessionBook) {
        for (key, declared) in book.reclaimed.keys() {
            if book.len() + 1 >= self.inner.config.sessions.max {
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

/// The host session a session of `key` is for (a per-host one's), with what it declared.
fn host_session(key: &SessionKey, declared: Option<Declared>) -> Option<HostSession> {
    let id = key.host()?;
    let (sampling, elicitation) = declared.map_or((false, false), |d| (d.sampling, d.elicitation));
    Some(HostSession { id, sampling, elicitation })
}

/// Severity order (RFC 5424, as the spec lists the levels): lower is more verbose.
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The `sessions:<upstream>` sweep: closes sessions idle for `session_idle`, until `stop`.
pub(super) async fn sweep(upstream: Upstream, stop: CancellationToken) {
    let idle = upstream.inner.config.sessions.idle;
    let every = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(book) = &upstream.inner.sessions else { return };
        let closed = book.close_idle(idle);
        if !closed.is_empty() {
            tracing::debug!(upstream = upstream.name(), closed = closed.len(), "idle upstream sessions closed");
            upstream.inner.metrics.set_upstream_sessions(upstream.name(), book.len());
            upstream.closed_with_own_offerings(&closed);
        }
        upstream.resume_reclaimed(book);
    }
}
