//! `[cluster]`: a per-principal (or per-host) upstream session another replica owns, reached
//! over MCP. Where a request runs is decided once, where its session is picked
//! ([`Upstream::session_for`]): the caller's session here, or a [`Session`] whose
//! [`Connection`] is a streamable HTTP connection to the owner's session endpoint — made,
//! supervised and used as any HTTP upstream's (rounds, relay, progress, the CLIENT span of the
//! hop), with a fresh pass on every request ([`OwnerRoutes::pass`]: the principal, the host
//! session, the JWT and kept-answer key of the request it carries). What crosses replicas is
//! handed in by the composition ([`OwnerRoutes`]); this module knows no cluster.
//!
//! The owner unreachable (no connection within the peer client's connect timeout, or TLS
//! refused either side): the request runs on a session here, counted as a `fallback`. Such a
//! connection is kept while it is used (a request, a subscription, a host listing here) and closed once
//! unused for `session_idle`, with its host session (per-host), or when its upstream stops.
//!
//! A subscription on such a session is made on that connection as on any upstream session
//! (`resources/subscribe` at the owner, each `updated` back on the MCP session's stream, made
//! again after a reconnect), at most [`MAX_SUBSCRIPTIONS_PER_OWNER`] URIs of one principal at one
//! owner; what the session lists as its own is asked there, and asked again when the owner
//! says `tools/list_changed` or `prompts/list_changed` (the shared connection's lists until it
//! answers). Every second the `sessions:<upstream>` sweep looks where each session
//! lives now ([`Upstream::follow_owners`], `following`): the subscriptions of one whose owner changed (those
//! waiting since it was reclaimed from a full pool too) are made where it lives now (here, or
//! on a connection to the new owner), each subscriber told once that its URI may have changed, and its hosts list the shared connection's lists until the new place
//! says otherwise.
//!
//! A 2026-07-28 host's retry of a call parked on another replica goes to that replica the same
//! way ([`Upstream::session_on`]), of any upstream (a shared one too): a connection to its
//! session endpoint pinned to 2026-07-28, where the answer can be `input_required` again,
//! declaring what the host declared; that replica gone or unreachable, the retry fails
//! ([`Unreached`]), never runs here. Such connections close once unused for `session_idle`
//! (checked at each retry, since a shared upstream has no sweep).
//!
//! Invariant: a connection to an owner carries one principal's (host session's) requests
//! only, each under a pass naming that principal; the owner's own requests never go on one.
//! A subscription is on one session at a time, the one where its session lives as this replica last
//! looked.

mod following;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::client::Declared;
use super::owner_link::{OwnerLink, Whose};
use super::pool::SessionKey;
use super::session::Session;
use super::sessions::SessionHandle;
use super::{Connection, Offered, Upstream};
use crate::config::{ProtocolChoice, UpstreamTransport};
use crate::error::ProxyError;
use crate::host::HostSession;
use crate::protocol::{LEGACY_HANDSHAKE, MODERN_VERSION};
use crate::subscription_table::SubscriberId;

/// URIs one principal subscribes at most on the sessions one owner keeps for this replica: each is
/// a subscription and a task there, so one principal's subscriptions cannot take an owner from
/// every other host. Past it a subscription is refused, naming the bound.
pub const MAX_SUBSCRIPTIONS_PER_OWNER: usize = 64;

/// The connections to other replicas, by replica, whose session and what for.
#[derive(Default)]
pub(super) struct AtOwners {
    open: Mutex<BTreeMap<At, AtOwner>>,
}

/// Where one connection to another replica goes: the replica, whose session, what for.
type At = (Arc<str>, SessionKey, Reach);

/// What a connection to another replica is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Reach {
    /// The session it owns (2025 era): requests, subscriptions, its own lists.
    Session,
    /// Retries of calls parked there, from hosts that declared (sampling, elicitation).
    Parked(bool, bool),
}

/// Why a retry cannot reach the replica its call is parked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreached {
    /// No such replica is alive.
    Gone,
    /// It could not be connected to.
    Unreachable,
}

struct AtOwner {
    session: Session,
    stop: CancellationToken,
    last: Instant,
}

impl AtOwners {
    /// Close those `closing` picks; those there were.
    fn close_where(&self, mut closing: impl FnMut(&At, &AtOwner) -> bool) -> Vec<Session> {
        let mut closed = Vec::new();
        self.open.lock().expect("owners lock").retain(|at, conn| {
            let close = closing(at, conn);
            if close {
                conn.stop.cancel();
                closed.push(conn.session.clone());
            }
            !close
        });
        closed
    }

    /// Every open connection's session.
    pub(super) fn sessions(&self) -> Vec<Session> {
        self.open.lock().expect("owners lock").values().map(|conn| conn.session.clone()).collect()
    }

    /// The URIs `principal` subscribes on connections to `owner`.
    fn uris_subscribed(&self, owner: &str, principal: &str) -> usize {
        let open = self.open.lock().expect("owners lock");
        let theirs = open.iter().filter(|((at, key, _), _)| &**at == owner && key.principal() == principal);
        theirs.map(|(_, conn)| conn.session.subscriptions().len()).sum()
    }
}

