//! Streamable HTTP at `/mcp`: legacy sessions (`Mcp-Session-Id`) and stateless 2026-07-28
//! requests on one endpoint, behind [`crate::auth`]: every request is authenticated (or
//! refused with 401) before rmcp sees it, and carries its [`crate::auth::Principal`] in the
//! extensions of the `http::request::Parts` rmcp hands to the handler.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::serve::ListenerExt;
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::ProxyServer;
use super::sessions::{SessionBook, reap};
use crate::auth::{self, Authenticator};
use crate::metrics::Transport;
use crate::proxy::Proxy;

/// Serve on `listener` until `shutdown`. Authentication follows `proxy.config().auth`; the
/// handler's own principal (`anonymous`) is only a fallback for requests without HTTP parts.
pub async fn serve_http(proxy: Proxy, listener: TcpListener, shutdown: CancellationToken) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    let server = proxy.config().server.clone();
    let proxy_auth = proxy.config().auth.clone();
    // rmcp's own keep-alive would close subscribed sessions that are merely quiet: the proxy
    // reaps sessions itself (see `sessions`).
    let mut session_config = SessionConfig::default();
    session_config.keep_alive = None;
    let mut sessions = LocalSessionManager::default();
    sessions.session_config = session_config;
    let sessions = Arc::new(sessions);
    let book = Arc::new(SessionBook::default());
    tokio::spawn(reap(book.clone(), sessions.clone(), proxy.clone(), shutdown.clone()));
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        // A stateless request answered by one message gets plain JSON: the client reads the
        // body to its end and keeps the connection (SSE bodies were dropped mid-stream, which
        // closed a connection per request). Listen streams still get SSE.
        .with_json_response(true)
        .with_allowed_hosts(allowed_hosts(local, &server.allowed_hosts))
        .with_cancellation_token(shutdown.child_token());
    // rmcp builds one handler per legacy session and per stateless request, inside the request
    // the middleware authenticated: each handler belongs to that request's principal.
    let factory = move || {
        let principal = auth::current_principal().unwrap_or_else(|| auth::ANONYMOUS.to_string());
        Ok(ProxyServer::new(proxy.clone(), &principal, Transport::Http).with_session_book(book.clone()))
    };
    let service = StreamableHttpService::new(factory, sessions, config);
    let authenticator = Authenticator::new(&proxy_auth);
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(authenticator, auth::require_principal));
    tracing::info!(address = %local, "serving MCP at http://{local}/mcp");
    // Replies (SSE bodies above all) go out in several writes: without TCP_NODELAY each one
    // after the first waits for the host's delayed ACK (~40 ms).
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await
}

fn allowed_hosts(local: SocketAddr, extra: &[String]) -> Vec<String> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
    hosts.push(local.ip().to_string());
    hosts.extend(extra.iter().cloned());
    hosts
}
