//! `[cluster]`: what a connection to another replica's session endpoint is given (see
//! `owners`): how owners and replicas are found and passes made ([`OwnerRoutes`], handed in by the
//! composition), the owner and session one connection serves ([`OwnerLink`]), and what such a
//! connection does apart from any other: its hops counted, its session's own lists asked, the
//! owner's errors taken as the proxy's own.

use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use rmcp::model::{ErrorCode, ErrorData};
use rmcp::service::ServiceError;

use super::{Connection, Link, Offered};
use crate::error::ProxyError;
use crate::host::{HostSession, SubjectToken};

/// The replica holding a session, when another one than this.
pub type OwnerOf = Arc<dyn Fn(&Whose<'_>) -> Option<OwnerAt> + Send + Sync>;

/// Another replica alive, by its id.
pub type ReplicaAt = Arc<dyn Fn(&str) -> Option<OwnerAt> + Send + Sync>;

/// A fresh pass for one request to a replica, for a session, carrying what it carries.
pub type MakePass = Arc<dyn Fn(&str, &Whose<'_>, &Carried<'_>) -> String + Send + Sync>;

/// How another replica's sessions are reached, handed in by the composition.
#[derive(Clone)]
pub struct OwnerRoutes {
    /// The replica holding `whose` session, when another one than this.
    pub owner_of: OwnerOf,
    /// Another replica alive, by its id (the one a call waits on, which its `requestState`
    /// names).
    pub replica_at: ReplicaAt,
    /// A fresh pass for one request to replica `to` for `whose` session, carrying `carried`.
    pub pass: MakePass,
    /// The client between replicas (HTTP/2, with `peer_tls` over TLS).
    pub client: reqwest::Client,
    /// The session endpoint's route and the header of its pass.
    pub path: &'static str,
    pub header: &'static str,
}

/// Whose session a request is for.
#[derive(Debug, Clone, Copy)]
pub struct Whose<'a> {
    pub upstream: &'a str,
    pub principal: &'a str,
    /// A per-host upstream's host session (none: the principal's session).
    pub host: Option<HostSession>,
}

/// The replica holding a session: its id and the base URL of its MCP listener.
#[derive(Debug, Clone)]
pub struct OwnerAt {
    pub replica: String,
    pub url: String,
}

/// What one request's pass carries besides whose it is.
#[derive(Debug, Default, Clone, Copy)]
pub struct Carried<'a> {
    /// The JWT the host's request came with (the owner exchanges it for the upstream's token).
    pub subject: Option<&'a SubjectToken>,
    /// The key a 2025 host's call's answer is kept under at the owner, when that host's stream
    /// is lost with this replica.
    pub kept_as: Option<&'a str>,
}

/// The owner a connection goes to, and whose session it serves there.
#[derive(Clone)]
pub(crate) struct OwnerLink {
    routes: OwnerRoutes,
    pub(super) replica: Arc<str>,
    upstream: Arc<str>,
    principal: Arc<str>,
    host: Option<HostSession>,
}

impl OwnerLink {
    /// The link to replica `replica` for `whose` session.
    pub(super) fn new(routes: OwnerRoutes, replica: Arc<str>, whose: Whose<'_>) -> Self {
        let (upstream, principal) = (whose.upstream.into(), whose.principal.into());
        OwnerLink { routes, replica, upstream, principal, host: whose.host }
    }

    /// The pass header of one request carrying `carried`.
    pub(super) fn pass(&self, carried: &Carried<'_>) -> Option<(HeaderName, HeaderValue)> {
        let whose = Whose { upstream: &self.upstream, principal: &self.principal, host: self.host };
        let pass = (self.routes.pass)(&self.replica, &whose, carried);
        Some((HeaderName::from_static(self.routes.header), HeaderValue::from_str(&pass).ok()?))
    }

    pub(super) fn client(&self) -> reqwest::Client {
        self.routes.client.clone()
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

    /// What the session a connection to an owner serves lists there as its own: `None` while
    /// it lists none of its own (the owner says so with [`crate::protocol::NO_OWN_LISTS`]).
    pub(super) async fn own_lists_at_owner(&self, link: &Link) -> Result<Option<Offered>, String> {
        let timeout = self.config().request_timeout;
        let tools = match tokio::time::timeout(timeout, link.peer.list_tools(None)).await {
            Ok(Ok(page)) => page.tools,
            Ok(Err(ServiceError::McpError(error))) if lists_none(&error) => return Ok(None),
            Ok(Err(error)) => return Err(super::reason::service_failure(&error)),
            Err(_) => return Err("tools/list timed out".into()),
        };
        let prompts = match tokio::time::timeout(timeout, link.peer.list_prompts(None)).await {
            Ok(Ok(page)) => page.prompts,
            Ok(Err(ServiceError::McpError(error))) if lists_none(&error) => return Ok(None),
            Ok(Err(error)) => return Err(super::reason::service_failure(&error)),
            Err(_) => return Err("prompts/list timed out".into()),
        };
        Ok(Some(Offered { tools, prompts }))
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

/// Does the owner's `error` say the session lists none of its own?
fn lists_none(error: &ErrorData) -> bool {
    error.data.as_ref().is_some_and(|data| data["kind"] == crate::protocol::NO_OWN_LISTS)
}
