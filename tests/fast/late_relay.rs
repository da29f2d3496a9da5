//! What a stdio upstream sends for a call after that call has answered goes to no host — never
//! to the call that happens to be in flight then, another principal's. The fixture (over stdio)
//! logs `<tag> late` and asks `late sampling of <tag>` some time after its `late` tool answered
//! alice, while bob's call is the only one in flight; bob hears and is asked nothing of alice's,
//! and the proxy counts what it could not attribute. A message that names its call by the
//! progress token the proxy gave it (`_meta.progressToken`) reaches that call's host. The
//! upstream is set `session = "shared"`: what is tested is its one child serving both.

#![allow(deprecated)] // Sampling and logging are deprecated by SEP-2577 but still in the 2025 era.

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    Implementation, LoggingMessageNotificationParam, SamplingCapability, SamplingMessage,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::support::fixture::DEADLINE;
use crate::support::proxy::{ProxyProcess, fixture_upstream, toml_str};

const ALICE_TOKEN: &str = "alice-tok-late-relay-4b1e";
const BOB_TOKEN: &str = "bob-tok-late-relay-9c2f";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
const EVERYTHING: &str = "allow = [\"**\"]\n";
/// The lines of `mcp_proxy_relay_unattributed_total` for the fixture's log messages and
/// sampling requests.
const UNATTRIBUTED_LOGS: [(&str, &str); 2] = [("upstream", "fx"), ("kind", "log")];
const UNATTRIBUTED_SAMPLING: [(&str, &str); 2] = [("upstream", "fx"), ("kind", "sampling")];

/// What a host was sent: a log message's data, or a sampling request's prompt.
#[derive(Debug, Clone, PartialEq)]
enum Heard {
    Log(String),
    Asked(String),
}

/// A host that declares sampling, answers it, and records what it is sent.
#[derive(Clone)]
struct Recording {
    name: &'static str,
    heard: mpsc::UnboundedSender<Heard>,
}

impl ClientHandler for Recording {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(SamplingCapability::default());
        ClientConfig::new(capabilities, Implementation::new(self.name, "1.0.0"))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let prompt = serde_json::to_string(&params.messages).unwrap_or_default();
        let _ = self.heard.send(Heard::Asked(prompt));
        let answer = SamplingMessage::assistant_text(format!("the answer of {}", self.name));
        Ok(CreateMessageResult::new(answer, "test-model".into()))
    }

    async fn on_logging_message(&self, params: LoggingMessageNotificationParam, _: NotificationContext<RoleClient>) {
        let _ = self.heard.send(Heard::Log(params.data.as_str().unwrap_or_default().to_owned()));
    }
}

type Host = RunningService<RoleClient, Recording>;

async fn host(url: &str, name: &'static str, token: &str) -> anyhow::Result<(Host, mpsc::UnboundedReceiver<Heard>)> {
    let (heard, received) = mpsc::unbounded_channel();
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    let host =
        tokio::time::timeout(DEADLINE, Recording { name, heard }.serve(transport)).await.context("connect")??;
    Ok((host, received))
}

async fn late(host: &Peer<RoleClient>, arguments: serde_json::Value) -> anyhow::Result<()> {
    let params =
        CallToolRequestParams::new("fx__late").with_arguments(arguments.as_object().cloned().unwrap_or_default());
    let result = tokio::time::timeout(DEADLINE, host.call_tool(params)).await.context("the call hung")??;
    anyhow::ensure!(result.is_error != Some(true), "{result:?}");
    Ok(())
}

fn drained(heard: &mut mpsc::UnboundedReceiver<Heard>) -> Vec<Heard> {
    std::iter::from_fn(|| heard.try_recv().ok()).collect()
}

