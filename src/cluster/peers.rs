//! `[cluster]`: how the replicas reach one another, and what a request's answer is as it
//! crosses. A request on a session another replica holds, a subscription on it, its own lists
//! and a 2026-07-28 retry of a call parked on another replica go there over MCP, to its session
//! endpoint (`session_pass`, and the upstream's `owners`), through [`PeerClient`]'s HTTP/2
//! client (with `peer_tls`, over TLS: only the cluster's CA is trusted, and this replica's
//! certificate is presented). An [`Answer`] (or a [`crate::error::RemoteError`]) is also how a kept
//! answer is sealed into Redis for a host that resumes its stream on another replica.
//!
//! Invariant: one client per replica, so every request to one other replica is a stream of one
//! HTTP/2 connection.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolResult, CompleteResult, GetPromptResult, InputRequiredResult, ReadResourceResult, ServerResult,
};
use serde::{Deserialize, Serialize};

use super::keys::label;
use super::{Cluster, Owner};
use crate::error::ProxyError;
use crate::host::HostSession;

/// How long the caller waits for a connection to the owner before running the request itself.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the connection to a replica is pinged, and how long an unanswered ping waits
/// before the connection counts as dead (its requests fail; the next one connects anew).
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// Whose session a request of another replica runs on.
#[derive(Debug, Clone, Copy)]
pub struct SessionOf<'a> {
    pub principal: &'a str,
    pub upstream: &'a str,
    /// A per-host upstream's host session (none: the principal's session).
    pub host: Option<HostSession>,
}

/// The upstream's answer to a call, prompt, read or completion.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", content = "result", rename_all = "snake_case")]
pub enum Answer {
    Tool(CallToolResult),
    Prompt(GetPromptResult),
    Read(ReadResourceResult),
    Complete(CompleteResult),
    InputRequired(InputRequiredResult),
}

/// The client between replicas, and where each is; a cheap `Clone`.
#[derive(Clone)]
pub struct PeerClient {
    inner: Arc<Inner>,
}

struct Inner {
    cluster: Cluster,
    http: reqwest::Client,
}

impl PeerClient {
    pub fn new(cluster: &Cluster) -> PeerClient {
        // HTTP/2 with prior knowledge: every request to one replica, holds included, is a
        // stream of one connection (the listener speaks both; its `MAX_STREAMS` at once).
        let mut http = crate::crypto::http_client()
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_prior_knowledge()
            .http2_keep_alive_interval(KEEP_ALIVE)
            .http2_keep_alive_timeout(KEEP_ALIVE)
            .http2_keep_alive_while_idle(true)
            .no_proxy();
        if let Some(tls) = cluster.peer_tls() {
            http = http.tls_backend_preconfigured(super::peer_tls::client_config(tls)).https_only(true);
        }
        let http = http.build().expect("the client between replicas builds");
        PeerClient { inner: Arc::new(Inner { cluster: cluster.clone(), http }) }
    }

    /// The client between replicas (HTTP/2; with `peer_tls`, over TLS).
    pub fn client(&self) -> reqwest::Client {
        self.inner.http.clone()
    }

    /// What makes the passes of requests to the other replicas' session endpoints.
    pub fn session_passes(&self) -> super::session_pass::Passes {
        let cluster = &self.inner.cluster;
        super::session_pass::Passes::new(cluster.replica_id(), &cluster.keys().derive(label::SESSION_PASS))
    }

    /// This replica's id.
    pub fn replica_id(&self) -> &str {
        self.inner.cluster.replica_id()
    }

    /// Another replica seen alive that can be reached, by its id.
    pub fn replica(&self, id: &str) -> Option<Owner> {
        self.inner.cluster.others().into_iter().find(|other| other.replica == id)
    }

    /// The replica holding `of`, when it is another one.
    pub fn owner(&self, of: SessionOf<'_>) -> Option<Owner> {
        self.inner.cluster.owner_of(of.upstream, of.principal, of.host.map(|host| host.id))
    }
}

impl Answer {
    /// A kept call's answer as its host gets it: the call's or the get's result, in the form a
    /// 2025 host reads. Only those are kept: another kind is `upstream`'s failure.
    pub fn into_kept_result(self, upstream: &str) -> Result<ServerResult, ProxyError> {
        let mut result = match self {
            Answer::Tool(result) => ServerResult::CallToolResult(result),
            Answer::Prompt(result) => ServerResult::GetPromptResult(result),
            _ => {
                let reason = "a kept answer is of neither a call nor a get".to_string();
                return Err(ProxyError::UpstreamFailed { upstream: upstream.to_string(), reason });
            }
        };
        result.strip_result_type_for_legacy_peer();
        Ok(result)
    }
}
