//! `tools/call`, `prompts/get` and `completion/complete`, routed: the presented name is split,
//! decided for the caller and looked up in the merged snapshot (denied, unknown and of an
//! upstream that is down all answer alike), renamed to the upstream's own, sent with the
//! upstream's timeout, and the answer's URIs rewritten for the caller (`rewrite`).
//!
//! A host that cancels its request (`notifications/cancelled`) drops the upstream request,
//! which sends the upstream `notifications/cancelled` in turn. MRTR (`input_required`)
//! answers pass through to a 2026-07-28 host with the upstream's `requestState` sealed to the
//! caller (`sealed`); for a 2025 host the proxy asks it
//! and retries (`rounds`); nothing is cached. What a 2025-era upstream
//! sends for the call (sampling, elicitation, logging) goes to the calling host's relay
//! (`crate::upstream` attributes it); a 2026-07-28 host's `tools/call` gets such a request as
//! `input_required` and resumes the waiting upstream call with its retry (`parked`).

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, InputRequiredResult, Reference, RequestMetaObject,
    ResultType,
};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::names::Offering;
use super::parked::{self, Outcome, Resume};
use super::rounds::{self, Inputs};
use super::sealed::Holder;
use super::{ProgressOutlet, Tools, rewrite};
use crate::audit::scope;
use crate::cluster::forward::ForwardingHost;
use crate::error::ProxyError;
use crate::host::{HostRelay, SubjectToken};
use crate::metrics::{DenialAction, DenialKind};
use crate::namespace;
use crate::policy::PolicySet;
use crate::upstream::{Connection, HostSession, Upstream};

impl Tools {
    /// Call a namespaced tool for `principal`.
    /// With a `progress` outlet (the host asked for progress), the upstream's progress of
    /// this call reaches it: every step sent before the answer is in the outlet before this
    /// returns; with a `relay`, its sampling, elicitation and logging.
    pub async fn call_tool(
        &self,
        principal: &str,
        mut params: CallToolRequestParams,
        cancelled: &CancellationToken,
        progress: Option<Arc<dyn ProgressOutlet>>,
        relay: Option<Arc<dyn HostRelay>>,
    ) -> Result<CallToolResponse, ProxyError> {
        // One policy snapshot decides the call and what of its result is passed on.
        let policy = self.policy();
        let host = relay.as_deref().and_then(|relay| relay.host_session());
        let (upstream, original) = self.route(&policy, (principal, host), Offering::Tool, &params.name)?;
        let presented = std::mem::replace(&mut params.name, original.into());
        params.meta = meta_upstream(params.meta.take());
        let holder = Holder { principal, name: &presented, upstream: upstream.name() };
        let forwarding = ForwardingHost {
            progress: progress.as_deref(),
            relay: relay.clone(),
            presented: &presented,
            subject: None,
        };
        let elsewhere = self.tool_elsewhere(&upstream, &holder, &params, forwarding);
        let elsewhere = until_cancelled(cancelled, async { Ok(elsewhere.await) }).await?;
        let answer = match elsewhere {
            Some(answer) => answer?,
            None => self.call_here(&upstream, principal, &presented, params, cancelled, progress, relay).await?,
        };
        match answer {
            CallToolResponse::Complete(result) => {
                Ok(CallToolResponse::Complete(self.result_for(upstream.name(), result, &policy, principal)))
            }
            CallToolResponse::InputRequired(needs) => Ok(CallToolResponse::InputRequired(needs)),
            // A task (SEP-2663) and whatever comes later are not passed through.
            _ => Err(ProxyError::UpstreamFailed {
                upstream: upstream.name().to_string(),
                reason: "it answered with a task, which the proxy does not pass through".into(),
            }),
        }
    }

