//! The upstream side of traces ([`crate::telemetry`]): a request's CLIENT span, child of the
//! host request's SERVER span current on the task, and its context written into what goes
//! upstream (`_meta`'s `traceparent`/`tracestate`). Nothing here runs when traces are off; the
//! protocol version and transport the conventions' histograms count a request under are here too.

use rmcp::model::RequestMetaObject;

use super::{Link, Upstream};
use crate::config::UpstreamTransport;
use crate::error::ProxyError;
use crate::metrics::{self, Hop};
use crate::protocol::{Era, MODERN_VERSION};
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

impl Upstream {
    /// The protocol version its connection negotiated (`other` while there is none) and its
    /// transport (`pipe` for a child or the folder server, `tcp` for HTTP), for the metrics.
    pub(crate) fn hop(&self) -> Hop {
        let link = self.inner.link.lock().expect("link lock");
        self.hop_over(link.as_ref())
    }

    /// [`Upstream::hop`] over `link` (a connection being set up, not yet the current one).
    pub(crate) fn hop_over(&self, link: Option<&Link>) -> Hop {
        let transport = match &self.config().transport {
            UpstreamTransport::Http { .. } => metrics::Transport::Http,
            _ => metrics::Transport::Stdio,
        };
        let Some(link) = link else { return Hop::new(None, transport) };
        match (link.era, link.peer.peer_info()) {
            (Era::Modern, _) => Hop::new(Some(MODERN_VERSION), transport),
            (Era::Legacy, info) => Hop::new(info.as_ref().map(|info| info.protocol_version.as_str()), transport),
        }
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
