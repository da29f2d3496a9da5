//! The session gate: an axum middleware between the front middleware (authentication and the
//! fast path, [`super::fast::front`]) and rmcp's streamable HTTP service that owns the legacy
//! sessions' admission and ownership.
//!
//! - A request naming a session (`Mcp-Session-Id`) that another principal opened gets the
//!   same `404 Not Found: Session not found` as an unknown session — POST, GET (the SSE
//!   stream) and DELETE alike — so a leaked id is worth nothing to anyone else.
//! - A response that opens a session (rmcp's answer to `initialize` carries a new
//!   `Mcp-Session-Id`) enters it in the [`SessionBook`]; past `server.max_sessions` or
//!   `server.max_sessions_per_principal` the session is closed again at once and the host gets
//!   `503 Service Unavailable` with a plain-text reason and `Retry-After` (and, for its span,
//!   why: [`RefusedAtGate`]).
//! - A request (a POST answered `200`, not a notification's `202`) or the GET stream on a
//!   session marks it used: from then on only the idle timeouts apply to it, not
//!   `server.unused_session_idle_timeout`.
//! - `DELETE` of a session answers `204 No Content` (rmcp says 202, which SDKs report as a
//!   failed termination) and leaves the book.
//!
//! With `[cluster]` (see `shared`) a named session must carry an id minted for this principal
//! under the cluster's key, and one this replica does not hold must have a live record of the
//! same principal (rmcp then re-creates it from the record); anything else is the same 404. The
//! caps are the cluster's (the records), a GET stream served here holds the session's
//! subscriptions, and a `Last-Event-ID` of a GET stream this replica never served is dropped (its
//! events are another replica's; what the stream owes is sent on the new one). A `Last-Event-ID`
//! of a request's stream another replica served (or this one before it restarted) is answered
//! here with the request's answer or an error naming the lost replica (`shared::resumed`).

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{Method, StatusCode};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::sessions::{OpenedSubscriber, OverCap, SessionBook};
use super::shared::ids::StreamEvent;
use super::shared::records::{Admission, Records};
use super::shared::{self, Shared};
use super::turned_away::RefusedAtGate;
use crate::audit::{Audit, Event};
use crate::auth::Principal;
use crate::metrics::{Metrics, Transport};
use crate::protocol::Era;

const SESSION_HEADER: &str = "mcp-session-id";

/// What the gate works with; a cheap `Clone` for the middleware state.
#[derive(Clone)]
pub(super) struct Gate {
    pub book: Arc<SessionBook>,
    pub manager: Arc<LocalSessionManager>,
    pub metrics: Metrics,
    /// Each request turned away here for another principal's session, or over a session cap,
    /// is audited ([`crate::audit::Kind::Refused`]).
    pub audit: Audit,
    /// `[cluster]`: the sessions' records.
    pub shared: Option<Shared>,
}

/// The middleware: `axum::middleware::from_fn_with_state(gate, guard_sessions)`, inside the
/// front middleware (it reads the [`Principal`] that [`crate::auth::run_as`] put in).
pub(super) async fn guard_sessions(State(gate): State<Gate>, mut request: Request, next: Next) -> Response {
    let principal = request.extensions().get::<Principal>().map(|p| p.0.clone()).unwrap_or_default();
    let named = request.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let method = request.method().clone();
    if let (Some(shared), Some(session)) = (&gate.shared, &named) {
        return guard_shared(&gate, shared, &principal, session, request, next).await;
    }
    if let Some(session) = &named {
        match gate.book.owner(session) {
            Some(owner) if *owner != *principal => {
                tracing::debug!(principal = %principal, %method, "session of another principal refused");
                gate.audit.record(Event::refused("wrong_principal").principal(&principal));
                return session_not_found();
            }
            Some(_) => gate.book.touch(session, None),
            None => {}
        }
    }
    let opened = (named.is_none() && gate.shared.is_some()).then(|| {
        let opened = OpenedSubscriber::default();
        request.extensions_mut().insert(opened.clone());
        opened
    });
    let response = next.run(request).await;
    match named {
        Some(session) if method == Method::DELETE => ended(&gate, &session, response),
        Some(session) => {
            if uses_session(&method, &response) {
                gate.book.used(&session);
            }
            response
        }
        None => admit(&gate, &principal, response, opened).await,
    }
}

