//! The upstream side of traces ([`crate::telemetry`]): a request's CLIENT span, child of the
//! host request's SERVER span current on the task, and its context written into what goes
//! upstream (`_meta`'s `traceparent`/`tracestate`). Nothing here runs when traces are off.

use rmcp::model::RequestMetaObject;

use super::Upstream;
use crate::config::UpstreamTransport;
use crate::error::ProxyError;
use crate::telemetry::{self, Outgoing, Span, Transport};

impl Upstream {
    /// The CLIENT span of a `method` request to this upstream (`target`: the upstream's own tool
    /// or prompt name); nothing when traces are off or no host request's span is current.
    pub(crate) fn client_span(&self, method: &'static str, target: Option<&str>) -> Span {
        if !telemetry::on() {
            return Span::default();
        }
        let url = match &self.config().transport {
            UpstreamTransport::Http { url, .. } => url.parse::<http::Uri>().ok(),
            _ => None,
        };
        let server = url.as_ref().and_then(|url| {
            let port = url.port_u16().unwrap_or(if url.scheme_str() == Some("https") { 443 } else { 80 });
            Some((url.host()?, port))
        });
        let transport = if url.is_some() { Transport::Tcp } else { Transport::Pipe };
        telemetry::client_span(Outgoing { method, target, upstream: self.name(), server, transport })
    }
}

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
