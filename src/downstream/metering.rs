//! Rate limits at the hosts' edge ([`crate::rate_limits`], through [`Proxy::admit`]).
//!
//! Over HTTP the front middleware ([`super::fast::front`]) checks a call or read right after
//! authentication, before the fast path and rmcp: over the limit, the host gets `429 Too Many
//! Requests` with `Retry-After` (whole seconds, rounded up) and, for clients that read bodies, the
//! JSON-RPC error with the request's id and `data.retryAfterMs` — the same for a 2025 session
//! and a 2026-07-28 stateless request. A request it admitted carries [`Admitted`] in its
//! extensions, so the rmcp handler does not charge it again. What the middleware cannot peek
//! (a batch, a body too large or without a length) and everything over stdio is checked by the
//! handler ([`ProxyServer::admit`]), which answers the JSON-RPC error alone.
//!
//! A request the middleware refuses is a SERVER span of its own when traces are on
//! ([`super::traced::refused_span`]): `mcp_proxy.refused`, `error.type`, the `429`.
//!
//! Invariant: a request is charged once, before any cache or upstream work; with no rate
//! configured nothing here reads a body.

use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use http::{Method, StatusCode};
use rmcp::ErrorData;
use rmcp::model::{JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use serde::Deserialize;

use super::ProxyServer;
use super::audited::refused_event;
use super::traced::{self, Refused};
use crate::error::{ProxyError, retry_after_secs};
use crate::metrics::{Hop, Transport};
use crate::proxy::{Caller, Metered, Proxy};
use crate::telemetry::Carrier;

/// Bodies larger than this (or without `Content-Length`) are left to the handler's check.
const MAX_PEEK: u64 = 64 * 1024;

/// In a request's extensions: the front middleware took its token already.
#[derive(Debug, Clone, Copy)]
pub(super) struct Admitted;

/// Check an HTTP request of `principal` against the rate limits: the request back (marked
/// [`Admitted`] when it was charged), or the `429` reply.
pub(super) async fn check_http(proxy: &Proxy, principal: &str, request: Request) -> Result<Request, Response> {
    if !proxy.rate_limited() || request.method() != Method::POST {
        return Ok(request);
    }
    let length = request.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    if length.is_none_or(|n: u64| n > MAX_PEEK) {
        return Ok(request);
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_PEEK as usize).await else {
        return Err((StatusCode::BAD_REQUEST, "Bad Request: incomplete body").into_response());
    };
    let mut request = Request::from_parts(parts, Body::from(bytes.clone()));
    let Some(peeked) = peek(&bytes) else { return Ok(request) };
    let Some(method) = peeked.method() else { return Ok(request) };
    let started = Instant::now();
    let caller = proxy.caller(principal);
    match proxy.admit(&caller, peeked.metered()) {
        Ok(()) => {
            request.extensions_mut().insert(Admitted);
            Ok(request)
        }
        Err(error) => {
            let version = crate::wire::headers::single(request.headers(), crate::wire::headers::PROTOCOL_VERSION);
            let hop = Hop::new(version.flatten(), Transport::Http);
            proxy.metrics().downstream_request(method, error.kind(), started.elapsed(), hop);
            proxy.audit().record(refused_event(principal, Some(method), &peeked.metered(), error.kind()));
            peeked.traced_refusal(method, request.headers(), &error);
            Err(too_many_requests(&error, peeked.id))
        }
    }
}

impl ProxyServer {
    /// The handler's check: a request the front middleware admitted passes; any other is
    /// charged here (stdio; HTTP bodies the middleware could not peek). Refused: counted under
    /// `method` and answered with the JSON-RPC error (`data.retryAfterMs`).
    pub(super) fn admit(
        &self,
        extensions: &rmcp::model::Extensions,
        caller: &Caller,
        request: Metered<'_>,
        method: &'static str,
    ) -> Result<(), ErrorData> {
        let parts = extensions.get::<::http::request::Parts>();
        if parts.is_some_and(|parts| parts.extensions.get::<Admitted>().is_some()) {
            return Ok(());
        }
        let started = Instant::now();
        self.proxy.admit(caller, request).map_err(|error| {
            self.proxy.metrics().downstream_request(method, error.kind(), started.elapsed(), self.hop());
            self.proxy.audit().record(refused_event(&self.principal, Some(method), &request, error.kind()));
            error.into()
        })
    }
}

/// `429 Too Many Requests`, `Retry-After`, and the JSON-RPC error as the body.
fn too_many_requests(error: &ProxyError, id: RequestId) -> Response {
    let retry_after = match error {
        ProxyError::RateLimited { retry_after, .. } => retry_after_secs(*retry_after),
        _ => 1,
    };
    let message: ServerJsonRpcMessage = JsonRpcMessage::error(error.to_error_data(), Some(id));
    let body = serde_json::to_vec(&message).unwrap_or_default();
    let headers = [(CONTENT_TYPE, "application/json".to_string()), (RETRY_AFTER, retry_after.to_string())];
    (StatusCode::TOO_MANY_REQUESTS, headers, Bytes::from(body)).into_response()
}

/// What the middleware reads of a request: its id, method and the one parameter that names
/// its target. Unknown keys (a call's arguments) are skipped, not kept.
#[derive(Deserialize)]
struct Peeked {
    id: RequestId,
    method: String,
    #[serde(default)]
    params: Option<PeekedParams>,
}

#[derive(Deserialize, Default)]
struct PeekedParams {
    name: Option<String>,
    uri: Option<String>,
    #[serde(rename = "ref")]
    reference: Option<PeekedReference>,
    /// The host's trace context, for a refusal's span.
    #[serde(rename = "_meta")]
    meta: Option<PeekedMeta>,
}

#[derive(Deserialize, Default)]
struct PeekedMeta {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

#[derive(Deserialize)]
struct PeekedReference {
    #[serde(rename = "type")]
    kind: String,
    name: Option<String>,
    uri: Option<String>,
}

/// A single JSON-RPC request; `None` for anything else (a batch, a notification, bad JSON).
fn peek(body: &[u8]) -> Option<Peeked> {
    serde_json::from_slice(body).ok()
}

impl Peeked {
    /// The method as a metric label, when it is one the rate limits meter.
    fn method(&self) -> Option<&'static str> {
        Some(match self.method.as_str() {
            "resources/read" => "resources/read",
            "tools/call" => "tools/call",
            "prompts/get" => "prompts/get",
            "completion/complete" => "completion/complete",
            _ => return None,
        })
    }

    /// The SERVER span of this request, refused with `error` (nothing when traces are off).
    fn traced_refusal(&self, method: &'static str, head: &http::HeaderMap, error: &ProxyError) {
        if !crate::telemetry::on() {
            return;
        }
        let params = self.params.as_ref();
        let meta = params.and_then(|p| p.meta.as_ref());
        let target = match self.metered() {
            Metered::Tool(name) | Metered::Prompt(name) if method != "completion/complete" => Some(name),
            _ => None,
        };
        traced::refused_span(Refused {
            method,
            target,
            meta: Carrier {
                traceparent: meta.and_then(|m| m.traceparent.as_deref()),
                tracestate: meta.and_then(|m| m.tracestate.as_deref()),
            },
            head,
            request_id: Some(self.id.to_string()),
            reason: error.kind(),
            error_type: error.to_error_data().code.0.to_string(),
            status: StatusCode::TOO_MANY_REQUESTS.as_u16(),
        });
    }

    fn metered(&self) -> Metered<'_> {
        let params = self.params.as_ref();
        let name = params.and_then(|p| p.name.as_deref()).unwrap_or_default();
        let uri = params.and_then(|p| p.uri.as_deref()).unwrap_or_default();
        match self.method.as_str() {
            "resources/read" => Metered::Read(uri),
            "tools/call" => Metered::Tool(name),
            "prompts/get" => Metered::Prompt(name),
            _ => match params.and_then(|p| p.reference.as_ref()) {
                Some(PeekedReference { kind, name: Some(name), .. }) if kind == "ref/prompt" => Metered::Prompt(name),
                Some(PeekedReference { kind, uri: Some(uri), .. }) if kind == "ref/resource" => Metered::Template(uri),
                _ => Metered::Other,
            },
        }
    }
}