/// Whether rmcp's `response` shows the session used: a POST answered `200` carried a request
/// (notifications and the host's replies get `202 Accepted`), a GET answered `200` is its
/// stream.
fn uses_session(method: &Method, response: &Response) -> bool {
    response.status() == StatusCode::OK && (method == Method::POST || method == Method::GET)
}

/// `[cluster]`: a request naming a session.
async fn guard_shared(
    gate: &Gate,
    shared: &Shared,
    principal: &str,
    session: &str,
    mut request: Request,
    next: Next,
) -> Response {
    let method = request.method().clone();
    if !shared.records.ids.verify(session, principal) {
        tracing::debug!(principal = %principal, %method, "session id not minted for this principal here");
        if another_principals(gate, shared, session, principal).await {
            gate.audit.record(Event::refused("wrong_principal").principal(principal));
        }
        return session_not_found();
    }
    if method == Method::GET
        && let Some(last) = request.headers().get("last-event-id").and_then(|v| v.to_str().ok())
        && let Some(event) =
            shared.resumption.elsewhere(&shared.records.ids, session, last, gate.book.owner(session).is_some())
    {
        return resume_from_keeper(shared, principal, session, event).await;
    }
    let mut restoring = None;
    // Minted for `principal`: a session known here is theirs.
    match gate.book.owner(session) {
        Some(_) => gate.book.touch(session, None),
        None => match shared.records.load(session).await {
            Ok(Some(record)) if record.principal == principal => {
                let counted = gate.metrics.downstream_session(Transport::Http, Era::Legacy);
                gate.book.admit_restored(session, principal, counted);
                restoring = Some(record);
            }
            Ok(_) => return session_not_found(),
            Err(_) => return store_unavailable(),
        },
    }
    if method == Method::GET && !gate.book.streamed(session) {
        request.headers_mut().remove("last-event-id");
    }
    let restored = restoring.is_some();
    let response = match restoring {
        Some(record) => shared::restore_with(record, next.run(request)).await,
        None => next.run(request).await,
    };
    if method == Method::DELETE {
        return ended(gate, session, response);
    }
    if !response.status().is_success() {
        if restored {
            gate.book.forget(session);
        }
        return response;
    }
    if method == Method::GET { shared.stream_subscriptions.subscribe(session, principal, response) } else { response }
}

/// `[cluster]`: whether `session`, not minted for `principal`, is a live session of another
/// principal (known here, or by its record) — refused as the single process refuses it, where
/// an id nobody holds is only unknown.
async fn another_principals(gate: &Gate, shared: &Shared, session: &str, principal: &str) -> bool {
    match gate.book.owner(session) {
        Some(owner) => *owner != *principal,
        None => matches!(shared.records.load(session).await, Ok(Some(record)) if record.principal != principal),
    }
}

/// `[cluster]`: a request stream another replica served, resumed here (`shared::resumed`), on a
/// session whose record names `principal`.
async fn resume_from_keeper(shared: &Shared, principal: &str, session: &str, event: StreamEvent) -> Response {
    match shared.records.load(session).await {
        Ok(Some(record)) if record.principal == principal => {}
        Ok(_) => return session_not_found(),
        Err(_) => return store_unavailable(),
    }
    shared.resumption.answer(&shared.records.ids, principal, session, event).await
}

