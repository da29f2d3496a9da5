//! `POST /mcp-proxy/forward` on the MCP listener (`[cluster]` only): what another replica still
//! forwards here ([`crate::cluster::forward`]): a 2026-07-28 retry of a call parked here, a
//! host's answer. A call, prompt, read or completion on a session held here, a subscription on
//! it and its own lists come over MCP (`owned`), and are refused on this route. It carries a
//! mark made with the cluster's derived key instead
//! of a host's token; a request whose mark is wrong, stale, for another replica or seen before
//! is answered `403` and not run (counted as `refused`). Otherwise the answer is JSON lines: the
//! call's progress, the upstream's log messages and its questions to the host as they come
//! (the host's answer comes back as another forwarded request), then its answer or error.
//!
//! With traces on, a call, prompt, read or completion run here is a SERVER span continuing the
//! forwarding replica's hop (its `traceparent` header), parent of the CLIENT span to the
//! upstream.
//! The request runs with the JWT its host's request came with (sealed in it): the upstream
//! session sends it with a token exchanged for that JWT.
//!
//! Invariant: every progress step is written before the answer; the host that asked is the
//! forwarding replica's, so a call ends (upstream: cancelled) when that replica goes away.

#![allow(deprecated)] // Sampling and logging are deprecated by SEP-2577 but still in the 2025 era.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use rmcp::ErrorData;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam,
};
use tokio::sync::mpsc;

use super::traced::header_carrier;
use crate::cluster::forward::{
    self, Ask, Call, Forwarded, ForwardedHost, Forwarder, Line, MARK_HEADER, PASS_HEADER, PATH, RemoteError, Reply,
    SessionOf,
};
use crate::cluster::session_pass::{self, Passes};
use crate::host::{HostRelay, ProgressOutlet, SubjectToken};
use crate::listener::{Peers, VerifiedPeer};
use crate::proxy::Proxy;
use crate::telemetry::{self, Carrier, Incoming, Span};
use crate::tools::Ran;

/// Progress steps queued for the forwarding replica; beyond this they are dropped.
const PROGRESS_QUEUE: usize = 256;

/// The route, when this replica is part of a cluster.
pub(super) fn routes(proxy: &Proxy) -> Option<axum::Router> {
    proxy.tools().forwarder()?;
    let route = axum::routing::post(serve).layer(DefaultBodyLimit::disable());
    Some(axum::Router::new().route(PATH, route).with_state(proxy.clone()))
}

/// How the MCP listener tells other replicas' connections from hosts' (when this replica is
/// part of a cluster): a request to the route or to the session endpoint (`owned`, whose
/// `passes` are given) with a right pass on its head, or with `peer_tls` a TLS connection whose
/// certificate the cluster's CA issued.
pub(super) fn peers(proxy: &Proxy, passes: Option<Passes>) -> Option<Peers> {
    let forwarder = proxy.tools().forwarder()?.clone();
    let tls = proxy.cluster().and_then(|cluster| cluster.peer_tls()).map(crate::cluster::peer_tls::acceptor);
    let is_peer = move |uri: &http::Uri, headers: &http::HeaderMap| {
        if uri.path() == session_pass::PATH {
            let pass = headers.get(session_pass::HEADER).and_then(|value| value.to_str().ok());
            return passes.as_ref().is_some_and(|passes| passes.admits(pass).is_ok());
        }
        let pass = headers.get(PASS_HEADER).and_then(|value| value.to_str().ok());
        uri.path() == PATH && forwarder.admits(pass).is_ok()
    };
    Some(Peers { is_peer: Arc::new(is_peer), tls })
}

