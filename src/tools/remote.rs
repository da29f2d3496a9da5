//! Calls, gets and completions on a per-principal (or per-host) upstream session that another
//! replica holds (`[cluster]`, see [`crate::cluster::forward`]): decided and rewritten here as
//! any other, run there on the principal's (host session's) one session; and the owner's side,
//! [`Tools::run_forwarded`].
//!
//! The owner unreachable: the request runs here on a session of this replica (counted as a
//! `fallback`; that session starts without the owner's state). An MRTR `requestState` travels
//! sealed to the caller, as for a local call. What a forwarded call's upstream sends besides
//! progress (log messages, sampling and elicitation requests) reaches the call's host through
//! the forwarding replica, as for a local call; its answers go back to the owner. A
//! 2026-07-28 host's call is parked at the owner for its input, and resumed there from any
//! replica (the proxy's own `requestState` is never sealed, so any replica passes it on). On a
//! shared upstream a 2026-07-28 host's call is parked on the replica that started it, which its
//! `requestState` names; a retry landing elsewhere is sent there ([`Tools::run_forwarded`]
//! takes a shared upstream's request only to resume a call parked there).
//!
//! Invariant: a forwarded request reaches the owner only after this replica decided it for the
//! principal; the owner runs it on that principal's session and never forwards it again.

use std::sync::Arc;

use rmcp::model::{ReadResourceResponse, ServerResult};

use super::kinds::{send, state_of, takes_input};
use super::routed::{Asker, mismatched};
use super::sealed::Holder;
use super::{ProgressOutlet, Tools};
use crate::cluster::forward::{
    Answer, Call, Forwarder, ForwardingHost, HostOf, OwnLists, RemoteError, Sent, SessionOf,
};
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

    /// Run `call` at the replica that holds `asker`'s session of `upstream`, or where the call
    /// it continues waits for its host's input; `None`: run it here (this replica's, or the
    /// owner cannot be reached).
    pub(super) async fn run_elsewhere(
        &self,
        upstream: &Upstream,
        asker: &Asker<'_>,
        holder: &Holder<'_>,
        call: &Call,
    ) -> Option<Result<Answer, ProxyError>> {
        let of = session_of(upstream, asker.principal, asker.relay.as_deref());
        let waits_elsewhere = self.parked_elsewhere(upstream, state_of(call));
        if waits_elsewhere.is_none() && !self.held_elsewhere(upstream, of) {
            return None;
        }
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
        match waits_elsewhere {
            Some(replica) => Some(self.resume_at(upstream, of, replica, call, host).await),
            None => self.elsewhere(upstream, of, call, host).await,
        }
    }

    /// A read of `principal`'s session of `upstream` (the upstream's own URI) when another
    /// replica holds it, for a request that came with `subject`; `None`: read it here.
    pub async fn read_elsewhere(
        &self,
        upstream: &Upstream,
        principal: &str,
        subject: Option<&SubjectToken>,
        uri: &str,
    ) -> Option<Result<ReadResourceResponse, ProxyError>> {
        let call = Call::Read(rmcp::model::ReadResourceRequestParams::new(uri.to_string()));
        let host = ForwardingHost { subject, ..Default::default() };
        let answer = self.elsewhere(upstream, session_of(upstream, principal, None), call, host).await?;
        Some(answer.and_then(|answer| match answer {
            Answer::Read(result) => Ok(ReadResourceResponse::Complete(result)),
            Answer::InputRequired(needs) => Ok(ReadResourceResponse::InputRequired(needs)),
            _ => Err(mismatched(upstream)),
        }))
    }

    /// Run a request forwarded to this replica (its mark checked) on session `of` here (the
    /// principal's own, or its host session's); progress goes to `progress`, what the upstream
    /// sends the call's host to `relay` (which passes it back to the forwarding replica, and
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
        if let Call::Offerings = call {
            return Ok(Answer::Offerings(upstream.own_lists_here(principal, of.host.map(|host| host.key))));
        }
        let session = upstream.session_for(principal, of.host.map(HostSession::from)).await?;
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

    /// Replica `from` says what session `of` lists as its own now (see the upstream's
    /// `offered_elsewhere`); false when there is no such upstream here.
    pub fn offered_elsewhere(&self, of: SessionOf<'_>, from: &str, lists: Option<OwnLists>) -> bool {
        let Some(upstream) = self.inner.upstreams.get(of.upstream) else { return false };
        upstream.offered_elsewhere(of.principal, of.host.map(|host| host.key), from, lists);
        true
    }

    /// Is session `of` another replica's? Asked before anything of the request is opened: a
    /// request run here (a `requestState` of a call parked here, say) is left whole.
    /// `[cluster]`, a shared upstream: the replica another than this one on which the call
    /// that `state` (the proxy's own `requestState`) continues is parked. A per-principal or
    /// per-host upstream's call is parked at its session's owner, where it is sent anyway.
    fn parked_elsewhere<'s>(&self, upstream: &Upstream, state: Option<&'s str>) -> Option<&'s str> {
        let forwarder = self.inner.forwarder.as_ref()?;
        if upstream.config().sessions.mode != SessionMode::Shared {
            return None;
        }
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

    fn held_elsewhere(&self, upstream: &Upstream, of: SessionOf<'_>) -> bool {
        self.inner.forwarder.as_ref().is_some_and(|forwarder| {
            upstream.config().sessions.mode != SessionMode::Shared && forwarder.owner(of).is_some()
        })
    }

    /// Send `call` to the replica holding session `of`: `None` when this replica holds it, or
    /// runs it because the owner cannot be reached.
    async fn elsewhere(
        &self,
        upstream: &Upstream,
        of: SessionOf<'_>,
        call: Call,
        host: ForwardingHost<'_>,
    ) -> Option<Result<Answer, ProxyError>> {
        let forwarder = self.inner.forwarder.as_ref()?;
        if upstream.config().sessions.mode == SessionMode::Shared {
            return None;
        }
        let owner = forwarder.owner(of)?;
        // The owner's own timeout, and time to reach it.
        let timeout = upstream.config().request_timeout + crate::cluster::forward::CONNECT_TIMEOUT * 2;
        let metrics = &self.inner.metrics;
        match forwarder.send(&owner, of, call, host, timeout).await {
            Ok(answer) => {
                metrics.cluster_forward("forwarded");
                Some(Ok(answer))
            }
            Err(Sent::Unreachable) => {
                metrics.cluster_forward("fallback");
                tracing::warn!(
                    upstream = upstream.name(),
                    replica = %owner.replica,
                    "the replica holding this upstream session is unreachable; running the request here"
                );
                None
            }
            Err(Sent::Failed(error)) => {
                metrics.cluster_forward("failed");
                Some(Err(error))
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
    upstream.forwarded_as(principal, host)
}
