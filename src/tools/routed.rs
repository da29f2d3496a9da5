//! `tools/call`, `prompts/get` and `completion/complete`: one routed path over the request's
//! kind ([`Routed`]). Route: the presented name (or template) is split, looked up in the merged
//! snapshot and decided for the caller (denied, unknown and of an upstream that is down all
//! answer alike), then renamed to the upstream's own. Run: sent with the upstream's timeout on
//! the caller's session, which with `[cluster]` may be a connection to the replica holding it;
//! a 2026-07-28 retry goes over MCP to the replica its call is parked on. Rewrite: the
//! answer's URIs namespaced and judged for the caller (`rewrite`). What differs per kind is
//! only what a request names, rmcp's request and answer types, and the rewrite of the answer.
//!
//! A host that cancels its request (`notifications/cancelled`) drops the upstream request,
//! which sends the upstream `notifications/cancelled` in turn. MRTR (`input_required`)
//! answers pass through to a 2026-07-28 host with the upstream's `requestState` sealed to the
//! caller (`sealed`); for a 2025 host the proxy asks it and retries (`rounds`); nothing is
//! cached. What a 2025-era upstream sends for a call or get (sampling, elicitation, logging)
//! goes to the calling host's relay (`crate::upstream` attributes it); a 2026-07-28 host gets
//! such a request as `input_required` and resumes the waiting upstream request with its retry
//! (`parked`).

use std::sync::Arc;

use rmcp::model::{CompleteResult, Reference, RequestMetaObject};
use tokio_util::sync::CancellationToken;

use super::kinds::{Call, Routed, retry_parts, send, state_of, takes_input, with_inputs};
use super::names::Offering;
use super::parked::{self, Outcome, Resume};
use super::rounds;
use super::sealed::SealedFor;
use super::{ProgressOutlet, Tools, rewrite};
use crate::audit::scope;
use crate::cluster::peers::Answer;
use crate::error::ProxyError;
use crate::host::{HostRelay, SubjectToken};
use crate::metrics::{DenialAction, DenialKind};
use crate::namespace;
use crate::policy::PolicySet;
use crate::upstream::{Connection, HostSession, Unreached, Upstream};

/// Who asks, and what their request came with.
pub struct Asker<'a> {
    pub principal: &'a str,
    /// Cancelled when the host cancels its request.
    pub cancelled: &'a CancellationToken,
    /// The host asked for the request's progress.
    pub progress: Option<Arc<dyn ProgressOutlet>>,
    /// What the upstream sends for the request goes to its host through this.
    pub relay: Option<Arc<dyn HostRelay>>,
    /// The JWT the request came with, when it has no relay to carry it.
    pub subject: Option<&'a SubjectToken>,
    /// The request's `_meta` as the host sent it (rmcp hands it apart from the params): what is
    /// not the host's own goes upstream with it.
    pub meta: Option<&'a RequestMetaObject>,
}

impl<'a> Asker<'a> {
    /// `principal`'s request, with no progress asked, no relay and no JWT.
    pub fn new(principal: &'a str, cancelled: &'a CancellationToken) -> Self {
        Asker { principal, cancelled, progress: None, relay: None, subject: None, meta: None }
    }
}

impl Tools {
    /// Route a call, a get or a completion of `asker`'s to its upstream and answer it as the
    /// caller may see it. With a `progress` outlet, every step the upstream sent before its
    /// answer is in it when this returns.
    pub async fn request<R: Routed>(&self, asker: Asker<'_>, request: R) -> Result<R::Answer, ProxyError> {
        // One policy snapshot decides the request and what of its answer is passed on.
        let policy = self.policy();
        let mut call = request.into_call();
        let (upstream, presented) = self.route(&policy, &asker, &mut call)?;
        let sealed_for = SealedFor { principal: asker.principal, name: &presented, upstream: upstream.name() };
        let answer = match call {
            Call::Complete(_) if !upstream.offers_completion() => Answer::Complete(CompleteResult::default()),
            // On the heap: the run holds every kind's upstream request, here and elsewhere.
            call => until_cancelled(asker.cancelled, Box::pin(self.run(&upstream, &asker, &sealed_for, call))).await?,
        };
        let answer = self.rewritten(upstream.name(), answer, &policy, asker.principal);
        R::answer_of(answer).ok_or_else(|| mismatched(&upstream))
    }

    /// Run `call` on the caller's session of `upstream` (the shared connection, the caller's
    /// own session, or with `[cluster]` the connection to the replica holding it: the upstream
    /// decides, see its `session_for`); a 2026-07-28 retry of a call parked on another replica
    /// goes there.
    async fn run(
        &self,
        upstream: &Upstream,
        asker: &Asker<'_>,
        sealed_for: &SealedFor<'_>,
        call: Call,
    ) -> Result<Answer, ProxyError> {
        let answer = match self.parked_on_another(state_of(&call)).map(str::to_owned) {
            Some(replica) => self.retry_where_parked(upstream, asker, &replica, call).await?,
            None => self.run_here(upstream, asker, sealed_for, call).await?,
        };
        Ok(match answer {
            Answer::InputRequired(needs) => Answer::InputRequired(self.inner.state_seal.seal_needs(sealed_for, needs)),
            answer => answer,
        })
    }

