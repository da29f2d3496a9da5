//! W3C Trace Context both ways: a host's `traceparent`/`tracestate` (from `_meta` or the HTTP
//! headers) read into the parent of our SERVER span, and our CLIENT span's context written for
//! the upstream request. The SDK's `TraceContextPropagator` does the parsing and formatting.

use std::collections::HashMap;

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// A trace context as a request carries it: `traceparent` and `tracestate` values, if any.
#[derive(Debug, Clone, Copy, Default)]
pub struct Carrier<'a> {
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
}

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.traceparent,
            "tracestate" => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// The parent of a SERVER span: `_meta`'s context when valid, else the header's; and the
/// header's as a link when both are valid and differ.
pub(super) fn parent(meta: &Carrier<'_>, header: &Carrier<'_>) -> (Context, Option<SpanContext>) {
    let from_meta = remote(meta);
    let from_header = remote(header);
    match (from_meta, from_header) {
        (Some(meta), Some(header)) if header.trace_id() != meta.trace_id() || header.span_id() != meta.span_id() => {
            (Context::new().with_remote_span_context(meta), Some(header))
        }
        (Some(context), _) | (None, Some(context)) => (Context::new().with_remote_span_context(context), None),
        (None, None) => (Context::new(), None),
    }
}

fn remote(carrier: &Carrier<'_>) -> Option<SpanContext> {
    carrier.traceparent?;
    let context = TraceContextPropagator::new().extract(carrier);
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| span_context.clone())
}

/// `context`'s span as `traceparent` and `tracestate` values.
pub(super) fn inject(context: &Context) -> Option<(String, String)> {
    let mut written = HashMap::<String, String>::new();
    TraceContextPropagator::new().inject_context(context, &mut written);
    Some((written.remove("traceparent")?, written.remove("tracestate").unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const OTHER: &str = "00-11111111111111111111111111111111-2222222222222222-01";

    fn check(meta: Option<&str>, header: Option<&str>, parent_trace: Option<&str>, linked: bool) {
        let meta = Carrier { traceparent: meta, tracestate: None };
        let header = Carrier { traceparent: header, tracestate: None };
        let (context, link) = parent(&meta, &header);
        let span = context.span();
        let trace = span.span_context().is_valid().then(|| span.span_context().trace_id().to_string());
        assert_eq!(trace.as_deref(), parent_trace, "{meta:?} {header:?}");
        assert_eq!(link.is_some(), linked, "{meta:?} {header:?}");
    }

    #[test]
    fn meta_is_the_parent_and_a_different_header_a_link() {
        let host = Some("0af7651916cd43dd8448eb211c80319c");
        let other = Some("11111111111111111111111111111111");
        check(Some(HOST), None, host, false);
        check(None, Some(HOST), host, false);
        check(Some(HOST), Some(HOST), host, false);
        check(Some(HOST), Some(OTHER), host, true);
        check(Some("garbage"), Some(OTHER), other, false);
        check(Some("00-00000000000000000000000000000000-b7ad6b7169203331-01"), None, None, false);
        check(None, None, None, false);
    }

    #[test]
    fn a_context_is_written_as_traceparent() {
        let (context, _) = parent(&Carrier { traceparent: Some(HOST), tracestate: Some("k=v") }, &Carrier::default());
        assert_eq!(inject(&context), Some((HOST.to_string(), "k=v".to_string())));
    }
}
