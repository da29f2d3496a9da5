//! `[cluster]`: a per-principal (or per-host) upstream session another replica holds, reached
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
//! connection is kept while it is used and closed once unused for `session_idle`, with its
//! host session (per-host), or when its upstream stops.
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

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{ErrorCode, ErrorData};
use tokio_util::sync::CancellationToken;

use super::client::Declared;
use super::owner_link::{OwnerAt, OwnerLink, OwnerRoutes, Whose};
use super::pool::SessionKey;
use super::session::Session;
use super::sessions::SessionHandle;
use super::{Connection, Upstream};
use crate::config::{ProtocolChoice, UpstreamTransport};
use crate::error::ProxyError;
use crate::host::HostSession;
use crate::protocol::{LEGACY_HANDSHAKE, MODERN_VERSION};

/// The connections to owners, by replica, whose session and what for.
#[derive(Default)]
pub(super) struct AtOwners {
    open: Mutex<BTreeMap<At, AtOwner>>,
}

/// Where one connection to another replica goes: the replica, whose session, what for.
type At = (Arc<str>, SessionKey, Reach);

/// What a connection to another replica is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Reach {
    /// The session it holds (2025 era).
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
    /// Close those unused for `idle`, and (with `host`) those of that host session.
    fn close_where(&self, mut closing: impl FnMut(&SessionKey, &AtOwner) -> bool) {
        self.open.lock().expect("owners lock").retain(|(_, key, _), held| {
            let close = closing(key, held);
            if close {
                held.stop.cancel();
            }
            !close
        });
    }

    fn forget(&self, at: &At) {
        if let Some(held) = self.open.lock().expect("owners lock").remove(at) {
            held.stop.cancel();
        }
    }
}

impl Upstream {
    /// `[cluster]`: how another replica's sessions are reached (set once, before it is spawned).
    pub fn set_owner_routes(&self, routes: super::OwnerRoutes) {
        let _ = self.inner.owner_routes.set(routes);
    }

    /// The connection to the replica holding the session of `principal` (host session `host`),
    /// when another one holds it and can be reached; `None`: the session is this replica's (or
    /// its owner cannot be reached, counted as a `fallback`).
    pub(super) async fn session_at_owner(&self, principal: &str, host: Option<HostSession>) -> Option<SessionHandle> {
        let routes = self.inner.owner_routes.get().filter(|_| self.has_sessions())?;
        let (key, declared) = self.key_of(principal, host);
        let host = host.filter(|_| key.host().is_some());
        let whose = Whose { upstream: self.name(), principal, host };
        let owner = (routes.owner_of)(&whose)?;
        let at = (Arc::<str>::from(owner.replica.as_str()), key, Reach::Session);
        let session = self.connected_to(routes, &owner, &at, whose, declared).await;
        if session.is_none() {
            self.metrics().cluster_forward("fallback");
            tracing::warn!(
                upstream = self.name(),
                replica = %at.0,
                "the replica holding this upstream session is unreachable; running the request here"
            );
        }
        session.map(SessionHandle::AtOwner)
    }

