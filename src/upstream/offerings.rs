//! Tools, prompts and completion on one upstream: whole lists (every page), and the calls
//! routed to it, each with the upstream's timeout. Names here are the upstream's own; the
//! namespacing is `crate::tools`'s.
//!
//! Invariant: as for reads, no upstream error text reaches a client: an error reply becomes a
//! [`ProxyError`] in the proxy's words (its code kept), and a faulty reply fails only its own
//! request.

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CancelledNotificationParam, ClientRequest,
    CompleteRequest, CompleteRequestParams, CompleteResult, GetExtensions, GetPromptRequest, GetPromptRequestParams,
    GetPromptResponse, PaginatedRequestParams, Prompt, RequestId, ServerResult, Tool,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};

use std::sync::{Arc, Mutex, PoisonError};

use super::listing::every_page;
use super::progress::{ProgressClaim, ProgressRoutes};
use super::relay::{Refusal, RelayClaim};
use super::{Connection, Link};
use crate::error::ProxyError;
use crate::host::{HostRelay, KeptAs, ProgressOutlet, SubjectToken};
use crate::protocol::Era;
use crate::telemetry::Span;

/// What an upstream offers besides resources.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Offered {
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
}

impl Connection {
    /// Does the current connection offer completion?
    pub fn offers_completion(&self) -> bool {
        self.link().is_ok_and(|link| link.capabilities.completions.is_some())
    }

    /// Every page of its tools and prompts on `link` (an upstream that lacks one offers none
    /// of it); `None`, logged, when they cannot be had.
    pub(super) async fn fetch_offerings(&self, link: &Link) -> Option<Offered> {
        let fetched = self.list_offerings(link).await;
        if let Err(error) = &fetched {
            tracing::warn!(upstream = self.name(), error = %error, "tools and prompts not loaded");
        }
        fetched.ok()
    }

