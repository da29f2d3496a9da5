//! Traces: OpenTelemetry spans of the MCP semantic conventions, exported over OTLP/HTTP
//! (protobuf) to a collector, when `[telemetry]` or the standard `OTEL_*` variables name one.
//!
//! A host request is one SERVER span (`downstream` makes it with [`server_span`]), continuing
//! the host's trace from `params._meta.traceparent`/`tracestate` or, without those, the HTTP
//! `traceparent` header (both present and different: `_meta` is the parent, the header a
//! link). Each request the proxy sends an upstream for it is one CLIENT span
//! ([`client_span`]), child of the SERVER span, whose context goes upstream in the request's
//! `_meta` (and, to an HTTP upstream, its headers). What only the proxy knows — the cache's
//! outcome, the policy's decision and its file, a rate limit or cap refusal — is set on the
//! SERVER span by the hosts' side ([`Span::note`]); a CLIENT span whose request broke its
//! upstream connection, or was sent again, has an event saying so ([`Span::reconnecting`],
//! [`Span::retried`]). An upstream's `updated` is a CONSUMER span of its own trace, each host it
//! is queued for a PRODUCER span under it ([`updated_span`], [`Span::delivered`]).
//!
//! The sampler decides as a span is made, before any attribute is built: a span it leaves out
//! keeps only its context (so "not sampled" goes on upstream), and nothing is noted on it, no
//! event made and no log span opened for it.
//!
//! The exporter is the process's one (`install`, once, from `main`), like the crypto provider:
//! [`on`] is one atomic load, and everything here is a no-op when it is false — no span, no
//! context attached to a future, no socket towards any collector.
//!
//! Invariant: no span carries a token, a content, a raw session id (only the digest the audit
//! trail uses) or, unless the operator opted in (`resource_uris`), a URI; a denied request's span
//! never carries its URI.

mod export;
mod notification;
mod propagation;

use std::future::Future;
use std::sync::OnceLock;

use futures::future::Either;
use opentelemetry::trace::{FutureExt, Span as _, SpanKind, TraceContextExt, Tracer, WithContext};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Instrument;
use tracing::instrument::Instrumented;

pub use self::export::InstallError;
pub use self::notification::{Subscriber, updated_span};
pub use self::propagation::Carrier;
use crate::config::TelemetryConfig;

/// The installed exporter; none: traces are off.
static TRACING: OnceLock<Tracing> = OnceLock::new();

struct Tracing {
    tracer: SdkTracer,
    provider: SdkTracerProvider,
    resource_uris: bool,
}

/// Whether traces are on (an exporter is installed). One atomic load.
#[inline]
pub fn on() -> bool {
    TRACING.get().is_some()
}

/// Install the exporter `config` describes, once for the process (from `main`, inside the
/// tokio runtime its exports run on). Off (`Ok(None)`): nothing is installed, no socket opened.
/// The guard flushes what is left when the process ends ([`Installed::shutdown`]).
pub fn install(config: &TelemetryConfig) -> Result<Option<Installed>, InstallError> {
    let Some(endpoint) = &config.endpoint else { return Ok(None) };
    let provider = export::provider(config, endpoint)?;
    let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, env!("CARGO_PKG_NAME"));
    let tracing = Tracing { tracer, provider, resource_uris: config.resource_uris };
    TRACING.set(tracing).map_err(|_| InstallError::Twice)?;
    Ok(Some(Installed(())))
}

/// The installed exporter, flushed on [`Installed::shutdown`].
#[must_use]
pub struct Installed(());

impl Installed {
    /// Export the spans still queued and stop; at most the exporter's timeout.
    pub async fn shutdown(self) {
        if let Some(tracing) = TRACING.get() {
            let provider = tracing.provider.clone();
            let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        }
    }
}

/// The transport a request came on or goes over (`network.transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// stdio: `pipe`.
    Pipe,
    /// HTTP: `tcp`.
    Tcp,
}

impl Transport {
    fn label(self) -> &'static str {
        match self {
            Transport::Pipe => "pipe",
            Transport::Tcp => "tcp",
        }
    }
}

/// A host request, as its SERVER span needs it. What only a recorded span needs is computed
/// only for one (the sampler decides first).
pub struct Incoming<'a> {
    /// `mcp.method.name`.
    pub method: &'static str,
    /// The tool or prompt name (the span's name's target), as the host named it.
    pub target: Option<&'a str>,
    /// `_meta`'s trace context.
    pub meta: Carrier<'a>,
    /// The HTTP headers' trace context.
    pub header: Carrier<'a>,
    pub request_id: Option<&'a dyn std::fmt::Display>,
    /// `mcp.protocol.version`.
    pub version: Option<&'a str>,
    /// A digest of the 2025 session's id (computed only for a recorded span).
    pub session: Option<&'a dyn Fn() -> String>,
    pub transport: Transport,
}

