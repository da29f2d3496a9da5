//! A 2025 upstream's server-to-client requests during a 2026-07-28 host's `tools/call`: the
//! real Python SDK server (tests/py/conformance_server.py, PyPI `mcp` 2.3.0, pinned to
//! 2025-11-25) asks `sampling/createMessage` or `elicitation/create` while it serves the call;
//! the host, an rmcp client in its 2026-07-28 mode, takes no such requests. The proxy answers
//! the host's call with `input_required` carrying the upstream's request and a `requestState` of
//! its own, keeps the upstream call waiting, and when the host calls again with its answer, hands
//! it to the upstream and carries on. Only the principal that was asked can resume the call.

#![allow(deprecated)] // Sampling is deprecated by SEP-2577 but still in the 2025 era.

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationAction,
    Implementation, InputRequest, SamplingMessage,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientServiceExt, ErrorData, RoleClient};
use serde_json::{Value, json};

use crate::support::fixture::{DEADLINE, Era, error_code};
use crate::support::peers::{PeerHttp, spawn_py_script_http};
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, http_upstream};

const ALICE_TOKEN: &str = "alice-tok-9c4e1a7f3b5d2086";
const BOB_TOKEN: &str = "bob-tok-1f7d3b9e5a2c6048";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];

/// The key and `requestState` prefix the proxy uses (src/tools/parked.rs).
const INPUT_KEY: &str = "upstream-request";
const STATE_PREFIX: &str = "mcp-proxy-input:";

/// A 2026-07-28 host that declares sampling and elicitation and answers both as `name`.
#[derive(Clone)]
struct ModernHost {
    name: &'static str,
}

impl ClientHandler for ModernHost {
    fn get_info(&self) -> ClientConfig {
        let capabilities = ClientCapabilities::builder().enable_sampling().enable_elicitation().build();
        ClientConfig::new(capabilities, Implementation::new(self.name, "1.0.0"))
    }

    async fn create_message(
        &self,
        _: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let answer = SamplingMessage::assistant_text(format!("the answer of {}", self.name));
        Ok(CreateMessageResult::new(answer, "test-model".into()).with_stop_reason("endTurn"))
    }

    async fn create_elicitation(
        &self,
        _: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let content = json!({"username": self.name, "email": format!("{}@example.org", self.name)});
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(content))
    }
}

type Host = RunningService<RoleClient, ModernHost>;

/// The upstream's sampling and elicitation reach a 2026-07-28 host as `input_required`, which
/// rmcp's client answers through its handler; the call completes with the host's answers.
#[tokio::test]
async fn a_modern_host_answers_a_legacy_upstreams_sampling_and_elicitation() -> anyhow::Result<()> {
    let (_upstream, proxy, _policies) = proxy_in_front().await?;
    let host = modern_host(&proxy.url, "alice", ALICE_TOKEN).await?;
    let sampled = call(&host, "py__test_sampling", json!({"prompt": "what is your name?"})).await?;
    assert!(text_of(&sampled).contains("LLM response: the answer of alice"), "{sampled:?}");
    let elicited = call(&host, "py__test_elicitation", json!({"message": "who are you?"})).await?;
    let text = text_of(&elicited);
    assert!(text.contains("action=accept") && text.contains("alice@example.org"), "{elicited:?}");
    Ok(())
}

/// The round as the host sees it: `input_required` with the upstream's request under one key
/// and the proxy's `requestState`; another principal presenting that state gets a clear error
/// and resumes nothing; the principal that was asked completes the call with its answer.
#[tokio::test]
async fn only_the_principal_that_was_asked_can_resume_the_call() -> anyhow::Result<()> {
    let (_upstream, proxy, _policies) = proxy_in_front().await?;
    let alice = modern_host(&proxy.url, "alice", ALICE_TOKEN).await?;
    let bob = modern_host(&proxy.url, "bob", BOB_TOKEN).await?;
    let mut params = tool_params("py__test_sampling", json!({"prompt": "a question for alice"}));
    let first = once(&alice, params.clone()).await?;
    let CallToolResponse::InputRequired(needs) = first else { panic!("expected input_required: {first:?}") };
    let state = needs.request_state.clone().context("a requestState")?;
    assert!(state.starts_with(STATE_PREFIX), "{state}");
    let requests = needs.input_requests.context("input requests")?;
    let InputRequest::CreateMessage(asked) = &requests[INPUT_KEY] else { panic!("{requests:?}") };
    assert!(serde_json::to_string(&asked.params.messages)?.contains("a question for alice"));

    let answer = json!({"role": "assistant", "content": {"type": "text", "text": "from alice"}, "model": "m"});
    params.input_responses = Some([(INPUT_KEY.to_owned(), answer)].into());
    params.request_state = Some(state.clone());
    let mut stolen = params.clone();
    stolen.input_responses = Some(
        [(
            INPUT_KEY.to_owned(),
            json!({"role": "assistant", "content": {"type": "text", "text": "from bob"}, "model": "m"}),
        )]
        .into(),
    );
    let error = once(&bob, stolen).await.expect_err("bob cannot resume alice's call");
    let error: rmcp::ServiceError = error.downcast()?;
    assert_eq!(error_code(&error), Some(-32602), "{error}");
    assert!(error.to_string().contains("unknown or expired"), "{error}");

    let done = once(&alice, params.clone()).await?;
    let CallToolResponse::Complete(result) = done else { panic!("expected the result: {done:?}") };
    assert!(text_of(&result).contains("LLM response: from alice"), "{result:?}");
    let again = once(&alice, params).await.expect_err("a requestState resumes once");
    let again: rmcp::ServiceError = again.downcast()?;
    assert_eq!(error_code(&again), Some(-32602), "{again}");
    Ok(())
}

/// The upstream, the proxy in front of it with principals alice and bob, and their policies
/// folder (which must outlive the proxy: it is watched).
async fn proxy_in_front() -> anyhow::Result<(PeerHttp, ProxyProcess, tempfile::TempDir)> {
    let upstream = spawn_py_script_http("conformance_server.py", &[]);
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let upstreams = http_upstream("py", &upstream.url, "protocol = \"2025-11-25\"");
    let config = alice_and_bob_under_policies("", policies.path(), &upstreams);
    let proxy = ProxyProcess::start_with_offerings(&config, &TOKENS, &["py"]).await?;
    Ok((upstream, proxy, policies))
}

async fn modern_host(url: &str, name: &'static str, token: &str) -> anyhow::Result<Host> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(token),
    );
    let connecting = ModernHost { name }.serve_with_lifecycle(transport, Era::Modern.lifecycle());
    Ok(tokio::time::timeout(DEADLINE, connecting).await.context("connect timed out")??)
}

fn tool_params(tool: &str, arguments: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(tool.to_string());
    params.arguments = arguments.as_object().cloned();
    params
}

/// A call with MRTR driven by the host's handler.
async fn call(host: &Host, tool: &str, arguments: Value) -> anyhow::Result<CallToolResult> {
    let call = host.call_tool(tool_params(tool, arguments));
    Ok(tokio::time::timeout(DEADLINE, call).await.context("the call timed out")??)
}

/// One request of a call, MRTR not driven.
async fn once(host: &Host, params: CallToolRequestParams) -> anyhow::Result<CallToolResponse> {
    Ok(tokio::time::timeout(DEADLINE, host.peer().call_tool_once(params)).await.context("the call timed out")??)
}

fn text_of(result: &CallToolResult) -> String {
    serde_json::to_string(&result.content).unwrap_or_default()
}
