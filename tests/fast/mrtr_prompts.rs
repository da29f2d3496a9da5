//! MRTR for `prompts/get`, in both host eras: the rmcp fixture's `ask` prompt (2026-07-28 only)
//! answers `input_required` with one elicitation or sampling request per round until it has
//! `rounds` names, then one user message with the names. A 2025 host is asked each round through
//! its relay (as for `tools/call`, `mrtr_tools`) and gets the completed prompt; a 2026-07-28 host
//! gets `input_required` as the upstream sent it and completes with its own retries.
//!
//! And the other way round: a 2025 upstream (the fixture in `--era legacy`, whose `ask` prompt
//! asks each name as a server-to-client request) for a 2026-07-28 host, which takes no such
//! requests: the proxy answers `input_required` and the host's retry carries the prompt on
//! (src/tools/parked.rs).

use std::sync::atomic::Ordering;

use rmcp::model::{GetPromptRequestParams, GetPromptResponse, GetPromptResult, InputRequest, JsonObject};
use rmcp::{Peer, RoleClient};
use serde_json::{Value, json};

use crate::mrtr_tools::{Declares, host_in, legacy_host, proxy_with_modern_fixture};
use crate::support::fixture::{self, DEADLINE, Era, InProcess, error_code};
use crate::support::inproc::InProcessProxy;
use crate::support::proxy::http_upstream;

/// The fixture's `ask` prompt through the proxy.
const ASK: &str = "fx__ask";

/// A 2025 host getting a prompt that needs two rounds of elicitation is asked twice and gets the
/// completed prompt, whose message carries both answers in order.
#[tokio::test]
async fn a_legacy_host_is_asked_for_a_prompt_each_round_and_gets_it() -> anyhow::Result<()> {
    let (proxy, _upstream) = proxy_with_modern_fixture().await?;
    let (host, asked) = legacy_host(&proxy.url, Declares::Elicitation).await?;
    let response = get_ask(host.peer(), ask_params(2, "elicitation")).await?;
    let GetPromptResponse::Complete(result) = response else { panic!("expected a complete prompt: {response:?}") };
    assert_eq!(names_in(&result)?, json!(["name-1", "name-2"]));
    assert_eq!(asked.load(Ordering::SeqCst), 2, "one elicitation per round");
    Ok(())
}

/// Sampling input requests of a prompt are bridged too, for a host that declared `sampling`.
#[tokio::test]
async fn a_legacy_host_is_asked_for_a_prompt_by_sampling() -> anyhow::Result<()> {
    let (proxy, _upstream) = proxy_with_modern_fixture().await?;
    let (host, asked) = legacy_host(&proxy.url, Declares::Sampling).await?;
    let response = get_ask(host.peer(), ask_params(1, "sampling")).await?;
    let GetPromptResponse::Complete(result) = response else { panic!("expected a complete prompt: {response:?}") };
    assert_eq!(names_in(&result)?, json!(["name-1"]));
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    Ok(())
}

/// A 2025 host that did not declare elicitation is never asked: the prompt fails saying why.
#[tokio::test]
async fn a_legacy_host_without_elicitation_gets_a_clear_prompt_error() -> anyhow::Result<()> {
    let (proxy, _upstream) = proxy_with_modern_fixture().await?;
    let (host, asked) = legacy_host(&proxy.url, Declares::Nothing).await?;
    let error = get_ask(host.peer(), ask_params(1, "elicitation")).await.expect_err("the host cannot answer");
    let error: rmcp::ServiceError = error.downcast()?;
    assert!(error_code(&error).is_some(), "a JSON-RPC error: {error}");
    assert!(error.to_string().contains("did not declare (capability `elicitation`)"), "{error}");
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    Ok(())
}