async fn serve(State(proxy): State<Proxy>, request: axum::extract::Request) -> Response {
    let Some(forwarder) = proxy.tools().forwarder() else { return StatusCode::NOT_FOUND.into_response() };
    let (head, body) = request.into_parts();
    // With `peer_tls`, only a replica whose certificate the cluster's CA issued is heard.
    let tls_required = proxy.cluster().is_some_and(|cluster| cluster.peer_tls().is_some());
    if tls_required && head.extensions.get::<VerifiedPeer>().is_none() {
        return refused(&proxy, forward::Refusal::Unverified);
    }
    // The pass is checked on the head: without the cluster's key, not a byte of the body is read.
    let pass = head.headers.get(PASS_HEADER).and_then(|value| value.to_str().ok());
    if let Err(refusal) = forwarder.admits(pass) {
        return refused(&proxy, refusal);
    }
    let timeout = proxy.config().server.body_read_timeout;
    let body = match tokio::time::timeout(timeout, axum::body::to_bytes(body, forward::MAX_BODY)).await {
        Ok(Ok(body)) => body,
        Ok(Err(_)) => return (StatusCode::BAD_REQUEST, "Bad Request: incomplete or too large body\n").into_response(),
        Err(_) => {
            proxy.metrics().request_body_cut("body_timeout");
            tracing::warn!("cluster: a forwarded request's body did not arrive within server.body_read_timeout");
            return (StatusCode::REQUEST_TIMEOUT, "Request Timeout: the body did not arrive in time\n").into_response();
        }
    };
    let mark = head.headers.get(MARK_HEADER).and_then(|value| value.to_str().ok());
    let request = match forwarder.open(mark, &body) {
        Ok(request) => request,
        Err(refusal) => return refused(&proxy, refusal),
    };
    match request.call {
        Call::Reply { id, reply } => {
            return match forwarder.replied(&id, reply) {
                true => (StatusCode::OK, "taken\n").into_response(),
                false => (StatusCode::NOT_FOUND, "no such question waits\n").into_response(),
            };
        }
        // A request on a session held here comes over MCP (`owned`), not this way.
        ref call if !crate::tools::Tools::takes_forwarded(call) => return refused(&proxy, forward::Refusal::Malformed),
        _ => {}
    }
    let span = forwarded_span(&head.headers, &request);
    let (steps_in, steps) = mpsc::channel(PROGRESS_QUEUE);
    let call: BoxFuture<'static, Ran> = Box::pin(traced(span, run(proxy, request, steps_in)));
    let run = Run { call, steps, answer: None, done: false };
    let lines = futures::stream::unfold(run, next_line);
    ([(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(lines)).into_response()
}

fn refused(proxy: &Proxy, refusal: forward::Refusal) -> Response {
    proxy.metrics().cluster_forward("refused");
    tracing::warn!(reason = refusal.label(), "cluster: a forwarded request was refused");
    (StatusCode::FORBIDDEN, format!("refused: {refusal}\n")).into_response()
}

/// The forwarded request on this replica's session of the principal.
async fn run(proxy: Proxy, request: Forwarded, lines: mpsc::Sender<Line>) -> Ran {
    let forwarder = proxy.tools().forwarder().cloned();
    let subject = forwarder.as_ref().and_then(|forwarder| forwarder.subject_of(&request));
    let Forwarded { principal, upstream, call, host, session, .. } = request;
    tracing::debug!(upstream, principal, "cluster: running a forwarded request");
    // As if presented here: the principal's session opened for it has a JWT to connect with.
    if let Some(subject) = &subject {
        proxy.subjects().record(&principal, subject.token(), subject.until());
    }
    let progress = matches!(call, Call::Tool(_)).then(|| Arc::new(Steps(lines.clone())) as Arc<dyn ProgressOutlet>);
    let presented = host.as_ref().map(|host| host.presented.clone()).unwrap_or_default();
    let relay = host.zip(forwarder).map(|(host, forwarder)| {
        let principal = principal.as_str().into();
        Arc::new(ForwardRelay { lines, forwarder, host, principal, subject: subject.clone() }) as Arc<dyn HostRelay>
    });
    let of = SessionOf { principal: &principal, upstream: &upstream, host: session };
    proxy.tools().run_forwarded(of, call, progress, (relay, &presented), subject.as_ref()).await
}

/// The SERVER span of a forwarded call, continuing the forwarding replica's hop from the
/// request's `traceparent` header (nothing when traces are off).
fn forwarded_span(headers: &axum::http::HeaderMap, request: &Forwarded) -> Span {
    if !telemetry::on() {
        return Span::default();
    }
    let Some((method, target)) = request.call.traced() else { return Span::default() };
    let span = telemetry::server_span(Incoming {
        method,
        target,
        meta: Carrier::default(),
        header: header_carrier(Some(headers)),
        request_id: None,
        version: None,
        session: None,
        transport: telemetry::Transport::Tcp,
    });
    span.note("mcp_proxy.upstream", request.upstream.clone());
    span
}

/// Run `call` inside `span`; an error is the span's `error.type`.
async fn traced(span: Span, call: impl Future<Output = Ran>) -> Ran {
    let ran = span.attach(call).await;
    if let Err(error) = &ran {
        span.failed(error.kind().to_string());
    }
    ran
}

/// The answer being written: progress until the call is done, then what is left of it, then
/// the answer.
struct Run {
    call: BoxFuture<'static, Ran>,
    /// Progress, log messages and questions for the host, in the order they came.
    steps: mpsc::Receiver<Line>,
    answer: Option<Line>,
    done: bool,
}

enum Next {
    Step(Line),
    Ran(Ran),
}

async fn next_line(mut run: Run) -> Option<(Result<Bytes, Infallible>, Run)> {
    if run.done {
        return None;
    }
    if run.answer.is_none() {
        let next = tokio::select! {
            biased;
            Some(step) = run.steps.recv() => Next::Step(step),
            ran = &mut run.call => Next::Ran(ran),
        };
        match next {
            Next::Step(step) => return Some((Ok(encode(&step)), run)),
            Next::Ran(Ok(answer)) => run.answer = Some(Line::Answer(answer)),
            Next::Ran(Err(error)) => run.answer = Some(Line::Error(RemoteError::of(&error))),
        }
    }
    if let Ok(step) = run.steps.try_recv() {
        return Some((Ok(encode(&step)), run));
    }
    run.done = true;
    let answer = run.answer.take()?;
    Some((Ok(encode(&answer)), run))
}

fn encode(line: &Line) -> Bytes {
    let mut bytes = serde_json::to_vec(line).unwrap_or_else(|_| {
        let error = RemoteError::UpstreamFailed { reason: "the answer could not be written".into() };
        serde_json::to_vec(&Line::Error(error)).expect("a plain error serialises")
    });
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// A forwarded call's progress, queued for the forwarding replica (never waits).
struct Steps(mpsc::Sender<Line>);

impl ProgressOutlet for Steps {
    fn send(&self, progress: ProgressNotificationParam) {
        if self.0.try_send(Line::Progress(progress)).is_err() {
            tracing::debug!("cluster: a forwarded call's progress step was dropped (queue full)");
        }
    }
}

/// The host of a forwarded call, on the owner: what the upstream sends it is written to the
/// reply for the forwarding replica, which relays it to the host and posts its answers back.
struct ForwardRelay {
    lines: mpsc::Sender<Line>,
    forwarder: Forwarder,
    host: ForwardedHost,
    principal: Arc<str>,
    /// The JWT the call's request came with.
    subject: Option<SubjectToken>,
}

impl ForwardRelay {
    /// Ask the host, unless it did not declare what is asked.
    fn ask(&self, declared: bool, what: &str, ask: Ask) -> BoxFuture<'static, Result<Reply, ErrorData>> {
        if !declared {
            let refused = ErrorData::invalid_request(format!("the host did not declare {what}"), None);
            return Box::pin(async move { Err(refused) });
        }
        let (forwarder, lines) = (self.forwarder.clone(), self.lines.clone());
        Box::pin(async move { forwarder.ask(&lines, ask).await })
    }
}

impl HostRelay for ForwardRelay {
    fn sample(&self, params: CreateMessageRequestParams) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        let asked = self.ask(self.host.sampling, "sampling", Ask::Sample(params));
        Box::pin(async move {
            match asked.await? {
                Reply::Sampled(result) => Ok(result),
                Reply::Refused(error) => Err(error),
                Reply::Elicited(_) => Err(ErrorData::internal_error("the host answered another question", None)),
            }
        })
    }

    fn elicit(&self, params: ElicitRequestParams) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
        let asked = self.ask(self.host.elicitation, "elicitation", Ask::Elicit(params));
        Box::pin(async move {
            match asked.await? {
                Reply::Elicited(result) => Ok(result),
                Reply::Refused(error) => Err(error),
                Reply::Sampled(_) => Err(ErrorData::internal_error("the host answered another question", None)),
            }
        })
    }

    fn log(&self, params: LoggingMessageNotificationParam) {
        // The forwarding replica's relay filters by the host's level again.
        if self.lines.try_send(Line::Log(params)).is_err() {
            tracing::debug!("cluster: a forwarded call's log message was dropped (queue full)");
        }
    }

    fn log_level(&self) -> Option<LoggingLevel> {
        self.host.log_level
    }

    fn takes_input_required(&self) -> bool {
        self.host.takes_input_required
    }

    fn declares_sampling(&self) -> bool {
        self.host.sampling
    }

    fn declares_elicitation(&self) -> bool {
        self.host.elicitation
    }

    fn tenant(&self) -> Option<Arc<str>> {
        Some(self.principal.clone())
    }

    fn subject_token(&self) -> Option<SubjectToken> {
        self.subject.clone()
    }
}