/// One span of ours (SERVER or CLIENT), or nothing when traces are off. Dropping it ends it.
/// A span the sampler left out is kept as a context only (its trace and "not sampled" go on
/// upstream): no attribute, event or log span is made for it.
#[derive(Default)]
pub struct Span(Option<Context>);

/// The SERVER span of a host request (nothing when traces are off). The sampler decides before
/// any attribute is built: a request it leaves out costs its context alone.
pub fn server_span(incoming: Incoming<'_>) -> Span {
    let Some(tracing) = TRACING.get() else { return Span(None) };
    let (parent, link) = propagation::parent(&incoming.meta, &incoming.header);
    let mut builder = tracing.tracer.span_builder(incoming.method).with_kind(SpanKind::Server);
    if let Some(link) = link {
        builder = builder.with_links(vec![opentelemetry::trace::Link::with_context(link)]);
    }
    let mut span = tracing.tracer.build_with_context(builder, &parent);
    if span.is_recording() {
        if named_method(incoming.method) && incoming.target.is_some() {
            span.update_name(span_name(incoming.method, incoming.target));
        }
        span.set_attributes(server_attributes(&incoming));
    }
    Span(Some(parent.with_span(span)))
}

fn server_attributes(incoming: &Incoming<'_>) -> Vec<KeyValue> {
    let mut attributes = Vec::with_capacity(8);
    attributes.push(KeyValue::new("mcp.method.name", incoming.method));
    attributes.push(KeyValue::new("network.transport", incoming.transport.label()));
    if let Some(id) = incoming.request_id {
        attributes.push(KeyValue::new("jsonrpc.request.id", id.to_string()));
    }
    if let Some(version) = incoming.version {
        attributes.push(KeyValue::new("mcp.protocol.version", version.to_string()));
    }
    if let Some(session) = incoming.session {
        attributes.push(KeyValue::new("mcp.session.id", session()));
    }
    target_attribute(incoming.method, incoming.target, &mut attributes);
    attributes
}

/// An upstream request, as its CLIENT span needs it.
pub struct Outgoing<'a> {
    pub method: &'static str,
    /// The tool or prompt name, the upstream's own.
    pub target: Option<&'a str>,
    /// The upstream's name (`mcp_proxy.upstream`).
    pub upstream: &'a str,
    /// `server.address`, `server.port` of an HTTP upstream.
    pub server: Option<(&'a str, u16)>,
    pub transport: Transport,
}

/// The CLIENT span of a request to an upstream, child of the span current on this task; nothing
/// when traces are off or no span of a host request is current (the proxy's own requests:
/// catalog loads, health checks, subscriptions). Attributes only when the sampler keeps it.
pub fn client_span(outgoing: Outgoing<'_>) -> Span {
    let Some(tracing) = TRACING.get() else { return Span(None) };
    let parent = Context::current();
    if !parent.has_active_span() {
        return Span(None);
    }
    let builder = tracing.tracer.span_builder(outgoing.method).with_kind(SpanKind::Client);
    let mut span = tracing.tracer.build_with_context(builder, &parent);
    if span.is_recording() {
        if named_method(outgoing.method) && outgoing.target.is_some() {
            span.update_name(span_name(outgoing.method, outgoing.target));
        }
        span.set_attributes(client_attributes(&outgoing));
    }
    Span(Some(parent.with_span(span)))
}

fn client_attributes(outgoing: &Outgoing<'_>) -> Vec<KeyValue> {
    let mut attributes = Vec::with_capacity(6);
    attributes.push(KeyValue::new("mcp.method.name", outgoing.method));
    attributes.push(KeyValue::new("network.transport", outgoing.transport.label()));
    attributes.push(KeyValue::new("mcp_proxy.upstream", outgoing.upstream.to_string()));
    if let Some((address, port)) = outgoing.server {
        attributes.push(KeyValue::new("server.address", address.to_string()));
        attributes.push(KeyValue::new("server.port", i64::from(port)));
    }
    target_attribute(outgoing.method, outgoing.target, &mut attributes);
    attributes
}

impl Span {
    /// The span current on this task (a host request's, while its future runs attached to
    /// it); nothing when traces are off or none is.
    pub fn current() -> Span {
        if !on() {
            return Span(None);
        }
        let context = Context::current();
        Span(context.has_active_span().then_some(context))
    }

    /// Whether there is a span that is recorded (traces are on, it was made, and the sampler
    /// kept it): what is worth noting on it.
    pub fn is_recorded(&self) -> bool {
        self.recorded().is_some()
    }