    /// A call on this replica's connection (the shared one, or the caller's own session).
    #[allow(clippy::too_many_arguments)]
    async fn call_here(
        &self,
        upstream: &Upstream,
        principal: &str,
        presented: &str,
        params: CallToolRequestParams,
        cancelled: &CancellationToken,
        progress: Option<Arc<dyn ProgressOutlet>>,
        relay: Option<Arc<dyn HostRelay>>,
    ) -> Result<CallToolResponse, ProxyError> {
        let host = relay.as_deref().and_then(host_session);
        let upstream = upstream.session_for(principal, host).await?;
        upstream.pass_log_level(relay.as_deref().and_then(|relay| relay.log_level())).await;
        // Every step the upstream sent before its answer is in `progress` when this returns.
        match relay.clone().filter(|relay| relay.takes_input_required()) {
            Some(host) => {
                let holder = Holder { principal, name: presented, upstream: upstream.name() };
                let mut params = params;
                self.open_state_in(&holder, &mut params.request_state)?;
                let parked = self.call_parked(&upstream, principal, presented, params, progress, host);
                Ok(match until_cancelled(cancelled, parked).await? {
                    CallToolResponse::InputRequired(needs) => {
                        CallToolResponse::InputRequired(self.sealed_unless_parked(&holder, needs))
                    }
                    answer => answer,
                })
            }
            None => {
                let rounds = rounds::bridged(&upstream, relay.as_deref(), tool_needs, |inputs| {
                    upstream.call_tool(with_inputs_tool(params.clone(), inputs), progress.clone(), relay.clone())
                });
                until_cancelled(cancelled, rounds).await
            }
        }
    }

    /// A call for a 2026-07-28 `host`: what the upstream asks of it while the call runs is
    /// answered as `input_required`, and a retry with the proxy's `requestState` resumes the
    /// call (`parked`). `params` carries the upstream's own `requestState` (opened) or the
    /// proxy's; an upstream's own `input_required` comes back with its `requestState` unsealed
    /// (see [`Self::sealed_unless_parked`]).
    pub(super) async fn call_parked(
        &self,
        upstream: &Connection,
        principal: &str,
        presented: &str,
        mut params: CallToolRequestParams,
        progress: Option<Arc<dyn ProgressOutlet>>,
        host: Arc<dyn HostRelay>,
    ) -> Result<CallToolResponse, ProxyError> {
        let who = Resume { principal, name: presented, timeout: upstream.config().request_timeout };
        let calls = &self.inner.parked_tools;
        let outcome =
            match params.request_state.take() {
                Some(state) if parked::is_ours(Some(&state)) => {
                    calls.resume(who, &state, params.input_responses.as_ref(), host).await?
                }
                state => {
                    params.request_state = state;
                    let upstream = upstream.clone();
                    calls
                        .start(who, host, move |relay| async move {
                            upstream.call_tool(params, progress, Some(relay)).await
                        })
                        .await?
                }
            };
        Ok(match outcome {
            Outcome::Answered(answer) => answer,
            Outcome::Asks(needs) => CallToolResponse::InputRequired(needs),
        })
    }

    /// A `prompts/get` for a 2026-07-28 `host`, as [`Self::call_parked`] for a call.
    pub(super) async fn prompt_parked(
        &self,
        upstream: &Connection,
        principal: &str,
        presented: &str,
        mut params: GetPromptRequestParams,
        host: Arc<dyn HostRelay>,
    ) -> Result<GetPromptResponse, ProxyError> {
        let who = Resume { principal, name: presented, timeout: upstream.config().request_timeout };
        let gets = &self.inner.parked_prompts;
        let outcome = match params.request_state.take() {
            Some(state) if parked::is_ours(Some(&state)) => {
                gets.resume(who, &state, params.input_responses.as_ref(), host).await?
            }
            state => {
                params.request_state = state;
                let upstream = upstream.clone();
                gets.start(who, host, move |relay| async move { upstream.get_prompt(params, Some(relay)).await })
                    .await?
            }
        };
        Ok(match outcome {
            Outcome::Answered(answer) => answer,
            Outcome::Asks(needs) => GetPromptResponse::InputRequired(needs),
        })
    }

    /// The upstream's own `requestState` inside the one a host sent back (see `sealed`); a
    /// state this holder was not handed answers like an unknown one.
    pub(super) fn opened_state(
        &self,
        holder: &Holder<'_>,
        state: Option<String>,
    ) -> Result<Option<String>, ProxyError> {
        let Some(state) = state else { return Ok(None) };
        match self.inner.state_seal.open(holder, &state) {
            Some(opened) => Ok(Some(opened)),
            None => {
                tracing::debug!(
                    principal = holder.principal,
                    name = holder.name,
                    "a requestState not handed to this caller"
                );
                Err(parked::unknown_state())
            }
        }
    }

