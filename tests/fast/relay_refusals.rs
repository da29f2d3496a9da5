//! Sampling a stdio upstream asks for during a routed call, through real processes: the fixture
//! over stdio (its `sample` tool asks during the call, naming no call: rmcp stamps a progress
//! token of its own on every request it sends, as most servers name none), the proxy binary,
//! rmcp hosts of one or two principals over streamable HTTP.
//!
//! The upstream is set `session = "shared"` (a stdio upstream's default is a child per principal,
//! where such a request always has one principal's calls to go to).
//!
//! - When the proxy refuses to relay such a request and the upstream fails its call because of
//!   it (passing the refusal's code on, as the fixture's `propagate` does), the host's error names the
//!   refusal — what was refused and why, and what to set — not "refused the tools/call arguments".
//! - One host that never answers its call's sampling holds only its own call: another host's
//!   sampling on the same upstream is relayed and answered meanwhile, and the parked call fails
//!   alone, at its own timeout.

#![allow(deprecated)] // Sampling is deprecated by SEP-2577 but still in the 2025 era.

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, CreateMessageRequestParams,
    CreateMessageResult, Implementation, SamplingCapability, SamplingMessage,
};
use rmcp::service::{Peer, RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::support::fixture::DEADLINE;
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, fixture_upstream};

const ALICE_TOKEN: &str = "alice-tok-relay-refusals-5d0a";
const BOB_TOKEN: &str = "bob-tok-relay-refusals-e37c";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
/// The upstream's `request_timeout` here: the parked call fails at it.
const REQUEST_TIMEOUT_SECS: u64 = 8;

/// How a host treats the sampling requests it is sent.
#[derive(Clone, Copy, PartialEq)]
enum Sampling {
    /// It does not declare `sampling`.
    Undeclared,
    /// It answers at once.
    Answers,
    /// It never answers (the call waits on it).
    Never,
}

/// A host that records the prompts it is asked for.
#[derive(Clone)]
struct Host {
    name: &'static str,
    sampling: Sampling,
    asked: mpsc::UnboundedSender<String>,
}

impl ClientHandler for Host {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.sampling != Sampling::Undeclared {
            capabilities.sampling = Some(SamplingCapability::default());
        }
        ClientConfig::new(capabilities, Implementation::new(self.name, "1.0.0"))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let _ = self.asked.send(serde_json::to_string(&params.messages).unwrap_or_default());
        if self.sampling == Sampling::Never {
            std::future::pending::<()>().await;
        }
        let answer = SamplingMessage::assistant_text(format!("the answer of {}", self.name));
        Ok(CreateMessageResult::new(answer, "test-model".into()))
    }
}

async fn host(
    proxy: &ProxyProcess,
    name: &'static str,
    token: &str,
    sampling: Sampling,
) -> anyhow::Result<(RunningService<RoleClient, Host>, mpsc::UnboundedReceiver<String>)> {
    let (asked, heard) = mpsc::unbounded_channel();
    let config = StreamableHttpClientTransportConfig::with_uri(proxy.url.as_str()).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    let host = Host { name, sampling, asked };
    let host = tokio::time::timeout(DEADLINE, host.serve(transport)).await.context("connect")??;
    Ok((host, heard))
}

/// The fixture's `sample` tool with these arguments.
async fn sample(host: &Peer<RoleClient>, arguments: Value) -> Result<CallToolResult, ServiceError> {
    let params =
        CallToolRequestParams::new("fx__sample").with_arguments(arguments.as_object().cloned().unwrap_or_default());
    host.call_tool(params).await
}

async fn start() -> anyhow::Result<(ProxyProcess, tempfile::TempDir)> {
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let upstream = format!(
        "{}protocol = \"2025-11-25\"\nrequest_timeout = \"{REQUEST_TIMEOUT_SECS}s\"\nsession = \"shared\"\n",
        fixture_upstream("fx", &[])
    );
    let config = alice_and_bob_under_policies("", policies.path(), &upstream);
    let proxy = ProxyProcess::start_with_offerings(&config, &TOKENS, &["fx"]).await?;
    Ok((proxy, policies))
}

/// The text of a call's first content block.
fn answer_of(result: &CallToolResult) -> String {
    result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default()
}

fn message_of(error: &ServiceError) -> String {
    match error {
        ServiceError::McpError(error) => error.message.to_string(),
        other => panic!("not a JSON-RPC error: {other}"),
    }
}

