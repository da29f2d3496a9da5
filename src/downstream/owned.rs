//! The session endpoint (`[cluster]` only): `/mcp-proxy/session` on the MCP listener, where
//! the replica that holds a per-principal (or per-host) upstream session serves it to the
//! other replicas as MCP (streamable HTTP, 2025 era, one MCP session per upstream session),
//! and where a 2026-07-28 host's retry of a call parked on this replica comes from the replica
//! it landed on (2026-07-28 era, stateless: the retry's `requestState` and `inputResponses` go
//! in, the call's answer or its next `input_required` comes back).
//! Every request carries a pass sealed with the cluster's key ([`crate::cluster::session_pass`]),
//! opened on its head before a byte of its body is read; anything else is answered `403`
//! (counted as a forward `refused`). Past the pass its body is bound and has a deadline as a
//! host's on `/mcp` (`bodies`, charged to the principal it names). With `peer_tls`, only a
//! replica whose certificate the cluster's CA issued is heard. The gate and the service are `route`.
//!
//! An MCP session here is bound at `initialize` to the identity its pass names (principal,
//! upstream, host session); a later request of it naming another is refused. Names and URIs on
//! it are the upstream's own, with no namespace and no policy: the replica that sends a request
//! here decided it for its principal. `tools/call`, `prompts/get`, `completion/complete` and
//! `resources/read` run on this replica's session of that principal (or host session) through
//! the routed path's side for other replicas ([`crate::tools::Tools::run_for_replica`]: rounds,
//! relay, the token exchanged for the JWT the pass carries). A 2026-07-28 request has no MCP
//! session: its pass alone names whose it is, and it is taken only when it resumes a call
//! parked here (`tools/call` or `prompts/get` with the proxy's `requestState` naming this
//! replica, of any upstream, a shared one too); anything else is refused. What the upstream sends for a call (sampling,
//! elicitation, log messages) goes to the other replica on the call's own response stream, its
//! progress as `notifications/progress` with that replica's token, so that replica's HTTP
//! upstream code relays them to its host as for any HTTP upstream. `resources/subscribe` subscribes
//! the URI on that session (`replica_subscriptions`: each change comes back as
//! `notifications/resources/updated`); `tools/list` and `prompts/list` answer what the session
//! lists as its own, an error whose data's `kind` is [`crate::protocol::NO_OWN_LISTS`] while it
//! lists the upstream's; when that changes, the MCP session hears `tools/list_changed` or
//! `prompts/list_changed` (`owned_lists`). A call the other replica cancels
//! (`notifications/cancelled`) ends here, which cancels it upstream (`cancellations`); one whose
//! MCP session merely ends runs on (a kept call's answer waits for its host's resumption).
//!
//! Invariant: nothing runs for a request whose pass does not open here, or whose identity is
//! not its MCP session's; a 2026-07-28 request runs nothing but the resumption of a call parked
//! here for the principal its pass names.

#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.

use std::sync::{Arc, OnceLock};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelledNotificationParam, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, Implementation, InitializeRequestParams, InitializeResult,
    ListPromptsResult, ListToolsResult, PaginatedRequestParams, Prompt, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, SetLevelRequestParams, SubscribeRequestParams, Tool,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};
use tokio_util::sync::DropGuard;

use futures::future::BoxFuture;

use super::kept::KeptCalls;
use super::offerings::HostProgress;
use super::owned_lists;
use super::relay::{self, LogLevel};
use super::replica_subscriptions::ReplicaSubscriptions;
use super::traced::header_carrier;
use crate::cluster::peers::{Answer, SessionOf};
use crate::cluster::session_pass::{self, Opened};
use crate::error::{ProxyError, RemoteError};
use crate::protocol::Era;
use crate::proxy::Proxy;
use crate::telemetry::{self, Carrier, Incoming, Span};
use crate::tools::{Call, Ran, Routed};

mod cancellations;
mod route;

use cancellations::Cancellations;

pub(super) use route::{peers, routes};

/// The eras the endpoint speaks: a session's connection is a 2025 session; a retry of a call
/// parked here comes as a 2026-07-28 request.
const VERSIONS: &[ProtocolVersion] = &[ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28];

/// The answer to a list while the session lists nothing of its own: the upstream's lists are
/// its lists, which the asking replica has on its shared connection.
const OWN_LISTS_NONE: &str = "the session lists no tools or prompts of its own (or is not open here)";

/// A session's own tools and prompts (the upstream's names).
type OwnToolsAndPrompts = (Vec<Tool>, Vec<Prompt>);