    fn recorded(&self) -> Option<&Context> {
        self.0.as_ref().filter(|context| context.span().span_context().is_sampled())
    }

    /// `future` with this span current on its task (so the CLIENT spans of its upstream
    /// requests are its children) and, when it is recorded, its ids on every log line it writes
    /// (a `trace` span of `tracing` with `trace_id` and `span_id`); `future` itself when there
    /// is no span.
    pub fn attach<F: Future>(&self, future: F) -> Either<Instrumented<WithContext<F>>, Either<WithContext<F>, F>> {
        match (&self.0, self.recorded()) {
            (_, Some(context)) => {
                let (trace_id, span_id) = ids_of(context).unwrap_or_default();
                let logged = tracing::info_span!("trace", trace_id, span_id);
                Either::Left(future.with_context(context.clone()).instrument(logged))
            }
            (Some(context), None) => Either::Right(Either::Left(future.with_context(context.clone()))),
            (None, None) => Either::Right(Either::Right(future)),
        }
    }

    /// Set `key` to `value` on the span (nothing when there is none, or it is not recorded).
    pub fn note(&self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        if let Some(context) = self.recorded() {
            context.span().set_attribute(KeyValue::new(key, value));
        }
    }

    /// `mcp.resource.uri`, when the operator opted in; never for a denied request.
    pub fn note_uri(&self, uri: &str) {
        if self.is_recorded() && TRACING.get().is_some_and(|tracing| tracing.resource_uris) {
            self.note("mcp.resource.uri", uri.to_string());
        }
    }

    /// The upstream connection this CLIENT span's request went on broke under it, and the
    /// supervisor reconnects: an event `mcp_proxy.upstream.reconnect` (nothing when the span is
    /// not recorded).
    pub fn reconnecting(&self) {
        if let Some(context) = self.recorded() {
            let reason = KeyValue::new("mcp_proxy.reconnect.reason", "connection_broken");
            context.span().add_event("mcp_proxy.upstream.reconnect", vec![reason]);
        }
    }

    /// This CLIENT span's request is sent again (`reason`, a fixed phrase naming why the first
    /// attempt did not answer): an event `mcp_proxy.upstream.retry`.
    pub fn retried(&self, reason: &'static str) {
        if let Some(context) = self.recorded() {
            context.span().add_event("mcp_proxy.upstream.retry", vec![KeyValue::new("mcp_proxy.retry.reason", reason)]);
        }
    }

    /// The request failed: `error.type` (a JSON-RPC code, `tool_error`, or our error's kind)
    /// and the span's status.
    pub fn failed(&self, error_type: String) {
        if let Some(context) = self.recorded() {
            let span = context.span();
            span.set_status(opentelemetry::trace::Status::error(error_type.clone()));
            span.set_attribute(KeyValue::new("error.type", error_type));
        }
    }

    /// This span's context as `traceparent` and `tracestate` values, for the upstream request.
    pub fn injected(&self) -> Option<(String, String)> {
        self.0.as_ref().and_then(propagation::inject)
    }

    /// This span's trace and span ids (hex), for logs and audit events; none when it is not
    /// recorded (they would lead to no trace).
    pub fn ids(&self) -> Option<(String, String)> {
        self.recorded().and_then(ids_of)
    }
}

/// The trace and span ids (hex) of the span current on this task, if traces are on and one is
/// recorded.
pub fn current_ids() -> Option<(String, String)> {
    Span::current().ids()
}

fn ids_of(context: &Context) -> Option<(String, String)> {
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| (span_context.trace_id().to_string(), span_context.span_id().to_string()))
}

/// `{mcp.method.name} {target}`, the target only for a tool or a prompt.
fn span_name(method: &'static str, target: Option<&str>) -> std::borrow::Cow<'static, str> {
    match target {
        Some(target) if named_method(method) => format!("{method} {target}").into(),
        _ => method.into(),
    }
}

fn named_method(method: &str) -> bool {
    method == "tools/call" || method == "prompts/get"
}

fn target_attribute(method: &str, target: Option<&str>, attributes: &mut Vec<KeyValue>) {
    let Some(target) = target else { return };
    match method {
        "tools/call" => attributes.push(KeyValue::new("gen_ai.tool.name", target.to_string())),
        "prompts/get" => attributes.push(KeyValue::new("gen_ai.prompt.name", target.to_string())),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::span_name;

    #[test]
    fn a_span_is_named_by_its_method_and_a_tool_or_prompt() {
        assert_eq!(span_name("tools/call", Some("docs__search")), "tools/call docs__search");
        assert_eq!(span_name("prompts/get", Some("p")), "prompts/get p");
        assert_eq!(span_name("resources/read", Some("docs+file:///a")), "resources/read");
        assert_eq!(span_name("resources/list", None), "resources/list");
    }
}
