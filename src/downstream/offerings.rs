//! The `ServerHandler` side of tools, prompts and completion: each request goes to
//! [`crate::tools::Tools`] with the caller's principal and its cancellation token, and is
//! counted like every other request. What an upstream sends for a host's call (sampling,
//! elicitation, logging) is relayed to that host by the call's own task (`relay`). The bridge's tools ([`crate::bridge`]) head the first
//! `tools/list` page and their calls go to the bridge.

use std::sync::Arc;
use std::time::Instant;

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, GetPromptRequestParams,
    GetPromptResponse, ListPromptsResult, ListToolsResult, PaginatedRequestParams, Prompt, PromptsCapability,
    Reference, ServerCapabilities, Tool, ToolsCapability,
};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RequestContext, RoleServer};
use tokio::sync::mpsc;

use super::ProxyServer;
use super::audited::{self, Asked};
use super::kept::Answering;
use crate::audit::{self, Kind};
use crate::cluster::peers::Answer;
use crate::error::{ProxyError, RemoteError};
use crate::host::ProgressOutlet;
use crate::protocol::method;
use crate::proxy::Metered;
use crate::tools::{Asker, Routed};

/// Progress notifications that may wait for a slow host before new ones are dropped.
const PROGRESS_QUEUE: usize = 64;

/// How long a call's result waits for its progress to reach the host first; after that the
/// rest of its progress is dropped (never sent after the result).
const PROGRESS_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// One call's progress to its host, with the host's own token, in order, by a task of its own
/// (so the upstream connection never waits on a host). The call's result goes out only after
/// [`HostProgress::flushed`]: progress before its result, as the spec has it (a 2026-07-28
/// host's reply stream even closes with the result).
pub(super) struct HostProgress {
    queue: mpsc::Sender<Step>,
    sender: tokio::task::JoinHandle<()>,
}

/// What the sending task is given.
enum Step {
    Progress(ProgressNotificationParam),
    /// Everything queued before this has reached the host.
    Flushed(tokio::sync::oneshot::Sender<()>),
}

/// The outlet the upstream connection fills; owned by the call (the connection holds it weakly).
struct ProgressQueue(mpsc::Sender<Step>);

impl HostProgress {
    pub(super) fn start(peer: Peer<RoleServer>, token: ProgressToken) -> (HostProgress, Arc<dyn ProgressOutlet>) {
        let (queue, mut pending) = mpsc::channel::<Step>(PROGRESS_QUEUE);
        let sender = tokio::spawn(async move {
            while let Some(step) = pending.recv().await {
                match step {
                    Step::Progress(mut progress) => {
                        progress.progress_token = token.clone();
                        if peer.notify_progress(progress).await.is_err() {
                            return;
                        }
                    }
                    Step::Flushed(done) => drop(done.send(())),
                }
            }
        });
        let outlet = Arc::new(ProgressQueue(queue.clone()));
        (HostProgress { queue, sender }, outlet)
    }

    /// Wait (at most [`PROGRESS_FLUSH`]) until the progress queued so far reached the host;
    /// then nothing more is sent.
    pub(super) async fn flushed(self) {
        let (done, reached) = tokio::sync::oneshot::channel();
        let flush = async {
            self.queue.send(Step::Flushed(done)).await.ok()?;
            reached.await.ok()
        };
        if tokio::time::timeout(PROGRESS_FLUSH, flush).await.is_err() {
            tracing::debug!("a host took too long to take a call's progress; the rest is dropped");
        }
        self.sender.abort();
    }
}

impl ProgressOutlet for ProgressQueue {
    fn send(&self, progress: ProgressNotificationParam) {
        let _ = self.0.try_send(Step::Progress(progress));
    }
}

/// Tools, prompts (both with `listChanged`) and completions, whatever the upstreams offer.
pub(super) fn advertise(capabilities: &mut ServerCapabilities) {
    let mut tools = ToolsCapability::default();
    tools.list_changed = Some(true);
    let mut prompts = PromptsCapability::default();
    prompts.list_changed = Some(true);
    capabilities.tools = Some(tools);
    capabilities.prompts = Some(prompts);
    capabilities.completions = Some(Default::default());
    // What upstreams log for a host's call is relayed to it (see `relay`).
    capabilities.logging = Some(Default::default());
}