/// One MCP session of the endpoint: one upstream session of this replica, served to another.
#[derive(Clone)]
struct OwnedSession {
    proxy: Proxy,
    kept: Arc<KeptCalls>,
    /// The identity of its `initialize`.
    bound: Arc<OnceLock<session_pass::Identity>>,
    /// The other replica's `logging/setLevel` (its host's), which the relay filters by.
    level: LogLevel,
    /// Its subscriptions, held on the upstream session.
    subscriptions: ReplicaSubscriptions,
    /// Tells it of its upstream session's own list changes until dropped (`owned_lists`).
    lists: Arc<OnceLock<DropGuard>>,
    /// Its calls, each ended by the other replica's `notifications/cancelled` for it.
    cancellations: Arc<Cancellations>,
}

impl OwnedSession {
    /// The pass of `context`'s request, when it names the identity this session is bound to
    /// (a 2026-07-28 request has no session: its pass is whose it is).
    fn opened<'c>(&self, context: &'c RequestContext<RoleServer>) -> Result<&'c Opened, ErrorData> {
        let parts = context.extensions.get::<http::request::Parts>();
        let opened = parts.and_then(|parts| parts.extensions.get::<Opened>());
        let opened = opened.ok_or_else(|| ErrorData::invalid_request("no pass", None))?;
        if modern(context) {
            return Ok(opened);
        }
        match self.bound.get() {
            Some(bound) if *bound == opened.identity => Ok(opened),
            _ => Err(ErrorData::invalid_request("the pass names another session than this one's", None)),
        }
    }

    /// Run `call` (the upstream's own names) on the session the pass names, for the request of
    /// `context`: what the upstream sends for it goes back on the request's own stream. A
    /// call or prompt whose pass names a key runs to its end even when the other replica goes
    /// away, its answer kept for the host's resumption (`kept`); any call ends when the other
    /// replica cancels its request.
    async fn run(&self, call: Call, context: &RequestContext<RoleServer>) -> Result<Answer, ErrorData> {
        let opened = self.opened(context)?;
        if modern(context) && !self.proxy.tools().resumes_parked_here(&call) {
            let refused = "a 2026-07-28 request is taken here only to resume a call parked on this replica";
            return Err(ErrorData::invalid_request(refused, None));
        }
        let identity = opened.identity.clone();
        // As if presented here: the principal's session opened for it has a JWT to connect with.
        if let Some(subject) = &opened.subject {
            self.proxy.subjects().record(&identity.principal, subject.token(), subject.until());
        }
        let principal: Arc<str> = identity.principal.as_str().into();
        let token = match &call {
            Call::Tool(params) => {
                context.meta.get_progress_token().or_else(|| params.meta.as_ref()?.get_progress_token())
            }
            _ => None,
        };
        let (progress, outlet) = token.map(|token| HostProgress::start(context.peer.clone(), token)).unzip();
        let host = identity.host.map(|host| host.id);
        let (host_relay, jobs) = relay::for_call(context, &self.level, &principal, (host, None));
        let relays = matches!(call, Call::Tool(_) | Call::Prompt(_));
        let kept_as = opened.kept_as.clone().filter(|_| relays);
        let relayed = relays.then_some(host_relay);
        let (method, target) = call.traced();
        let target = target.unwrap_or_default();
        tracing::debug!(upstream = %identity.upstream, method, target, "cluster: serving another replica's request over MCP");
        let span = served_span(context, &call, &identity.upstream);
        let (proxy, subject) = (self.proxy.clone(), opened.subject.clone());
        let whose = identity.clone();
        let cancellable = self.cancellations.watch(&context.id);
        let ran = span.attach(cancellable.run(async move {
            let of = SessionOf { principal: &whose.principal, upstream: &whose.upstream, host: whose.host };
            proxy.tools().run_for_replica(of, call, outlet, relayed, subject.as_ref()).await
        }));
        let ran: BoxFuture<'static, Ran> = match kept_as {
            Some(key) => self.kept.run(key, (&identity.principal, &identity.upstream), ran),
            None => Box::pin(ran),
        };
        let answer = relay::serving(ran, jobs, &context.peer).await;
        if let Some(progress) = progress {
            progress.flushed().await;
        }
        if let Err(error) = &answer {
            span.failed(error.kind().to_string());
        }
        // The other replica answers its host this same error (`RemoteError`).
        answer.map_err(|error| RemoteError::error_data(&error))
    }

    /// [`Self::run`] for a request of kind `R`, its answer of that kind.
    async fn answer<R: Routed>(
        &self,
        request: R,
        context: &RequestContext<RoleServer>,
    ) -> Result<R::Answer, ErrorData> {
        let mut call = request.into_call();
        // What the other replica's host put in `_meta` goes on upstream, as from a host here.
        crate::tools::carry_host_meta(&mut call, Some(&context.meta));
        R::answer_of(self.run(call, context).await?).ok_or_else(mismatched)
    }

    /// What the session the pass names lists as its own (the upstream's names); an error while
    /// it lists nothing of its own, so the other replica keeps the shared connection's lists.
    fn own_lists(&self, context: &RequestContext<RoleServer>) -> Result<OwnToolsAndPrompts, ErrorData> {
        let identity = &self.opened(context)?.identity;
        let host = identity.host.map(|host| host.id);
        let lists = self.proxy.tools().own_lists_here(&identity.upstream, &identity.principal, host);
        let none = || serde_json::json!({ "kind": crate::protocol::NO_OWN_LISTS });
        lists.ok_or_else(|| ErrorData::internal_error(OWN_LISTS_NONE, Some(none())))
    }
}

