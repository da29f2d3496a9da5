//! The host end of a routed call's relay (see `crate::upstream`'s `relay`): the sampling and
//! elicitation requests and log messages an upstream sends for a host's `tools/call` or
//! `prompts/get` are served by the task of that host request itself, so rmcp sends the host's
//! requests on that call's response stream, and they end with the call.
//!
//! A host that did not declare `sampling` (or `elicitation`) is not asked: the upstream gets
//! an error. Log messages go to the host if they are at least at the level it set with
//! `logging/setLevel` (kept per host session; never sent on a shared upstream connection, and
//! passed on to a per-host or per-principal one before the host's next call: see
//! `crate::upstream`'s `sessions`); with no level set, all go.
//!
//! Each log message names the host request it belongs to (rmcp's `OriginatingRequestId` in its
//! extensions), so over streamable HTTP it goes on that call's own response stream, before the
//! call's answer (`call_streams`): a 2025 host that never opens the GET stream gets it too.
//!
//! Invariant: a host's relayed requests are bounded by its call: once the call has answered
//! (or timed out upstream), what is still pending is dropped and the upstream gets an error.

#![allow(deprecated)] // Sampling and logging are deprecated by SEP-2577 but still in the 2025 era.

use std::pin::pin;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use rmcp::ErrorData;
use rmcp::model::{
    ClientCapabilities, ClientResult, CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequest, ElicitRequestParams, ElicitResult, ErrorCode, LoggingLevel, LoggingMessageNotification,
    LoggingMessageNotificationParam, RequestId, ServerRequest,
};
use rmcp::service::{OriginatingRequestId, Peer, RequestContext, RoleServer};
use tokio::sync::{mpsc, oneshot};

use crate::host::{HostRelay, SubjectToken};
use crate::protocol::Era;

/// Relayed messages of one call that may wait for its task.
const RELAY_QUEUE: usize = 64;

/// A host session's `logging/setLevel`, shared by its calls.
pub(super) type LogLevel = Arc<Mutex<Option<LoggingLevel>>>;

/// What one call's relay hands its task.
pub(super) enum Job {
    Sample(CreateMessageRequestParams, oneshot::Sender<Result<CreateMessageResult, ErrorData>>),
    Elicit(ElicitRequestParams, oneshot::Sender<Result<ElicitResult, ErrorData>>),
    Log(LoggingMessageNotificationParam),
}

/// One call's relay: a queue to the task serving the host's request.
struct HostCall {
    jobs: mpsc::Sender<Job>,
    level: LogLevel,
    capabilities: ClientCapabilities,
    /// The host negotiated 2026-07-28 (it answers `input_required` itself).
    modern: bool,
    /// The calling principal's identity key.
    principal: Arc<str>,
    /// The host session the call came on, if it has one.
    host: Option<u64>,
    /// The JWT the call's request came with, if it did.
    subject: Option<SubjectToken>,
    /// `[cluster]`: the key its answer is kept under when its stream is lost.
    kept_as: Option<String>,
}

/// A relay for the host request of `context`, and the jobs its task is to serve (`serving`).
pub(super) fn for_call(
    context: &RequestContext<RoleServer>,
    level: &LogLevel,
    principal: &Arc<str>,
    (host, kept_as): (Option<u64>, Option<String>),
) -> (Arc<dyn HostRelay>, Jobs) {
    let (jobs, pending) = mpsc::channel(RELAY_QUEUE);
    let capabilities = context.client_capabilities().unwrap_or_default();
    let modern = Era::of_negotiated(context.protocol_version().as_ref()) == Era::Modern;
    let jobs_of_call = Jobs { pending, call: context.id.clone() };
    let principal = principal.clone();
    let parts = context.extensions.get::<http::request::Parts>();
    let subject = parts.and_then(crate::auth::subject_of).cloned();
    let call = HostCall { jobs, level: level.clone(), capabilities, modern, principal, host, subject, kept_as };
    (Arc::new(call), jobs_of_call)
}

/// The jobs of one call, and the host request they belong to.
pub(super) struct Jobs {
    pending: mpsc::Receiver<Job>,
    call: RequestId,
}

/// Run `call` and, in the same task, the host requests its relay asks for; logs are sent in
/// order. Once the call has answered, logs already queued are sent and the rest dropped: the
/// upstream connection queues each log message before the answer that follows it can reach the
/// call (`upstream`'s `relay`), so every one sent before the answer is queued by then.
pub(super) async fn serving<T>(call: impl Future<Output = T>, mut jobs: Jobs, peer: &Peer<RoleServer>) -> T {
    let mut call = pin!(call);
    let mut asked = FuturesUnordered::new();
    loop {
        tokio::select! {
            biased;
            answer = &mut call => {
                while let Ok(job) = jobs.pending.try_recv() {
                    if let Job::Log(params) = job {
                        log(peer, &jobs.call, params).await;
                    }
                }
                return answer;
            }
            Some(job) = jobs.pending.recv() => match job {
                Job::Log(params) => log(peer, &jobs.call, params).await,
                job => asked.push(ask(peer.clone(), job)),
            },
            Some(()) = asked.next(), if !asked.is_empty() => {}
        }
    }
}

