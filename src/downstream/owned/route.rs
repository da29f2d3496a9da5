//! The session endpoint's route: its gate (with `peer_tls`, a verified connection; the pass
//! opened on the head; the body guarded as a host's) in front of rmcp's streamable HTTP
//! service, one [`OwnedSession`] per MCP session; and how the listener tells other replicas'
//! connections from hosts'.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::handler::Handler;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};

use super::OwnedSession;
use crate::cluster::keys::label;
use crate::cluster::session_pass::{self, Passes, Refusal};
use crate::downstream::bodies::BodyGuard;
use crate::downstream::call_streams::CallStreams;
use crate::downstream::kept::KeptCalls;
use crate::downstream::relay::LogLevel;
use crate::downstream::replica_subscriptions::ReplicaSubscriptions;
use crate::listener::{Peers, VerifiedPeer};
use crate::proxy::Proxy;

/// What the route's gate works with.
#[derive(Clone)]
struct Gate {
    proxy: Proxy,
    passes: Passes,
    bodies: BodyGuard,
    tls_required: bool,
}

/// How the MCP listener tells other replicas' connections from hosts' (when this replica is
/// part of a cluster): a request to the session endpoint with a right pass (`passes`) on its
/// head, or with `peer_tls` a TLS connection whose certificate the cluster's CA issued.
pub(in crate::downstream) fn peers(proxy: &Proxy, passes: Option<Passes>) -> Option<Peers> {
    let passes = passes?;
    let tls = proxy.cluster().and_then(|cluster| cluster.peer_tls()).map(crate::cluster::peer_tls::acceptor);
    let is_peer = move |uri: &http::Uri, headers: &http::HeaderMap| {
        let pass = headers.get(session_pass::HEADER).and_then(|value| value.to_str().ok());
        uri.path() == session_pass::PATH && passes.admits(pass).is_ok()
    };
    Some(Peers { is_peer: Arc::new(is_peer), tls })
}

/// The route, and the passes it opens (the listener asks them of a connection's first head),
/// when this replica is part of a cluster.
pub(in crate::downstream) fn routes(
    proxy: &Proxy,
    bodies: BodyGuard,
    kept: Arc<KeptCalls>,
) -> Option<(axum::Router, Passes)> {
    let cluster = proxy.cluster()?;
    let passes = Passes::new(cluster.replica_id(), &cluster.keys().derive(label::SESSION_PASS));
    let tls_required = cluster.peer_tls().is_some();
    let gate = Gate { proxy: proxy.clone(), passes: passes.clone(), bodies, tls_required };
    let config = StreamableHttpServerConfig::default()
        .with_sse_keep_alive(None)
        // Every request carries the cluster's pass: no browser, no rebinding to guard against.
        .disable_allowed_hosts();
    let owner = proxy.clone();
    let factory = move || {
        let (proxy, kept) = (owner.clone(), kept.clone());
        Ok(OwnedSession {
            proxy,
            kept,
            bound: Arc::default(),
            level: LogLevel::default(),
            subscriptions: ReplicaSubscriptions::default(),
            lists: Arc::default(),
            cancellations: Arc::default(),
        })
    };
    // The other replica closes its connection once unused for its upstream's `session_idle`;
    // one whose replica died is closed here after twice that.
    let idle = proxy.config().upstreams.iter().map(|upstream| upstream.sessions.idle).max().unwrap_or_default();
    let mut local = LocalSessionManager::default();
    local.session_config.keep_alive = Some((idle * 2).max(SessionConfig::DEFAULT_KEEP_ALIVE));
    let sessions = Arc::new(CallStreams::new(Arc::new(local), None));
    let service = Arc::new(StreamableHttpService::new(factory, sessions, config));
    let service = move |request: Request| {
        let service = service.clone();
        async move { service.handle(request).await }
    };
    let gated = service.layer(axum::middleware::from_fn_with_state(gate, admit)).with_state(());
    Some((axum::Router::new().route_service(session_pass::PATH, gated), passes))
}

/// The gate: the pass is opened on the head (with `peer_tls`, over a verified connection
/// only), then the body guarded as a host's; the opened pass (and the JWT it carries) goes to
/// the handler in the request's extensions.
async fn admit(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    if gate.tls_required && request.extensions().get::<VerifiedPeer>().is_none() {
        return refused(&gate.proxy, Refusal::Unverified);
    }
    let pass = request.headers().get(session_pass::HEADER).and_then(|value| value.to_str().ok());
    let opened = match gate.passes.open(pass) {
        Ok(opened) => opened,
        Err(refusal) => return refused(&gate.proxy, refusal),
    };
    let (mut request, verdict) = match gate.bodies.guard(&opened.identity.principal, request) {
        Ok(guarded) => guarded,
        Err(refused) => return *refused,
    };
    if let Some(subject) = &opened.subject {
        request.extensions_mut().insert(subject.clone());
    }
    request.extensions_mut().insert(opened);
    let response = next.run(request).await;
    verdict.answer().unwrap_or(response)
}

fn refused(proxy: &Proxy, refusal: Refusal) -> Response {
    proxy.metrics().cluster_forward("refused");
    tracing::warn!(reason = refusal.label(), "cluster: a request to the session endpoint was refused");
    (StatusCode::FORBIDDEN, format!("refused: {refusal}\n")).into_response()
}
