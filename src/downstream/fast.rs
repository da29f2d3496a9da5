//! The fast path: `resources/read`, `resources/list` and `resources/templates/list` on `/mcp`
//! answered in the axum layer, in front of rmcp's streamable HTTP service, for the two shapes
//! hosts send most — a 2026-07-28 stateless request (JSON reply) and a request on an open
//! 2025-era session (SSE reply). rmcp's per-request service (a serve loop, channels and task
//! spawns for a stateless request; the session worker's hop and a response stream for a
//! session) is what a cache hit used to pay for; the proxy's own work is the same here.
//!
//! Invariants:
//! - the same proxy code answers: [`Proxy::read`] / [`Proxy::list_resources`] /
//!   [`Proxy::list_templates`] (access, policy, cache, namespace), the same
//!   `downstream_request` metrics (method, outcome, duration), the same read post-processing
//!   ([`super::read_response`]) and rmcp's own era rules for results and error codes — so a
//!   reply is byte for byte the JSON-RPC message rmcp would send;
//! - it runs after authentication, in the same middleware ([`front`]), before the session gate:
//!   a session is served only when the gate's book knows it, the request's principal opened it,
//!   it finished its 2025-era handshake (`notifications/initialized` with a version before
//!   2026-07-28), and rmcp still holds it; it notes the request for the idle reaper as the gate
//!   does, and leaves every other session request to the gate (another principal's: 404);
//! - anything it is not sure of goes to rmcp untouched (same head, same body bytes): other
//!   methods, notifications, batches, unknown fields (MRTR input), `Origin` headers, hosts it
//!   does not recognise exactly, headers rmcp would validate otherwise, chunked or large bodies,
//!   and everything when `server.fast_path = false`;
//! - a 2025 session reply carries the message as one SSE event without an event id (rmcp's ids
//!   count the session's streams; a complete reply in one body has nothing to resume).
//!
//! Every byte-level rule it applies — the head's checks, the request's era, error codes and
//! HTTP statuses, SSE framing, the contents JSON — is the wire floor's ([`crate::wire`]); the
//! differential test (`tests/fast/differential.rs`) holds its replies to rmcp's, byte for byte.

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, ORIGIN};
use http::{HeaderMap, Method, StatusCode};
use rmcp::model::{ErrorCode, ErrorData, JsonRpcMessage, RequestId, ServerJsonRpcMessage, ServerResult};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::Value;

mod parse;
mod reply;

use self::reply::{Reply, SetAside, json_reply, sse_reply};
use super::audited::{Asked, read_event};
use super::bodies::BodyGuard;
use super::sessions::SessionBook;
use crate::audit;
use crate::auth::{self, Authenticator, SubjectToken};
use crate::error::ProxyError;
use crate::metrics::{Hop, Transport};
use crate::protocol::Era;
use crate::proxy::{Caller, Proxy};
use crate::telemetry;
use crate::wire::era;
use crate::wire::headers::{self, AllowedHosts};
use crate::wire::status;

/// Bodies larger than this (or without `Content-Length`) go to rmcp, which has its own limit.
const MAX_BODY: u64 = 64 * 1024;

/// The middleware's state; a cheap `Clone`.
#[derive(Clone)]
pub(super) struct FastPath {
    pub proxy: Proxy,
    pub book: Arc<SessionBook>,
    pub manager: Arc<LocalSessionManager>,
    /// The `Host` values rmcp accepts (`StreamableHttpServerConfig::allowed_hosts`).
    pub hosts: Arc<AllowedHosts>,
}

/// One request the fast path answers.
struct Call {
    id: RequestId,
    op: Op,
    /// The 2025-era session it arrived on; `None` for a 2026-07-28 stateless request.
    session: Option<Arc<str>>,
    /// The host's trace context in `_meta`.
    trace: parse::Trace,
    /// Its protocol version and transport, for the conventions' histograms.
    hop: Hop,
}

#[derive(Debug, PartialEq)]
enum Op {
    Read(String),
    List(Option<String>),
    Templates(Option<String>),
}

impl Op {
    fn method(&self) -> &'static str {
        match self {
            Op::Read(_) => "resources/read",
            Op::List(_) => "resources/list",
            Op::Templates(_) => "resources/templates/list",
        }
    }
}

