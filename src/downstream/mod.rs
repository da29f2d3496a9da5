//! The downstream side: the rmcp `ServerHandler` hosts talk to, over stdio and streamable HTTP,
//! in both protocol eras. It turns requests into [`Proxy`] calls and errors into the wire form;
//! it decides nothing itself.
//!
//! This file holds [`ProxyServer`], one host's server, and what every handler shares (the
//! principal check, the session's outlet, metrics); `handler.rs` is its `ServerHandler`, whose
//! arms go to `resources.rs`, `subscribing.rs` and `offerings.rs`. Each audited request (a read,
//! call, prompt, completion, subscription) is run inside [`crate::audit::scope::noting`] and
//! its events are made by `audited.rs`, the same for the rmcp handler and the fast path. With
//! traces on, each request runs inside its SERVER span (`traced.rs`, [`crate::telemetry`]), and
//! one refused before any handler has a span of its own (`turned_away.rs`).
//! `refusal.rs` answers a stdio host whose proxy cannot serve with the reason.
//! With `[cluster]`, `kept.rs` keeps the answer of a 2025 host's call whose stream was cut (that of a call served here, or
//! of one run here for a replica that went away), for the host's resumption on any
//! replica (`shared/resumed.rs`); `owned.rs` serves the upstream sessions this replica holds to
//! the other replicas as MCP (`/mcp-proxy/session`, each request under a sealed pass), their
//! subscriptions held there (`replica_subscriptions.rs`) and their own list changes told there
//! (`owned_lists.rs`).

mod audited;
mod bodies;
mod call_streams;
mod closing;
mod fast;
mod gate;
mod handler;
mod http;
mod kept;
mod metering;
mod offerings;
mod outlets;
mod owned;
mod owned_lists;
mod reaper;
mod refusal;
mod relay;
mod replica_subscriptions;
mod resources;
mod sessions;
mod shared;
mod subscribing;
mod traced;
mod turned_away;

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use rmcp::ErrorData;
use rmcp::ServiceExt;
use rmcp::service::{Peer, RoleServer};
use tokio_util::sync::CancellationToken;

pub use self::http::serve_http;
use self::outlets::SessionOutlet;
pub use self::refusal::refuse_stdio;
use self::resources::read_response;
use crate::error::ProxyError;
use crate::fanout::{OutletInfo, OutletKind};
use crate::metrics::{Hop, SessionGuard, Transport};
use crate::protocol::Era;
use crate::proxy::{Caller, Proxy};
use crate::subscription_table::SubscriberId;

/// One per legacy session, per stateless 2026-07-28 request, or per stdio host: the HTTP
/// service's factory makes one for every session and request.
pub struct ProxyServer {
    proxy: Proxy,
    principal: Arc<str>,
    transport: Transport,
    /// Legacy HTTP sessions' last activity, for the reaper.
    book: Option<Arc<sessions::SessionBook>>,
    /// `[cluster]`: the sessions' records (subscriptions and log level are kept there).
    records: Option<shared::records::Records>,
    /// `[cluster]`: where the answer of a call whose stream is cut is kept (`kept`).
    kept: Option<Arc<kept::KeptCalls>>,
    /// This legacy session's outlet, once it has one; released when the server is dropped,
    /// which rmcp does when the session ends.
    session: OnceLock<Session>,
    /// Cancelled when listen streams are to end gracefully (shutdown; see `closing`).
    closing: CancellationToken,
    /// The level this host set with `logging/setLevel`, for the upstreams' log messages of its
    /// calls (see `relay`).
    log_level: relay::LogLevel,
    /// Listen streams registered before rmcp acknowledged them, by the request's task, until
    /// `listen` takes them (see `subscribing`); released with the server otherwise.
    pending_listens: subscribing::PendingListens,
    /// This host session's key for per-host upstream sessions: its subscriber id; with `[cluster]`
    /// one derived from its `Mcp-Session-Id`, the same on every replica (set by `seen`).
    host_key: crate::fanout::HostKey,
    /// The JWT of the HTTP request this handler was made for (rmcp makes one per 2026-07-28
    /// request): a listen stream's subscriptions go with it. Nothing else uses it: a 2025
    /// session's handler is made at its `initialize`, and each request carries its own.
    request_subject: Option<crate::host::SubjectToken>,
    /// The protocol version and transport its requests are counted under (the conventions'
    /// histograms), from its first request (the version is one per session, host or request).
    hop: OnceLock<Hop>,
}

