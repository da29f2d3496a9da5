//! `[cluster]`: what of the routed path still crosses replicas as a forwarded request
//! ([`crate::cluster::forward`]), and the owner's side of a request another replica sends here.
//!
//! A request on a per-principal (or per-host) session another replica holds goes there over
//! MCP, on the connection the upstream picks (its `session_for`); the owner's session endpoint
//! runs it here through [`Tools::run_forwarded`] on this replica's own session, never sending
//! it on. A 2026-07-28 host's call parked for its input waits on the replica that started it,
//! which the proxy's `requestState` names (it is never sealed, so any replica reads it); a
//! retry landing on another replica is forwarded there ([`Tools::resume_where_parked`]), and
//! resumed there ([`Tools::run_forwarded`] takes a request of a shared upstream only for that).
//!
//! Invariant: a request reaches another replica only after this replica decided it for the
//! principal; the replica that runs it never forwards it again.

use std::sync::Arc;

use rmcp::model::ServerResult;

use super::kinds::{send, state_of, takes_input};
use super::routed::Asker;
use super::sealed::Holder;
use super::{ProgressOutlet, Tools};
use crate::cluster::forward::{Answer, Call, Forwarder, ForwardingHost, HostOf, RemoteError, Sent, SessionOf};
use crate::config::SessionMode;
use crate::error::ProxyError;
use crate::host::{HostRelay, SubjectToken};
use crate::upstream::{HostSession, Upstream};

/// The owner's outcome for a request forwarded here: its answer, or why not.
pub type Ran = Result<Answer, ProxyError>;

impl Tools {
    /// `[cluster]`: what sends and opens forwarded requests.
    pub fn forwarder(&self) -> Option<&Forwarder> {
        self.inner.forwarder.as_ref()
    }

    /// A 2026-07-28 retry (`call`, with the proxy's `requestState`) of a call parked on another
    /// replica: resumed there; `None`: run it here.
    pub(super) async fn resume_where_parked(
        &self,
        upstream: &Upstream,
        asker: &Asker<'_>,
        holder: &Holder<'_>,
        call: &Call,
    ) -> Option<Result<Answer, ProxyError>> {
        let replica = self.parked_on_another(state_of(call))?;
        let mut call = call.clone();
        if let Err(error) = self.open_state_in(holder, &mut call) {
            return Some(Err(error));
        }
        let host = ForwardingHost {
            progress: asker.progress.as_deref(),
            relay: asker.relay.clone(),
            presented: holder.name,
            subject: asker.subject,
        };
        let of = session_of(upstream, asker.principal, asker.relay.as_deref());
        Some(self.resume_at(upstream, of, replica, call, host).await)
    }

    /// Whether `call` may still come as a forwarded request (`cluster::forward`): a retry of
    /// a call parked here. A call, prompt, read or completion on a session held here comes
    /// over MCP (the session endpoint), never so.
    pub fn takes_forwarded(call: &Call) -> bool {
        match call {
            Call::Tool(_) | Call::Prompt(_) => super::parked::is_ours(state_of(call)),
            _ => false,
        }
    }

