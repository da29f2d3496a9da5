//! Streamable HTTP at `/mcp`: legacy sessions (`Mcp-Session-Id`) and stateless 2026-07-28
//! requests on one endpoint, behind [`crate::auth`]: every request is authenticated (or
//! refused with 401) before rmcp sees it, and carries its [`crate::auth::Principal`] in the
//! extensions of the `http::request::Parts` rmcp hands to the handler. In the same middleware
//! ([`super::fast::front`]) the fast path answers reads and lists in front of rmcp; for the
//! rest, [`super::gate`] admits legacy sessions and binds each to its principal.
//!
//! `Host` must be loopback, the listen address or one of `server.allowed_hosts`; a request
//! with an `Origin` header must name the listener's own origin ([`listener::own_origins`], the
//! bound address and port, known after bind) or one of `server.allowed_origins` — other
//! browser pages (a DNS-rebinding page on the attacker's name, any other site) are refused,
//! non-browser clients send no `Origin`. Both answered 403 by rmcp.

use std::sync::Arc;
use std::time::Duration;

use axum::handler::Handler;
use rmcp::transport::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::SessionStore;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::ProxyServer;
use super::bodies::BodyGuard;
use super::call_streams::{CallStreams, ClusterStreams};
use super::closing::{ClosingStreams, track_streams};
use super::fast::{self, FastPath, Front};
use super::gate::{Gate, guard_sessions};
use super::kept::KeptCalls;
use super::reaper::reap;
use super::sessions::SessionBook;
use super::shared::Shared;
use super::shared::answers::Answers;
use super::shared::keepers::Keepers;
use super::shared::news::Newsroom;
use super::shared::records::Records;
use super::shared::resumed::Resumption;
use super::shared::streams::StreamSubscriptions;
use crate::auth::{self, Authenticator};
use crate::listener::{self, ConnectionLimits, allowed_hosts, own_origins};
use crate::metrics::Transport;
use crate::proxy::Proxy;
use crate::wire::headers::AllowedHosts;