struct Session {
    proxy: Proxy,
    id: SubscriberId,
    _counted: Option<SessionGuard>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.proxy.deregister(self.id);
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
            records: None,
            kept: None,
            session: OnceLock::new(),
            closing,
            log_level: relay::LogLevel::default(),
            pending_listens: subscribing::PendingListens::default(),
            host_key: Default::default(),
            request_subject: None,
            hop: OnceLock::new(),
        }
    }

    /// `[cluster]`: sessions kept in `records`; a handler built to restore one (rmcp replays
    /// its handshake) takes its log level from the record, and session news sets it from then
    /// on (a GET stream serves no request that would note it); it knows its host key at once (a
    /// GET stream restored here tells its host of its per-host sessions' own lists).
    fn with_records(mut self, records: Option<shared::records::Records>) -> Self {
        if let Some(record) = shared::restoring() {
            if let Some(level) = record.level {
                *self.log_level.lock().expect("log level lock") = Some(level);
            }
            if let Some(records) = &records {
                let _ = self.host_key.set(records.ids.host_key(&record.session));
                if let Some(book) = &self.book {
                    book.keep_level(&record.session, &records.ids.record_key(&record.session), &self.log_level);
                }
            }
        }
        self.records = records;
        self
    }

    /// Note a legacy HTTP session's request, for the reaper.
    fn seen(&self, extensions: &rmcp::model::Extensions) {
        if let (Some(records), Some(session)) = (&self.records, session_header(extensions))
            && self.host_key.get().is_none()
        {
            let _ = self.host_key.set(records.ids.host_key(session));
        }
        let Some(book) = &self.book else { return };
        if let Some(session) = session_header(extensions) {
            // With `[cluster]` its log level is in the book already: kept as the session was
            // admitted here (`gate`) or its handler restored (`with_records`).
            book.touch(session, self.session.get().map(|s| s.id));
        }
    }

    /// The caller of one request: this session's principal and the policy in force now. A
    /// request makes it once and decides everything with it.
    fn caller(&self) -> Caller {
        self.proxy.caller(&self.principal)
    }

    /// Count a request in the metrics; hand back its result.
    fn record<T>(&self, method: &'static str, started: Instant, result: Result<T, ProxyError>) -> Result<T, ErrorData> {
        self.proxy.metrics().downstream_request(
            method,
            crate::metrics::outcome(&result),
            started.elapsed(),
            self.hop(),
        );
        Ok(result?)
    }

    /// The protocol version (as its first request said it) and transport of this host's
    /// requests, for the metrics.
    fn hop(&self) -> Hop {
        self.hop.get().copied().unwrap_or_else(|| Hop::new(None, self.transport))
    }

    /// Note the protocol version of a request `context` carries, once.
    fn note_version(&self, context: &rmcp::service::RequestContext<RoleServer>) {
        self.hop.get_or_init(|| Hop::new(context.protocol_version().as_ref().map(|v| v.as_str()), self.transport));
    }

    /// A legacy session belongs to the principal that opened it: a request on it that
    /// authenticated as someone else is refused.
    fn check_principal(&self, extensions: &rmcp::model::Extensions, method: &'static str) -> Result<(), ErrorData> {
        self.seen(extensions);
        let presented = extensions.get::<::http::request::Parts>().and_then(crate::auth::principal_of);
        match presented {
            Some(principal) if principal != &*self.principal => {
                let asked = crate::proxy::Metered::Other;
                self.proxy.audit().record(audited::refused_event(principal, Some(method), &asked, "wrong_principal"));
                Err(ErrorData::invalid_request("this session belongs to another principal", None))
            }
            _ => Ok(()),
        }
    }

    /// The key of the host session this server is (a 2025 session or a stdio host, once
    /// initialized) for its per-host upstream sessions (see `host_key`); a stateless 2026-07-28
    /// request has none.
    fn host_key(&self) -> Option<u64> {
        self.host_key.get().copied()
    }

    /// The host session's key and, `[cluster]`, the key the answer of the request of `context`
    /// is kept under when its stream is lost (`kept`).
    fn host_and_key(&self, context: &rmcp::service::RequestContext<RoleServer>) -> (Option<u64>, Option<String>) {
        let kept_as = self.records.as_ref().zip(session_header(&context.extensions)).map(|(records, session)| {
            records.ids.call_key(session, &serde_json::to_string(&context.id).unwrap_or_default())
        });
        (self.host_key(), kept_as)
    }

    /// This session's subscriber id, registering its outlet on first use.
    fn session(&self, peer: &Peer<RoleServer>) -> SubscriberId {
        self.session
            .get_or_init(|| {
                let info = OutletInfo {
                    principal: self.principal.to_string(),
                    kind: OutletKind::Session,
                    wants_list_changed: true,
                    wants_tools_list_changed: true,
                    wants_prompts_list_changed: true,
                    host_key: self.host_key.clone(),
                };
                let id = self.proxy.register_outlet(info, Arc::new(SessionOutlet(peer.clone())));
                if self.records.is_none() {
                    let _ = self.host_key.set(id);
                }
                // A legacy HTTP session is counted by the session book from `initialize` on.
                let counted =
                    self.book.is_none().then(|| self.proxy.metrics().downstream_session(self.transport, Era::Legacy));
                Session { proxy: self.proxy.clone(), id, _counted: counted }
            })
            .id
    }
}

/// The `Mcp-Session-Id` of the HTTP request behind a handler call, if any.
fn session_header(extensions: &rmcp::model::Extensions) -> Option<&str> {
    let parts = extensions.get::<::http::request::Parts>()?;
    parts.headers.get("mcp-session-id").and_then(|v| v.to_str().ok())
}

/// The JWT the HTTP request behind a handler call came with, if any.
fn subject_of(extensions: &rmcp::model::Extensions) -> Option<crate::host::SubjectToken> {
    extensions.get::<::http::request::Parts>().and_then(crate::auth::subject_of).cloned()
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
