//! The upstream side of traces ([`crate::telemetry`]): a request's CLIENT span (made by
//! `Connection::client_span`, a child of the host request's SERVER span current on the task)
//! written into what goes upstream (`_meta`'s `traceparent`/`tracestate`). Nothing here runs
//! when traces are off.

use rmcp::model::RequestMetaObject;

use crate::error::ProxyError;
use crate::telemetry::Span;

/// A failed request on its CLIENT span: `error.type`, and, when the failure broke its
/// connection (the supervisor reconnects), an event saying so.
pub(crate) fn note_failure(span: &Span, error: &ProxyError) {
    span.failed(error.kind().to_string());
    if matches!(error, ProxyError::UpstreamDown { .. }) {
        span.reconnecting();
    }
}

/// `meta` with `span`'s context added (`traceparent`, and `tracestate` when it has one); `meta`
/// unchanged when there is no span.
pub(crate) fn with_trace(meta: Option<RequestMetaObject>, span: &Span) -> Option<RequestMetaObject> {
    let Some((traceparent, tracestate)) = span.injected() else { return meta };
    let mut meta = meta.unwrap_or_default();
    meta.set_traceparent(traceparent);
    if !tracestate.is_empty() {
        meta.set_tracestate(tracestate);
    }
    Some(meta)
}
