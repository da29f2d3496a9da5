//! The upstream side of traces ([`crate::telemetry`]): a request's CLIENT span (made by
//! `Connection::client_span`, a child of the host request's SERVER span current on the task)
//! written into what goes upstream (`_meta`'s `traceparent`/`tracestate`). Nothing here runs
//! when traces are off.

use rmcp::model::RequestMetaObject;

use crate::telemetry::Span;

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