    /// An upstream's `input_required` as the host gets it: its `requestState` sealed.
    pub(super) fn sealed_needs(&self, holder: &Holder<'_>, mut needs: InputRequiredResult) -> InputRequiredResult {
        needs.request_state = needs.request_state.map(|state| self.inner.state_seal.seal(holder, &state));
        needs
    }

    /// `needs` for the host: an upstream's `requestState` sealed to the caller; the proxy's own
    /// (a call parked for the host's input, on whichever replica) passed as it is, since only
    /// the principal that was asked can resume it anyway.
    pub(super) fn sealed_unless_parked(&self, holder: &Holder<'_>, needs: InputRequiredResult) -> InputRequiredResult {
        match parked::is_ours(needs.request_state.as_deref()) {
            true => needs,
            false => self.sealed_needs(holder, needs),
        }
    }

    /// A complete tool result from `upstream` as `principal` may see it: URIs in its blocks,
    /// `_meta` and `structuredContent` namespaced, and what it may not read removed.
    pub(super) fn result_for(
        &self,
        upstream: &str,
        mut result: CallToolResult,
        policy: &PolicySet,
        principal: &str,
    ) -> CallToolResult {
        let resources = self.inner.resources.snapshot();
        let links = rewrite::Links::new(upstream, &resources, policy, principal);
        let (content, dropped) = rewrite::blocks_for(&links, result.content);
        result.content = content;
        result.meta = rewrite::result_meta(&links, result.meta);
        if dropped > 0 {
            self.inner.metrics.policy_denied(DenialAction::Read, None);
            tracing::debug!(upstream, principal, dropped, "tool result blocks withheld");
        }
        match rewrite::structured_for(&links, &mut result) {
            rewrite::Structured::Passed | rewrite::Structured::Rewritten { removed: 0 } => {}
            rewrite::Structured::Rewritten { removed } => {
                self.inner.metrics.policy_denied(DenialAction::Read, None);
                tracing::debug!(upstream, principal, removed, "structuredContent: denied resources removed");
            }
            rewrite::Structured::Withheld => {
                self.inner.metrics.policy_denied(DenialAction::Read, None);
                tracing::debug!(
                    upstream,
                    principal,
                    "tool result withheld: its structuredContent names a denied resource"
                );
            }
        }
        // A 2025-era upstream's result has no `resultType`; 2026-07-28 hosts need it
        // (rmcp clears it again for 2025 hosts).
        result.result_type = Some(ResultType::COMPLETE);
        result
    }

    /// Get a namespaced prompt for `principal`; with a `relay`, as for a call.
    pub async fn get_prompt(
        &self,
        principal: &str,
        mut params: GetPromptRequestParams,
        cancelled: &CancellationToken,
        relay: Option<Arc<dyn HostRelay>>,
    ) -> Result<GetPromptResponse, ProxyError> {
        let policy = self.policy();
        let host = relay.as_deref().and_then(|relay| relay.host_session());
        let (upstream, original) = self.route(&policy, (principal, host), Offering::Prompt, &params.name)?;
        let presented = std::mem::replace(&mut params.name, original);
        params.meta = meta_upstream(params.meta.take());
        let holder = Holder { principal, name: &presented, upstream: upstream.name() };
        let elsewhere = self.prompt_elsewhere(&upstream, &holder, &params, relay.clone());
        let elsewhere = until_cancelled(cancelled, async { Ok(elsewhere.await) }).await?;
        let answer = match elsewhere {
            Some(answer) => answer?,
            None => self.prompt_here(&upstream, principal, &presented, params, cancelled, relay).await?,
        };
        let GetPromptResponse::Complete(result) = answer else { return Ok(answer) };
        Ok(GetPromptResponse::Complete(self.prompt_for(upstream.name(), result, &policy, principal)))
    }