/// Send the host one log message of its request `call`, marked as that request's (see the
/// module doc). Returns once the session's transport has taken it: on the call's own stream it
/// is then ahead of the call's answer.
async fn log(peer: &Peer<RoleServer>, call: &RequestId, params: LoggingMessageNotificationParam) {
    let mut notification = LoggingMessageNotification::new(params);
    notification.extensions.insert(OriginatingRequestId(call.clone()));
    let _ = peer.send_notification(notification.into()).await;
}

/// Send the host one relayed request; its answer goes back to the waiting upstream handler.
async fn ask(peer: Peer<RoleServer>, job: Job) {
    match job {
        Job::Sample(params, answer) => {
            let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
            let result = match peer.send_request(request).await {
                Ok(ClientResult::CreateMessageResult(result)) => Ok(*result),
                Ok(_) => Err(ErrorData::internal_error("the host answered sampling with something else", None)),
                Err(error) => Err(host_error(error)),
            };
            let _ = answer.send(result);
        }
        Job::Elicit(params, answer) => {
            let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
            let result = match peer.send_request(request).await {
                Ok(ClientResult::ElicitResult(result)) => Ok(result),
                Ok(_) => Err(ErrorData::internal_error("the host answered elicitation with something else", None)),
                Err(error) => Err(host_error(error)),
            };
            let _ = answer.send(result);
        }
        Job::Log(_) => {}
    }
}

/// The host's error passes on as it is; a broken host connection becomes an internal error.
fn host_error(error: rmcp::ServiceError) -> ErrorData {
    match error {
        rmcp::ServiceError::McpError(error) => error,
        other => {
            tracing::debug!(error = %other, "relayed request to the host failed");
            ErrorData::internal_error("the calling host did not answer", None)
        }
    }
}

impl HostCall {
    /// Queue a request for the call's task and wait for the host's answer.
    fn ask<R: Send + 'static>(
        &self,
        job: impl FnOnce(oneshot::Sender<Result<R, ErrorData>>) -> Job,
    ) -> BoxFuture<'static, Result<R, ErrorData>> {
        let (answer, answered) = oneshot::channel();
        let queued = self.jobs.try_send(job(answer));
        Box::pin(async move {
            if queued.is_err() {
                return Err(ErrorData::internal_error("the call is over or has too many requests pending", None));
            }
            answered.await.unwrap_or_else(|_| Err(ErrorData::internal_error("the call is over", None)))
        })
    }
}

fn unsupported<R: Send + 'static>(what: &str) -> BoxFuture<'static, Result<R, ErrorData>> {
    let error = ErrorData::new(ErrorCode::METHOD_NOT_FOUND, format!("the calling host does not support {what}"), None);
    Box::pin(async move { Err(error) })
}

impl HostRelay for HostCall {
    fn sample(&self, params: CreateMessageRequestParams) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        if self.capabilities.sampling.is_none() {
            return unsupported("sampling");
        }
        self.ask(|answer| Job::Sample(params, answer))
    }

    fn elicit(&self, params: ElicitRequestParams) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
        if self.capabilities.elicitation.is_none() {
            return unsupported("elicitation");
        }
        self.ask(|answer| Job::Elicit(params, answer))
    }

    fn log_level(&self) -> Option<LoggingLevel> {
        *self.level.lock().expect("log level lock")
    }

    fn takes_input_required(&self) -> bool {
        self.modern
    }

    fn declares_sampling(&self) -> bool {
        self.capabilities.sampling.is_some()
    }

    fn declares_elicitation(&self) -> bool {
        self.capabilities.elicitation.is_some()
    }

    fn tenant(&self) -> Option<Arc<str>> {
        Some(self.principal.clone())
    }

    fn host_session(&self) -> Option<u64> {
        self.host
    }

    fn subject_token(&self) -> Option<SubjectToken> {
        self.subject.clone()
    }

    fn kept_as(&self) -> Option<String> {
        self.kept_as.clone()
    }

    fn log(&self, params: LoggingMessageNotificationParam) {
        let wanted = self.level.lock().expect("log level lock").is_none_or(|least| rank(params.level) >= rank(least));
        if wanted {
            let _ = self.jobs.try_send(Job::Log(params));
        }
    }
}

/// Severity order (RFC 5424, as the spec's levels are listed).
fn rank(level: LoggingLevel) -> u8 {
    level as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_rank_by_severity() {
        assert!(rank(LoggingLevel::Debug) < rank(LoggingLevel::Info));
        assert!(rank(LoggingLevel::Warning) < rank(LoggingLevel::Error));
        assert!(rank(LoggingLevel::Alert) < rank(LoggingLevel::Emergency));
    }
}
