//! `[cluster]`: a 2025 host's request stream resumed on a replica that cannot replay it. Each
//! event of a request's stream names the replica serving it and the request (`ids`); a host
//! whose stream was cut (its connection dropped, or that replica died) reconnects with `GET`
//! and `Last-Event-ID` through the balancer. A replica that served the stream replays it
//! (rmcp, `call_streams`); any other one, or the same one restarted (it no longer holds the
//! session), answers here, on a stream of one event, with the request's answer or a JSON-RPC
//! error for its id. The answer of a call or prompt kept here is taken at once (or when the
//! call ends); else the replicas are asked on the session news channel who keeps it, and the
//! keeper hands it over through Redis once the call ends (`keepers`). It may be kept (`kept`):
//! - the replica that served the stream, alive, keeps the answer it wrote for the host (a
//!   while after the call, whether or not it went out on the stream): handed on as it is;
//! - a replica that ran the call for the serving one (the owner of a per-principal or per-host
//!   upstream session) keeps the upstream's answer when the serving replica went away:
//!   rewritten here for the host as that replica would have.
//!
//! When none keeps it, the error says why: the serving replica, alive, keeps no answer for it
//! (it went out on the stream, or more than 60 s ago: a serving replica keeps every such
//! answer that long after its call ended, `kept`); or the serving replica said nothing and is
//! taken for lost (dead, or restarted), or the keeper went away before the call ended, and the
//! call may or may not have run; or Redis could not be reached to ask.
//!
//! Invariant: only the principal whose session it is gets an answer (the event id holds only on
//! its session, the session's record names its principal, and a kept call is handed only to a
//! request of its principal); an answer rewritten here passes the principal's policy of now,
//! one kept by the serving replica the policy of its request (as rmcp's replay there would).

use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use rmcp::ErrorData;
use rmcp::model::{ErrorCode, JsonRpcMessage, RequestId, ServerJsonRpcMessage, ServerResult};
use serde_json::json;

use super::ids::{SessionIds, StreamEvent};
use super::keepers::{Found, Keepers};
use crate::cluster::peers::Answer;
use crate::downstream::kept::{COLLECT_WAIT, KeptCalls};
use crate::error::{ProxyError, RemoteError};
use crate::proxy::Proxy;
use crate::wire::sse;

/// What a resumption elsewhere works with; a cheap `Clone`.
#[derive(Clone)]
pub(crate) struct Resumption {
    pub proxy: Proxy,
    /// This replica's id.
    pub replica: Arc<str>,
    /// The calls this replica runs for others, kept when their host's stream is lost.
    pub kept: Arc<KeptCalls>,
    /// Who keeps a call's answer elsewhere, asked on the session news channel.
    pub keepers: Keepers,
}

impl Resumption {
    /// What `last_event_id` (of `session`) says, when it names a request stream this replica
    /// cannot replay: another replica's, or its own from before it restarted (it does not hold
    /// the session: `held_here` false). `None`: rmcp's way (its own ids, or this replica's).
    pub fn elsewhere(
        &self,
        ids: &SessionIds,
        session: &str,
        last_event_id: &str,
        held_here: bool,
    ) -> Option<StreamEvent> {
        let event = ids.open_event_id(session, last_event_id)?;
        (event.replica.as_str() != &*self.replica || !held_here).then_some(event)
    }

    /// The resumed stream of `event`'s request on `session` of `principal`: its answer, or an
    /// error naming the lost replica.
    pub async fn answer(&self, ids: &SessionIds, principal: &str, session: &str, event: StreamEvent) -> Response {
        let Ok(id) = serde_json::from_str::<RequestId>(&event.request) else {
            return (StatusCode::BAD_REQUEST, "Bad Request: not a request's event id\n").into_response();
        };
        let key = ids.call_key(session, &event.request);
        let message: ServerJsonRpcMessage = match self.collect(principal, &key, &event.replica).await {
            Found::Kept { upstream, answer, written } => {
                tracing::info!(
                    principal,
                    upstream,
                    written,
                    "cluster: a lost stream's call answered from where it was kept"
                );
                let result = match written {
                    true => as_written(&upstream, answer),
                    false => self.proxy.tools().kept_for(principal, &upstream, answer),
                };
                match result {
                    Ok(result) => JsonRpcMessage::response(result, id),
                    Err(error) => JsonRpcMessage::error(error.to_error_data(), Some(id)),
                }
            }
            Found::NotKept => {
                tracing::info!(principal, replica = %event.replica, "cluster: a lost stream's answer is kept nowhere");
                JsonRpcMessage::error(not_kept(&event.replica), Some(id))
            }
            Found::Lost(replica) => {
                tracing::info!(principal, replica = %replica, "cluster: a lost stream's request was lost with its replica");
                JsonRpcMessage::error(lost(&replica, replica == event.replica), Some(id))
            }
            Found::Unasked => {
                tracing::info!(principal, "cluster: a lost stream's answer could not be asked for (Redis down)");
                JsonRpcMessage::error(unasked(), Some(id))
            }
        };
        one_event(&message)
    }

    /// The answer of `principal`'s call kept under `key`: here, or at any other replica alive;
    /// `serving` is the replica that served its stream.
    async fn collect(&self, principal: &str, key: &str, serving: &str) -> Found {
        let Some((upstream, answer)) = self.kept.find(key, principal) else {
            return self.keepers.collect(principal, key, serving).await;
        };
        match answer.wait(COLLECT_WAIT).await {
            Some(answer) => Found::Kept { upstream, answer, written: serving == &*self.replica },
            None => Found::NotKept,
        }
    }
}

/// A call's answer as the replica that served its stream wrote it for the host (already
/// rewritten there), or its error.
fn as_written(upstream: &str, answer: Result<Answer, RemoteError>) -> Result<ServerResult, ProxyError> {
    answer.map_err(|error| error.into_error(upstream))?.into_kept_result(upstream)
}

/// The error of a request whose replica (the one serving its stream, `serving`, or the one
/// running its call) was lost with it.
fn lost(replica: &str, serving: bool) -> ErrorData {
    let role = if serving { "serving" } else { "running" };
    let message = format!("the replica {role} this request ({replica}) was lost; the call may or may not have run");
    ErrorData::new(ErrorCode::INTERNAL_ERROR, message, Some(json!({ "cause": "replica_lost", "replica": replica })))
}

/// The error of a request whose serving replica lives but keeps no answer for it.
fn not_kept(replica: &str) -> ErrorData {
    let message = format!(
        "the replica serving this request ({replica}) keeps no answer for it: it went out on the stream, or the call \
         ended more than {} s ago",
        crate::downstream::kept::KEPT_FOR.as_secs()
    );
    ErrorData::new(ErrorCode::INTERNAL_ERROR, message, Some(json!({ "cause": "not_kept", "replica": replica })))
}

/// The error of a request whose answer could not be asked for.
fn unasked() -> ErrorData {
    let message = "the answer of this request cannot be asked for now: the cluster's Redis cannot be reached; \
                   the call may or may not have run";
    ErrorData::new(ErrorCode::INTERNAL_ERROR, message.to_string(), Some(json!({ "cause": "redis_unreachable" })))
}

/// An SSE reply of one event carrying `message`, ending there.
fn one_event(message: &ServerJsonRpcMessage) -> Response {
    let mut body = Vec::new();
    sse::event(&mut body, |body| serde_json::to_writer(body, message).expect("JSON"));
    let mut response = Response::new(Body::from(body));
    sse::reply_headers(response.headers_mut());
    response
}
