//! `POST /mcp-proxy/forward` on the MCP listener (`[cluster]` only): what another replica still
//! forwards here ([`crate::cluster::forward`]): a subscription held on a session held here, a
//! session's own lists, a kept answer to collect. A call, prompt, read or completion on a
//! session held here, and a 2026-07-28 retry of a call parked here, come over MCP (`owned`).
//! It carries a mark made with the cluster's derived key instead of a host's token; a request
//! whose mark is wrong, stale, for another replica or seen before is answered `403` and not run
//! (counted as `refused`). Otherwise the answer is JSON lines: a session's lists; for a
//! subscription held here for the other replica, whether it is held, then each change of it, for
//! as long as the reply is open; for a kept answer, the call's upstream, then its answer.
//!
//! Invariant: nothing is done for a request whose mark does not open here.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::kept::{COLLECT_WAIT, KeptAnswer, KeptCalls};
use crate::cluster::forward::{self, Call, Line, MARK_HEADER, PASS_HEADER, PATH, RemoteError, SessionOf};
use crate::cluster::session_pass::{self, Passes};
use crate::error::ProxyError;
use crate::listener::{Peers, VerifiedPeer};
use crate::proxy::{Proxy, ReplicaHold};
use crate::tools::Ran;

/// What the route works with.
#[derive(Clone)]
struct Forwarding {
    proxy: Proxy,
    kept: Arc<KeptCalls>,
}

/// The route, when this replica is part of a cluster; calls kept for lost hosts go in `kept`.
pub(super) fn routes(proxy: &Proxy, kept: Arc<KeptCalls>) -> Option<axum::Router> {
    proxy.tools().forwarder()?;
    let route = axum::routing::post(serve).layer(DefaultBodyLimit::disable());
    Some(axum::Router::new().route(PATH, route).with_state(Forwarding { proxy: proxy.clone(), kept }))
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

async fn serve(State(Forwarding { proxy, kept }): State<Forwarding>, request: axum::extract::Request) -> Response {
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
    let of = SessionOf { principal: &request.principal, upstream: &request.upstream, host: request.session };
    match request.call {
        Call::Hold { uri } => held_reply(proxy.hold_for_replica(of, &uri).await),
        Call::Offered { from, lists } => match proxy.tools().offered_elsewhere(of, &from, lists) {
            true => (StatusCode::OK, "taken\n").into_response(),
            false => (StatusCode::NOT_FOUND, "no such upstream here\n").into_response(),
        },
        Call::Offerings => answered(proxy.tools().own_lists(of)),
        Call::Collect { key } => collected(kept.find(&key, &request.principal)),
    }
}

/// The reply to a [`Call::Offerings`]: its answer or error, one line.
fn answered(ran: Ran) -> Response {
    let line = match ran {
        Ok(answer) => Line::Answer(answer),
        Err(error) => Line::Error(RemoteError::of(&error)),
    };
    ([(header::CONTENT_TYPE, "application/x-ndjson")], encode(&line)).into_response()
}

/// The reply to a [`Call::Collect`]: the kept call's upstream at once, then its answer when
/// the call ends; `404` when none is kept here.
fn collected(kept: Option<(String, KeptAnswer)>) -> Response {
    let Some((upstream, answer)) = kept else {
        return (StatusCode::NOT_FOUND, "no such call kept here\n").into_response();
    };
    let first = futures::stream::once(async move { encode(&Line::Kept { upstream }) });
    let then =
        futures::stream::once(answer.wait(COLLECT_WAIT)).filter_map(|line| async move { line.as_ref().map(encode) });
    let lines = first.chain(then).map(Ok::<_, Infallible>);
    ([(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(lines)).into_response()
}

fn refused(proxy: &Proxy, refusal: forward::Refusal) -> Response {
    proxy.metrics().cluster_forward("refused");
    tracing::warn!(reason = refusal.label(), "cluster: a forwarded request was refused");
    (StatusCode::FORBIDDEN, format!("refused: {refusal}\n")).into_response()
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

fn encode(line: &Line) -> Bytes {
    let mut bytes = serde_json::to_vec(line).unwrap_or_else(|_| {
        let error = RemoteError::UpstreamFailed { reason: "the answer could not be written".into() };
        serde_json::to_vec(&Line::Error(error)).expect("a plain error serialises")
    });
    bytes.push(b'\n');
    Bytes::from(bytes)
}