    /// Run a request another replica sent here (over MCP to the session endpoint, or a
    /// forwarded retry, [`Tools::takes_forwarded`]) on session `of` here (the
    /// principal's own, or its host session's); progress goes to `progress`, what the upstream
    /// sends the call's host to `relay` (which passes it back to the other replica, and
    /// gives the JWT the call came with). A read or completion goes with `subject`, the JWT
    /// its request came with.
    pub async fn run_forwarded(
        &self,
        of: SessionOf<'_>,
        call: Call,
        progress: Option<Arc<dyn ProgressOutlet>>,
        (relay, presented): (Option<Arc<dyn HostRelay>>, &str),
        subject: Option<&SubjectToken>,
    ) -> Ran {
        let principal = of.principal;
        let down = || ProxyError::UpstreamDown { upstream: of.upstream.to_string(), cause: None };
        let upstream = self.inner.upstreams.get(of.upstream).ok_or_else(down)?;
        // A shared upstream's request comes here only to resume a call parked here.
        if upstream.config().sessions.mode == SessionMode::Shared && !super::parked::is_ours(state_of(&call)) {
            return Err(ProxyError::InvalidParams("not an upstream with sessions of its own here".into()));
        }
        let session = upstream.session_here(principal, of.host.map(HostSession::from)).await?;
        session.pass_log_level(relay.as_deref().and_then(|relay| relay.log_level())).await;
        self.inner.metrics.cluster_forward("served");
        // A host that takes `input_required` (2026-07-28): parked here as for a local call, so
        // its retry (forwarded here from any replica) resumes it; for a 2025 host, the
        // upstream's requests go to it through `relay`.
        match relay.clone().filter(|relay| relay.takes_input_required()) {
            Some(host) if takes_input(&call) => {
                self.parked(&session, (principal, presented), call, progress, host).await
            }
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
        let mut result = match self.rewritten(upstream, answer, &policy, principal) {
            Answer::Tool(result) => ServerResult::CallToolResult(result),
            Answer::Prompt(result) => ServerResult::GetPromptResult(result),
            _ => {
                let reason = "it answered a kept call with something else".to_string();
                return Err(ProxyError::UpstreamFailed { upstream: upstream.to_string(), reason });
            }
        };
        result.strip_result_type_for_legacy_peer();
        Ok(result)
    }

    /// `[cluster]`: the replica other than this one on which the call that `state` (the
    /// proxy's own `requestState`) continues is parked.
    fn parked_on_another<'s>(&self, state: Option<&'s str>) -> Option<&'s str> {
        let forwarder = self.inner.forwarder.as_ref()?;
        let replica = super::parked::parked_at(state?)?;
        (replica != forwarder.replica_id()).then_some(replica)
    }

    /// Send the retry `call` of a call parked on `replica` there, where it resumes.
    async fn resume_at(
        &self,
        upstream: &Upstream,
        of: SessionOf<'_>,
        replica: &str,
        call: Call,
        host: ForwardingHost<'_>,
    ) -> Result<Answer, ProxyError> {
        let forwarder = self.inner.forwarder.as_ref().ok_or_else(super::parked::unknown_state)?;
        let Some(waiting) = forwarder.replica(replica) else {
            tracing::debug!(upstream = upstream.name(), replica, "a requestState names a replica that is gone");
            return Err(ProxyError::InvalidParams(format!(
                "requestState continues a call that waited on replica `{replica}`, which is gone: that call is over; \
                 call again without requestState"
            )));
        };
        let timeout = upstream.config().request_timeout + crate::cluster::forward::CONNECT_TIMEOUT * 2;
        match forwarder.send(&waiting, of, call, host, timeout).await {
            Ok(answer) => {
                self.inner.metrics.cluster_forward("forwarded");
                Ok(answer)
            }
            Err(Sent::Unreachable) => {
                self.inner.metrics.cluster_forward("failed");
                Err(ProxyError::InvalidParams(format!(
                    "requestState continues a call that waits on replica `{replica}`, which cannot be reached: \
                     that call is lost; call again without requestState"
                )))
            }
            Err(Sent::Failed(error)) => {
                self.inner.metrics.cluster_forward("failed");
                Err(error)
            }
        }
    }
}

/// Whose session a request of `principal` (from `relay`'s host, when it has one) runs on at
/// `upstream`: a per-host upstream's request from a host session runs on that session's own.
fn session_of<'a>(upstream: &'a Upstream, principal: &'a str, relay: Option<&dyn HostRelay>) -> SessionOf<'a> {
    let host = relay.and_then(|relay| {
        let key = relay.host_session()?;
        Some(HostOf { key, sampling: relay.declares_sampling(), elicitation: relay.declares_elicitation() })
    });
    let host = host.filter(|_| upstream.config().sessions.mode == SessionMode::PerHost);
    SessionOf { principal, upstream: upstream.name(), host }
}