    /// The connection to replica `replica`, where a call of `principal`'s (host session
    /// `host`'s) waits for its 2026-07-28 host's input, for that host's retry; the host declared
    /// `(sampling, elicitation)`. Of any upstream: a retry resumes a call parked there, whoever
    /// holds the upstream's session.
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
        let at = (routes.replica_at)(replica).ok_or(Unreached::Gone)?;
        let (key, _) = self.key_of(principal, host);
        let host = host.filter(|_| key.host().is_some());
        let whose = Whose { upstream: self.name(), principal, host };
        let declared = Some(Declared { sampling, elicitation });
        let open_at = (Arc::<str>::from(at.replica.as_str()), key, Reach::Parked(sampling, elicitation));
        match self.connected_to(routes, &at, &open_at, whose, declared).await {
            Some(session) => Ok(SessionHandle::AtOwner(session)),
            None => {
                self.metrics().cluster_forward("failed");
                tracing::warn!(upstream = self.name(), replica, "the replica a call waits on is unreachable");
                Err(Unreached::Unreachable)
            }
        }
    }

    /// The connection `at` to replica `to`'s session endpoint for `whose` session, opened now
    /// if need be (declaring `declared`); `None` when it cannot be connected to within the
    /// request timeout.
    async fn connected_to(
        &self,
        routes: &OwnerRoutes,
        to: &OwnerAt,
        at: &At,
        whose: Whose<'_>,
        declared: Option<Declared>,
    ) -> Option<Session> {
        let session = {
            let mut open = self.inner.at_owners.open.lock().expect("owners lock");
            match open.get_mut(at) {
                Some(held) => {
                    held.last = Instant::now();
                    held.session.clone()
                }
                None => {
                    let (spine, parent_stop) = self.launch()?;
                    let mut config = self.config().clone();
                    let url = format!("{}{}", to.url, routes.path);
                    config.transport =
                        UpstreamTransport::Http { url, headers: Default::default(), ca: None, auth: None };
                    config.protocol = ProtocolChoice::Pinned(match at.2 {
                        Reach::Session => LEGACY_HANDSHAKE.to_string(),
                        Reach::Parked(..) => MODERN_VERSION.to_string(),
                    });
                    let link = OwnerLink::new(routes.clone(), at.0.clone(), whose);
                    let connection = Connection::to_owner(config, self.metrics().clone(), declared, link);
                    let session = Session::new(connection, whose.principal.into(), at.1.host());
                    let stop = parent_stop.child_token();
                    session.spawn(&spine, stop.clone(), None, false);
                    open.insert(at.clone(), AtOwner { session: session.clone(), stop, last: Instant::now() });
                    session
                }
            }
        };
        if session.link().is_err() {
            let opened = tokio::time::timeout(self.config().request_timeout, session.wait_settled()).await;
            if opened.is_err() || session.link().is_err() {
                self.inner.at_owners.forget(at);
                return None;
            }
        }
        Some(session)
    }

    /// Close the connections to owners unused for `idle`.
    pub(super) fn close_idle_at_owners(&self, idle: Duration) {
        self.inner.at_owners.close_where(|_, held| held.last.elapsed() >= idle);
    }

    /// Host session `host` ended: its connections to owners close (the owner closes its session
    /// on the session's news).
    pub(super) fn close_host_at_owners(&self, host: u64) {
        self.inner.at_owners.close_where(|key, _| key.host() == Some(host));
    }
}

impl Connection {
    /// The replica a connection to an owner goes to; `None` for any other connection.
    pub(crate) fn owner(&self) -> Option<&OwnerLink> {
        self.inner.owner.as_ref()
    }

    /// A request on a connection to an owner was answered (`ok`) or failed: counted as a
    /// `forwarded` or `failed` request between replicas. Nothing for any other connection.
    pub(super) fn count_hop(&self, ok: bool) {
        if self.owner().is_some() {
            self.metrics().cluster_forward(if ok { "forwarded" } else { "failed" });
        }
    }

    /// The error an owner answered, as it gave it: its replica is this proxy, whose errors
    /// are ours (a stdio child's start-failure cause included).
    pub(super) fn owner_error(&self, uri: Option<&str>, error: ErrorData) -> ProxyError {
        let upstream = self.name().to_string();
        let data = error.data.as_ref();
        let kind = data.and_then(|data| data["kind"].as_str());
        match (error.code, kind) {
            (ErrorCode::RESOURCE_NOT_FOUND, _) => ProxyError::not_found(uri.unwrap_or_default()),
            (_, Some("upstream_down")) => {
                let cause = data.and_then(|data| data["cause"].as_str()).map(str::to_owned);
                ProxyError::UpstreamDown { upstream, cause }
            }
            (_, Some("upstream_timeout")) => {
                ProxyError::UpstreamTimeout { upstream, timeout: self.config().request_timeout }
            }
            (ErrorCode::INVALID_PARAMS, _) => {
                let message = error.message.strip_prefix("invalid request: ").unwrap_or(&error.message);
                ProxyError::InvalidParams(message.to_string())
            }
            (_, kind) => ProxyError::UpstreamFailed { upstream, reason: kind.unwrap_or("upstream_failed").to_string() },
        }
    }
}
