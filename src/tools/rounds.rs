//! Multi round-trip requests (MRTR) bridged for a 2025 host: a 2026-07-28 upstream answers a
//! `tools/call` or `prompts/get` with `input_required` (its `inputRequests` and an opaque
//! `requestState`), which a 2025 host cannot take. The proxy asks that host each input request
//! as a 2025 server-to-client request (`elicitation/create`, `sampling/createMessage`, through
//! the call's [`HostRelay`]) and retries the upstream call with the answers (`inputResponses`,
//! keyed as the upstream named them) and the `requestState` as it was sent.
//!
//! Invariant: bridging is bounded: at most [`MAX_ROUNDS`] retries, all within the upstream's
//! `request_timeout`; a host that did not declare what is asked, or an input request the proxy
//! cannot relay (`roots/list`), fails the call with an error saying so. A 2026-07-28 host gets
//! `input_required` as it was sent, and answers it itself.

use std::future::Future;

use rmcp::ErrorData;
use rmcp::model::{ErrorCode, InputRequest, InputRequiredResult, InputResponses};

use crate::cluster::peers::Answer;
use crate::error::ProxyError;
use crate::host::HostRelay;
use crate::upstream::Connection;

/// How many times one call is retried with a host's answers before it fails.
pub(super) const MAX_ROUNDS: usize = 8;

/// What a retry carries: the host's answers and the upstream's `requestState`.
pub(super) struct Inputs {
    pub responses: InputResponses,
    pub request_state: Option<String>,
}

/// Send a routed request with `send` and, while the upstream answers `input_required` to a host
/// that cannot take it, ask the host and send again with its answers.
pub(super) async fn bridged<Fut>(
    upstream: &Connection,
    relay: Option<&dyn HostRelay>,
    mut send: impl FnMut(Option<Inputs>) -> Fut,
) -> Result<Answer, ProxyError>
where
    Fut: Future<Output = Result<Answer, ProxyError>>,
{
    let Some(relay) = relay.filter(|relay| !relay.takes_input_required()) else { return send(None).await };
    let timeout = upstream.config().request_timeout;
    let rounds = async {
        let mut answer = send(None).await?;
        for _ in 0..MAX_ROUNDS {
            let Answer::InputRequired(needs) = &answer else { return Ok(answer) };
            let inputs = ask_host(upstream.name(), relay, needs).await?;
            answer = send(Some(inputs)).await?;
        }
        match answer {
            Answer::InputRequired(_) => {
                Err(failed(upstream.name(), format!("it still needs input after {MAX_ROUNDS} rounds")))
            }
            answer => Ok(answer),
        }
    };
    tokio::time::timeout(timeout, rounds)
        .await
        .unwrap_or_else(|_| Err(ProxyError::UpstreamTimeout { upstream: upstream.name().to_string(), timeout }))
}

/// Ask the host each of the upstream's input requests, in key order.
async fn ask_host(upstream: &str, relay: &dyn HostRelay, needs: &InputRequiredResult) -> Result<Inputs, ProxyError> {
    let mut responses = InputResponses::new();
    for (key, request) in needs.input_requests.iter().flatten() {
        let answer = match request {
            InputRequest::Elicitation(request) => relay.elicit(request.params.clone()).await.map(serde_json::to_value),
            InputRequest::CreateMessage(request) => {
                relay.sample(request.params.clone()).await.map(serde_json::to_value)
            }
            _ => {
                let reason =
                    format!("it asks the host for `{key}` by roots/list or newer, which the proxy does not relay");
                return Err(failed(upstream, reason));
            }
        };
        let answer = answer.map_err(|error| host_refused(upstream, key, request, error))?;
        let answer = answer.map_err(|_| failed(upstream, format!("the host's answer to `{key}` is not JSON")))?;
        responses.insert(key.clone(), answer);
    }
    Ok(Inputs { responses, request_state: needs.request_state.clone() })
}

/// The call's error when the host could not answer input request `key`.
fn host_refused(upstream: &str, key: &str, request: &InputRequest, error: ErrorData) -> ProxyError {
    let what = match request {
        InputRequest::Elicitation(_) => "elicitation",
        InputRequest::CreateMessage(_) => "sampling",
        _ => "roots",
    };
    if error.code == ErrorCode::METHOD_NOT_FOUND {
        return failed(
            upstream,
            format!("it needs input (`{key}`) by {what}, which the calling host did not declare (capability `{what}`)"),
        );
    }
    tracing::debug!(upstream, key, error = %error.message, "the host did not answer an input request");
    failed(upstream, format!("the calling host did not answer its {what} request `{key}`"))
}

fn failed(upstream: &str, reason: String) -> ProxyError {
    ProxyError::UpstreamFailed { upstream: upstream.to_string(), reason }
}
