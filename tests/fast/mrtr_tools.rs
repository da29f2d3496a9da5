//! MRTR bridged for a 2025 host: a 2026-07-28 upstream answers a `tools/call` with
//! `input_required` (the rmcp fixture's `ask` tool: one elicitation or sampling request per round, a `requestState`
//! that carries the names given so far); a 2025 host cannot take that, so the proxy asks it each
//! input request as `elicitation/create` and retries the call with the answers until the
//! upstream completes. A 2025 host that did not declare elicitation gets a clear error, and a
//! 2026-07-28 host still gets `input_required` as it was sent.
//!
//! The upstream is the fixture rather than the PyPI `mcp` 2.3.0 conformance server: that
//! server's tools ask with `ctx.session.elicit` / `create_message`, standalone requests, which
//! under 2026-07-28 fail the call (`-32600`) instead of answering `input_required` (MCPServer
//! answers that only for `Resolve(Elicit/Sample)` parameters, which the conformance tools do not
//! use), so its four sampling/elicitation scenarios stay in `not_forwarded("unprefixed,
//! 2026-07-28")` (its pinned run; `auto` speaks 2025 to it).

#![allow(deprecated)] // Sampling is deprecated by SEP-2577 but still in the 2025 era.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, InputRequest,
    SamplingMessage,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ClientServiceExt, ErrorData, RoleClient};
use serde_json::{Value, json};

use crate::support::fixture::{self, DEADLINE, Era, InProcess, error_code};
use crate::support::inproc::InProcessProxy;
use crate::support::proxy::http_upstream;

/// The fixture's `ask` tool through the proxy.
const ASK: &str = "fx__ask";

/// What a [`NameGiver`] declares.
#[derive(Clone, Copy)]
pub(crate) enum Declares {
    Elicitation,
    Sampling,
    Nothing,
}

/// A 2025 host that answers each elicitation or sampling request with the next name (`name-1`,
/// `name-2`, …), and counts them.
#[derive(Clone)]
pub(crate) struct NameGiver {
    asked: Arc<AtomicUsize>,
    declares: Declares,
}

impl ClientHandler for NameGiver {
    fn get_info(&self) -> ClientConfig {
        let capabilities = match self.declares {
            Declares::Elicitation => ClientCapabilities::builder().enable_elicitation().build(),
            Declares::Sampling => ClientCapabilities::builder().enable_sampling().build(),
            Declares::Nothing => ClientCapabilities::default(),
        };
        ClientConfig::new(capabilities, Implementation::new("name-giver", "1.0.0"))
    }

    async fn create_message(
        &self,
        _request: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let asked = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(CreateMessageResult::new(SamplingMessage::assistant_text(format!("name-{asked}")), "test-model".into()))
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let asked = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": format!("name-{asked}")})))
    }
}

/// A 2025 host calling a tool that needs input for three rounds is asked three times and gets
/// the completed result, carrying every answer in order (so each retry had the answer and the
/// `requestState` of its round).
#[tokio::test]
async fn a_legacy_host_is_asked_each_round_and_gets_the_completed_call() -> anyhow::Result<()> {
    let (proxy, _upstream) = proxy_with_modern_fixture().await?;
    let (host, asked) = legacy_host(&proxy.url, Declares::Elicitation).await?;
    let result = call_ask(&host, 3).await?;
    let CallToolResponse::Complete(result) = result else { panic!("expected a complete result, got {result:?}") };
    let text = result.content[0].as_text().unwrap_or_else(|| panic!("expected text: {:?}", result.content));
    let answer: Value = serde_json::from_str(&text.text)?;
    assert_eq!(answer["names"], json!(["name-1", "name-2", "name-3"]), "{answer}");
    assert_eq!(asked.load(Ordering::SeqCst), 3, "one elicitation per round");
    Ok(())
}

/// Sampling input requests are bridged the same way, for a host that declared `sampling`.
#[tokio::test]
async fn a_legacy_host_is_asked_by_sampling_too() -> anyhow::Result<()> {
    let (proxy, _upstream) = proxy_with_modern_fixture().await?;
    let (host, asked) = legacy_host(&proxy.url, Declares::Sampling).await?;
    let result = call_ask_by(&host, 2, "sampling").await?;
    let CallToolResponse::Complete(result) = result else { panic!("expected a complete result, got {result:?}") };
    let text = result.content[0].as_text().unwrap_or_else(|| panic!("expected text: {:?}", result.content));
    let answer: Value = serde_json::from_str(&text.text)?;
    assert_eq!(answer["names"], json!(["name-1", "name-2"]), "{answer}");
    assert_eq!(asked.load(Ordering::SeqCst), 2, "one sampling request per round");
    Ok(())
}

