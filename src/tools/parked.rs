//! Server-to-client requests of a routed call bridged for a 2026-07-28 host — `rounds` the
//! other way round. A 2025 upstream asks for `sampling/createMessage` or `elicitation/create`
//! while it serves a call (`tools/call` or `prompts/get`); a 2026-07-28 host takes no
//! server-to-client requests, it takes `input_required`. So the upstream call runs in a task
//! of its own; when it asks, the host's
//! call is answered with `input_required` carrying that request (key [`INPUT_KEY`]) and a
//! `requestState` of the proxy's own, and the upstream call waits (parked). When the host sends
//! the call again with its answer in `inputResponses` and that `requestState`, the answer goes
//! to the upstream and the call carries on: its next request becomes the next
//! `input_required`, its answer the call's answer.
//!
//! Invariant: parked calls are bounded — at most [`PER_PRINCIPAL`] per principal and [`TOTAL`]
//! in all, each parked no longer than its upstream's `request_timeout` (the upstream call itself
//! times out within that too). A `requestState` is 256 random bits, resumed once, only by the
//! principal that parked it and for the same tool or prompt of the same upstream; unknown, expired and another
//! principal's state answer alike. Nothing is asked of a host that did not declare it. With
//! `[cluster]` a state ends with `@<replica>`, the replica the call is parked on (not a secret:
//! the token alone resumes it, and only there); a retry landing on another replica goes there
//! over MCP (`routed`, `served`).

#![allow(deprecated)] // Sampling is deprecated by SEP-2577 but still in the 2025 era.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use futures::future::BoxFuture;
use rmcp::ErrorData;
use rmcp::model::{
    CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult, ElicitRequest, ElicitRequestParams,
    ElicitResult, ErrorCode, InputRequest, InputRequests, InputRequiredResult, InputResponses, LoggingLevel,
    LoggingMessageNotificationParam,
};
use tokio::sync::{mpsc, oneshot};

use crate::error::ProxyError;
use crate::host::{HostRelay, SubjectToken};

/// How every `requestState` the proxy mints begins.
pub(super) const STATE_PREFIX: &str = "mcp-proxy-input:";

/// The key of the upstream's request in `inputRequests` (and of its answer).
pub(super) const INPUT_KEY: &str = "upstream-request";

/// Parked calls of one principal.
pub(super) const PER_PRINCIPAL: usize = 16;

/// Parked calls in all.
pub(super) const TOTAL: usize = 1024;

/// Requests one running call may have queued for its host.
const ASKS_QUEUE: usize = 8;

/// What a step of a call came to.
pub(super) enum Outcome<R> {
    /// The upstream answered.
    Answered(R),
    /// The upstream asks the host something: the call's answer for now.
    Asks(InputRequiredResult),
}

/// The calls parked for their host's answer, by `requestState`.
pub(super) struct ParkedCalls<R> {
    calls: Mutex<HashMap<String, Parked<R>>>,
    /// `[cluster]`: this replica's id, the end of every `requestState` minted here (after
    /// [`REPLICA_MARK`]), so that a retry landing on another replica is sent here.
    replica: Option<String>,
}

/// What stands between a `requestState`'s token and the replica its call waits on.
const REPLICA_MARK: char = '@';

/// Who may resume a parked call, until when, and the call.
struct Parked<R> {
    principal: String,
    name: String,
    expires: Instant,
    call: RunningCall<R>,
}

/// An upstream call running in a task of its own (aborted when this is dropped), and what it
/// asks of the host.
pub(super) struct RunningCall<R> {
    answer: oneshot::Receiver<Result<R, ProxyError>>,
    asks: mpsc::Receiver<Ask>,
    relay: Arc<ParkingRelay>,
    task: tokio::task::JoinHandle<()>,
    /// The request the host was given and has yet to answer.
    pending: Option<Ask>,
}

/// One request of the upstream, waiting for the host's answer.
enum Ask {
    Sample(CreateMessageRequestParams, oneshot::Sender<Result<CreateMessageResult, ErrorData>>),
    Elicit(ElicitRequestParams, oneshot::Sender<Result<ElicitResult, ErrorData>>),
}

/// The relay the upstream call is given: requests queue for the host's next `input_required`;
/// log messages go to the host request serving the call now.
struct ParkingRelay {
    asks: mpsc::Sender<Ask>,
    host: Mutex<Arc<dyn HostRelay>>,
}

/// Who is resuming a call, and with what.
pub(super) struct Resume<'a> {
    pub principal: &'a str,
    pub name: &'a str,
    pub timeout: Duration,
}