/// What the outermost `/mcp` middleware holds; a cheap `Clone`.
#[derive(Clone)]
pub(super) struct Front {
    pub auth: Authenticator,
    pub fast: FastPath,
    /// Each authenticated request's body is read against its deadline and its principal's
    /// budget.
    pub bodies: BodyGuard,
}

/// The outermost middleware of `/mcp`: `axum::middleware::from_fn_with_state(front,
/// fast::front)`. Every request is authenticated (or refused with 401) first; what the fast
/// path answers is answered here; anything else goes on with its principal
/// ([`auth::run_as`], with the JWT it presented) through the session gate to rmcp, and a
/// request rmcp refuses for its MCP headers is audited ([`audit_header_refusal`]). One
/// middleware for both, so a cache hit passes one layer, not three. An event stream ends when
/// a JWT expires ([`auth::expiry`]).
pub(super) async fn front(State(front): State<Front>, request: Request, next: Next) -> Response {
    let (principal, subject) = match front.auth.authenticate_subject(request.headers()).await {
        Ok(authenticated) => authenticated,
        Err(rejection) => {
            audit_refusal(&front.fast.proxy, rejection, request.headers());
            return front.auth.refuse(rejection, request.method());
        }
    };
    let (request, verdict) = match front.bodies.guard(&principal.0, request) {
        Ok(guarded) => guarded,
        Err(refused) => return *refused,
    };
    // Rate limits before anything else: a refusal costs a body peek and a map lookup.
    let request = match super::metering::check_http(&front.fast.proxy, &principal.0, request).await {
        Ok(request) => request,
        Err(too_many) => return verdict.answer().unwrap_or(too_many),
    };
    // Traces on: what a refusal before any handler needs for its span.
    let (request, kept_request) = match super::turned_away::keep_request(request).await {
        Ok(kept) => kept,
        Err(incomplete) => return verdict.answer().unwrap_or(incomplete),
    };
    let expiry = subject.as_ref().map(|subject| auth::expiry::TokenExpiry(subject.until()));
    let response = match front.fast.answer(&principal.0, subject.as_ref(), request).await {
        Ok(response) => response,
        Err(request) => {
            let name = principal.0.clone();
            let response = auth::run_as(principal, subject, request, next).await;
            let response = audit_header_refusal(&front.fast.proxy, &name, response).await;
            super::turned_away::trace_refusal(kept_request, response).await
        }
    };
    if let Some(cut) = verdict.answer() {
        return cut;
    }
    auth::expiry::end_stream_at(expiry, response)
}

impl FastPath {
    /// The reply when the fast path answers `request` for `principal` (which came with the JWT
    /// `subject`, if any); else the request back, the same head and the same body bytes.
    async fn answer(
        &self,
        principal: &str,
        subject: Option<&SubjectToken>,
        request: Request,
    ) -> Result<Response, Request> {
        if !self.proxy.config().server.fast_path || !head_is_plain(request.method(), request.headers(), &self.hosts) {
            return Err(request);
        }
        let (parts, body) = request.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY as usize).await else {
            // The body was announced but did not arrive whole: nobody is waiting for an answer.
            return Ok((StatusCode::BAD_REQUEST, "Bad Request: incomplete body").into_response());
        };
        let call = match classify(&parts.headers, &bytes) {
            Some(call) if self.admits(principal, &call).await => call,
            _ => return Err(Request::from_parts(parts, Body::from(bytes))),
        };
        if let Some(session) = &call.session {
            // What the session gate does for the requests it passes: activity for the reaper,
            // and the session is used.
            self.book.touch(session, None);
            self.book.used(session);
        }
        let modern = call.session.is_none();
        let era = if modern { Era::Modern } else { Era::Legacy };
        tracing::debug!(method = call.op.method(), era = era.label(), "answered on the fast path");
        let span = server_span(&call, &parts.headers, modern);
        let reply = span.attach(self.serve(principal, subject, call, modern)).await;
        if let JsonRpcMessage::Error(error) = &reply.message {
            span.failed(error.error.code.0.to_string());
        }
        Ok(if modern { json_reply(reply) } else { sse_reply(reply) })
    }
}

