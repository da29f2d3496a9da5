//! The admin listener, separate from the MCP endpoint: `GET /metrics` (Prometheus text),
//! `/healthz` (the process answers), `/readyz` (every required upstream is up) and `/status`
//! (JSON: upstreams, cache and subscription totals).
//!
//! It knows nothing of the proxy's parts: it renders [`Metrics`] and asks the `status` closure
//! of [`AdminState`] for a [`StatusReport`] on each `/readyz` and `/status` request.
//!
//! Like `/mcp`, it answers only requests whose `Host` is loopback, its own address or one of
//! `server.allowed_hosts` (a DNS-rebinding page cannot read it), caps its connections and
//! times out slow request heads (see [`crate::listener`]).
//!
//! Invariant: nothing here carries a principal's secret or a session id; `/status` shows what
//! `last_error` texts upstream supervision chose to record (ours, not upstream internals).

mod report;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use self::report::{
    CacheReport, PolicyReloadReport, Readiness, ReloadReport, StatusReport, SubscriptionReport, UpstreamReport,
};
use crate::listener::{self, ConnectionLimits, allowed_hosts};
use crate::metrics::Metrics;

/// What the admin handlers read from.
#[derive(Clone)]
pub struct AdminState {
    pub metrics: Metrics,
    /// Called on each `/readyz` and `/status` request; keep it quick (no awaiting, short locks).
    pub status: Arc<dyn Fn() -> StatusReport + Send + Sync>,
}

/// Serve the admin routes on `listener` until `shutdown`, within `limits`. Only requests
/// whose `Host` is loopback, the listen address or one of `extra_hosts`
/// (`server.allowed_hosts`) are answered (DNS rebinding); others get 403.
pub async fn serve_admin(
    listener: TcpListener,
    state: AdminState,
    limits: ConnectionLimits,
    extra_hosts: Vec<String>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let address = listener.local_addr()?;
    let hosts: Arc<[String]> = allowed_hosts(address, &extra_hosts).into();
    let app = router(state).layer(axum::middleware::from_fn_with_state(hosts, require_allowed_host));
    tracing::info!(address = %address, "admin listening at http://{address}");
    listener::serve(listener, app, limits, None, None, shutdown).await
}

/// 403 unless the request's `Host` (port aside, or exactly `host:port`) is in `allowed`.
async fn require_allowed_host(State(allowed): State<Arc<[String]>>, request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|value| value.to_str().ok()).unwrap_or("");
    if host_allowed(host, &allowed) {
        return next.run(request).await;
    }
    tracing::warn!(host, "admin request with a disallowed Host refused (possible DNS rebinding)");
    (StatusCode::FORBIDDEN, "Forbidden: Host header is not allowed\n").into_response()
}

/// Whether a `Host` header value names one of `allowed` (names or `name:port`).
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host.as_str(), |(name, port)| match port.parse::<u16>() {
            Ok(_) => name,
            Err(_) => host.as_str(),
        }),
    };
    !name.is_empty()
        && allowed.iter().any(|entry| entry.eq_ignore_ascii_case(name) || entry.eq_ignore_ascii_case(&host))
}

/// The admin routes, for embedding or testing without a listener.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .with_state(state)
}

/// `/status` is the report with the readiness verdict alongside.
#[derive(Serialize)]
struct StatusBody {
    #[serde(flatten)]
    readiness: Readiness,
    #[serde(flatten)]
    report: StatusReport,
}

async fn metrics(State(state): State<AdminState>) -> Response {
    ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], state.metrics.render()).into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AdminState>) -> Response {
    let readiness = (state.status)().readiness();
    let code = if readiness.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (code, Json(readiness)).into_response()
}

async fn status(State(state): State<AdminState>) -> Json<StatusBody> {
    let report = (state.status)();
    Json(StatusBody { readiness: report.readiness(), report })
}

#[cfg(test)]
mod tests;