    async fn run_here(
        &self,
        upstream: &Upstream,
        asker: &Asker<'_>,
        sealed_for: &SealedFor<'_>,
        mut call: Call,
    ) -> Result<Answer, ProxyError> {
        let relay = asker.relay.as_deref();
        let upstream = upstream.session_for(asker.principal, relay.and_then(host_session)).await?;
        upstream.pass_log_level(relay.and_then(|relay| relay.log_level())).await;
        match asker.relay.clone().filter(|relay| relay.takes_input_required()) {
            Some(host) if takes_input(&call) => {
                self.open_state_in(sealed_for, &mut call)?;
                self.parked(&upstream, sealed_for.principal, call, asker.progress.clone(), host).await
            }
            _ => {
                let (progress, subject) = (&asker.progress, asker.subject);
                rounds::bridged(&upstream, relay, |inputs| {
                    send(&upstream, with_inputs(call.clone(), inputs), progress.clone(), asker.relay.clone(), subject)
                })
                .await
            }
        }
    }

    /// A 2026-07-28 host's retry of a call parked on replica `replica` (its `requestState`
    /// names it), sent there over MCP, on this replica's connection to that replica's session
    /// endpoint for the caller's session (`upstream`'s `session_on`), where it resumes. The
    /// replica gone or unreachable: the call is over, and the error says so; never run here.
    async fn retry_where_parked(
        &self,
        upstream: &Upstream,
        asker: &Asker<'_>,
        replica: &str,
        call: Call,
    ) -> Result<Answer, ProxyError> {
        let relay = asker.relay.as_deref();
        let Some(host) = asker.relay.clone().filter(|relay| relay.takes_input_required()) else {
            return Err(parked::unknown_state());
        };
        let declares = (host.declares_sampling(), host.declares_elicitation());
        let there = match upstream.session_on(replica, asker.principal, relay.and_then(host_session), declares).await {
            Ok(there) => there,
            Err(Unreached::Gone) => {
                tracing::debug!(upstream = upstream.name(), replica, "a requestState names a replica that is gone");
                return Err(ProxyError::InvalidParams(format!(
                    "requestState continues a call that waited on replica `{replica}`, which is gone: that call is \
                     over; call again without requestState"
                )));
            }
            Err(Unreached::Unreachable) => {
                return Err(ProxyError::InvalidParams(format!(
                    "requestState continues a call that waits on replica `{replica}`, which cannot be reached: \
                     that call is lost; call again without requestState"
                )));
            }
        };
        send(&there, call, asker.progress.clone(), Some(host), asker.subject).await
    }

    /// A call or get for a 2026-07-28 `host`: what the upstream asks of it meanwhile is
    /// answered as `input_required`, and a retry with the proxy's `requestState` resumes it
    /// (`parked`), on this replica whichever replica the retry landed on. `call` carries the
    /// upstream's own names, and its own `requestState` (opened) or the proxy's.
    pub(super) async fn parked(
        &self,
        upstream: &Connection,
        principal: &str,
        mut call: Call,
        progress: Option<Arc<dyn ProgressOutlet>>,
        host: Arc<dyn HostRelay>,
    ) -> Result<Answer, ProxyError> {
        // A state resumes the same tool (or prompt: never a call's state a get's) of the same
        // upstream, by the upstream's own names, which the replica it is parked on knows.
        let name = match &call {
            Call::Prompt(params) => format!("prompt:{}/{}", upstream.name(), params.name),
            Call::Tool(params) => format!("tool:{}/{}", upstream.name(), params.name),
            _ => return Err(ProxyError::InvalidParams("only a call or a get waits for input".into())),
        };
        let who = Resume { principal, name: &name, timeout: upstream.config().request_timeout };
        let calls = &self.inner.parked;
        let ours = state_of(&call).filter(|state| parked::is_ours(Some(state))).map(str::to_owned);
        let outcome =
            match ours {
                Some(state) => {
                    let responses = retry_parts(&mut call).and_then(|(responses, _)| responses.as_ref());
                    calls.resume(who, &state, responses, host).await?
                }
                None => {
                    let upstream = upstream.clone();
                    calls
                        .start(who, host, move |relay| async move {
                            send(&upstream, call, progress, Some(relay), None).await
                        })
                        .await?
                }
            };
        Ok(match outcome {
            Outcome::Answered(answer) => answer,
            Outcome::Asks(needs) => Answer::InputRequired(needs),
        })
    }