/// The upstream fails the call with the proxy's refusal (-32601: the host did not declare
/// sampling); the host is told that, not that the upstream failed with some code.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_failed_over_an_undeclared_capability_says_so() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    let (alice, mut asked) = host(&proxy, "alice", ALICE_TOKEN, Sampling::Undeclared).await?;
    let arguments = json!({"tag": "alice", "propagate": true});
    let called = tokio::time::timeout(DEADLINE, sample(alice.peer(), arguments)).await.context("the call hung")?;
    let message = message_of(&called.expect_err("the upstream failed the call"));
    assert!(message.contains("upstream `fx`"), "{message}");
    assert!(message.contains("sampling") && message.contains("did not declare"), "names the refusal: {message}");
    assert!(!message.contains("arguments") && !message.contains("answered with error"), "{message}");
    assert!(asked.try_recv().is_err(), "alice was never asked");
    alice.cancel().await?;
    Ok(())
}

/// Once two principals have called, a stdio upstream's sampling that names no call is refused
/// (-32602); the upstream passes that code on, and bob's error says a sampling request named no
/// call — not that his arguments were refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_failed_over_an_unattributed_request_says_so() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    let (alice, _) = host(&proxy, "alice", ALICE_TOKEN, Sampling::Answers).await?;
    let (bob, mut bob_asked) = host(&proxy, "bob", BOB_TOKEN, Sampling::Answers).await?;
    let first = tokio::time::timeout(DEADLINE, sample(alice.peer(), json!({"tag": "alice"}))).await?;
    assert!(answer_of(&first?).contains("the answer of alice"), "the only principal's lone call is asked");
    let arguments = json!({"tag": "bob", "propagate": true});
    let called = tokio::time::timeout(DEADLINE, sample(bob.peer(), arguments)).await.context("the call hung")?;
    let message = message_of(&called.expect_err("the upstream failed the call"));
    assert!(message.contains("upstream `fx`"), "{message}");
    assert!(message.contains("sampling without naming its call"), "names the refusal: {message}");
    let advice = "set `session = \"per-principal\"` on upstream `fx` to keep sampling for every caller";
    assert!(message.contains(advice), "says what to set: {message}");
    assert!(!message.contains("arguments"), "not the host's arguments: {message}");
    assert!(!message.contains("alice"), "nothing of another principal: {message}");
    assert!(bob_asked.try_recv().is_err(), "an unnamed request is not guessed at");
    for host in [alice, bob] {
        host.cancel().await?;
    }
    Ok(())
}

/// One principal (alice) on two hosts: the first host's call waits on sampling it never
/// answers; meanwhile the second host's call on the same stdio upstream asks sampling (naming no
/// call, so only the single-principal rule can place it), is relayed to the second host and
/// answered, and returns; the first call then fails alone, at the upstream's timeout.
#[tokio::test(flavor = "multi_thread")]
async fn a_parked_call_holds_only_its_own_host() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    let (parked, mut parked_asked) = host(&proxy, "parked", ALICE_TOKEN, Sampling::Never).await?;
    let (other, mut other_asked) = host(&proxy, "other", ALICE_TOKEN, Sampling::Answers).await?;
    let parkeds = tokio::spawn({
        let parked = parked.peer().clone();
        async move { sample(&parked, json!({"tag": "parked"})).await }
    });
    let asked = tokio::time::timeout(DEADLINE, parked_asked.recv()).await.context("the first host was never asked")?;
    assert!(asked.is_some_and(|prompt| prompt.contains("sampling of parked")));

    let others = tokio::time::timeout(DEADLINE, sample(other.peer(), json!({"tag": "other"})))
        .await
        .context("the other call hung")??;
    assert!(answer_of(&others).contains("the answer of other"), "relayed and answered: {others:?}");
    assert!(other_asked.try_recv().is_ok_and(|prompt| prompt.contains("sampling of other")));
    assert!(other_asked.try_recv().is_err(), "asked nothing of the parked call's");
    assert!(parked_asked.try_recv().is_err(), "the parked host was asked nothing more");

    let parkeds = tokio::time::timeout(DEADLINE * 2, parkeds).await.context("the parked call never ended")??;
    let message = message_of(&parkeds.expect_err("the parked call times out"));
    assert!(message.contains(&format!("did not answer within {REQUEST_TIMEOUT_SECS}s")), "{message}");
    for host in [parked, other] {
        host.cancel().await?;
    }
    Ok(())
}