    async fn list_offerings(&self, link: &Link) -> Result<Offered, String> {
        let (has_tools, has_prompts) = (link.capabilities.tools.is_some(), link.capabilities.prompts.is_some());
        let tools = every_page(self, link, "tools/list", has_tools, |cursor| async {
            let page = link.peer.list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor))).await?;
            Ok((page.tools, page.next_cursor, None))
        });
        let tools = tools.await?.0;
        let prompts = every_page(self, link, "prompts/list", has_prompts, |cursor| async {
            let page = link.peer.list_prompts(Some(PaginatedRequestParams::default().with_cursor(cursor))).await?;
            Ok((page.prompts, page.next_cursor, None))
        });
        Ok(Offered { tools, prompts: prompts.await?.0 })
    }

    /// `tools/call` with the upstream's own tool name. With a `progress` outlet, the upstream's
    /// progress of this call goes there (by the token rmcp gives the request, one per request),
    /// every step sent before the answer before this returns (see `progress`). With a `relay`,
    /// what the upstream sends for this call goes to it (see `relay`). Dropping the future
    /// before the answer sends the upstream `notifications/cancelled`.
    pub async fn call_tool(
        &self,
        params: CallToolRequestParams,
        progress: Option<Arc<dyn ProgressOutlet>>,
        relay: Option<Arc<dyn HostRelay>>,
    ) -> Result<CallToolResponse, ProxyError> {
        let name = params.name.to_string();
        let mut request = CallToolRequest::new(params);
        if let Some(outlet) = &progress {
            request.extensions.insert(ProgressClaim(Arc::downgrade(outlet)));
        }
        let answer_of = |result| match result {
            ServerResult::CallToolResult(result) => Some(CallToolResponse::Complete(result)),
            ServerResult::InputRequiredResult(needs) => Some(CallToolResponse::InputRequired(needs)),
            ServerResult::CreateTaskResult(task) => Some(CallToolResponse::Task(task)),
            _ => None,
        };
        self.routed(("tools/call", &name), ClientRequest::CallToolRequest(request), relay, answer_of).await
    }

    /// `prompts/get` with the upstream's own prompt name; with a `relay`, as for a call.
    pub async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        relay: Option<Arc<dyn HostRelay>>,
    ) -> Result<GetPromptResponse, ProxyError> {
        let name = params.name.clone();
        let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
        let answer_of = |result| match result {
            ServerResult::GetPromptResult(result) => Some(GetPromptResponse::Complete(result)),
            ServerResult::InputRequiredResult(needs) => Some(GetPromptResponse::InputRequired(needs)),
            _ => None,
        };
        self.routed(("prompts/get", &name), request, relay, answer_of).await
    }

    /// A routed request (`method`, naming `name`) on its CLIENT span, with the upstream's
    /// timeout; `answer_of` takes the answer of its kind from the reply. The span notes a tool's
    /// `isError` as `tool_error`, an error by its kind.
    async fn routed<T>(
        &self,
        (method, name): (&'static str, &str),
        request: ClientRequest,
        relay: Option<Arc<dyn HostRelay>>,
        answer_of: impl FnOnce(ServerResult) -> Option<T>,
    ) -> Result<T, ProxyError> {
        let link = self.link()?;
        let span = self.client_span(method, Some(name));
        let refused = Mutex::new(None);
        let request = async {
            let result = self.send_routed(&link, request, relay, &refused, &span).await?;
            if let ServerResult::CallToolResult(result) = &result
                && result.is_error == Some(true)
            {
                span.failed("tool_error".into());
            }
            answer_of(result).ok_or(ServiceError::UnexpectedResponse)
        };
        let answer = self.timed(method, request, !link.peer.is_transport_closed()).await;
        if let Err(error) = &answer {
            super::traced::note_failure(&span, error);
        }
        self.named_refusal(method, answer, refused)
    }

    /// A routed call the upstream failed (an error reply) after a request it sent for the call
    /// was refused or went unanswered: the error names that refusal (see `relay`'s `refusal`),
    /// not the code the upstream passed on (-32602 would read as the host's arguments refused).
    fn named_refusal<T>(
        &self,
        method: &str,
        answer: Result<T, ProxyError>,
        refused: Mutex<Option<Refusal>>,
    ) -> Result<T, ProxyError> {
        let refusal = refused.into_inner().unwrap_or_else(PoisonError::into_inner);
        match (answer, refusal) {
            (Err(ProxyError::InvalidParams(_) | ProxyError::UpstreamFailed { .. }), Some(refusal)) => {
                tracing::debug!(upstream = self.name(), method, ?refusal, "a routed call failed after a relay refusal");
                Err(self.failed(format!("the {method} failed after {}", refusal.describe(self.name()))))
            }
            (answer, _) => answer,
        }
    }

    /// `completion/complete` for a host's request that came with the JWT `subject` (if any): an
    /// upstream that exchanges tokens gets it with a token exchanged for that one. Routed as a
    /// call is (its CLIENT span, its trace context upstream, cancelled upstream when dropped).
    pub async fn complete_as(
        &self,
        params: CompleteRequestParams,
        subject: Option<&SubjectToken>,
    ) -> Result<CompleteResult, ProxyError> {
        let target = params.r#ref.as_prompt_name().or(params.r#ref.as_resource_uri()).unwrap_or_default().to_owned();
        let mut request = ClientRequest::CompleteRequest(CompleteRequest::new(params));
        if let Some(subject) = subject {
            request.extensions_mut().insert(subject.clone());
        }
        let answer_of = |result| match result {
            ServerResult::CompleteResult(result) => Some(result),
            _ => None,
        };
        self.routed(("completion/complete", &target), request, None, answer_of).await
    }

    /// Send a routed request and await its answer; `relay` gets what the upstream sends for it
    /// meanwhile (booked as the request is written, see `relay`); when it fails, `refused` gets
    /// what was refused of the call's requests meanwhile, if anything. A progress claim in its extensions is routed by the tapped transport and
    /// forgotten when this returns. Dropping the future before the answer sends the upstream
    /// `notifications/cancelled`.
    async fn send_routed(
        &self,
        link: &Link,
        request: ClientRequest,
        relay: Option<Arc<dyn HostRelay>>,
        refused: &Mutex<Option<Refusal>>,
        span: &Span,
    ) -> Result<ServerResult, ServiceError> {
        let peer = link.peer.clone();
        let mut options = PeerRequestOptions::no_options();
        let meta = super::relay::request_meta(link.era == Era::Modern, relay.as_ref());
        options.meta = super::traced::with_trace(meta, span);
        let mut request = request;
        if let Some(relay) = &relay {
            request.extensions_mut().insert(RelayClaim(Arc::downgrade(relay)));
            // An exchanging upstream gets this request with a token exchanged for the host's own.
            if let Some(subject) = relay.subject_token() {
                request.extensions_mut().insert(subject);
            }
            // `[cluster]`: the owner keeps the answer under this key for a host that loses us.
            if let Some(key) = relay.kept_as() {
                request.extensions_mut().insert(KeptAs(key));
            }
        }
        let handle = peer.send_request_with_option(request, options).await?;
        let _forget = Forget { routes: &link.progress, token: handle.progress_token.clone() };
        let _relayed = relay.map(|relay| self.inner.relays.register(handle.id.clone(), relay));
        let id = handle.id.clone();
        let mut abandoned = Abandoned { peer, id: Some(id.clone()) };
        let answer = handle.await_response().await;
        abandoned.id = None;
        if answer.is_err() {
            *refused.lock().unwrap_or_else(PoisonError::into_inner) = self.inner.relays.refusal_of(&id);
        }
        answer
    }

    async fn timed<T>(
        &self,
        method: &'static str,
        request: impl Future<Output = Result<T, ServiceError>>,
        connection_open: bool,
    ) -> Result<T, ProxyError> {
        let started = std::time::Instant::now();
        let timeout = self.config().request_timeout;
        let result = match tokio::time::timeout(timeout, request).await {
            Err(_) => Err(ProxyError::UpstreamTimeout { upstream: self.name().to_string(), timeout }),
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(error)) => Err(self.request_error(method, error, connection_open)),
        };
        let elapsed = started.elapsed();
        self.count_hop(result.is_ok());
        if self.owner().is_none() {
            let outcome = crate::metrics::outcome(&result);
            self.inner.metrics.upstream_request(self.name(), method, outcome, elapsed, self.hop());
        }
        result
    }
}

/// A request whose answer is no longer awaited: the upstream is told to stop.
struct Abandoned {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        let cancelled = CancelledNotificationParam::new(Some(id), Some("the host cancelled the request".into()));
        tokio::spawn(async move { peer.notify_cancelled(cancelled).await });
    }
}

/// Forgets a call's progress token when the call is over, however it ends.
struct Forget<'a> {
    routes: &'a ProgressRoutes,
    token: rmcp::model::ProgressToken,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.routes.forget(&self.token);
    }
}
