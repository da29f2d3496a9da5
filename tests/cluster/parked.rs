//! A 2026-07-28 host's call parked on one replica resumes from any replica (issue 37, item 4):
//! three replicas behind haproxy (round-robin) in front of one HTTP fixture pinned to the 2025
//! era, whose `ask` prompt asks the calling host for a name by `sampling/createMessage` three
//! times in a row. A 2026-07-28 host takes no server-to-client requests, so each question comes
//! back as `input_required` with the proxy's `requestState`, which names the replica the call is
//! parked on; each retry lands on the next replica, which sends it there over MCP (a `prompts/get`
//! carrying the `requestState` and the host's `inputResponses`, at that replica's session
//! endpoint), where the call resumes. The prompt answers with the three names, in order.

#![allow(deprecated)] // Sampling is deprecated by SEP-2577 but still in the 2025 era.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context;
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, GetPromptRequestParams,
    Implementation, SamplingCapability, SamplingMessage,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientServiceExt, ErrorData, RoleClient};
use serde_json::{Value, json};

use super::replicas::{ALICE_TOKEN, TOKENS};
use crate::support::DEADLINE;
use crate::support::cluster::{Replicas, forwards};
use crate::support::fixture::{Era, HttpFixture};
use crate::support::proxy::{alice_and_bob_policies, alice_and_bob_under_policies, http_upstream};

/// Names the fixture's `ask` prompt asks for, one round each.
const ROUNDS: usize = 3;

/// Three replicas in front of one HTTP fixture spoken to in the 2025 era (it asks the calling
/// host by server-to-client requests), alice and bob allowed everything.
async fn three_replicas() -> anyhow::Result<(Replicas, HttpFixture, tempfile::TempDir)> {
    let fixture = HttpFixture::spawn(&[]).await?;
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let upstream = http_upstream("fx", &fixture.url, "protocol = \"2025-11-25\"");
    let config = alice_and_bob_under_policies("", policies.path(), &upstream);
    let cluster = Replicas::start(3, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("fx").await?;
    }
    Ok((cluster, fixture, policies))
}

/// A 2026-07-28 host that declares sampling and answers each question with the next name,
/// `heron 1`, `heron 2`, …
#[derive(Clone, Default)]
struct NamingHost {
    asked: Arc<AtomicUsize>,
}

impl ClientHandler for NamingHost {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(SamplingCapability::default());
        ClientConfig::new(capabilities, Implementation::new("naming-host", "1.0.0"))
    }

    async fn create_message(
        &self,
        _: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let name = format!("heron {}", self.asked.fetch_add(1, Ordering::SeqCst) + 1);
        Ok(CreateMessageResult::new(SamplingMessage::assistant_text(name), "test-model".into()))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_modern_hosts_answers_to_a_2025_upstreams_sampling_resume_its_call_over_mcp_from_any_replica()
-> anyhow::Result<()> {
    let (cluster, _fixture, _policies) = three_replicas().await?;
    let config = StreamableHttpClientTransportConfig::with_uri(cluster.url()).auth_header(ALICE_TOKEN);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    let host = NamingHost::default();
    let connecting = host.clone().serve_with_lifecycle(transport, Era::Modern.lifecycle());
    let alice = tokio::time::timeout(DEADLINE, connecting).await.context("connect")??;

    // The running service drives the rounds: it answers each `input_required` and asks again.
    let arguments = json!({"rounds": ROUNDS.to_string(), "by": "sampling"});
    let get = GetPromptRequestParams::new("fx__ask").with_arguments(arguments.as_object().cloned().unwrap_or_default());
    let result = tokio::time::timeout(DEADLINE, alice.get_prompt(get)).await.context("the prompt hung")??;
    let [message] = &result.messages[..] else { anyhow::bail!("expected one message: {result:?}") };
    let text = message.content.as_text().with_context(|| format!("no text in {message:?}"))?;
    let names: Value = serde_json::from_str(&text.text).with_context(|| format!("not JSON: {}", text.text))?;
    assert_eq!(names, json!({"names": ["heron 1", "heron 2", "heron 3"]}), "every round's answer reached the call");
    assert_eq!(host.asked.load(Ordering::SeqCst), ROUNDS, "the host was asked once per round");

    // Round-robin takes each retry to the next replica: the ones that landed elsewhere than the
    // call's replica crossed as MCP, resuming it at that replica's session endpoint.
    let all: Vec<_> = cluster.replicas.iter().collect();
    let resumed = forwards(all.iter().copied(), "resumed").await?;
    let sent = forwards(all.iter().copied(), "forwarded").await?;
    eprintln!("retries resumed over MCP: {resumed} (requests sent to another replica: {sent})");
    assert!(resumed >= 1.0, "no retry crossed to the replica its call waits on as MCP");
    assert!(sent >= resumed, "each retry that crossed was sent by a replica's connection to another");
    Ok(())
}
