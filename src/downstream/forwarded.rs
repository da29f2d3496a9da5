//! `POST /mcp-proxy/forward` on the MCP listener (`[cluster]` only): a request another replica
//! forwards here because this replica holds the principal's upstream session
//! ([`crate::cluster::forward`]). It carries a mark made with the cluster's derived key instead
//! of a host's token; a request whose mark is wrong, stale, for another replica or seen before
//! is answered `403` and not run (counted as `refused`). Otherwise the answer is JSON lines: the
//! call's progress as it comes, then its answer or error; for a subscription held here for the
//! other replica, whether it is held, then each change of it, for as long as the reply is open.
//!
//! Invariant: every progress step is written before the answer; the host that asked is the
//! forwarding replica's, so the call ends (upstream: cancelled) when that replica goes away.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use rmcp::model::ProgressNotificationParam;
use tokio::sync::mpsc;

use crate::cluster::forward::{self, Call, Forwarded, Line, MARK_HEADER, PATH, RemoteError};
use crate::error::ProxyError;
use crate::host::ProgressOutlet;
use crate::proxy::{Proxy, ReplicaHold};
use crate::tools::Ran;

/// Progress steps queued for the forwarding replica; beyond this they are dropped.
const PROGRESS_QUEUE: usize = 256;

/// The route, when this replica is part of a cluster.
pub(super) fn routes(proxy: &Proxy) -> Option<axum::Router> {
    proxy.tools().forwarder()?;
    let route = axum::routing::post(serve).layer(DefaultBodyLimit::max(forward::MAX_BODY));
    Some(axum::Router::new().route(PATH, route).with_state(proxy.clone()))
}

async fn serve(State(proxy): State<Proxy>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(forwarder) = proxy.tools().forwarder() else { return StatusCode::NOT_FOUND.into_response() };
    let mark = headers.get(MARK_HEADER).and_then(|value| value.to_str().ok());
    let request = match forwarder.open(mark, &body) {
        Ok(request) => request,
        Err(refusal) => {
            proxy.metrics().cluster_forward("refused");
            tracing::warn!(reason = refusal.label(), "cluster: a forwarded request was refused");
            return (StatusCode::FORBIDDEN, format!("refused: {refusal}\n")).into_response();
        }
    };
    if let Call::Hold { uri } = &request.call {
        let held = proxy.hold_for_replica(&request.principal, &request.upstream, uri).await;
        return held_reply(held);
    }
    let (steps_in, steps) = mpsc::channel(PROGRESS_QUEUE);
    let run = Run { call: Box::pin(run(proxy, request, steps_in)), steps, answer: None, done: false };
    let lines = futures::stream::unfold(run, next_line);
    ([(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(lines)).into_response()
}

/// The reply to a [`Call::Hold`]: whether it is held, then each change, with a line every
/// [`forward::ALIVE_EVERY`]; the hold goes when the reply is dropped (the other replica let go,
/// or went away and a write failed).
fn held_reply(held: Result<ReplicaHold, ProxyError>) -> Response {
    let lines: Pin<Box<dyn futures::Stream<Item = Result<Bytes, Infallible>> + Send>> = match held {
        Err(error) => Box::pin(futures::stream::once(async move { Ok(encode(&Line::Error(RemoteError::of(&error)))) })),
        Ok(hold) => {
            let first = encode(&Line::Held { acknowledged: hold.acknowledged });
            let mut alive = tokio::time::interval(forward::ALIVE_EVERY);
            alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            alive.reset();
            let changes = futures::stream::unfold((hold, alive), |(mut hold, mut alive)| async move {
                let line = tokio::select! {
                    change = hold.changes.recv() => Line::Updated { uri: change? },
                    _ = alive.tick() => Line::Alive,
                };
                Some((Ok(encode(&line)), (hold, alive)))
            });
            Box::pin(futures::stream::once(async move { Ok(first) }).chain(changes))
        }
    };
    ([(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(lines)).into_response()
}

/// The forwarded request on this replica's session of the principal.
async fn run(proxy: Proxy, request: Forwarded, steps: mpsc::Sender<ProgressNotificationParam>) -> Ran {
    let Forwarded { principal, upstream, call, .. } = request;
    tracing::debug!(upstream, principal, "cluster: running a forwarded request");
    let progress = matches!(call, Call::Tool(_)).then(|| Arc::new(Steps(steps)) as Arc<dyn ProgressOutlet>);
    proxy.tools().run_forwarded(&principal, &upstream, call, progress).await
}

/// The answer being written: progress until the call is done, then what is left of it, then
/// the answer.
struct Run {
    call: Pin<Box<dyn Future<Output = Ran> + Send>>,
    steps: mpsc::Receiver<ProgressNotificationParam>,
    answer: Option<Line>,
    done: bool,
}

enum Next {
    Step(ProgressNotificationParam),
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
            Next::Step(step) => return Some((Ok(encode(&Line::Progress(step))), run)),
            Next::Ran(Ok(answer)) => run.answer = Some(Line::Answer(answer)),
            Next::Ran(Err(error)) => run.answer = Some(Line::Error(RemoteError::of(&error))),
        }
    }
    if let Ok(step) = run.steps.try_recv() {
        return Some((Ok(encode(&Line::Progress(step))), run));
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
struct Steps(mpsc::Sender<ProgressNotificationParam>);

impl ProgressOutlet for Steps {
    fn send(&self, progress: ProgressNotificationParam) {
        if self.0.try_send(progress).is_err() {
            tracing::debug!("cluster: a forwarded call's progress step was dropped (queue full)");
        }
    }
}
