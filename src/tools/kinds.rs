//! The kinds of routed request ([`Routed`]: a `tools/call`, a `prompts/get`, a
//! `completion/complete`) as the one routed path (`routed`) runs them: each as a [`Call`]
//! (a `resources/read` too, as another replica's session endpoint sends it), sent on an
//! upstream ([`send`]), its answer an [`Answer`] until it is handed back as rmcp's answer of
//! its kind.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, GetPromptRequestParams,
    GetPromptResponse, InputResponses, ReadResourceRequestParams, ReadResourceResponse,
};

use super::ProgressOutlet;
use super::rounds::Inputs;
use crate::cluster::peers::Answer;
use crate::error::ProxyError;
use crate::host::{HostRelay, SubjectToken};
use crate::protocol::method;
use crate::upstream::Connection;

/// A request run on an upstream's session (names and URIs are the upstream's own).
#[derive(Debug, Clone)]
pub enum Call {
    Tool(CallToolRequestParams),
    Prompt(GetPromptRequestParams),
    Read(ReadResourceRequestParams),
    Complete(CompleteRequestParams),
}

impl Call {
    /// The method and target (a tool's or prompt's name) it is traced as.
    pub fn traced(&self) -> (&'static str, Option<&str>) {
        match self {
            Call::Tool(params) => (method::TOOLS_CALL, Some(&params.name)),
            Call::Prompt(params) => (method::PROMPTS_GET, Some(&params.name)),
            Call::Read(_) => (method::RESOURCES_READ, None),
            Call::Complete(_) => (method::COMPLETION_COMPLETE, None),
        }
    }
}

/// A request the proxy routes to the upstream that offers what it names: rmcp's params of a
/// `tools/call`, a `prompts/get` or a `completion/complete`, and the answer a host is given.
pub trait Routed: Send + 'static {
    type Answer;

    /// The request as one of the kinds the routed path runs.
    fn into_call(self) -> Call;

    /// The answer of this kind, if `answer` is one.
    fn answer_of(answer: Answer) -> Option<Self::Answer>;

    /// How it went, for the audit trail: `ok`, `tool_error` (a tool said `isError`) or
    /// `input_required`.
    fn outcome(answer: &Self::Answer) -> &'static str;
}

impl Routed for CallToolRequestParams {
    type Answer = CallToolResponse;

    fn into_call(self) -> Call {
        Call::Tool(self)
    }

    fn answer_of(answer: Answer) -> Option<CallToolResponse> {
        match answer {
            Answer::Tool(result) => Some(CallToolResponse::Complete(result)),
            Answer::InputRequired(needs) => Some(CallToolResponse::InputRequired(needs)),
            _ => None,
        }
    }

    fn outcome(answer: &CallToolResponse) -> &'static str {
        match answer {
            CallToolResponse::Complete(result) if result.is_error == Some(true) => "tool_error",
            CallToolResponse::InputRequired(_) => "input_required",
            _ => "ok",
        }
    }
}

impl Routed for GetPromptRequestParams {
    type Answer = GetPromptResponse;

    fn into_call(self) -> Call {
        Call::Prompt(self)
    }

    fn answer_of(answer: Answer) -> Option<GetPromptResponse> {
        match answer {
            Answer::Prompt(result) => Some(GetPromptResponse::Complete(result)),
            Answer::InputRequired(needs) => Some(GetPromptResponse::InputRequired(needs)),
            _ => None,
        }
    }

    fn outcome(answer: &GetPromptResponse) -> &'static str {
        match answer {
            GetPromptResponse::InputRequired(_) => "input_required",
            _ => "ok",
        }
    }
}

impl Routed for CompleteRequestParams {
    type Answer = CompleteResult;

    fn into_call(self) -> Call {
        Call::Complete(self)
    }

    fn answer_of(answer: Answer) -> Option<CompleteResult> {
        match answer {
            Answer::Complete(result) => Some(result),
            _ => None,
        }
    }

    fn outcome(_: &CompleteResult) -> &'static str {
        "ok"
    }
}

/// Send `call` (the upstream's own names) on `upstream`; with a `progress` outlet, the
/// upstream's progress of it goes there; with a `relay`, what the upstream sends for it;
/// `subject`: the JWT a read or completion came with. A task (SEP-2663) is not passed through.
pub(super) async fn send(
    upstream: &Connection,
    call: Call,
    progress: Option<Arc<dyn ProgressOutlet>>,
    relay: Option<Arc<dyn HostRelay>>,
    subject: Option<&SubjectToken>,
) -> Result<Answer, ProxyError> {
    let task = || {
        let reason = "it answered with a task, which the proxy does not pass through".into();
        ProxyError::UpstreamFailed { upstream: upstream.name().to_string(), reason }
    };
    Ok(match call {
        Call::Tool(params) => match upstream.call_tool(params, progress, relay).await? {
            CallToolResponse::Complete(result) => Answer::Tool(result),
            CallToolResponse::InputRequired(needs) => Answer::InputRequired(needs),
            _ => return Err(task()),
        },
        Call::Prompt(params) => match upstream.get_prompt(params, relay).await? {
            GetPromptResponse::Complete(result) => Answer::Prompt(result),
            GetPromptResponse::InputRequired(needs) => Answer::InputRequired(needs),
            _ => return Err(task()),
        },
        Call::Read(params) => match upstream.read_as(&params.uri, subject).await? {
            ReadResourceResponse::Complete(result) => Answer::Read(result),
            ReadResourceResponse::InputRequired(needs) => Answer::InputRequired(needs),
            _ => return Err(task()),
        },
        Call::Complete(params) => Answer::Complete(upstream.complete_as(params, subject).await?),
    })
}

/// Whether `call` may wait for its host's input (`input_required`): a call or a get.
pub(super) fn takes_input(call: &Call) -> bool {
    matches!(call, Call::Tool(_) | Call::Prompt(_))
}

/// The `requestState` a call or get carries.
pub(super) fn state_of(call: &Call) -> Option<&str> {
    match call {
        Call::Tool(params) => params.request_state.as_deref(),
        Call::Prompt(params) => params.request_state.as_deref(),
        _ => None,
    }
}

/// What a retry of a call or get carries: the host's `inputResponses` and a `requestState`.
pub(super) fn retry_parts(call: &mut Call) -> Option<(&mut Option<InputResponses>, &mut Option<String>)> {
    match call {
        Call::Tool(params) => Some((&mut params.input_responses, &mut params.request_state)),
        Call::Prompt(params) => Some((&mut params.input_responses, &mut params.request_state)),
        _ => None,
    }
}

/// A retried call or get carries the host's answers and the upstream's `requestState`.
pub(super) fn with_inputs(mut call: Call, inputs: Option<Inputs>) -> Call {
    if let (Some(inputs), Some((responses, state))) = (inputs, retry_parts(&mut call)) {
        (*responses, *state) = (Some(inputs.responses), inputs.request_state);
    }
    call
}