impl Upstream {
    /// `[cluster]`: how another replica's sessions are reached (set once, before it is spawned).
    pub fn set_owner_routes(&self, routes: super::OwnerRoutes) {
        let _ = self.inner.owner_routes.set(routes);
    }

    /// The connection to the replica owning the session of `principal` (host session `host`),
    /// when another one owns it, opened now if need be (not waiting for it to connect):
    /// that replica and the connection's session.
    fn at_owner(&self, principal: &str, host: Option<HostSession>) -> Option<(Arc<str>, Session)> {
        let routes = self.inner.owner_routes.get().filter(|_| self.has_sessions())?;
        let (key, declared) = self.key_of(principal, host);
        let host = host.filter(|_| key.host().is_some());
        let whose = Whose { upstream: self.name(), principal, host };
        let owner = (routes.owner_of)(&whose)?;
        let at: At = (owner.replica.as_str().into(), key, Reach::Session);
        let mut open = self.inner.at_owners.open.lock().expect("owners lock");
        let conn = match open.get_mut(&at) {
            // A host session's own requests declare what it declared; a connection opened to
            // learn its lists knew none of it, and gives way (its subscriptions go along).
            Some(conn) if conn.session.inner.declared != declared && declares_anything(declared) => {
                conn.stop.cancel();
                let subscribed = conn.session.subscriptions().take_all();
                let fresh = self.open_at_owner(routes, &owner.url, &at, whose, declared)?;
                fresh.session.subscribe_waiting(subscribed);
                *conn = fresh;
                conn
            }
            Some(conn) => conn,
            None => {
                let session = self.open_at_owner(routes, &owner.url, &at, whose, declared)?;
                open.entry(at.clone()).or_insert(session)
            }
        };
        conn.last = Instant::now();
        Some((at.0, conn.session.clone()))
    }

    /// A new connection `at` to the session endpoint of the replica at `url` for `whose`
    /// session, supervised until the upstream stops (or it is closed); a session's updates and
    /// own lists go to the upstream's events.
    fn open_at_owner(
        &self,
        routes: &super::OwnerRoutes,
        url: &str,
        at: &At,
        whose: Whose<'_>,
        declared: Option<Declared>,
    ) -> Option<AtOwner> {
        let (spine, parent_stop) = self.launch()?;
        let mut config = self.config().clone();
        let url = format!("{url}{}", routes.path);
        config.transport = UpstreamTransport::Http { url, headers: Default::default(), ca: None, auth: None };
        config.protocol = ProtocolChoice::Pinned(match at.2 {
            Reach::Session => LEGACY_HANDSHAKE.to_string(),
            Reach::Parked(..) => MODERN_VERSION.to_string(),
        });
        let link = OwnerLink::new(routes.clone(), at.0.clone(), whose);
        let connection = Connection::new(config, self.metrics().clone(), declared, None, Some(link));
        let session = Session::new(connection, whose.principal.into(), at.1.host());
        let stop = parent_stop.child_token();
        let events = match at.2 {
            Reach::Session => self.inner.events.lock().expect("events lock").clone(),
            Reach::Parked(..) => None,
        };
        session.spawn(&spine, stop.clone(), events, false);
        Some(AtOwner { session, stop, last: Instant::now() })
    }

    /// The connection to the replica owning the session of `principal` (host session `host`),
    /// when another one owns it and can be reached; `None`: the session is this replica's (or
    /// its owner cannot be reached, counted as a `fallback`).
    pub(super) async fn session_at_owner(&self, principal: &str, host: Option<HostSession>) -> Option<SessionHandle> {
        let (replica, session) = self.at_owner(principal, host)?;
        if session.link().is_err() {
            let opened = tokio::time::timeout(self.config().request_timeout, session.wait_settled()).await;
            if opened.is_err() || session.link().is_err() {
                // What it subscribes stays on it: it connects again, or moves with its session.
                self.inner.at_owners.close_where(|(to, _, _), conn| {
                    *to == replica
                        && Arc::ptr_eq(&conn.session.inner, &session.inner)
                        && !session.subscriptions().subscribes_anything()
                });
                self.metrics().cluster_forward("fallback");
                tracing::warn!(
                    upstream = self.name(),
                    replica = %replica,
                    "the replica owning this upstream session is unreachable; running the request here"
                );
                return None;
            }
        }
        // As on a session here: a request goes after what its subscribers subscribed before it.
        session.subscriptions_settled().await;
        Some(SessionHandle::AtOwner(session))
    }