    /// A complete prompt from `upstream` as `principal` may see it: URIs in its messages and
    /// `_meta` namespaced, and the messages it may not read removed.
    pub(super) fn prompt_for(
        &self,
        upstream: &str,
        mut result: GetPromptResult,
        policy: &PolicySet,
        principal: &str,
    ) -> GetPromptResult {
        result.result_type = Some(ResultType::COMPLETE);
        let resources = self.inner.resources.snapshot();
        let links = rewrite::Links::new(upstream, &resources, policy, principal);
        result.meta = rewrite::result_meta(&links, result.meta);
        result.messages.retain_mut(|message| {
            let block = std::mem::replace(&mut message.content, rmcp::model::ContentBlock::text(""));
            match rewrite::block_for(&links, block) {
                Some(block) => {
                    message.content = block;
                    true
                }
                None => false,
            }
        });
        result
    }

    /// A prompt on this replica's connection (the shared one, or the caller's own session).
    async fn prompt_here(
        &self,
        upstream: &Upstream,
        principal: &str,
        presented: &str,
        params: GetPromptRequestParams,
        cancelled: &CancellationToken,
        relay: Option<Arc<dyn HostRelay>>,
    ) -> Result<GetPromptResponse, ProxyError> {
        let host = relay.as_deref().and_then(host_session);
        let upstream = upstream.session_for(principal, host).await?;
        upstream.pass_log_level(relay.as_deref().and_then(|relay| relay.log_level())).await;
        match relay.clone().filter(|relay| relay.takes_input_required()) {
            Some(host) => {
                let holder = Holder { principal, name: presented, upstream: upstream.name() };
                let mut params = params;
                self.open_state_in(&holder, &mut params.request_state)?;
                let parked = self.prompt_parked(&upstream, principal, presented, params, host);
                Ok(match until_cancelled(cancelled, parked).await? {
                    GetPromptResponse::InputRequired(needs) => {
                        GetPromptResponse::InputRequired(self.sealed_unless_parked(&holder, needs))
                    }
                    answer => answer,
                })
            }
            None => {
                let rounds = rounds::bridged(&upstream, relay.as_deref(), prompt_needs, |inputs| {
                    upstream.get_prompt(with_inputs_prompt(params.clone(), inputs), relay.clone())
                });
                until_cancelled(cancelled, rounds).await
            }
        }
    }

    /// Completion for a namespaced prompt or resource template, from its upstream.
    pub async fn complete(
        &self,
        principal: &str,
        subject: Option<&SubjectToken>,
        mut params: CompleteRequestParams,
        cancelled: &CancellationToken,
    ) -> Result<CompleteResult, ProxyError> {
        let policy = self.policy();
        let upstream = match &mut params.r#ref {
            Reference::Prompt(prompt) => {
                let (upstream, original) = self.route(&policy, (principal, None), Offering::Prompt, &prompt.name)?;
                prompt.name = original.to_string();
                upstream
            }
            Reference::Resource(template) => {
                let (upstream, original) = self.route_template(&policy, principal, &template.uri)?;
                template.uri = original;
                upstream
            }
            _ => return Err(ProxyError::InvalidParams("unsupported completion reference".into())),
        };
        params.meta = meta_upstream(params.meta.take());
        if !upstream.offers().2 {
            return Ok(CompleteResult::default());
        }
        let elsewhere = self.complete_elsewhere(&upstream, principal, subject, &params);
        let elsewhere = until_cancelled(cancelled, async { Ok(elsewhere.await) }).await?;
        let mut result = match elsewhere {
            Some(result) => result?,
            None => {
                let upstream = upstream.session_for(principal, None).await?;
                until_cancelled(cancelled, upstream.complete_as(params, subject)).await?
            }
        };
        result.result_type = Some(ResultType::COMPLETE);
        let resources = self.inner.resources.snapshot();
        let links = rewrite::Links::new(upstream.name(), &resources, &policy, principal);
        let (completion, dropped) = rewrite::completion_for(&links, result.completion);
        result.completion = completion;
        result.meta = rewrite::result_meta(&links, result.meta);
        if dropped > 0 {
            self.inner.metrics.policy_denied(DenialAction::Read, None);
            tracing::debug!(upstream = upstream.name(), principal, dropped, "completion values withheld");
        }
        Ok(result)
    }

    /// The upstream and its own name for a presented name the caller may use; otherwise the
    /// one answer for unknown, denied and unavailable alike.
    fn route(
        &self,
        policy: &PolicySet,
        (principal, host): (&str, Option<u64>),
        offering: Offering,
        presented: &str,
    ) -> Result<(Upstream, String), ProxyError> {
        let unknown = || ProxyError::UnknownName { offering: offering.label(), name: presented.to_string() };
        let snapshot = self.snapshot_for(principal, host);
        let naming = snapshot.naming();
        let (name, original) = naming.origin(presented).ok_or_else(unknown)?;
        let upstream = self.inner.upstreams.get(name).ok_or_else(unknown)?;
        let listed = match offering {
            Offering::Tool => snapshot.tool(name, presented).is_some(),
            Offering::Prompt => snapshot.prompt(name, presented).is_some(),
        };
        if !listed {
            return Err(unknown());
        }
        if !self.allowed(policy, principal, naming, offering, presented, Some(DenialAction::Use)) {
            tracing::debug!(principal, name = presented, offering = offering.label(), "denied");
            let kind = match offering {
                Offering::Tool => DenialKind::Call,
                Offering::Prompt => DenialKind::Prompt,
            };
            scope::denied(&self.inner.metrics, kind, presented, Some(name));
            return Err(unknown());
        }
        scope::routed(name);
        Ok((upstream, original.to_string()))
    }

    /// A listed, namespaced URI template the caller may see, and its upstream; otherwise the
    /// one not-found answer.
    fn route_template(
        &self,
        policy: &PolicySet,
        principal: &str,
        template: &str,
    ) -> Result<(Upstream, String), ProxyError> {
        let not_found = || ProxyError::not_found(template);
        let (name, original) = namespace::split(template).ok_or_else(not_found)?;
        let upstream = self.inner.upstreams.get(name).ok_or_else(not_found)?;
        if !self.inner.resources.snapshot().any_template(|t| t.uri_template == template) {
            return Err(not_found());
        }
        if !policy.is_allow_all() && !policy.template_visible(principal, template) {
            self.inner.metrics.policy_denied(DenialAction::Use, None);
            scope::denied(&self.inner.metrics, DenialKind::Template, template, Some(name));
            return Err(not_found());
        }
        scope::routed(name);
        Ok((upstream, original.to_string()))
    }
}