/// More rounds than the proxy bridges fail the call with an error, not a hang.
#[tokio::test]
async fn bridging_stops_after_a_bounded_number_of_rounds() -> anyhow::Result<()> {
    let (proxy, _upstream) = proxy_with_modern_fixture().await?;
    let (host, asked) = legacy_host(&proxy.url, Declares::Elicitation).await?;
    let error = call_ask(&host, 20).await.expect_err("too many rounds");
    let error: rmcp::ServiceError = error.downcast()?;
    assert!(error_code(&error).is_some(), "a JSON-RPC error: {error}");
    assert!(error.to_string().contains("still needs input"), "{error}");
    assert_eq!(asked.load(Ordering::SeqCst), 8, "at most 8 rounds are asked");
    Ok(())
}

/// A 2025 host without the elicitation capability is never asked: the call fails saying why.
#[tokio::test]
async fn a_legacy_host_without_elicitation_gets_a_clear_error() -> anyhow::Result<()> {
    let (proxy, _upstream) = proxy_with_modern_fixture().await?;
    let (host, asked) = legacy_host(&proxy.url, Declares::Nothing).await?;
    let error = call_ask(&host, 1).await.expect_err("the host cannot answer");
    let error: rmcp::ServiceError = error.downcast()?;
    assert!(error_code(&error).is_some(), "a JSON-RPC error: {error}");
    assert!(error.to_string().contains("did not declare (capability `elicitation`)"), "{error}");
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    Ok(())
}

/// A 2026-07-28 host gets the tool's `input_required` as the upstream sent it, its
/// `requestState` sealed to the host's principal.
#[tokio::test]
async fn a_modern_host_gets_input_required_from_a_tool_as_it_was_sent() -> anyhow::Result<()> {
    let (proxy, _upstream) = proxy_with_modern_fixture().await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let call = host.call_tool_once(CallToolRequestParams::new(ASK));
    let response = tokio::time::timeout(DEADLINE, call).await??;
    let CallToolResponse::InputRequired(needs) = response else { panic!("expected input_required: {response:?}") };
    let state = needs.request_state.unwrap_or_default();
    assert!(state.starts_with("mcp-proxy-sealed:") && !state.contains("fixture-ask"), "{state}");
    let requests = needs.input_requests.expect("input requests passed through");
    assert!(matches!(requests["who"], InputRequest::Elicitation(_)), "{:?}", requests["who"]);
    Ok(())
}

pub(crate) async fn proxy_with_modern_fixture() -> anyhow::Result<(InProcessProxy, InProcess)> {
    let upstream = fixture::serve_in_process(&["--era", "modern"]).await?;
    let proxy = InProcessProxy::start(&http_upstream("fx", &upstream.url, "protocol = \"2026-07-28\"")).await?;
    proxy.wait_up("fx", 1).await?;
    Ok((proxy, upstream))
}

/// A 2025 (`initialize`) host at `url`, and how often it was asked.
pub(crate) async fn legacy_host(
    url: &str,
    declares: Declares,
) -> anyhow::Result<(RunningService<RoleClient, NameGiver>, Arc<AtomicUsize>)> {
    host_in(url, declares, Era::Legacy).await
}

/// A host of `era` at `url` that gives names, and how often it was asked.
pub(crate) async fn host_in(
    url: &str,
    declares: Declares,
    era: Era,
) -> anyhow::Result<(RunningService<RoleClient, NameGiver>, Arc<AtomicUsize>)> {
    let asked = Arc::new(AtomicUsize::new(0));
    let handler = NameGiver { asked: asked.clone(), declares };
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    let connecting = handler.serve_with_lifecycle(transport, era.lifecycle());
    Ok((tokio::time::timeout(DEADLINE, connecting).await??, asked))
}

/// `fx__ask` by elicitation with `rounds`, MRTR not driven by the client, within the deadline.
async fn call_ask(host: &RunningService<RoleClient, NameGiver>, rounds: u64) -> anyhow::Result<CallToolResponse> {
    call_ask_by(host, rounds, "elicitation").await
}

async fn call_ask_by(
    host: &RunningService<RoleClient, NameGiver>,
    rounds: u64,
    by: &str,
) -> anyhow::Result<CallToolResponse> {
    let arguments = json!({"rounds": rounds, "by": by}).as_object().cloned().unwrap_or_default();
    let call = host.call_tool_once(CallToolRequestParams::new(ASK).with_arguments(arguments));
    Ok(tokio::time::timeout(DEADLINE, call).await??)
}