    /// The upstream and the presented name for what `call` names, when the caller may use
    /// it; `call` then names the upstream's own. Otherwise the one answer for unknown, denied
    /// and unavailable alike.
    fn route(&self, policy: &PolicySet, asker: &Asker<'_>, call: &mut Call) -> Result<(Upstream, String), ProxyError> {
        let principal = asker.principal;
        let host = asker.relay.as_deref().and_then(|relay| relay.host_session());
        let (upstream, presented, original) = match call {
            Call::Tool(params) => self.route_named(policy, (principal, host), Offering::Tool, &params.name)?,
            Call::Prompt(params) => self.route_named(policy, (principal, host), Offering::Prompt, &params.name)?,
            Call::Complete(params) => match &params.r#ref {
                Reference::Prompt(prompt) => {
                    self.route_named(policy, (principal, None), Offering::Prompt, &prompt.name)?
                }
                Reference::Resource(template) => self.route_template(policy, principal, &template.uri)?,
                _ => return Err(ProxyError::InvalidParams("unsupported completion reference".into())),
            },
            _ => return Err(ProxyError::InvalidParams("not a routed request".into())),
        };
        match call {
            Call::Tool(params) => params.name = original.into(),
            Call::Prompt(params) => params.name = original,
            Call::Complete(params) => match &mut params.r#ref {
                Reference::Prompt(prompt) => prompt.name = original,
                Reference::Resource(template) => template.uri = original,
                _ => {}
            },
            _ => unreachable!("routed above"),
        }
        carry_host_meta(call, asker.meta);
        Ok((upstream, presented))
    }

    /// The upstream, the presented name and the upstream's own for a tool or prompt the caller
    /// may use.
    fn route_named(
        &self,
        policy: &PolicySet,
        (principal, host): (&str, Option<u64>),
        offering: Offering,
        presented: &str,
    ) -> Result<(Upstream, String, String), ProxyError> {
        let unknown = || ProxyError::UnknownName { offering: offering.label(), name: presented.to_string() };
        let snapshot = self.snapshot_for(principal, host);
        let naming = snapshot.naming();
        let (name, original) = naming.origin(presented).ok_or_else(unknown)?;
        let upstream = self.inner.upstreams.get(name).ok_or_else(unknown)?;
        if !snapshot.offers(offering, name, presented) {
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
        Ok((upstream, presented.to_string(), original.to_string()))
    }

    /// A listed, namespaced URI template the caller may see, its upstream and the upstream's
    /// own; otherwise the one not-found answer.
    fn route_template(
        &self,
        policy: &PolicySet,
        principal: &str,
        template: &str,
    ) -> Result<(Upstream, String, String), ProxyError> {
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
        Ok((upstream, template.to_string(), original.to_string()))
    }
}

impl Tools {
    /// The host's sealed `requestState` in `call` (a call or get), opened for the upstream.
    pub(super) fn open_state_in(&self, sealed_for: &SealedFor<'_>, call: &mut Call) -> Result<(), ProxyError> {
        retry_parts(call).map_or(Ok(()), |(_, state)| self.inner.state_seal.open_in(sealed_for, state))
    }

    /// `answer` from `upstream` as `principal` may see it (`rewrite`).
    pub(super) fn rewritten(&self, upstream: &str, answer: Answer, policy: &PolicySet, principal: &str) -> Answer {
        let resources = self.inner.resources.snapshot();
        let links = rewrite::Links::new(upstream, &resources, policy, principal);
        rewrite::answer_for(&links, answer, &self.inner.metrics)
    }
}

/// The host session of a request's host, and what it declared, when it has one.
fn host_session(relay: &dyn HostRelay) -> Option<HostSession> {
    let id = relay.host_session()?;
    Some(HostSession { id, sampling: relay.declares_sampling(), elicitation: relay.declares_elicitation() })
}

/// A call, get or completion goes upstream with the `_meta` it carries, else its host's
/// (`host`: rmcp hands a request's `_meta` apart from its params), without the keys that are
/// the host's own. A read carries none, as on its own path.
pub fn carry_host_meta(call: &mut Call, host: Option<&RequestMetaObject>) {
    let meta = match call {
        Call::Tool(params) => &mut params.meta,
        Call::Prompt(params) => &mut params.meta,
        Call::Complete(params) => &mut params.meta,
        Call::Read(_) => return,
    };
    let upstream = super::progress::upstream_meta(meta.take().or_else(|| host.cloned()));
    *meta = Some(upstream).filter(|meta| !meta.0.0.is_empty());
}

pub(super) fn mismatched(upstream: &Upstream) -> ProxyError {
    let reason = "the replica holding the session answered another kind of result".into();
    ProxyError::UpstreamFailed { upstream: upstream.name().to_string(), reason }
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
