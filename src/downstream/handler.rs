//! The rmcp `ServerHandler` of [`ProxyServer`]: what the proxy tells hosts about itself, and one
//! arm a method, each handing the request to the part that owns it — `resources`,
//! `subscribing`, `offerings` (tools, prompts, completion) — or, for the few that are the
//! session's own (`logging/setLevel`, `notifications/initialized`), handling it in a line or two.
//!
//! Invariant: every arm that awaits the proxy's work awaits it boxed (`Box::pin`). rmcp awaits
//! `handle_request` inline in the task that runs a legacy session's handshake and lives as long
//! as the session, and in each request's task; a task's allocation is the size of its largest
//! state, so unboxed arms made every session pay for the largest handler future (~42 KB of a
//! ~50 KB task in a debug build, measured with heaptrack) for its whole life. Boxed, a handler's
//! future is allocated only while its request runs.

use std::sync::LazyLock;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, GetPromptRequestParams,
    GetPromptResponse, ListPromptsResult, ListToolsResult,
};
use rmcp::model::{
    Implementation, InitializeRequestParams, InitializeResult, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, ServerHandler};

use super::sessions::OpenedSubscriber;
use super::traced::traced;
use super::{ProxyServer, offerings, session_header};
use crate::protocol::{self, method};

/// What the proxy tells hosts about itself; the same for every host.
static SERVER_INFO: LazyLock<ServerConfig> = LazyLock::new(|| {
    let mut capabilities = ServerCapabilities::builder()
        .enable_resources()
        .enable_resources_subscribe()
        .enable_resources_list_changed()
        .build();
    // Always offered (see `offerings`): capabilities are fixed at a session's start, before
    // every upstream is known, and an empty list is an honest answer.
    offerings::advertise(&mut capabilities);
    ServerConfig::new(capabilities)
        .with_server_info(Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Resources of several MCP servers, each URI prefixed with its server's name and '+' (docs+file:///a.md).",
        )
});

impl ServerHandler for ProxyServer {
    /// rmcp asks for this on every request (and builds a stateless request's service with it):
    /// it is built once and cloned.
    fn get_info(&self) -> ServerConfig {
        SERVER_INFO.clone()
    }

    /// `[cluster]`: a 2025 session's outlet is registered as it opens (not only at
    /// `notifications/initialized`, which may land on another replica), its subscriber id left for
    /// the gate (`OpenedSubscriber`).
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let opened = context
            .extensions
            .get::<::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<OpenedSubscriber>());
        if let Some(opened) = opened {
            let _ = opened.subscriber.set(self.session(&context.peer));
            let _ = opened.host_key.set(self.host_key.clone());
            let _ = opened.log_level.set(self.log_level.clone());
        }
        self.negotiate_initialize(&request)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let span = self.server_span(method::RESOURCES_LIST, None, &context);
        traced(span, Box::pin(self.resources_list(request, context))).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let span = self.server_span(method::TEMPLATES_LIST, None, &context);
        traced(span, Box::pin(self.resources_list_templates(request, context))).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let span = self.server_span(method::RESOURCES_READ, None, &context);
        traced(span, Box::pin(self.resources_read(request, context))).await
    }

    // Tools, prompts and completion: see `offerings`.

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let span = self.server_span(method::TOOLS_LIST, None, &context);
        traced(span, Box::pin(self.offerings_list_tools(request, context))).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let span = self.server_span(method::TOOLS_CALL, Some(&name), &context);
        traced(span, Box::pin(self.offerings_call_tool(request, context))).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let span = self.server_span(method::PROMPTS_LIST, None, &context);
        traced(span, Box::pin(self.offerings_list_prompts(request, context))).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let name = request.name.to_string();
        let span = self.server_span(method::PROMPTS_GET, Some(&name), &context);
        traced(span, Box::pin(self.offerings_get_prompt(request, context))).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let span = self.server_span(method::COMPLETION_COMPLETE, None, &context);
        traced(span, Box::pin(self.offerings_complete(request, context))).await
    }

    /// Kept for this host session alone (an upstream connection is shared): it filters the
    /// upstreams' log messages relayed for its calls (see `relay`).
    #[allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.check_principal(&context.extensions, "logging/setLevel")?;
        *self.log_level.lock().expect("log level lock") = Some(request.level);
        if let (Some(records), Some(session)) = (&self.records, session_header(&context.extensions))
            && let Err(error) = records.set_level(session, request.level).await
        {
            tracing::warn!(error = %error, "cluster: a session's log level was not recorded");
        }
        Ok(())
    }

    /// rmcp hands a known method whose params do not parse (a read without `uri`) here: it is
    /// a malformed request, not an unknown method.
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        if protocol::is_downstream_method(&request.method) {
            let message = format!("invalid params for {}: see the MCP schema for its required fields", request.method);
            return Err(ErrorData::invalid_params(message, None));
        }
        Err(ErrorData::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, request.method, None))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.session(&context.peer);
        self.seen(&context.extensions);
        // The fast path serves this session once it knows the era its handshake chose.
        let legacy = context.peer.peer_info().is_some_and(|info| info.protocol_version.has_initialize());
        if let (Some(book), Some(session), true) = (&self.book, session_header(&context.extensions), legacy) {
            book.handshake_done(session);
        }
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let span = self.server_span(method::RESOURCES_SUBSCRIBE, None, &context);
        traced(span, Box::pin(self.subscriptions_subscribe(request, context))).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let span = self.server_span(method::RESOURCES_UNSUBSCRIBE, None, &context);
        traced(span, Box::pin(self.subscriptions_unsubscribe(request, context))).await
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        self.subscriptions_accepted_filter(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        Box::pin(self.subscriptions_listen(context)).await
    }
}