impl FastPath {
    /// A stateless request is always admitted; a session request only on a session of this
    /// principal that finished a 2025-era handshake and that rmcp still holds.
    async fn admits(&self, principal: &str, call: &Call) -> bool {
        let Some(session) = &call.session else { return true };
        if self.book.legacy_owner(session).is_none_or(|owner| *owner != *principal) {
            return false;
        }
        self.manager.has_session(session).await.unwrap_or(false)
    }

    /// Answer `call` with the proxy's own methods; rmcp's era rules applied to the result.
    async fn serve(&self, principal: &str, subject: Option<&SubjectToken>, call: Call, modern: bool) -> Reply {
        let started = Instant::now();
        let mut contents = None;
        let hop = call.hop;
        let caller = self.proxy.caller(principal).with_subject(subject.cloned());
        let result = match call.op {
            Op::Read(uri) => {
                let asked = Asked {
                    principal,
                    era: Some(if modern { Era::Modern } else { Era::Legacy }),
                    session: call.session.as_deref(),
                    request: Some(call.id.to_string()),
                    started,
                };
                self.read(&caller, &uri, (&asked, hop), &mut contents).await
            }
            Op::List(cursor) => self
                .record("resources/list", (started, hop), self.proxy.list_resources(&caller, cursor.as_deref()))
                .map(ServerResult::ListResourcesResult),
            Op::Templates(cursor) => {
                let listed = self.proxy.list_templates(&caller, cursor.as_deref());
                self.record("resources/templates/list", (started, hop), listed)
                    .map(ServerResult::ListResourceTemplatesResult)
            }
        };
        // What rmcp's `ServerHandler` dispatch does to every result and error of these eras.
        let result = result.and_then(|mut result| {
            if modern {
                result.fill_missing_cache_hints();
            } else if matches!(result, ServerResult::InputRequiredResult(_)) {
                let message = "InputRequiredResult requires negotiated protocol version 2026-07-28 or newer";
                return Err(ErrorData::invalid_request(message, None));
            } else {
                result.strip_result_type_for_legacy_peer();
                result.strip_non_object_output_for_legacy_peer();
            }
            Ok(result)
        });
        let message: ServerJsonRpcMessage = match result {
            Ok(result) => JsonRpcMessage::response(result, call.id),
            Err(mut error) => {
                error.code = status::code_for(if modern { Era::Modern } else { Era::Legacy }, error.code);
                JsonRpcMessage::error(error, Some(call.id))
            }
        };
        Reply { message, contents }
    }