async fn start() -> anyhow::Result<(ProxyProcess, tempfile::TempDir)> {
    let policies = tempfile::tempdir()?;
    for principal in ["alice", "bob"] {
        std::fs::write(
            policies.path().join(format!("{principal}.toml")),
            format!("principals = [\"{principal}\"]\n{EVERYTHING}"),
        )?;
    }
    let config = format!(
        "[auth]\nmode = \"bearer\"\n\n\
         [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n\
         [policies]\ndir = {}\n\n{}protocol = \"2025-11-25\"\nsession = \"shared\"\n",
        toml_str(policies.path().to_str().expect("utf-8 path")),
        fixture_upstream("fx", &[])
    );
    let proxy = ProxyProcess::start_with_offerings(&config, &TOKENS, &["fx"]).await?;
    Ok((proxy, policies))
}

/// bob's call is in flight (held 3 s) while alice's call answers and, 200 ms later, the fixture
/// logs and asks for alice's call: bob gets none of it, and both are counted unattributed.
#[tokio::test(flavor = "multi_thread")]
async fn a_stdio_upstreams_late_messages_for_alice_never_reach_bobs_call() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    let (alice, mut alice_heard) = host(&proxy.url, "alice", ALICE_TOKEN).await?;
    let (bob, mut bob_heard) = host(&proxy.url, "bob", BOB_TOKEN).await?;
    // alice calls first, so that both principals have called before any message below is sent
    // (while only bob had, his own unnamed messages would rightly reach his lone call). Her
    // "first late" comes 300 ms after her answer, when no call is in flight: dropped and counted.
    // (Sent at once, it could be read before her answer, while her call was still the only one
    // of the only principal, and rightly reach her.)
    late(alice.peer(), json!({"tag": "first", "after_ms": 300})).await?;
    proxy.wait_metric("mcp_proxy_relay_unattributed_total", &UNATTRIBUTED_LOGS, |n| n >= 1.0).await?;
    let bobs = tokio::spawn({
        let bob = bob.peer().clone();
        async move { late(&bob, json!({"tag": "bob", "hold_ms": 3000})).await }
    });
    // bob's call is at the upstream before alice's second one: "bob during" is counted only once
    // bob's call is in flight.
    proxy.wait_metric("mcp_proxy_relay_unattributed_total", &UNATTRIBUTED_LOGS, |n| n >= 2.0).await?;
    late(alice.peer(), json!({"tag": "alice", "after_ms": 200, "sample": true})).await?;
    bobs.await??;
    let heard = drained(&mut bob_heard);
    let of_alice = |h: &Heard| matches!(h, Heard::Log(t) | Heard::Asked(t) if t.contains("alice"));
    assert!(!heard.iter().any(of_alice), "bob was sent alice's: {heard:?}");
    proxy.wait_metric("mcp_proxy_relay_unattributed_total", &UNATTRIBUTED_SAMPLING, |n| n >= 1.0).await?;
    assert!(!drained(&mut alice_heard).iter().any(|h| matches!(h, Heard::Asked(_))), "her call was over");
    // Untagged, even a message during a call is not guessed at: "first late", "alice during",
    // "bob during", "alice late" and "bob late" are all dropped and counted.
    proxy.wait_metric("mcp_proxy_relay_unattributed_total", &UNATTRIBUTED_LOGS, |n| n >= 5.0).await?;

    // A message that names its call reaches that call's host, and only it.
    // (Sent on her call's stream before its answer; her client runs each notification callback
    // in a task of its own, so it may record it just after the call returned.)
    late(alice.peer(), json!({"tag": "named", "tagged": true})).await?;
    let named = Heard::Log("named during".into());
    let heard = tokio::time::timeout(DEADLINE, async {
        let mut heard = Vec::new();
        while let Some(next) = alice_heard.recv().await {
            heard.push(next);
            if heard.contains(&named) {
                break;
            }
        }
        heard
    })
    .await;
    assert!(heard.as_ref().is_ok_and(|heard| heard.contains(&named)), "her call's named message: {heard:?}");
    assert!(!drained(&mut bob_heard).iter().any(|h| matches!(h, Heard::Log(t) if t.contains("named"))));
    for host in [alice, bob] {
        host.cancel().await?;
    }
    Ok(())
}