impl ProxyServer {
    pub(super) async fn offerings_list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.check_principal(&context.extensions, method::TOOLS_LIST)?;
        let started = Instant::now();
        let cursor = request.and_then(|r| r.cursor);
        let caller = self.caller();
        let host = self.host_key();
        let page = self.proxy.tools().list::<Tool>((caller.principal(), host), caller.policy(), cursor.as_deref());
        let mut answer = page.map(|page| ListToolsResult {
            next_cursor: page.next_cursor,
            ..ListToolsResult::with_all_items(page.items)
        });
        if let (Ok(page), None) = (&mut answer, &cursor) {
            // The bridge's tools (when on) head the first page; the cursors page the upstreams'.
            let mut tools = crate::bridge::tools_for(&self.proxy, &caller);
            tools.append(&mut page.tools);
            page.tools = tools;
        }
        self.record("tools/list", started, answer)
    }

    pub(super) async fn offerings_list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.check_principal(&context.extensions, method::PROMPTS_LIST)?;
        let started = Instant::now();
        let cursor = request.and_then(|r| r.cursor);
        let caller = self.caller();
        let page = self.proxy.tools().list::<Prompt>(
            (caller.principal(), self.host_key()),
            caller.policy(),
            cursor.as_deref(),
        );
        let listed = page.map(|page| ListPromptsResult {
            next_cursor: page.next_cursor,
            ..ListPromptsResult::with_all_items(page.items)
        });
        self.record("prompts/list", started, listed)
    }

    pub(super) async fn offerings_call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        // A bridge read names its resource: the audit trail records it with the call.
        let uri = request.arguments.as_ref().and_then(|a| a.get("uri")?.as_str().map(str::to_string));
        let asked = (Kind::Call, Metered::Tool(&name), uri.filter(|_| crate::bridge::is_bridge_tool(&name)));
        let answering = self.answering(&context, (&name, false));
        // Bridge calls (searches, reads) count against the same per-principal limit.
        let serve = || kept_too(answering, self.bridge_or_route(request, &context), tool_answer);
        self.routed::<CallToolRequestParams, _>(&context, asked, serve).await
    }

    /// A tool call, to the bridge or routed to its upstream.
    async fn bridge_or_route(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ProxyError> {
        if crate::bridge::is_bridge_tool(&request.name) {
            let answer = crate::bridge::call(&self.proxy, &self.caller(), request).await;
            return answer.map(CallToolResponse::Complete);
        }
        let token = context.meta.get_progress_token().or_else(|| request.meta.as_ref()?.get_progress_token());
        let (progress, outlet) = token.map(|token| HostProgress::start(context.peer.clone(), token)).unzip();
        let (relay, jobs) =
            super::relay::for_call(context, &self.log_level, &self.principal, self.host_and_key(context));
        let asker = Asker {
            progress: outlet,
            relay: Some(relay),
            meta: Some(&context.meta),
            ..Asker::new(&self.principal, &context.ct)
        };
        let answer = super::relay::serving(self.proxy.tools().request(asker, request), jobs, &context.peer).await;
        if let Some(progress) = progress {
            progress.flushed().await;
        }
        answer
    }

    pub(super) async fn offerings_get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let name = request.name.clone();
        let answering = self.answering(&context, (&name, true));
        let get = || async {
            let (relay, jobs) =
                super::relay::for_call(&context, &self.log_level, &self.principal, self.host_and_key(&context));
            let asker =
                Asker { relay: Some(relay), meta: Some(&context.meta), ..Asker::new(&self.principal, &context.ct) };
            let got = super::relay::serving(self.proxy.tools().request(asker, request), jobs, &context.peer);
            kept_too(answering, got, prompt_answer).await
        };
        self.routed::<GetPromptRequestParams, _>(&context, (Kind::Prompt, Metered::Prompt(&name), None), get).await
    }

    pub(super) async fn offerings_complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let reference = request.r#ref.clone();
        let metered = match &reference {
            Reference::Prompt(prompt) => Metered::Prompt(&prompt.name),
            Reference::Resource(template) => Metered::Template(&template.uri),
            _ => Metered::Other,
        };
        let complete = || async {
            let subject = super::subject_of(&context.extensions);
            let asker = Asker {
                subject: subject.as_ref(),
                meta: Some(&context.meta),
                ..Asker::new(&self.principal, &context.ct)
            };
            self.proxy.tools().request(asker, request).await
        };
        self.routed::<CompleteRequestParams, _>(&context, (Kind::Complete, metered, None), complete).await
    }

    /// `[cluster]`: this 2025 host's call (or prompt, `prompt`) named `presented`, as its
    /// stream booked it in `kept`: its answer goes there too (see [`kept_too`]). `None` without
    /// `[cluster]`, a session or a booking.
    fn answering(&self, context: &RequestContext<RoleServer>, (presented, prompt): (&str, bool)) -> Option<Answering> {
        let (kept, key) = self.kept.as_ref().zip(self.host_and_key(context).1)?;
        let upstream = self.proxy.tools().upstream_of(self.caller().policy(), &self.principal, prompt, presented);
        kept.answering(&key, (&self.principal, upstream.as_deref().unwrap_or_default()))
    }

    /// A routed request of any kind, `asked` for (and, for a bridge read, the URI it reads):
    /// the principal checked, a rate-limit token and an in-flight slot spent, `serve` run, the
    /// decision noted on the request's span, one audit event and the request counted.
    async fn routed<R: Routed, F>(
        &self,
        context: &RequestContext<RoleServer>,
        (kind, asked, uri): (Kind, Metered<'_>, Option<String>),
        serve: impl FnOnce() -> F,
    ) -> Result<R::Answer, ErrorData>
    where
        F: Future<Output = Result<R::Answer, ProxyError>>,
    {
        let method = match kind {
            Kind::Prompt => method::PROMPTS_GET,
            Kind::Complete => method::COMPLETION_COMPLETE,
            _ => method::TOOLS_CALL,
        };
        self.check_principal(&context.extensions, method)?;
        self.admit(&context.extensions, &self.caller(), asked, method)?;
        let started = Instant::now();
        let _permit = self.admit_call(method, started, asked).await?;
        let (answer, notes) = audit::scope::noting(Box::pin(serve())).await;
        let span = crate::telemetry::Span::current();
        super::traced::note_decision(&span, &notes);
        let outcome = audited::routed_outcome::<R>(&answer);
        if outcome == "tool_error" {
            span.failed(outcome.into());
        }
        self.proxy.audit().request(notes, || {
            let mut event =
                audited::naming(Asked::of(&self.principal, context, started).event(kind, method, outcome), &asked);
            event.uri = uri.or(event.uri);
            event
        });
        self.record(method, started, answer)
    }

    /// A permit for one more routed call of this principal, or the error naming the limit (the
    /// refusal audited, naming what was `asked`).
    async fn admit_call(
        &self,
        method: &'static str,
        started: Instant,
        asked: Metered<'_>,
    ) -> Result<crate::tools::CallPermit, ErrorData> {
        self.proxy.tools().admit_call(&self.principal).await.map_err(|limit| {
            self.proxy.metrics().downstream_request(method, "over_limit", started.elapsed(), self.hop());
            self.proxy.audit().record(audited::refused_event(&self.principal, Some(method), &asked, "call_limit"));
            let message = format!(
                "call limit reached: {limit} calls of this principal are in flight \
                 (server.max_calls_per_principal); try again when one has answered"
            );
            ErrorData::invalid_request(message, None)
        })
    }
}

/// `serve`'s answer, also given to `answering` (when kept: `kept_as`), where it waits for the
/// host's resumption on another replica should the host's stream have been cut.
async fn kept_too<T>(
    answering: Option<Answering>,
    serve: impl Future<Output = Result<T, ProxyError>>,
    kept_as: fn(&T) -> Option<Answer>,
) -> Result<T, ProxyError> {
    let answer = serve.await;
    // One not kept is forgotten with its `answering`.
    let line = match &answer {
        Ok(answered) => kept_as(answered).map(Ok),
        Err(error) => Some(Err(RemoteError::of(error))),
    };
    if let Some((answering, line)) = answering.zip(line) {
        answering.answered(line);
    }
    answer
}

/// A tool call's answer as it is kept: a 2025 host's is complete.
fn tool_answer(response: &CallToolResponse) -> Option<Answer> {
    match response {
        CallToolResponse::Complete(result) => Some(Answer::Tool(result.clone())),
        _ => None,
    }
}

/// A prompt's answer as it is kept: a 2025 host's is complete.
fn prompt_answer(response: &GetPromptResponse) -> Option<Answer> {
    match response {
        GetPromptResponse::Complete(result) => Some(Answer::Prompt(result.clone())),
        _ => None,
    }
}
