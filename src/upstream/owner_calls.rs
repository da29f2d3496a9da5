//! `[cluster]`: what a connection to another replica's session endpoint (`owners`) does apart
//! from any other connection: its hops counted, its session's own lists asked there, the
//! owner's errors taken as the proxy's own: the error it carries ([`RemoteError`]) as it is,
//! so the host gets the code, message and kind the owner would give its own host.

use rmcp::model::{ErrorCode, ErrorData};
use rmcp::service::ServiceError;

use super::owner_link::OwnerLink;
use super::{Connection, Link, Offered};
use crate::error::{ProxyError, RemoteError};

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
    /// are ours (a stdio child's start-failure cause included). One without the error it
    /// carries (its session endpoint's own refusals, rmcp's) is read from its code and kind.
    pub(super) fn owner_error(&self, uri: Option<&str>, error: ErrorData) -> ProxyError {
        let upstream = self.name().to_string();
        if let Some(carried) = RemoteError::carried_in(&error) {
            return carried.into_error(&upstream);
        }
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
