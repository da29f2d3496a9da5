//! The hosts' side of traces ([`crate::telemetry`]): each request's SERVER span, made from what
//! it came with (rmcp's request context, or the fast path's parse and head), and what only the
//! proxy knows put on it — the cache's outcome, the policy's decision and its file, the
//! upstream it was routed to — and the span of a request refused before routing (a rate
//! limit's `429`; rmcp's `400` and the session gate's `503` through `turned_away.rs`), which no
//! handler ever sees. Nothing here runs when traces are off.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::HeaderMap;
use rmcp::ErrorData;
use rmcp::service::{RequestContext, RoleServer};

use super::audited::cache_label;
use super::{ProxyServer, session_header};
use crate::audit::scope::Notes;
use crate::error::ProxyError;
use crate::metrics::Transport;
use crate::proxy::ReadAnswer;
use crate::telemetry::{self, Carrier, Incoming, Span};
use crate::wire::headers;

/// In a request's extensions while traces are on: set once a handler (or the fast path) made
/// the request's SERVER span, so a refusal is not traced twice.
#[derive(Debug, Clone, Default)]
pub(super) struct Spanned(Arc<AtomicBool>);

impl Spanned {
    pub(super) fn mark(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub(super) fn marked(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl ProxyServer {
    /// The SERVER span of a request rmcp's handler serves: `target` is a tool's or prompt's
    /// name as the host gave it.
    pub(super) fn server_span(
        &self,
        method: &'static str,
        target: Option<&str>,
        context: &RequestContext<RoleServer>,
    ) -> Span {
        self.note_version(context);
        if !telemetry::on() {
            return Span::default();
        }
        let parts = context.extensions.get::<http::request::Parts>();
        if let Some(spanned) = parts.and_then(|parts| parts.extensions.get::<Spanned>()) {
            spanned.mark();
        }
        let headers = parts.map(|parts| &parts.headers);
        let version = context.protocol_version();
        let session = session_header(&context.extensions);
        let digest = || session.map(crate::audit::session_digest).unwrap_or_default();
        telemetry::server_span(Incoming {
            method,
            target,
            meta: Carrier { traceparent: context.meta.get_traceparent(), tracestate: context.meta.get_tracestate() },
            header: header_carrier(headers),
            request_id: Some(&context.id),
            version: version.as_ref().map(|version| version.as_str()),
            session: session.is_some().then_some(&digest as &dyn Fn() -> String),
            transport: match self.transport {
                Transport::Stdio => telemetry::Transport::Pipe,
                _ => telemetry::Transport::Tcp,
            },
        })
    }
}

/// An HTTP request turned away before it was routed, as its SERVER span needs it.
pub(super) struct Refused<'a> {
    pub method: &'static str,
    /// The tool or prompt name, as the host gave it.
    pub target: Option<&'a str>,
    /// `_meta`'s trace context.
    pub meta: Carrier<'a>,
    pub head: &'a HeaderMap,
    pub request_id: Option<String>,
    /// Why (`mcp_proxy.refused`), as the audit trail says it.
    pub reason: &'static str,
    /// `error.type`: the JSON-RPC error code it was answered with (the HTTP status when the
    /// answer has none).
    pub error_type: String,
    /// The HTTP status it was answered with (`http.response.status_code`).
    pub status: u16,
}

/// The SERVER span of a request refused before routing (a rate limit's `429`, rmcp's `400`, the
/// session gate's `503`), made and ended at once: the refusal is all it did. Nothing when
/// traces are off.
pub(super) fn refused_span(refused: Refused<'_>) {
    if !telemetry::on() {
        return;
    }
    let head = refused.head;
    let session = headers::single(head, headers::SESSION_ID).flatten();
    let digest = || session.map(crate::audit::session_digest).unwrap_or_default();
    let span = telemetry::server_span(Incoming {
        method: refused.method,
        target: refused.target,
        meta: refused.meta,
        header: header_carrier(Some(head)),
        request_id: refused.request_id.as_ref().map(|id| id as &dyn std::fmt::Display),
        version: headers::single(head, headers::PROTOCOL_VERSION).flatten(),
        session: session.is_some().then_some(&digest as &dyn Fn() -> String),
        transport: telemetry::Transport::Tcp,
    });
    span.note("mcp_proxy.refused", refused.reason);
    span.note("http.response.status_code", i64::from(refused.status));
    span.failed(refused.error_type);
}

/// The trace context of an HTTP request's headers.
pub(super) fn header_carrier(headers: Option<&HeaderMap>) -> Carrier<'_> {
    let value = |name: &str| headers.and_then(|headers| headers.get(name)).and_then(|v| v.to_str().ok());
    Carrier { traceparent: value("traceparent"), tracestate: value("tracestate") }
}

/// Run `request` inside `span` (its span while it runs); an error answer's JSON-RPC code is
/// the span's `error.type`.
pub(super) async fn traced<T>(span: Span, request: impl Future<Output = Result<T, ErrorData>>) -> Result<T, ErrorData> {
    let answer = span.attach(request).await;
    if let Err(error) = &answer {
        span.failed(error.code.0.to_string());
    }
    answer
}

/// A read's facts on the current span: the policy's decision, the upstream, the cache's
/// outcome, what is left of the entry's lifetime when it was kept, and (opted in, and only for
/// a read that was answered) its URI.
pub(super) fn note_read(uri: &str, answer: &Result<ReadAnswer, ProxyError>, notes: &Notes) {
    let span = Span::current();
    if !span.is_recorded() {
        return;
    }
    note_decision(&span, notes);
    if let Ok(ReadAnswer::Result { outcome, kept_for, .. }) = answer {
        span.note("mcp_proxy.cache.outcome", cache_label(*outcome));
        if !kept_for.is_zero() {
            span.note("mcp_proxy.cache.remaining_s", kept_for.as_secs_f64());
        }
        span.note_uri(uri);
    }
}

/// The policy's decision of a request (denied when any part of it was), the deciding file, and
/// the upstream it was routed to, on the current span.
pub(super) fn note_decision(span: &Span, notes: &Notes) {
    let denied = !notes.denials.is_empty();
    if denied || notes.upstream.is_some() || notes.policy_file.is_some() {
        span.note("mcp_proxy.policy.decision", if denied { "denied" } else { "allowed" });
    }
    if let Some(file) = &notes.policy_file {
        span.note("mcp_proxy.policy.file", file.clone());
    }
    if let Some(upstream) = &notes.upstream {
        span.note("mcp_proxy.upstream", upstream.clone());
    }
}