    async fn read(
        &self,
        caller: &Caller,
        uri: &str,
        (asked, hop): (&Asked<'_>, Hop),
        contents: &mut Option<SetAside>,
    ) -> Result<ServerResult, ErrorData> {
        // Boxed: each layer of futures above it would hold a copy of its state, moved on every
        // hit (a read's future is kilobytes; a box is one allocation).
        let (answer, notes) = audit::scope::noting(Box::pin(self.proxy.read(caller, uri))).await;
        super::traced::note_read(uri, &answer, &notes);
        self.proxy.audit().request(notes, || read_event(asked, uri, &answer));
        let answer = answer.inspect_err(|error| {
            tracing::debug!(uri, principal = caller.principal(), error = %error, kind = error.kind(), "read failed");
        });
        let modern = asked.era == Some(Era::Modern);
        let mut answer = self.record("resources/read", (asked.started, hop), answer)?;
        // The cache entry's JSON goes into the reply instead of the contents serialised again.
        *contents = reply::set_aside(&mut answer);
        Ok(ServerResult::from(super::read_response(answer, modern)))
    }

    /// Count a request in the metrics exactly as the rmcp-served handler does.
    fn record<T>(
        &self,
        method: &'static str,
        (started, hop): (Instant, Hop),
        result: Result<T, ProxyError>,
    ) -> Result<T, ErrorData> {
        self.proxy.metrics().downstream_request(method, crate::metrics::outcome(&result), started.elapsed(), hop);
        Ok(result?)
    }
}

/// The SERVER span of a request the fast path answers (nothing when traces are off).
fn server_span(call: &Call, head: &HeaderMap, modern: bool) -> telemetry::Span {
    if !telemetry::on() {
        return telemetry::Span::default();
    }
    let version = if modern {
        Some(crate::protocol::MODERN_VERSION)
    } else {
        headers::single(head, headers::PROTOCOL_VERSION).flatten()
    };
    let digest = || call.session.as_deref().map(audit::session_digest).unwrap_or_default();
    telemetry::server_span(telemetry::Incoming {
        method: call.op.method(),
        target: None,
        meta: telemetry::Carrier {
            traceparent: call.trace.traceparent.as_deref(),
            tracestate: call.trace.tracestate.as_deref(),
        },
        header: super::traced::header_carrier(Some(head)),
        request_id: Some(&call.id),
        version,
        session: call.session.is_some().then_some(&digest as &dyn Fn() -> String),
        transport: telemetry::Transport::Tcp,
    })
}

/// A request refused with 401: counted by why, and audited (the reason, never the token).
fn audit_refusal(proxy: &Proxy, rejection: auth::Rejection, head: &HeaderMap) {
    proxy.metrics().auth_refused(rejection.label());
    proxy.audit().request(audit::scope::Notes::default(), || {
        let mut event = audit::Event::new(audit::Kind::AuthRefused, "refused");
        event.reason = Some(rejection.label());
        event.session(headers::single(head, headers::SESSION_ID).flatten())
    });
}

/// rmcp's answer to a request whose MCP headers disagree with its body, or lack what its body
/// requires (SEP-2243 `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`; `MCP-Protocol-Version` against
/// `_meta`): `400` with the JSON-RPC error `HEADER_MISMATCH`, made before any handler runs. The
/// answer goes back as it came; the refusal is one audit event (`refused`, reason
/// `header_mismatch`, with the request's id), as every other refusal is.
async fn audit_header_refusal(proxy: &Proxy, principal: &str, response: Response) -> Response {
    let json = response.headers().get(CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(headers::JSON.as_bytes()));
    if response.status() != StatusCode::BAD_REQUEST || !json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return (StatusCode::BAD_REQUEST, "Bad Request").into_response();
    };
    let answer: Option<Value> = serde_json::from_slice(&bytes).ok();
    let code = answer.as_ref().and_then(|answer| answer["error"]["code"].as_i64());
    if code == Some(i64::from(ErrorCode::HEADER_MISMATCH.0)) {
        let id = answer.and_then(|answer| serde_json::from_value::<RequestId>(answer["id"].clone()).ok());
        let id = id.map(|id| id.to_string());
        proxy.audit().record(audit::Event::refused("header_mismatch").principal(principal).request(id));
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// A POST whose head rmcp would accept without a word: no `Origin`, a `Host` it allows, both
/// media types accepted (no weights), a JSON body of known, small length.
fn head_is_plain(method: &Method, head: &HeaderMap, hosts: &AllowedHosts) -> bool {
    if method != Method::POST || head.contains_key(ORIGIN) || !hosts.allow(head) {
        return false;
    }
    let length = head.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if length.is_none_or(|n| n > MAX_BODY) {
        return false;
    }
    headers::content_type_is_json(head) && headers::accepts_json_and_sse(head)
}

/// The call in `body`, when it is one the fast path answers exactly as rmcp would.
fn classify(head: &HeaderMap, body: &Bytes) -> Option<Call> {
    let request = parse::typed(body).or_else(|| parse::via_rmcp(body))?;
    let session = headers::single(head, headers::SESSION_ID)?;
    let era = era::of_request(head, &request.meta, session.is_some())?;
    let (op, trace) = (request.op, request.trace);
    let name = match &op {
        Op::Read(uri) => Some(uri.as_str()),
        _ => None,
    };
    let agree = match era {
        Era::Modern => headers::standard_headers_agree(head, op.method(), name),
        Era::Legacy => headers::only_session_headers(head),
    };
    let version = match era {
        Era::Modern => Some(crate::protocol::MODERN_VERSION),
        Era::Legacy => headers::single(head, headers::PROTOCOL_VERSION).flatten(),
    };
    let hop = Hop::new(version, Transport::Http);
    agree.then(|| Call { id: request.id, op, session: session.map(Arc::from), trace, hop })
}

#[cfg(test)]
mod tests;