/// A 2026-07-28 host gets the prompt's `input_required` as the upstream sent it (its
/// `requestState` sealed), round after round, and completes it by sending its answers with the
/// `requestState` it was given: the upstream's state, opened again, carried the names.
#[tokio::test]
async fn a_modern_host_completes_a_prompt_with_its_own_retries() -> anyhow::Result<()> {
    let (proxy, _upstream) = proxy_with_modern_fixture().await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let mut params = ask_params(2, "elicitation");
    for round in 1..=2 {
        let response = get_ask(host.peer(), params.clone()).await?;
        let GetPromptResponse::InputRequired(needs) = response else {
            panic!("round {round}: expected input_required: {response:?}")
        };
        let state = needs.request_state.clone().unwrap_or_default();
        assert!(state.starts_with("mcp-proxy-sealed:") && !state.contains("fixture-ask"), "round {round}: {state}");
        let requests = needs.input_requests.expect("input requests passed through");
        assert!(matches!(requests["who"], InputRequest::Elicitation(_)), "{:?}", requests["who"]);
        let answer = json!({"action": "accept", "content": {"name": format!("name-{round}")}});
        params.input_responses = Some([("who".to_owned(), answer)].into());
        params.request_state = needs.request_state;
    }
    let response = get_ask(host.peer(), params).await?;
    let GetPromptResponse::Complete(result) = response else { panic!("expected a complete prompt: {response:?}") };
    assert_eq!(names_in(&result)?, json!(["name-1", "name-2"]));
    Ok(())
}

/// A 2026-07-28 host getting a prompt of a 2025 upstream that asks by elicitation twice: each
/// request reaches the host as `input_required` (rmcp's client answers it through its handler)
/// and the prompt completes with both answers.
#[tokio::test]
async fn a_modern_host_answers_a_legacy_upstreams_requests_as_input_required() -> anyhow::Result<()> {
    let (proxy, _upstream) = proxy_with_legacy_fixture().await?;
    let (host, asked) = host_in(&proxy.url, Declares::Elicitation, Era::Modern).await?;
    let get = host.get_prompt(ask_params(2, "elicitation"));
    let result = tokio::time::timeout(DEADLINE, get).await??;
    assert_eq!(names_in(&result)?, json!(["name-1", "name-2"]));
    assert_eq!(asked.load(Ordering::SeqCst), 2, "one input_required round per request");
    Ok(())
}

/// The first round as the host sees it, by sampling: the upstream's request under the proxy's
/// key, a `requestState` of the proxy's; a retry without the answer ends the call with a clear
/// error, and its state cannot be used again.
#[tokio::test]
async fn a_modern_host_sees_the_upstreams_request_and_a_retry_without_an_answer_fails() -> anyhow::Result<()> {
    let (proxy, _upstream) = proxy_with_legacy_fixture().await?;
    let (host, _) = host_in(&proxy.url, Declares::Sampling, Era::Modern).await?;
    let mut params = ask_params(1, "sampling");
    let response = get_ask(host.peer(), params.clone()).await?;
    let GetPromptResponse::InputRequired(needs) = response else { panic!("expected input_required: {response:?}") };
    let requests = needs.input_requests.expect("the upstream's request");
    assert!(matches!(requests["upstream-request"], InputRequest::CreateMessage(_)), "{requests:?}");
    let state = needs.request_state.expect("a requestState");
    assert!(state.starts_with("mcp-proxy-input:"), "{state}");
    params.request_state = Some(state);
    for round in ["no answer", "state used"] {
        let error = get_ask(host.peer(), params.clone()).await.expect_err(round);
        let error: rmcp::ServiceError = error.downcast()?;
        assert_eq!(error_code(&error), Some(-32602), "{round}: {error}");
    }
    Ok(())
}

async fn proxy_with_legacy_fixture() -> anyhow::Result<(InProcessProxy, InProcess)> {
    let upstream = fixture::serve_in_process(&["--era", "legacy"]).await?;
    let proxy = InProcessProxy::start(&http_upstream("fx", &upstream.url, "protocol = \"2025-11-25\"")).await?;
    proxy.wait_up("fx", 1).await?;
    Ok((proxy, upstream))
}

fn ask_params(rounds: u64, by: &str) -> GetPromptRequestParams {
    let arguments: JsonObject =
        json!({"rounds": rounds.to_string(), "by": by}).as_object().cloned().unwrap_or_default();
    GetPromptRequestParams::new(ASK).with_arguments(arguments)
}

/// `fx__ask` with `params`, MRTR not driven by the client, within the deadline.
async fn get_ask(host: &Peer<RoleClient>, params: GetPromptRequestParams) -> anyhow::Result<GetPromptResponse> {
    Ok(tokio::time::timeout(DEADLINE, host.get_prompt_once(params)).await??)
}

/// The names in the completed prompt's one message.
fn names_in(result: &GetPromptResult) -> anyhow::Result<Value> {
    let [message] = &result.messages[..] else { anyhow::bail!("expected one message: {result:?}") };
    let text = message.content.as_text().ok_or_else(|| anyhow::anyhow!("expected text: {message:?}"))?;
    Ok(serde_json::from_str::<Value>(&text.text)?["names"].clone())
}