/// A response that opened a session: enter it, or close it again over a cap.
async fn admit(gate: &Gate, principal: &str, response: Response, opened: Option<OpenedSubscriber>) -> Response {
    let Some(session) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return response;
    };
    let session = session.to_owned();
    let counted = gate.metrics.downstream_session(Transport::Http, Era::Legacy);
    let admitted = match &gate.shared {
        Some(shared) => admit_shared(&shared.records, &gate.book, &session, principal).await,
        None => Ok(()),
    };
    let admitted = admitted.and_then(|()| gate.book.admit(&session, principal, counted).map_err(Some));
    let over = match admitted {
        Ok(()) => {
            if let Some(&subscriber) = opened.as_ref().and_then(|opened| opened.subscriber.get()) {
                gate.book.touch(&session, Some(subscriber));
            }
            if let (Some(shared), Some(level)) = (&gate.shared, opened.as_ref().and_then(|o| o.log_level.get())) {
                gate.book.keep_level(&session, &shared.records.ids.record_key(&session), level);
            }
            if let (Some(shared), Some(key)) = (&gate.shared, opened.as_ref().and_then(|opened| opened.host_key.get()))
            {
                let host = shared.records.ids.host_key(&session);
                let _ = key.set(host);
                // Its per-host sessions another replica holds tell this one of their own lists.
                shared.stream_subscriptions.proxy.tools().watch_own_lists(principal, Some(host));
            }
            return response;
        }
        Err(Some(over)) => over,
        Err(None) => {
            let _ = gate.manager.close_session(&Arc::from(session.as_str())).await;
            return store_unavailable();
        }
    };
    tracing::warn!(principal = %principal, limit = ?over, "session refused: over the session limit");
    gate.audit.record(Event::refused("session_limit").principal(principal).method("initialize"));
    let _ = gate.manager.close_session(&Arc::from(session.as_str())).await;
    if let Some(shared) = &gate.shared {
        let _ = shared.records.end(&session).await;
    }
    let reason = match over {
        OverCap::Total(n) => format!("too many sessions: the proxy holds its limit of {n} (server.max_sessions)"),
        OverCap::Principal(n) => {
            format!("too many sessions for this principal: limit {n} (server.max_sessions_per_principal)")
        }
    };
    let headers = [(CONTENT_TYPE, "text/plain; charset=utf-8"), (RETRY_AFTER, "10")];
    let body = format!("Service Unavailable: {reason}; close an unused session (DELETE) or retry later\n");
    (StatusCode::SERVICE_UNAVAILABLE, headers, Extension(RefusedAtGate("session_limit")), body).into_response()
}

/// `[cluster]`: the cluster-wide caps, kept with the records; `None`: Redis cannot be reached.
async fn admit_shared(
    records: &Records,
    book: &SessionBook,
    session: &str,
    principal: &str,
) -> Result<(), Option<OverCap>> {
    let (total, mine) = book.caps();
    match records.admit(session, principal, total, mine).await {
        Ok(Admission::Admitted) => Ok(()),
        Ok(Admission::OverTotal) => Err(Some(OverCap::Total(total))),
        Ok(Admission::OverPrincipal) => Err(Some(OverCap::Principal(mine))),
        Err(error) => {
            tracing::warn!(error = %error, "cluster: a new session could not be recorded");
            Err(None)
        }
    }
}

/// Redis cannot be reached: a session it holds can be neither opened nor restored.
fn store_unavailable() -> Response {
    let headers = [(CONTENT_TYPE, "text/plain; charset=utf-8"), (RETRY_AFTER, "5")];
    let body = "Service Unavailable: the cluster's session store (Redis) cannot be reached; retry later\n";
    (StatusCode::SERVICE_UNAVAILABLE, headers, Extension(RefusedAtGate("session_store_unavailable")), body)
        .into_response()
}

/// A `DELETE` went through: the session left the book; answer 204 for rmcp's 202.
fn ended(gate: &Gate, session: &str, mut response: Response) -> Response {
    if response.status().is_success() {
        gate.book.forget(session);
        *response.status_mut() = StatusCode::NO_CONTENT;
        *response.body_mut() = axum::body::Body::empty();
    }
    response
}

/// rmcp's own answer for an unknown session, word for word.
fn session_not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}