impl<R: Send + 'static> Default for ParkedCalls<R> {
    fn default() -> Self {
        ParkedCalls { calls: Mutex::new(HashMap::new()), replica: None }
    }
}

/// Whether `state` is one the proxy minted (else it is the upstream's, passed through).
pub(super) fn is_ours(state: Option<&str>) -> bool {
    state.is_some_and(|state| state.starts_with(STATE_PREFIX))
}

/// The replica whose call `state` (one the proxy minted) continues; `None` when it names
/// none (a single process).
pub(super) fn parked_at(state: &str) -> Option<&str> {
    state.strip_prefix(STATE_PREFIX)?.split_once(REPLICA_MARK).map(|(_, replica)| replica)
}

impl<R: Send + 'static> ParkedCalls<R> {
    /// The parked calls of replica `replica` (`[cluster]`), whose `requestState`s name it.
    pub fn of_replica(replica: Option<&str>) -> Self {
        ParkedCalls { calls: Mutex::new(HashMap::new()), replica: replica.map(str::to_owned) }
    }

    /// Start a call for a 2026-07-28 `host` (`start` sends it upstream with the relay it is
    /// given) and run it until it answers or asks the host something.
    pub async fn start<F>(
        &self,
        who: Resume<'_>,
        host: Arc<dyn HostRelay>,
        start: impl FnOnce(Arc<dyn HostRelay>) -> F,
    ) -> Result<Outcome<R>, ProxyError>
    where
        F: Future<Output = Result<R, ProxyError>> + Send + 'static,
    {
        let (queue, asks) = mpsc::channel(ASKS_QUEUE);
        let relay = Arc::new(ParkingRelay { asks: queue, host: Mutex::new(host) });
        let (done, answer) = oneshot::channel();
        // The host request's span stays the parent of the upstream call's (nothing when off).
        let call = crate::telemetry::Span::current().attach(start(relay.clone()));
        let task = tokio::spawn(async move {
            let _ = done.send(call.await);
        });
        let running = RunningCall { answer, asks, relay, task, pending: None };
        self.run(who, running).await
    }

    /// Resume the call parked under `state` with the host's `responses`, and run it on.
    pub async fn resume(
        &self,
        who: Resume<'_>,
        state: &str,
        responses: Option<&InputResponses>,
        host: Arc<dyn HostRelay>,
    ) -> Result<Outcome<R>, ProxyError> {
        let mut running = self.take(state, who.principal, who.name)?;
        *running.relay.host.lock().expect("host lock") = host;
        running.answer_pending(responses)?;
        self.run(who, running).await
    }

    /// Run `running` until the upstream answers, or park it while its host is asked.
    async fn run(&self, who: Resume<'_>, mut running: RunningCall<R>) -> Result<Outcome<R>, ProxyError> {
        let ask = tokio::select! {
            biased;
            answer = &mut running.answer => {
                let answer = answer.unwrap_or_else(|_| Err(ProxyError::InvalidParams("the call ended".into())));
                return answer.map(Outcome::Answered);
            }
            Some(ask) = running.asks.recv() => ask,
        };
        let request = ask.input_request();
        running.pending = Some(ask);
        let state = self.park(who, running)?;
        let mut requests = InputRequests::new();
        requests.insert(INPUT_KEY.to_owned(), request);
        Ok(Outcome::Asks(InputRequiredResult::new(Some(requests), Some(state))))
    }

    /// Keep `running` for its host's retry; its new `requestState`.
    fn park(&self, who: Resume<'_>, running: RunningCall<R>) -> Result<String, ProxyError> {
        let now = Instant::now();
        let mut calls = self.calls.lock().expect("parked lock");
        calls.retain(|_, parked| parked.expires > now && !parked.call.task.is_finished());
        let principal_holds = calls.values().filter(|parked| parked.principal == who.principal).count();
        if principal_holds >= PER_PRINCIPAL || calls.len() >= TOTAL {
            tracing::debug!(principal = who.principal, held = principal_holds, "too many calls wait for input");
            return Err(ProxyError::InvalidParams(format!(
                "too many calls wait for this client's input ({PER_PRINCIPAL} per client, {TOTAL} in all); \
                 answer or abandon one first"
            )));
        }
        let state = match &self.replica {
            Some(replica) => format!("{STATE_PREFIX}{}{REPLICA_MARK}{replica}", fresh_token()),
            None => format!("{STATE_PREFIX}{}", fresh_token()),
        };
        let parked = Parked {
            principal: who.principal.to_owned(),
            name: who.name.to_owned(),
            expires: now + who.timeout,
            call: running,
        };
        calls.insert(state.clone(), parked);
        Ok(state)
    }

    /// The call parked under `state`, if this principal may resume it for this name.
    fn take(&self, state: &str, principal: &str, name: &str) -> Result<RunningCall<R>, ProxyError> {
        let unknown = unknown_state;
        let mut calls = self.calls.lock().expect("parked lock");
        let parked = calls.get(state).ok_or_else(unknown)?;
        if parked.principal != principal || parked.name != name {
            tracing::debug!(principal, name, "a requestState of another principal or call was presented");
            return Err(unknown());
        }
        let parked = calls.remove(state).ok_or_else(unknown)?;
        if parked.expires <= Instant::now() || parked.call.task.is_finished() {
            return Err(unknown());
        }
        Ok(parked.call)
    }

    /// Calls parked now (for tests and status).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.calls.lock().expect("parked lock").len()
    }
}