    /// The connection to replica `replica`, where a call of `principal`'s (host session
    /// `host`'s) waits for its 2026-07-28 host's input, for that host's retry; the host declared
    /// `(sampling, elicitation)`. Of any upstream: a retry resumes a call parked there, whoever
    /// owns the upstream's session.
    pub async fn session_on(
        &self,
        replica: &str,
        principal: &str,
        host: Option<HostSession>,
        (sampling, elicitation): (bool, bool),
    ) -> Result<SessionHandle, Unreached> {
        let routes = self.inner.owner_routes.get().ok_or(Unreached::Gone)?;
        // A shared upstream has no sweep: its connections for retries close here once idle.
        self.close_idle_at_owners(self.config().sessions.idle);
        let to = (routes.replica_at)(replica).ok_or(Unreached::Gone)?;
        let (key, _) = self.key_of(principal, host);
        let host = host.filter(|_| key.host().is_some());
        let whose = Whose { upstream: self.name(), principal, host };
        let declared = Some(Declared { sampling, elicitation });
        let at: At = (to.replica.as_str().into(), key, Reach::Parked(sampling, elicitation));
        let session = {
            let mut open = self.inner.at_owners.open.lock().expect("owners lock");
            let conn = match open.get_mut(&at) {
                Some(conn) => conn,
                None => {
                    let fresh = self.open_at_owner(routes, &to.url, &at, whose, declared);
                    open.entry(at.clone()).or_insert(fresh.ok_or(Unreached::Unreachable)?)
                }
            };
            conn.last = Instant::now();
            conn.session.clone()
        };
        if session.link().is_err() {
            let opened = tokio::time::timeout(self.config().request_timeout, session.wait_settled()).await;
            if opened.is_err() || session.link().is_err() {
                self.inner.at_owners.close_where(|open, _| *open == at);
                self.metrics().cluster_forward("failed");
                tracing::warn!(upstream = self.name(), replica, "the replica a call waits on is unreachable");
                return Err(Unreached::Unreachable);
            }
        }
        Ok(SessionHandle::AtOwner(session))
    }

    /// What the session of `principal` (host session `host`) lists as its own when another
    /// replica owns it: `Some(None)` while it lists none of its own, or before that replica
    /// answered (asked now, on a connection opened if need be); `None` when it is this
    /// replica's.
    pub(super) fn own_offerings_at_owner(&self, principal: &str, host: Option<u64>) -> Option<Option<Arc<Offered>>> {
        let host = host.map(|id| HostSession { id, sampling: false, elicitation: false });
        let (_, session) = self.at_owner(principal, host)?;
        Some(session.own_offerings())
    }

    /// Subscribe `uri` for `subscriber` on the session of `principal` (host session `host`) at the
    /// replica owning it, when another one does; `None`: it is this replica's. Past
    /// [`MAX_SUBSCRIPTIONS_PER_OWNER`] URIs of the principal at that replica, refused.
    pub(super) fn subscribe_at_owner(
        &self,
        principal: &str,
        host: Option<HostSession>,
        subscriber: SubscriberId,
        uri: &str,
    ) -> Option<Result<(), ProxyError>> {
        let (replica, session) = self.at_owner(principal, host)?;
        let full = self.inner.at_owners.uris_subscribed(&replica, principal) >= MAX_SUBSCRIPTIONS_PER_OWNER;
        if full && !session.subscriptions().subscribes_uri(uri) {
            return Some(Err(subscriptions_limit()));
        }
        session.subscribe(subscriber, uri);
        Some(Ok(()))
    }

    /// The session at the replica owning the session of `principal` (host session `host`)
    /// on which `uri` is subscribed, if any.
    pub(super) fn subscribed_at_owner(&self, principal: &str, host: Option<HostSession>, uri: &str) -> Option<Session> {
        let (key, _) = self.key_of(principal, host);
        let open = self.inner.at_owners.open.lock().expect("owners lock");
        let mut conn = open.iter().filter(|((_, at, _), _)| *at == key).map(|(_, conn)| &conn.session);
        conn.find(|session| session.subscriptions().subscribes_uri(uri)).cloned()
    }

    /// Close the connections to owners unused for `idle` that subscribe nothing.
    pub(super) fn close_idle_at_owners(&self, idle: Duration) {
        let closed = self
            .inner
            .at_owners
            .close_where(|_, conn| !conn.session.subscriptions().subscribes_anything() && conn.last.elapsed() >= idle);
        self.closed_with_own_offerings(&closed);
    }

    /// Host session `host` ended: its connections to owners close (the owner closes its session
    /// on the session's news).
    pub(super) fn close_host_at_owners(&self, host: u64) {
        let closed = self.inner.at_owners.close_where(|(_, key, _), _| key.host() == Some(host));
        self.closed_with_own_offerings(&closed);
    }
}

/// Does a host session declare anything an upstream may ask it for?
fn declares_anything(declared: Option<Declared>) -> bool {
    declared.is_some_and(|declared| declared.sampling || declared.elicitation)
}

/// The error of a subscription past [`MAX_SUBSCRIPTIONS_PER_OWNER`].
fn subscriptions_limit() -> ProxyError {
    ProxyError::SubscriptionLimit {
        subscriber: "this principal, on a replica that does not own its upstream session,",
        limit: MAX_SUBSCRIPTIONS_PER_OWNER,
        setting: "the bound on subscriptions made at another replica",
    }
}
