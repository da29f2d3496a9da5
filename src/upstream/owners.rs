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
//! Invariant: a connection to an owner carries one principal's (host session's) requests
//! only, each under a pass naming that principal; the owner's own requests never go on one.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{ErrorCode, ErrorData};
use tokio_util::sync::CancellationToken;

use super::owner_link::{OwnerLink, Whose};
use super::pool::SessionKey;
use super::session::Session;
use super::sessions::SessionHandle;
use super::{Connection, Upstream};
use crate::config::{ProtocolChoice, UpstreamTransport};
use crate::error::ProxyError;
use crate::host::HostSession;

/// The connections to owners, by owner and whose session.
#[derive(Default)]
pub(super) struct AtOwners {
    open: Mutex<BTreeMap<(Arc<str>, SessionKey), AtOwner>>,
}

struct AtOwner {
    session: Session,
    stop: CancellationToken,
    last: Instant,
}

impl AtOwners {
    /// Close those unused for `idle`, and (with `host`) those of that host session.
    fn close_where(&self, mut closing: impl FnMut(&SessionKey, &AtOwner) -> bool) {
        self.open.lock().expect("owners lock").retain(|(_, key), held| {
            let close = closing(key, held);
            if close {
                held.stop.cancel();
            }
            !close
        });
    }

    fn forget(&self, at: &(Arc<str>, SessionKey)) {
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
        let at = (Arc::<str>::from(owner.replica.as_str()), key);
        let session = {
            let mut open = self.inner.at_owners.open.lock().expect("owners lock");
            match open.get_mut(&at) {
                Some(held) => {
                    held.last = Instant::now();
                    held.session.clone()
                }
                None => {
                    let (spine, parent_stop) = self.launch()?;
                    let mut config = self.config().clone();
                    let url = format!("{}{}", owner.url, routes.path);
                    config.transport =
                        UpstreamTransport::Http { url, headers: Default::default(), ca: None, auth: None };
                    config.protocol = ProtocolChoice::Pinned(crate::protocol::LEGACY_HANDSHAKE.to_string());
                    let link = OwnerLink::new(routes.clone(), at.0.clone(), whose);
                    let connection = Connection::to_owner(config, self.metrics().clone(), declared, link);
                    let session = Session::new(connection, principal.into(), at.1.host());
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
                self.inner.at_owners.forget(&at);
                self.metrics().cluster_forward("fallback");
                tracing::warn!(
                    upstream = self.name(),
                    replica = %at.0,
                    "the replica holding this upstream session is unreachable; running the request here"
                );
                return None;
            }
        }
        Some(SessionHandle::AtOwner(session))
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
