//! The SERVER span of an HTTP request turned away before any handler served it: rmcp's `400`
//! (headers that disagree with the body, an unsupported protocol version, a malformed request)
//! and `415` (a body it cannot read as JSON-RPC), and the session gate's `503` (a session cap,
//! the cluster's session store out of reach). The front middleware ([`super::fast::front`]) keeps what such a span needs —
//! the head and the (small) body as they came — while traces are on ([`keep_request`]), and makes the
//! span when the answer is one of these and no handler made one ([`trace_refusal`]). The `429`
//! of a rate limit has its own span, made where it is refused ([`super::metering`]).
//!
//! Invariant: nothing here runs, and no body is read, when traces are off; a span names no URI
//! and carries no body.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, Method, StatusCode};
use rmcp::model::{ErrorCode, RequestId};
use serde::Deserialize;

use super::traced::{self, Refused, Spanned};
use crate::protocol::{DOWNSTREAM_METHODS, KNOWN_VERSIONS};
use crate::telemetry::{self, Carrier};
use crate::wire::headers;

/// Bodies larger than this (or without `Content-Length`) are not kept: their refusal's span
/// has no method and no `_meta` context.
const MAX_KEPT: u64 = 64 * 1024;

/// The methods a refusal's span may be named by; anything else is `_OTHER` (a bounded name, as
/// the conventions do for HTTP methods).
const LIFECYCLE_METHODS: &[&str] = &["initialize", "ping", "server/discover", "logging/setLevel"];

/// In a response's extensions: why the session gate turned the request away (`503`).
#[derive(Debug, Clone, Copy)]
pub(super) struct RefusedAtGate(pub &'static str);

/// What a request came with, kept for its refusal's span.
pub(super) struct KeptRequest {
    head: HeaderMap,
    body: Option<Bytes>,
    spanned: Spanned,
}

/// `request` with its body read (when small and announced), and what a refusal's span needs of
/// it; `None` when traces are off (nothing read). The body that does not arrive whole is
/// answered `400` here, as the fast path would.
pub(super) async fn keep_request(request: Request) -> Result<(Request, Option<KeptRequest>), Response> {
    if !telemetry::on() || request.method() != Method::POST {
        return Ok((request, None));
    }
    let spanned = Spanned::default();
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(spanned.clone());
    let length = parts.headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let (body, kept) = match length {
        Some(length) if length <= MAX_KEPT => match axum::body::to_bytes(body, MAX_KEPT as usize).await {
            Ok(bytes) => (Body::from(bytes.clone()), Some(bytes)),
            Err(_) => return Err((StatusCode::BAD_REQUEST, "Bad Request: incomplete body").into_response()),
        },
        _ => (body, None),
    };
    let kept_request = KeptRequest { head: parts.headers.clone(), body: kept, spanned };
    Ok((Request::from_parts(parts, body), Some(kept_request)))
}

/// `response` as it goes back; a `400`, `415` or `503` no handler traced is first a SERVER span
/// of its own (made and ended at once), continuing the host's trace like any request's.
pub(super) async fn trace_refusal(kept_request: Option<KeptRequest>, response: Response) -> Response {
    let Some(kept_request) = kept_request else { return response };
    let status = response.status();
    let refusal = [StatusCode::BAD_REQUEST, StatusCode::UNSUPPORTED_MEDIA_TYPE, StatusCode::SERVICE_UNAVAILABLE];
    if kept_request.spanned.marked() || !refusal.contains(&status) {
        return response;
    }
    let gate = response.extensions().get::<RefusedAtGate>().map(|refused| refused.0);
    let (response, code) = error_code(response).await;
    let sent =
        kept_request.body.as_deref().and_then(|body| serde_json::from_slice::<Sent>(body).ok()).unwrap_or_default();
    let (reason, error_type) = match (gate, code) {
        (Some(reason), _) => (reason, status.as_u16().to_string()),
        (None, _) if status == StatusCode::UNSUPPORTED_MEDIA_TYPE => ("bad_body", status.as_u16().to_string()),
        (None, Some(code)) => (reason_of_code(code), code.to_string()),
        (None, None) => (reason_of_head(&kept_request.head), status.as_u16().to_string()),
    };
    let method = known_method(sent.method.as_deref());
    let params = sent.params.unwrap_or_default();
    let meta = params.meta.unwrap_or_default();
    let target = params.name.as_deref().filter(|_| method == "tools/call" || method == "prompts/get");
    traced::refused_span(Refused {
        method,
        target,
        meta: Carrier { traceparent: meta.traceparent.as_deref(), tracestate: meta.tracestate.as_deref() },
        head: &kept_request.head,
        request_id: sent.id.map(|id| id.to_string()),
        reason,
        error_type,
        status: status.as_u16(),
    });
    response
}

/// What a refusal's span reads of a request's body; anything else is skipped.
#[derive(Deserialize, Default)]
struct Sent {
    id: Option<RequestId>,
    method: Option<String>,
    params: Option<SentParams>,
}

#[derive(Deserialize, Default)]
struct SentParams {
    name: Option<String>,
    #[serde(rename = "_meta")]
    meta: Option<SentMeta>,
}

#[derive(Deserialize, Default)]
struct SentMeta {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

/// The JSON-RPC error code of a JSON answer (the response rebuilt from its bytes).
async fn error_code(response: Response) -> (Response, Option<i32>) {
    let json = response.headers().get(CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(headers::JSON.as_bytes()));
    if !json {
        return (response, None);
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_KEPT as usize).await else {
        return ((StatusCode::BAD_REQUEST, "Bad Request").into_response(), None);
    };
    let answer: Option<serde_json::Value> = serde_json::from_slice(&bytes).ok();
    let code = answer.and_then(|answer| answer["error"]["code"].as_i64()).and_then(|code| i32::try_from(code).ok());
    (Response::from_parts(parts, Body::from(bytes)), code)
}

/// Why rmcp refused, from its JSON-RPC error code.
fn reason_of_code(code: i32) -> &'static str {
    match ErrorCode(code) {
        ErrorCode::HEADER_MISMATCH => "header_mismatch",
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION => "unsupported_protocol_version",
        _ => "bad_request",
    }
}

/// Why rmcp refused with a plain-text `400`: a protocol version header it does not know, or
/// the request itself.
fn reason_of_head(head: &HeaderMap) -> &'static str {
    match headers::single(head, headers::PROTOCOL_VERSION) {
        Some(Some(version)) if !KNOWN_VERSIONS.contains(&version) => "unsupported_protocol_version",
        // Twice, or not text: rmcp refuses the header's encoding.
        None => "unsupported_protocol_version",
        _ => "bad_request",
    }
}

/// `method` when the proxy serves it (or it is a lifecycle request), else `_OTHER`.
fn known_method(method: Option<&str>) -> &'static str {
    let method = method.unwrap_or_default();
    DOWNSTREAM_METHODS.iter().chain(LIFECYCLE_METHODS).find(|known| **known == method).copied().unwrap_or("_OTHER")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(method: Option<&str>, expected: &str) {
        assert_eq!(known_method(method), expected, "{method:?}");
    }

    #[test]
    fn a_refusal_is_named_by_a_known_method_or_other() {
        check(Some("resources/read"), "resources/read");
        check(Some("initialize"), "initialize");
        check(Some("resources/frobnicate"), "_OTHER");
        check(None, "_OTHER");
    }
}
