//! The accept loop both HTTP listeners (`/mcp` and the admin listener) run instead of
//! `axum::serve`, which has no header timeout and no connection cap, and the `Host` values
//! they accept. It sits below both (`downstream`, `admin`), so neither imports the other.
//!
//! Invariants:
//! - at most [`ConnectionLimits::max_connections`] connections are open per listener: past it
//!   the loop stops accepting, so further clients wait in the kernel's backlog (and no file
//!   descriptor is spent on them) until a connection closes;
//! - a connection must deliver a complete request head within
//!   [`ConnectionLimits::header_read_timeout`] — its first request and every keep-alive request
//!   after it — or it is closed (slowloris, idle half-open connections);
//! - every accepted socket has `TCP_NODELAY`: replies written in pieces (SSE frames) leave at
//!   once instead of waiting ~40 ms for the peer's delayed ACK (Nagle's algorithm).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// `Host` values a listener on `local` accepts: loopback names, its own address, `extra`.
pub fn allowed_hosts(local: std::net::SocketAddr, extra: &[String]) -> Vec<String> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
    hosts.push(local.ip().to_string());
    hosts.extend(extra.iter().cloned());
    hosts
}

/// Per-listener connection limits, from `[server]`.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

impl ConnectionLimits {
    pub fn of(server: &crate::config::ServerConfig) -> Self {
        Self { max_connections: server.max_connections, header_read_timeout: server.header_read_timeout }
    }
}

/// Serve `app` over HTTP/1.1 on `listener` until `shutdown`; then stop accepting and wait for
/// open connections to finish their current exchange.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            _ = shutdown.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // EMFILE and friends: back off briefly instead of spinning on the error.
                    tracing::warn!(error = %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(error = %error, peer = %peer, "TCP_NODELAY not set");
        }
        let connection = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(error = %error, peer = %peer, "connection ended with an error");
            }
            drop(permit);
        });
    }
    graceful.shutdown().await;
    Ok(())
}