/// The host session of a call's host, and what it declared, when it has one.
fn host_session(relay: &dyn HostRelay) -> Option<HostSession> {
    let id = relay.host_session()?;
    Some(HostSession { id, sampling: relay.declares_sampling(), elicitation: relay.declares_elicitation() })
}

fn tool_needs(answer: &CallToolResponse) -> Option<&InputRequiredResult> {
    match answer {
        CallToolResponse::InputRequired(needs) => Some(needs),
        _ => None,
    }
}

fn prompt_needs(answer: &GetPromptResponse) -> Option<&InputRequiredResult> {
    match answer {
        GetPromptResponse::InputRequired(needs) => Some(needs),
        _ => None,
    }
}

/// A retried call carries the host's answers and the upstream's `requestState`.
fn with_inputs_tool(mut params: CallToolRequestParams, inputs: Option<Inputs>) -> CallToolRequestParams {
    if let Some(inputs) = inputs {
        params.input_responses = Some(inputs.responses);
        params.request_state = inputs.request_state;
    }
    params
}

fn with_inputs_prompt(mut params: GetPromptRequestParams, inputs: Option<Inputs>) -> GetPromptRequestParams {
    if let Some(inputs) = inputs {
        params.input_responses = Some(inputs.responses);
        params.request_state = inputs.request_state;
    }
    params
}

/// The host's `_meta` as it may go upstream (`None` when nothing is left).
fn meta_upstream(meta: Option<RequestMetaObject>) -> Option<RequestMetaObject> {
    Some(super::progress::upstream_meta(meta)).filter(|meta| !meta.0.0.is_empty())
}

/// The request's answer, or an error once the host cancelled it (the upstream request is
/// dropped, which cancels it upstream; rmcp sends the host nothing for a cancelled request).
async fn until_cancelled<T>(
    cancelled: &CancellationToken,
    request: impl Future<Output = Result<T, ProxyError>>,
) -> Result<T, ProxyError> {
    tokio::select! {
        answer = request => answer,
        _ = cancelled.cancelled() => Err(ProxyError::InvalidParams("the request was cancelled".into())),
    }
}