/// The `retry` of each request stream's priming event.
const REQUEST_STREAM_RETRY: Duration = Duration::from_millis(500);

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
    // A host whose request stream is cut reconnects (`Last-Event-ID`) after this: soon enough
    // that a call on a replica that died is answered within seconds.
    session_config.sse_retry = Some(REQUEST_STREAM_RETRY);
    let mut sessions = LocalSessionManager::default();
    sessions.session_config = session_config;
    let sessions = Arc::new(sessions);
    let metrics = proxy.metrics().clone();
    let metrics_for_listener = metrics.clone();
    let proxy_for_routes = proxy.clone();
    let subjects = proxy.subjects().clone();
    // `[cluster]`: sessions any replica serves, kept in Redis (see `shared`).
    let records = proxy.cluster().map(|cluster| {
        Records::new(cluster.clone(), server.session_idle_timeout, server.subscribed_session_idle_timeout)
    });
    let mut book = SessionBook::new(server.max_sessions, server.max_sessions_per_principal);
    if records.is_some() {
        book = book.with_shared_caps();
    }
    let book = Arc::new(book);
    let spine = proxy.spine();
    let reaper = reap(book.clone(), sessions.clone(), proxy.clone(), records.clone(), shutdown.clone());
    spine.spawn("session-reaper", reaper);
    // `[cluster]`: calls served or run here, kept when their host's stream is cut.
    let kept = Arc::new(KeptCalls::default());
    let keeping = records.as_ref().map(|_| kept.clone());
    // `[cluster]`: a host's answer reaches the replica that asked, wherever it lands.
    let answers = records
        .clone()
        .zip(proxy.cluster())
        .map(|(records, cluster)| Arc::new(Answers::new(cluster.replica_id(), records, metrics.clone())));
    let shared = records.clone().zip(proxy.cluster()).map(|(records, cluster)| {
        let stream_subscriptions = StreamSubscriptions {
            proxy: proxy.clone(),
            records: records.clone(),
            book: book.clone(),
            streams: Arc::default(),
        };
        let keepers = Keepers::new(records.clone(), cluster.replica_id(), kept.clone());
        let replica = cluster.replica_id().into();
        let resumption = Resumption { proxy: proxy.clone(), replica, kept: kept.clone(), keepers };
        Shared { records, stream_subscriptions, resumption }
    });
    if let Some((shared, answers)) = shared.as_ref().zip(answers.clone()) {
        let newsroom = Newsroom {
            records: shared.records.clone(),
            book: book.clone(),
            manager: sessions.clone(),
            streams: shared.streams().clone(),
            proxy: proxy.clone(),
            answers,
            keepers: shared.resumption.keepers.clone(),
        };
        spine.spawn("session-news", newsroom.run(shutdown.clone()));
    }
    // At shutdown listen streams end first, rmcp stops after them (see `closing`).
    let streams = ClosingStreams::default();
    let stop_rmcp = CancellationToken::new();
    spine.spawn("listen-closing", streams.clone().close_in_order(shutdown.clone(), stop_rmcp.clone()));
    let hosts: Arc<[String]> = allowed_hosts(local, &server.allowed_hosts).into();
    let origins = server.allowed_origins.iter().cloned().chain(own_origins(local));
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        // A stateless request answered by one message gets plain JSON: the client reads the
        // body to its end and keeps the connection (SSE bodies were dropped mid-stream, which
        // closed a connection per request). Listen streams still get SSE.
        .with_json_response(true)
        .with_allowed_hosts(hosts.to_vec())
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_cancellation_token(stop_rmcp);
    // rmcp keeps each session's `initialize` in the records and replays it on a replica asked
    // for a session it does not hold.
    config.session_store = records.clone().map(|records| Arc::new(records) as Arc<dyn SessionStore>);
    // rmcp builds one handler per legacy session and per stateless request, inside the request
    // the middleware authenticated: each handler belongs to that request's principal.
    let gate = Gate {
        book: book.clone(),
        manager: sessions.clone(),
        metrics: metrics.clone(),
        audit: proxy.audit().clone(),
        shared,
    };
    let closing = streams.closing.clone();
    let hosts = Arc::new(AllowedHosts::new(&hosts));
    let fast = FastPath { proxy: proxy.clone(), book: book.clone(), manager: sessions.clone(), hosts };
    let streams_cluster = records.as_ref().zip(answers).zip(proxy.cluster()).map(|((records, answers), cluster)| {
        ClusterStreams { ids: records.ids.clone(), answers, replica: cluster.replica_id().into(), kept: kept.clone() }
    });
    let bodies = BodyGuard::new(
        server.body_read_timeout,
        server.max_body_bytes_per_principal,
        metrics.clone(),
        proxy.audit().clone(),
    );
    let factory = move || {
        let principal = auth::current_principal().unwrap_or_else(|| auth::ANONYMOUS.to_string());
        let server = ProxyServer {
            book: Some(book.clone()),
            kept: keeping.clone(),
            closing: closing.clone(),
            request_subject: auth::current_subject(),
            ..ProxyServer::new(proxy.clone(), &principal, Transport::Http)
        };
        Ok(server.with_records(records.clone()))
    };
    // axum and each `from_fn` layer clone the service behind them at every request; rmcp's
    // clone copies its config (the allowed hosts and origins with it) — a dozen times per
    // request, most of a cache hit's allocations. Behind an `Arc` a clone is a counter.
    // A call's log messages ride its own response stream, not the GET stream (see `call_streams`).
    let service =
        Arc::new(StreamableHttpService::new(factory, Arc::new(CallStreams::new(sessions, streams_cluster)), config));
    let service = move |request: axum::extract::Request| {
        let service = service.clone();
        async move { service.handle(request).await }
    };
    // `[cluster]`: upstream sessions held here, served to the other replicas as MCP.
    let owned = super::owned::routes(&proxy_for_routes, bodies.clone(), kept.clone());
    let front = Front { auth: Authenticator::keeping(&proxy_auth, subjects), fast, bodies };
    // Layers run outside in: authentication and the fast path first, then the session gate.
    // One composite layer (a tuple: its first element outermost) instead of one `layer` call
    // each: the router boxes what each call wraps, and every middleware clones and boxes the
    // service behind it at every request — with the four in one, the chain between them is
    // plain values (a clone is a few counters), boxed once.
    let layers = (
        axum::middleware::from_fn_with_state(front, fast::front),
        axum::middleware::from_fn_with_state(gate, guard_sessions),
        axum::middleware::from_fn_with_state(streams, track_streams),
    );
    let mut app = axum::Router::new().nest_service("/mcp", service.with_state(())).layer(layers);
    // The protected resource metadata is public: merged after the layers, outside them.
    if let Some(jwt) = &proxy_auth.jwt {
        app = app.merge(auth::metadata::routes(jwt));
    }
    // `[cluster]`: other replicas' requests carry a sealed pass, not a host's token.
    if let Some(cluster) = proxy_for_routes.cluster() {
        cluster.listening_at(local);
    }
    let passes = owned.map(|(routes, passes)| {
        app = std::mem::take(&mut app).merge(routes);
        passes
    });
    tracing::info!(address = %local, "serving MCP at http://{local}/mcp");
    let peers = super::owned::peers(&proxy_for_routes, passes);
    let open: listener::OpenConnections =
        Arc::new(move |kind, open| metrics_for_listener.listener_connections(kind.label(), open));
    listener::serve(listener, app, ConnectionLimits::of(&server), peers, Some(open), shutdown).await
}
