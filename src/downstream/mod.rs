//! The downstream side: the rmcp `ServerHandler` hosts talk to, over stdio and streamable HTTP,
//! in both protocol eras. It turns requests into [`Proxy`] calls and errors into the wire form;
//! it decides nothing itself.

mod closing;
mod fast;
mod gate;
mod http;
mod offerings;
mod outlets;
mod relay;
mod sessions;

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, GetPromptRequestParams,
    GetPromptResponse, ListPromptsResult, ListToolsResult,
};
use rmcp::model::{
    Implementation, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use tokio_util::sync::CancellationToken;

pub use self::http::serve_http;
use self::outlets::{ListenOutlet, SessionOutlet};
use crate::error::ProxyError;
use crate::fanout::{OutletInfo, OutletKind};
use crate::metrics::{SessionGuard, Transport};
use crate::protocol::{self, Era, method};
use crate::proxy::{Proxy, ReadAnswer};
use crate::subscriptions::HolderId;

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

/// One per legacy session, per stateless 2026-07-28 request, or per stdio host. Cloning gives a
/// new one with no session: the HTTP service clones a template for every session and request.
pub struct ProxyServer {
    proxy: Proxy,
    principal: Arc<str>,
    transport: Transport,
    /// Legacy HTTP sessions' last activity, for the reaper.
    book: Option<Arc<sessions::SessionBook>>,
    /// This legacy session's outlet, once it has one; released when the server is dropped,
    /// which rmcp does when the session ends.
    session: OnceLock<Session>,
    /// Cancelled when listen streams are to end gracefully (shutdown; see `closing`).
    closing: CancellationToken,
    /// The level this host set with `logging/setLevel`, for the upstreams' log messages of its
    /// calls (see `relay`).
    log_level: relay::LogLevel,
}

struct Session {
    proxy: Proxy,
    id: HolderId,
    _counted: Option<SessionGuard>,
    /// The URIs this session subscribed, as the host wrote them; at most
    /// `server.max_subscriptions_per_session`.
    subscribed: Mutex<HashSet<String>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.proxy.release(self.id);
    }
}

impl Clone for ProxyServer {
    fn clone(&self) -> Self {
        let mut fresh = Self::new(self.proxy.clone(), &self.principal, self.transport);
        fresh.book = self.book.clone();
        fresh.closing = self.closing.clone();
        fresh
    }
}

impl ProxyServer {
    pub fn new(proxy: Proxy, principal: &str, transport: Transport) -> Self {
        let closing = CancellationToken::new();
        Self {
            proxy,
            principal: principal.into(),
            transport,
            book: None,
            session: OnceLock::new(),
            closing,
            log_level: relay::LogLevel::default(),
        }
    }

    /// Listen streams end gracefully (with their final result) when `closing` is cancelled.
    fn closing_with(mut self, closing: CancellationToken) -> Self {
        self.closing = closing;
        self
    }

    fn with_session_book(mut self, book: Arc<sessions::SessionBook>) -> Self {
        self.book = Some(book);
        self
    }

    /// Note a legacy HTTP session's request, for the reaper.
    fn seen(&self, extensions: &rmcp::model::Extensions) {
        let Some(book) = &self.book else { return };
        if let Some(session) = session_header(extensions) {
            book.touch(session, self.session.get().map(|s| s.id));
        }
    }

    /// Count a request in the metrics; hand back its result.
    fn record<T>(&self, method: &'static str, started: Instant, result: Result<T, ProxyError>) -> Result<T, ErrorData> {
        self.proxy.metrics().downstream_request(method, crate::metrics::outcome(&result), started.elapsed());
        Ok(result?)
    }

    /// A legacy session belongs to the principal that opened it: a request on it that
    /// authenticated as someone else is refused.
    fn check_principal(&self, extensions: &rmcp::model::Extensions) -> Result<(), ErrorData> {
        self.seen(extensions);
        let presented = extensions.get::<::http::request::Parts>().and_then(crate::auth::principal_of);
        match presented {
            Some(principal) if principal != &*self.principal => {
                Err(ErrorData::invalid_request("this session belongs to another principal", None))
            }
            _ => Ok(()),
        }
    }