impl<R> RunningCall<R> {
    /// Hand the host's answer to the request it was given to the upstream.
    fn answer_pending(&mut self, responses: Option<&InputResponses>) -> Result<(), ProxyError> {
        let answer = responses.and_then(|responses| responses.get(INPUT_KEY)).ok_or_else(|| {
            ProxyError::InvalidParams(format!("inputResponses has no answer to `{INPUT_KEY}`; the call is over"))
        })?;
        let malformed = |what: &str| ProxyError::InvalidParams(format!("the answer to `{INPUT_KEY}` is not {what}"));
        match self.pending.take() {
            Some(Ask::Sample(_, reply)) => {
                let result = serde_json::from_value(answer.clone()).map_err(|_| malformed("a sampling result"))?;
                let _ = reply.send(Ok(result));
            }
            Some(Ask::Elicit(_, reply)) => {
                let result = serde_json::from_value(answer.clone()).map_err(|_| malformed("an elicitation result"))?;
                let _ = reply.send(Ok(result));
            }
            None => return Err(ProxyError::InvalidParams("the call asked nothing".into())),
        }
        Ok(())
    }
}

impl<R> Drop for RunningCall<R> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Ask {
    /// The request as it goes to the host in `inputRequests`.
    fn input_request(&self) -> InputRequest {
        match self {
            Ask::Sample(params, _) => InputRequest::CreateMessage(CreateMessageRequest::new(params.clone())),
            Ask::Elicit(params, _) => InputRequest::Elicitation(ElicitRequest::new(params.clone())),
        }
    }
}

impl ParkingRelay {
    /// Queue a request for the host and wait for its answer (or the call's end).
    fn ask<T: Send + 'static>(
        &self,
        ask: impl FnOnce(oneshot::Sender<Result<T, ErrorData>>) -> Ask,
    ) -> BoxFuture<'static, Result<T, ErrorData>> {
        let (reply, answered) = oneshot::channel();
        let queued = self.asks.try_send(ask(reply));
        Box::pin(async move {
            if queued.is_err() {
                return Err(ErrorData::internal_error("the call is over or has too many requests pending", None));
            }
            answered.await.unwrap_or_else(|_| Err(ErrorData::internal_error("the call is over", None)))
        })
    }

    fn host(&self) -> Arc<dyn HostRelay> {
        self.host.lock().expect("host lock").clone()
    }
}

impl HostRelay for ParkingRelay {
    fn sample(&self, params: CreateMessageRequestParams) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        if !self.host().declares_sampling() {
            return undeclared("sampling");
        }
        self.ask(|reply| Ask::Sample(params, reply))
    }

    fn elicit(&self, params: ElicitRequestParams) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
        if !self.host().declares_elicitation() {
            return undeclared("elicitation");
        }
        self.ask(|reply| Ask::Elicit(params, reply))
    }

    fn log(&self, params: LoggingMessageNotificationParam) {
        self.host().log(params);
    }

    fn log_level(&self) -> Option<LoggingLevel> {
        self.host().log_level()
    }

    fn tenant(&self) -> Option<Arc<str>> {
        self.host().tenant()
    }

    fn subject_token(&self) -> Option<SubjectToken> {
        self.host().subject_token()
    }
}

fn undeclared<T: Send + 'static>(what: &str) -> BoxFuture<'static, Result<T, ErrorData>> {
    let error = ErrorData::new(ErrorCode::METHOD_NOT_FOUND, format!("the calling host does not support {what}"), None);
    Box::pin(async move { Err(error) })
}

/// 256 random bits, base64url.
/// The answer to a `requestState` that continues nothing this caller may continue: unknown,
/// expired, another principal's or call's, tampered.
pub(super) fn unknown_state() -> ProxyError {
    ProxyError::InvalidParams(
        "requestState is unknown or expired: the call it continued is over; call again without it".into(),
    )
}

fn fresh_token() -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

#[cfg(test)]
mod tests;
