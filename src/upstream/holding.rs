//! Subscriptions on an upstream's sessions ([`Upstream::session_hold`]): a 2025 host's goes on
//! its principal's session (per-host: its host session's), a listen stream's on its principal's;
//! never on the shared connection. A session holding one is not closed as idle. A reload makes
//! every hold again on its successor's sessions ([`Upstream::hold_again`]). With `[cluster]`, a
//! hold is made where its session lives: on the connection to the replica holding it when
//! that is another one (`owners`), which holds it there for this one
//! ([`Upstream::hold_for_replica`]).
//!
//! Invariant: a hold is on its holder's principal's (host session's) session only.

use std::sync::Arc;
use std::time::Duration;

use super::client::Declared;
use super::pool::SessionKey;
use super::{HostSession, Upstream, Watching};
use crate::error::ProxyError;
use crate::host::SubjectToken;
use crate::subscriptions::HolderId;

/// One URI held on a session, for `holder` of `principal` (on host session `host` when the
/// session is that host's).
pub struct SessionHold {
    principal: Arc<str>,
    host: Option<HostSession>,
    holder: HolderId,
    uri: String,
}

impl Upstream {
    /// `holder` (a host session or listen stream of `principal`, coming on host session `host`
    /// when it has one) subscribes `uri` (un-namespaced) of this upstream: on a per-principal
    /// or per-host upstream the subscription is made on that principal's (host session's) own
    /// session, opened now if need be, and only its holders hear what that session says of it.
    /// A no-op on a shared upstream (the watch book subscribes the shared connection). With
    /// `[cluster]`, it is made where that session lives (`owners`). `subject`: the JWT the
    /// subscription request came with; a `token_exchange` session subscribes with a token
    /// exchanged for it (`credentials`).
    pub fn session_hold(
        &self,
        principal: &str,
        host: Option<HostSession>,
        holder: HolderId,
        uri: &str,
        subject: Option<&SubjectToken>,
    ) -> Result<(), ProxyError> {
        if let Some(held) = self.hold_at_owner(principal, host, holder, uri) {
            return held;
        }
        self.hold_here(principal, host, holder, uri, subject)
    }

    /// `[cluster]`, the owner's side: hold `uri` for `holder` (a session of another replica's
    /// connection to this one) on `principal`'s session here (host session `host`'s), never
    /// sent on to another replica.
    pub fn hold_for_replica(
        &self,
        principal: &str,
        host: Option<HostSession>,
        holder: HolderId,
        uri: &str,
    ) -> Result<(), ProxyError> {
        if !self.has_sessions() {
            return Err(ProxyError::InvalidParams("not an upstream with sessions of its own here".into()));
        }
        self.hold_here(principal, host, holder, uri, None)
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
        // With this request's JWT; a subscription is a request: the session counts as used.
        let (session, _lease) = self.open_session(book, &key, declared, subject)?;
        if session.holds().hold(holder, uri) {
            session.set_watching(uri, true);
        }
        Ok(())
    }

    /// Wait (at most `timeout`) until the connection holding `principal`'s subscriptions
    /// (host session `host`'s on a per-host upstream) answered the one of `uri`: this upstream
    /// when it is shared, else that session, which must be open already (a subscription opened
    /// it). The shared connection of a per-session upstream never subscribes, so waiting on it
    /// would only time out.
    /// With `[cluster]`, a hold on the connection to the replica holding the session is
    /// waited on there (that replica answers once its session answered).
    pub async fn wait_held(
        &self,
        principal: &str,
        host: Option<HostSession>,
        uri: &str,
        timeout: Duration,
    ) -> Watching {
        if let Some(session) = self.held_at_owner(principal, host, uri) {
            return session.wait_watching(uri, timeout).await;
        }
        self.wait_for_replica(principal, host, uri, timeout).await
    }

    /// As [`Upstream::wait_held`], on this replica's session only: also the owner's side of a
    /// hold another replica asked for ([`Upstream::hold_for_replica`]).
    pub async fn wait_for_replica(
        &self,
        principal: &str,
        host: Option<HostSession>,
        uri: &str,
        timeout: Duration,
    ) -> Watching {
        let Some(book) = &self.inner.sessions else { return self.wait_watching(uri, timeout).await };
        match book.session(&self.key_of(principal, host).0) {
            Some(session) => session.wait_watching(uri, timeout).await,
            None => Watching::NotInTime,
        }
    }

    /// Every hold on its sessions, for whom: a reload that replaces it makes them again on its
    /// successor ([`Upstream::hold_again`]).
    pub fn session_holds(&self) -> Vec<SessionHold> {
        let Some(book) = &self.inner.sessions else { return Vec::new() };
        let mut holds = Vec::new();
        for (key, session) in book.sessions() {
            let (principal, host): (Arc<str>, _) = (key.principal().into(), host_session(&key, session.inner.declared));
            for (holder, uris) in session.holds().all() {
                let principal = &principal;
                holds.extend(uris.into_iter().map(|uri| SessionHold {
                    principal: principal.clone(),
                    host,
                    holder,
                    uri,
                }));
            }
        }
        let waiting = book.reclaimed.all().into_iter().map(|(key, declared, holder, uri)| SessionHold {
            principal: key.principal().into(),
            host: host_session(&key, declared),
            holder,
            uri,
        });
        holds.extend(waiting);
        let at_owners = self.holds_at_owners().into_iter();
        holds.extend(at_owners.map(|(principal, host, holder, uri)| SessionHold { principal, host, holder, uri }));
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
        self.release_at_owners(holder, Some(uri));
        self.release_here(holder, Some(uri));
    }

    /// `holder` is gone: what it held on this upstream's sessions is let go.
    pub fn session_release_all(&self, holder: HolderId) {
        self.release_at_owners(holder, None);
        self.release_here(holder, None);
    }

    /// `holder` lets go of `uri` (everything it held when `None`) on this replica's sessions.
    pub(super) fn release_here(&self, holder: HolderId, uri: Option<&str>) {
        let Some(book) = &self.inner.sessions else { return };
        book.reclaimed.release(holder, uri);
        for (_, session) in book.sessions() {
            session.holds().release(holder, uri).iter().for_each(|uri| session.set_watching(uri, false));
        }
    }
}

/// The host session a session of `key` is for (a per-host one's), with what it declared.
pub(super) fn host_session(key: &SessionKey, declared: Option<Declared>) -> Option<HostSession> {
    let id = key.host()?;
    let (sampling, elicitation) = declared.map_or((false, false), |d| (d.sampling, d.elicitation));
    Some(HostSession { id, sampling, elicitation })
}
