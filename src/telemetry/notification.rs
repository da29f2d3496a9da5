//! The spans of an upstream's `notifications/resources/updated` and its fan-out: one CONSUMER
//! span per `updated` the proxy hears (the root of a trace of its own: a one-way message it
//! consumes and acts on, answering nobody), and one PRODUCER span per host the proxy queues
//! the notification for, child of it, so one trace shows the whole fan-out.
//!
//! Invariant: a delivery span exists only for a subscriber whose principal may see the URI (the
//! fan-out decides before it makes one), and names the URI only when the operator opted in.

use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};

use super::{Span, TRACING};

/// `notifications/resources/updated`, the span name of the notification and of each delivery.
const UPDATED: &str = "notifications/resources/updated";

/// The subscriber a delivery is queued for.
#[derive(Debug, Clone, Copy)]
pub struct Subscriber {
    /// The proxy's number for the subscriber (`mcp_proxy.holder`): a counter of this process, never
    /// a session id.
    pub id: u64,
    /// `session` (a 2025 session) or `listen_stream` (a 2026-07-28 listen stream).
    pub kind: &'static str,
}

/// The CONSUMER span of an `updated` `upstream` sent (nothing when traces are off).
pub fn updated_span(upstream: &str) -> Span {
    let Some(tracing) = TRACING.get() else { return Span(None) };
    let builder = tracing.tracer.span_builder(UPDATED).with_kind(SpanKind::Consumer);
    let root = Context::new();
    let mut span = tracing.tracer.build_with_context(builder, &root);
    if span.is_recording() {
        span.set_attributes([
            KeyValue::new("mcp.method.name", UPDATED),
            KeyValue::new("mcp_proxy.upstream", upstream.to_string()),
        ]);
    }
    Span(Some(root.with_span(span)))
}

impl Span {
    /// The PRODUCER span of queueing this `updated` of `uri` for `subscriber` (`queued`: whether
    /// its queue took it; not: full, or the host gone), child of this span and ended at once;
    /// nothing when there is no span or it is not recorded. The send itself happens on the host's own outlet task.
    pub fn delivered(&self, subscriber: Subscriber, uri: &str, queued: bool) {
        let (Some(parent), Some(tracing)) = (self.recorded(), TRACING.get()) else { return };
        let mut attributes = vec![
            KeyValue::new("mcp.method.name", UPDATED),
            KeyValue::new("mcp_proxy.holder", i64::try_from(subscriber.id).unwrap_or(i64::MAX)),
            KeyValue::new("mcp_proxy.holder.kind", subscriber.kind),
            KeyValue::new("mcp_proxy.delivery", if queued { "queued" } else { "dropped" }),
        ];
        if tracing.resource_uris {
            attributes.push(KeyValue::new("mcp.resource.uri", uri.to_string()));
        }
        let builder = tracing.tracer.span_builder(UPDATED).with_kind(SpanKind::Producer).with_attributes(attributes);
        tracing.tracer.build_with_context(builder, parent).end();
    }
}
