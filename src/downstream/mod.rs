//! The downstream side: the rmcp `ServerHandler` hosts talk to, over stdio and streamable HTTP,
//! in both protocol eras. It turns requests into [`Proxy`] calls and errors into the wire form;
//! it decides nothing itself.

mod http;

use rmcp::model::{
    Implementation, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};

pub use self::http::serve_http;
use crate::proxy::Proxy;

/// One per session (legacy) or request (2026-07-28); cheap to build.
#[derive(Clone)]
pub struct ProxyServer {
    proxy: Proxy,
    principal: std::sync::Arc<str>,
}

impl ProxyServer {
    pub fn new(proxy: Proxy, principal: &str) -> Self {
        Self { proxy, principal: principal.into() }
    }
}

impl ServerHandler for ProxyServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_resources().build())
            .with_server_info(Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Resources of several MCP servers, each URI prefixed with its server's name and '+' (docs+file:///a.md).",
            )
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let cursor = request.and_then(|r| r.cursor);
        Ok(self.proxy.list_resources(&self.principal, cursor.as_deref())?)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let cursor = request.and_then(|r| r.cursor);
        Ok(self.proxy.list_templates(&self.principal, cursor.as_deref())?)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let response = self.proxy.read(&self.principal, &request.uri).await;
        if let Err(error) = &response {
            tracing::debug!(uri = %request.uri, principal = %self.principal, error = %error, kind = error.kind(), "read failed");
        }
        Ok(response?)
    }
}

/// Serve one host over stdin/stdout until it disconnects or `shutdown` fires.
pub async fn serve_stdio(
    proxy: Proxy,
    principal: &str,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let running = ProxyServer::new(proxy, principal).serve_with_ct(rmcp::transport::stdio(), shutdown).await?;
    running.waiting().await?;
    Ok(())
}