/// The SERVER span of a request served here, continuing the other replica's hop from the
/// request's `traceparent` header (nothing when traces are off).
fn served_span(context: &RequestContext<RoleServer>, call: &Call, upstream: &str) -> Span {
    if !telemetry::on() {
        return Span::default();
    }
    let (method, target) = call.traced();
    let headers = context.extensions.get::<http::request::Parts>().map(|parts| &parts.headers);
    let span = telemetry::server_span(Incoming {
        method,
        target,
        meta: Carrier { traceparent: context.meta.get_traceparent(), tracestate: context.meta.get_tracestate() },
        header: header_carrier(headers),
        request_id: None,
        version: None,
        session: None,
        transport: telemetry::Transport::Tcp,
    });
    span.note("mcp_proxy.upstream", upstream.to_string());
    span
}

/// Whether `context`'s request is of the 2026-07-28 era (stateless: no MCP session).
fn modern(context: &RequestContext<RoleServer>) -> bool {
    Era::of_negotiated(context.protocol_version().as_ref()) == Era::Modern
}

/// The answer of another kind than asked.
fn mismatched() -> ErrorData {
    ProxyError::InvalidParams("the upstream answered another kind of result".into()).into()
}

impl ServerHandler for OwnedSession {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_completions()
            .enable_logging()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")))
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(VERSIONS)
    }

    /// Binds the session to the identity its pass names.
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let parts = context.extensions.get::<http::request::Parts>();
        let opened = parts.and_then(|parts| parts.extensions.get::<Opened>());
        let opened = opened.ok_or_else(|| ErrorData::invalid_request("no pass", None))?;
        if self.bound.set(opened.identity.clone()).is_err() {
            return Err(ErrorData::invalid_request("the session is initialized already", None));
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    /// From now on it hears when its upstream session's own lists change.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let Some(identity) = self.bound.get() else { return };
        let changes = self.proxy.tools().own_list_changes();
        let _ =
            self.lists.get_or_init(|| owned_lists::relay(self.proxy.spine(), changes, identity.clone(), context.peer));
    }

    /// The other replica cancelled a request: its call ends here (`cancellations`).
    async fn on_cancelled(&self, notification: CancelledNotificationParam, _: NotificationContext<RoleServer>) {
        if let Some(id) = notification.request_id {
            self.cancellations.cancel(&id);
        }
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.opened(&context)?;
        *self.level.lock().expect("log level lock") = Some(request.level);
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.answer(request, &context).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.answer(request, &context).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.answer(request, &context).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        match self.run(Call::Read(request), &context).await? {
            Answer::Read(result) => Ok(ReadResourceResponse::Complete(result)),
            Answer::InputRequired(needs) => Ok(ReadResourceResponse::InputRequired(needs)),
            _ => Err(mismatched()),
        }
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.own_lists(&context)?.0))
    }

    async fn list_prompts(
        &self,
        _: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(self.own_lists(&context)?.1))
    }

    /// Subscribed on the session the pass names; answered once that session acknowledged it (or
    /// gave up waiting).
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let identity = self.opened(&context)?.identity.clone();
        let of = SessionOf { principal: &identity.principal, upstream: &identity.upstream, host: identity.host };
        let subscription = self.proxy.subscribe_for_replica(of, &request.uri).await?;
        self.subscriptions.keep(self.proxy.spine(), request.uri, subscription, context.peer.clone());
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.opened(&context)?;
        self.subscriptions.unsubscribe(&request.uri);
        Ok(())
    }
}
