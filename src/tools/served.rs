//! `[cluster]`: the replica's side of a request another replica sends here. A request on a
//! per-principal (or per-host) session this replica holds comes over MCP to the session
//! endpoint (`downstream`'s `owned`), and runs through [`Tools::run_for_replica`] on this
//! replica's own session, never sent on. So does a 2026-07-28 host's retry of a call parked
//! here, whichever replica the retry landed on (its `requestState` names this one): it resumes
//! the parked call, and is the only request of a shared upstream taken here. Also a kept
//! answer as the host may see it ([`Tools::kept_for`]).
//!
//! Invariant: a request reaches another replica only after the replica it landed on decided it
//! for the principal; the replica that runs it never sends it on.

use std::sync::Arc;

use rmcp::model::ServerResult;

use super::kinds::{Call, send, state_of, takes_input};
use super::{ProgressOutlet, Tools};
use crate::cluster::peers::{Answer, PeerClient, SessionOf};
use crate::config::SessionMode;
use crate::error::{ProxyError, RemoteError};
use crate::host::{HostRelay, SubjectToken};

/// The outcome of a request another replica sent here: its answer, or why not.
pub type Ran = Result<Answer, ProxyError>;

impl Tools {
    /// `[cluster]`: the client between replicas, and where each is.
    pub fn forwarder(&self) -> Option<&PeerClient> {
        self.inner.forwarder.as_ref()
    }

    /// Whether `call` resumes a call parked on this replica (it carries the proxy's own
    /// `requestState`, naming this replica): the one request a 2026-07-28 connection of another
    /// replica brings to the session endpoint.
    pub fn resumes_parked_here(&self, call: &Call) -> bool {
        let state = state_of(call);
        super::parked::is_ours(state) && self.parked_on_another(state).is_none()
    }

    /// Run a request another replica sent here over MCP on session `of` here (the principal's
    /// own, or its host session's); progress goes to `progress`, what the upstream sends the
    /// call's host to `relay` (which passes it back to the other replica, and gives the JWT
    /// the call came with). A read or completion goes with `subject`, the JWT its request came
    /// with. A retry of a call parked here (from a 2026-07-28 host, `relay` taking
    /// `input_required`) resumes it, on no session of its own.
    pub async fn run_for_replica(
        &self,
        of: SessionOf<'_>,
        call: Call,
        progress: Option<Arc<dyn ProgressOutlet>>,
        relay: Option<Arc<dyn HostRelay>>,
        subject: Option<&SubjectToken>,
    ) -> Ran {
        let principal = of.principal;
        let down = || ProxyError::UpstreamDown { upstream: of.upstream.to_string(), cause: None };
        let upstream = self.inner.upstreams.get(of.upstream).ok_or_else(down)?;
        let host = relay.clone().filter(|relay| relay.takes_input_required());
        if super::parked::is_ours(state_of(&call)) {
            let host = host.ok_or_else(super::parked::unknown_state)?;
            self.inner.metrics.cluster_forward("resumed");
            return self.parked(&upstream, principal, call, progress, host).await;
        }
        // A shared upstream's request comes here only to resume a call parked here.
        if upstream.config().sessions.mode == SessionMode::Shared {
            return Err(ProxyError::InvalidParams("not an upstream with sessions of its own here".into()));
        }
        let session = upstream.session_here(principal, of.host).await?;
        session.pass_log_level(relay.as_deref().and_then(|relay| relay.log_level())).await;
        self.inner.metrics.cluster_forward("served");
        // A host that takes `input_required` (2026-07-28): parked here as for a local call, so
        // its retry (sent here from any replica) resumes it; for a 2025 host, the upstream's
        // requests go to it through `relay`.
        match host {
            Some(host) if takes_input(&call) => self.parked(&session, principal, call, progress, host).await,
            _ => send(&session, call, progress, relay, subject).await,
        }
    }

    /// The answer of a call kept for a 2025 host whose stream was lost with the replica that
    /// served it (`downstream`'s `kept`): `upstream`'s answer or error as `principal` may see
    /// it, rewritten as that replica would have, under the policy of now.
    pub fn kept_for(
        &self,
        principal: &str,
        upstream: &str,
        answer: Result<Answer, RemoteError>,
    ) -> Result<ServerResult, ProxyError> {
        let policy = self.policy();
        let answer = answer.map_err(|error| error.into_error(upstream))?;
        self.rewritten(upstream, answer, &policy, principal).into_kept_result(upstream)
    }

    /// `[cluster]`: the replica other than this one on which the call that `state` (the
    /// proxy's own `requestState`) continues is parked.
    pub(super) fn parked_on_another<'s>(&self, state: Option<&'s str>) -> Option<&'s str> {
        let forwarder = self.inner.forwarder.as_ref()?;
        let replica = super::parked::parked_at(state?)?;
        (replica != forwarder.replica_id()).then_some(replica)
    }
}
