//! [`FixtureHandler`]: the rmcp `ServerHandler` of one connection (a stdio stream, a legacy HTTP
//! session, or one stateless HTTP request). It owns nothing but a connection id; every answer
//! comes from the shared [`Fixture`].
//!
//! Era rules: `--era modern` advertises only 2026-07-28, so `initialize` fails as rmcp fails it.
//! `--era legacy` must make `server/discover` fail like a pre-2026 server (method not found), so it
//! lets rmcp's version gate pass every known version and refuses 2026-07-28 requests itself.

use std::borrow::Cow;

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, DiscoverRequestMethod, DiscoverResult, Implementation,
        InitializeRequestParams, InitializeResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
        PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
        ServerConfig, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext},
};

use crate::{cli::Era, state::Fixture, tools};

const MODERN_ONLY: &[ProtocolVersion] = &[ProtocolVersion::V_2026_07_28];

/// The server handler of one connection.
#[derive(Clone)]
pub struct FixtureHandler {
    fixture: Fixture,
    connection: u64,
}

/// Deregisters a listen stream however `listen` ends (cancelled, or its future dropped).
struct ListenRegistration {
    fixture: Fixture,
    registration: u64,
}

impl Drop for ListenRegistration {
    fn drop(&mut self) {
        self.fixture.deregister_listen(self.registration);
    }
}

impl FixtureHandler {
    pub fn new(fixture: Fixture) -> Self {
        let connection = fixture.next_id();
        Self { fixture, connection }
    }

    fn era(&self) -> Era {
        self.fixture.settings().era
    }

    /// In `--era legacy`, refuse requests that use the 2026-07-28 per-request lifecycle.
    fn admit(&self, context: &RequestContext<RoleServer>) -> Result<(), McpError> {
        let version = context.protocol_version();
        match version {
            Some(version) if self.era() == Era::Legacy && !version.has_initialize() => {
                Err(McpError::unsupported_protocol_version(version, handshake_versions()))
            }
            _ => Ok(()),
        }
    }
}

impl ServerHandler for FixtureHandler {
    fn get_info(&self) -> ServerConfig {
        let settings = self.fixture.settings();
        let mut capabilities = ServerCapabilities::builder()
            .enable_resources()
            .enable_resources_list_changed()
            .enable_resources_subscribe()
            .enable_tools()
            .build();
        if let Some(resources) = capabilities.resources.as_mut() {
            resources.subscribe = Some(settings.subscribe);
        }
        let name = format!("mcp-proxy-fixture-{}", settings.prefix);
        ServerConfig::new(capabilities).with_server_info(Implementation::new(name, env!("CARGO_PKG_VERSION")))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        match self.era() {
            Era::Modern => Cow::Borrowed(MODERN_ONLY),
            Era::Legacy | Era::Both => Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS),
        }
    }

    fn negotiate_initialize(&self, request: &InitializeRequestParams) -> Result<InitializeResult, McpError> {
        let requested = &request.protocol_version;
        if self.era() == Era::Modern {
            return Err(McpError::unsupported_protocol_version(requested.clone(), MODERN_ONLY));
        }
        let mut info = self.get_info();
        info.protocol_version = if handshake_versions().contains(requested) {
            requested.clone()
        } else {
            ProtocolVersion::LATEST_WITH_INITIALIZE
        };
        Ok(info)
    }

    async fn discover(&self, _context: RequestContext<RoleServer>) -> Result<DiscoverResult, McpError> {
        if self.era() == Era::Legacy {
            return Err(McpError::method_not_found::<DiscoverRequestMethod>());
        }
        let settings = self.fixture.settings();
        let mut result =
            DiscoverResult::from_server_info(self.supported_protocol_versions().into_owned(), self.get_info());
        if let Some(ttl_ms) = settings.ttl_ms {
            result = result.with_ttl_ms(ttl_ms);
        }
        if let Some(scope) = settings.scope {
            result = result.with_cache_scope(scope);
        }
        Ok(result)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        tracing::debug!(session = self.connection, "legacy session initialized");
        self.fixture.register_session(self.connection, context.peer);
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.admit(&context)?;
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        let page = self.fixture.list_resources(cursor)?;
        let mut result = ListResourcesResult::with_all_items(page.items);
        result.next_cursor = page.next_cursor;
        result.ttl_ms = self.fixture.settings().ttl_ms;
        result.cache_scope = self.fixture.settings().scope;
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.admit(&context)?;
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        let page = self.fixture.list_templates(cursor)?;
        let mut result = ListResourceTemplatesResult::with_all_items(page.items);
        result.next_cursor = page.next_cursor;
        result.ttl_ms = self.fixture.settings().ttl_ms;
        result.cache_scope = self.fixture.settings().scope;
        Ok(result)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.admit(&context)?;
        if self.fixture.is_needs_input(&request.uri) {
            let modern = context.protocol_version().is_some_and(|version| !version.has_initialize());
            return Ok(self.fixture.read_needs_input(modern)?.into());
        }
        Ok(self.fixture.read(&request.uri).await?.into())
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let mut accepted =
            (self.era() != Era::Legacy).then(|| requested.supported_by(&self.get_info().capabilities))?;
        if let Some(uris) = accepted.resource_subscriptions.as_mut() {
            uris.retain(|uri| !self.fixture.settings().refuses(uri));
        }
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let registration = self.fixture.register_listen(context.sink().clone());
        let _registered = ListenRegistration { fixture: self.fixture.clone(), registration };
        tracing::debug!(registration, accepted = ?context.accepted(), "listen opened");
        context.cancelled().await;
        tracing::debug!(registration, "listen closed");
        Ok(())
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if !self.fixture.settings().subscribe {
            return Err(McpError::method_not_found::<rmcp::model::SubscribeRequestMethod>());
        }
        if self.fixture.settings().refuses(&request.uri) {
            return Err(McpError::invalid_params("subscriptions to this resource are refused", None));
        }
        self.fixture.subscribe(self.connection, &request.uri, context.peer);
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if !self.fixture.settings().subscribe {
            return Err(McpError::method_not_found::<rmcp::model::UnsubscribeRequestMethod>());
        }
        self.fixture.unsubscribe(self.connection, &request.uri);
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.admit(&context)?;
        Ok(ListToolsResult::with_all_items(tools::definitions()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.admit(&context)?;
        Ok(tools::call(&self.fixture, request).await?.into())
    }
}

fn handshake_versions() -> &'static [ProtocolVersion] {
    ProtocolVersion::known_up_to(&ProtocolVersion::LATEST_WITH_INITIALIZE)
}