    /// This session's holder id, registering its outlet on first use.
    fn session(&self, peer: &Peer<RoleServer>) -> HolderId {
        self.session
            .get_or_init(|| {
                let info = OutletInfo {
                    principal: self.principal.to_string(),
                    kind: OutletKind::Session,
                    wants_list_changed: true,
                    wants_tools_list_changed: true,
                    wants_prompts_list_changed: true,
                };
                let id = self.proxy.register_outlet(info, Arc::new(SessionOutlet(peer.clone())));
                // A legacy HTTP session is counted by the session book from `initialize` on.
                let counted =
                    self.book.is_none().then(|| self.proxy.metrics().downstream_session(self.transport, Era::Legacy));
                Session { proxy: self.proxy.clone(), id, _counted: counted, subscribed: Mutex::default() }
            })
            .id
    }
}

impl ServerHandler for ProxyServer {
    /// rmcp asks for this on every request (and builds a stateless request's service with it):
    /// it is built once and cloned.
    fn get_info(&self) -> ServerConfig {
        SERVER_INFO.clone()
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.check_principal(&context.extensions)?;
        let started = Instant::now();
        let cursor = request.and_then(|r| r.cursor);
        self.record(method::RESOURCES_LIST, started, self.proxy.list_resources(&self.principal, cursor.as_deref()))
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.check_principal(&context.extensions)?;
        let started = Instant::now();
        let cursor = request.and_then(|r| r.cursor);
        self.record(method::TEMPLATES_LIST, started, self.proxy.list_templates(&self.principal, cursor.as_deref()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.check_principal(&context.extensions)?;
        let started = Instant::now();
        let answer = self.proxy.read(&self.principal, &request.uri).await;
        let answer = answer.inspect_err(|error| {
            tracing::debug!(uri = %request.uri, principal = %self.principal, error = %error, kind = error.kind(), "read failed");
        });
        let answer = self.record(method::RESOURCES_READ, started, answer)?;
        let modern = Era::of_negotiated(context.protocol_version().as_ref()) == Era::Modern;
        Ok(read_response(&self.proxy, answer, modern))
    }

    // Tools, prompts and completion: see `offerings`.

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.offerings_list_tools(request, context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.offerings_call_tool(request, context).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.offerings_list_prompts(request, context).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.offerings_get_prompt(request, context).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.offerings_complete(request, context).await
    }

    /// Kept for this host session alone (an upstream connection is shared): it filters the
    /// upstreams' log messages relayed for its calls (see `relay`).
    #[allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.check_principal(&context.extensions)?;
        *self.log_level.lock().expect("log level lock") = Some(request.level);
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
        self.check_principal(&context.extensions)?;
        let started = Instant::now();
        let holder = self.session(&context.peer);
        self.seen(&context.extensions);
        let session = self.session.get().expect("registered just above");
        let mut subscribed = session.subscribed.lock().expect("subscribed lock");
        let limit = self.proxy.config().server.max_subscriptions_per_session;
        if !subscribed.contains(&request.uri) && subscribed.len() >= limit {
            self.proxy.metrics().downstream_request(method::RESOURCES_SUBSCRIBE, "over_limit", started.elapsed());
            let message = format!(
                "subscription limit reached: this session holds {limit} subscriptions \
                 (server.max_subscriptions_per_session); unsubscribe from one first"
            );
            return Err(ErrorData::invalid_request(message, None));
        }
        let result = self.proxy.subscribe(holder, &self.principal, &request.uri);
        if result.is_ok() {
            subscribed.insert(request.uri.clone());
        }
        self.record(method::RESOURCES_SUBSCRIBE, started, result)
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.check_principal(&context.extensions)?;
        let started = Instant::now();
        let holder = self.session(&context.peer);
        if let Some(session) = self.session.get() {
            session.subscribed.lock().expect("subscribed lock").remove(&request.uri);
        }
        self.record(
            method::RESOURCES_UNSUBSCRIBE,
            started,
            self.proxy.unsubscribe(holder, &self.principal, &request.uri),
        )
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.resources_list_changed = requested.resources_list_changed.filter(|wanted| *wanted);
        accepted.tools_list_changed = requested.tools_list_changed.filter(|wanted| *wanted);
        accepted.prompts_list_changed = requested.prompts_list_changed.filter(|wanted| *wanted);
        accepted.resource_subscriptions = requested
            .resource_subscriptions
            .as_ref()
            .map(|uris| {
                // A listen stream holds at most `server.max_subscriptions_per_session` URIs;
                // the accepted filter tells the host which.
                let mut uris = self.proxy.subscribable(&self.principal, uris);
                uris.truncate(self.proxy.config().server.max_subscriptions_per_session);
                uris
            })
            .filter(|uris| !uris.is_empty());
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let accepted = context.accepted().clone();
        let info = OutletInfo {
            principal: self.principal.to_string(),
            kind: OutletKind::ListenStream,
            wants_list_changed: accepted.resources_list_changed == Some(true),
            wants_tools_list_changed: accepted.tools_list_changed == Some(true),
            wants_prompts_list_changed: accepted.prompts_list_changed == Some(true),
        };
        let holder = self.proxy.register_outlet(info, Arc::new(ListenOutlet(context.sink().clone())));
        // Released however this ends: returned, or dropped with its request.
        let counted = self.proxy.metrics().downstream_session(self.transport, Era::Modern);
        let _held =
            Session { proxy: self.proxy.clone(), id: holder, _counted: Some(counted), subscribed: Mutex::default() };
        self.proxy.metrics().downstream_request(method::SUBSCRIPTIONS_LISTEN, "ok", std::time::Duration::ZERO);
        for uri in accepted.resource_subscriptions.iter().flatten() {
            if let Err(error) = self.proxy.subscribe(holder, &self.principal, uri) {
                tracing::debug!(uri, error = %error, "listen URI not held");
            }
        }
        // Returning ends the stream with its final result: at shutdown, before rmcp stops.
        tokio::select! {
            _ = context.cancelled() => {}
            _ = self.closing.cancelled() => tracing::debug!(principal = %self.principal, "listen stream closed for shutdown"),
        }
        Ok(())
    }
}

/// A `resources/read` answer as the host receives it: 2026-07-28 hosts (`modern`) learn how
/// long and for whom it may be kept. Shared by the rmcp handler and the fast path.
fn read_response(proxy: &Proxy, answer: ReadAnswer, modern: bool) -> ReadResourceResponse {
    match answer {
        ReadAnswer::Result { mut result, ttl, scope, .. } => {
            result.ttl_ms = modern.then(|| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
            result.cache_scope = modern.then(|| proxy.downstream_scope(scope));
            // A 2025-era upstream's result has no `resultType`; 2026-07-28 hosts need it.
            result.result_type = modern.then_some(rmcp::model::ResultType::COMPLETE);
            ReadResourceResponse::Complete(result)
        }
        ReadAnswer::InputRequired(response) => response,
    }
}

/// The `Mcp-Session-Id` of the HTTP request behind a handler call, if any.
fn session_header(extensions: &rmcp::model::Extensions) -> Option<&str> {
    let parts = extensions.get::<::http::request::Parts>()?;
    parts.headers.get("mcp-session-id").and_then(|v| v.to_str().ok())
}

/// Serve one host over stdin/stdout until it disconnects or `shutdown` fires.
pub async fn serve_stdio(
    proxy: Proxy,
    principal: &str,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let running =
        ProxyServer::new(proxy, principal, Transport::Stdio).serve_with_ct(rmcp::transport::stdio(), shutdown).await?;
    running.waiting().await?;
    Ok(())
}
