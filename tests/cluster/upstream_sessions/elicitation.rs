//! What the upstream asks a forwarded call's host: its log messages and elicitations reach the
//! host through the replica it asked; a 2026-07-28 host's call is parked where it waits and
//! resumed from any replica.

use anyhow::Context;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

use super::{ALICE_TOKEN, owner, owner_of, start, start_with};
use crate::support::DEADLINE;
use crate::support::cluster::{Replicas, forwards};
use crate::support::proxy::ProxyProcess;

/// A 2025 host that answers each elicitation with `word`, and keeps the log messages it hears.
#[derive(Clone)]
struct Answering {
    logged: tokio::sync::mpsc::UnboundedSender<String>,
}

impl rmcp::ClientHandler for Answering {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities = rmcp::model::ClientCapabilities::builder().enable_elicitation().build();
        rmcp::model::ClientConfig::new(capabilities, rmcp::model::Implementation::new("answering", "1.0.0"))
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let accepted = rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept);
        Ok(accepted.with_content(json!({ "word": "pelican" })))
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.logged.send(params.data.as_str().unwrap_or_default().to_string());
    }
}

/// What the upstream sends a forwarded call's host reaches it: alice (a 2025 host declaring
/// elicitation) calls, on a replica other than her owner, a tool that logs and then elicits a
/// word. The owner's session runs it (the log names the owner's child process); the log message
/// and the elicitation reach alice through the replica she asked, and her answer reaches the
/// upstream.
#[tokio::test(flavor = "multi_thread")]
async fn a_forwarded_calls_log_message_and_elicitation_reach_its_host() -> anyhow::Result<()> {
    let (cluster, _policies) = start(3).await?;
    let alice_owner = owner(&cluster, ALICE_TOKEN).await?;
    let asked = &cluster.replicas[(alice_owner + 1) % cluster.replicas.len()];
    let (logged_in, mut logged) = tokio::sync::mpsc::unbounded_channel();
    let config = StreamableHttpClientTransportConfig::with_uri(asked.url.as_str()).auth_header(ALICE_TOKEN);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    let alice =
        tokio::time::timeout(DEADLINE, Answering { logged: logged_in }.serve(transport)).await.context("connect")??;
    let result = tokio::time::timeout(DEADLINE, alice.peer().call_tool(CallToolRequestParams::new("per__ask")))
        .await
        .context("the call hung")??;
    let text = result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone());
    assert_eq!(text.as_deref(), Some("heard pelican"), "{result:?}");
    let message = tokio::time::timeout(DEADLINE, logged.recv()).await.context("no log message")?.context("closed")?;
    let pid = message.strip_prefix("asking ").with_context(|| format!("logged {message}"))?;
    assert_eq!(owner_of(&cluster, pid)?, alice_owner, "the owner's session ran the call");
    assert!(forwards([asked], "forwarded").await? >= 1.0);
    Ok(())
}

/// A 2026-07-28 host, which takes no server-to-client requests, gets the elicitation of a call
/// on a session another replica owns as `input_required`, and its retry resumes the call
/// wherever it lands: the call is parked on the replica the host asked, which its
/// `requestState` names. Through the balancer, each call and its retry land on two replicas in
/// turn (the owner among them or not); every call completes with the host's answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_modern_hosts_call_on_a_session_owned_elsewhere_is_parked_where_asked_and_resumed_from_any_replica()
-> anyhow::Result<()> {
    let (cluster, _policies) = start(3).await?;
    elicited_through_the_balancer(&cluster, 4).await?;
    let all: Vec<&ProxyProcess> = cluster.replicas.iter().collect();
    assert!(forwards(all.iter().copied(), "forwarded").await? >= 1.0, "some rounds went to the owner from elsewhere");
    assert!(forwards(all.iter().copied(), "resumed").await? >= 1.0, "some retries resumed their call over MCP");
    Ok(())
}

/// A 2026-07-28 host of alice's, through the balancer, calls `per__ask` `rounds` times; its
/// client answers each `input_required` (the upstream's elicitation) and calls again, and every
/// call completes with its answer.
async fn elicited_through_the_balancer(cluster: &Replicas, rounds: usize) -> anyhow::Result<()> {
    let (logged, _) = tokio::sync::mpsc::unbounded_channel();
    let config = StreamableHttpClientTransportConfig::with_uri(cluster.url()).auth_header(ALICE_TOKEN);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    let lifecycle = crate::support::fixture::Era::Modern.lifecycle();
    let connecting = rmcp::ClientServiceExt::serve_with_lifecycle(Answering { logged }, transport, lifecycle);
    let alice = tokio::time::timeout(DEADLINE, connecting).await.context("connect")??;
    for round in 0..rounds {
        // The running service drives the rounds: it answers `input_required` and calls again.
        let call = alice.call_tool(CallToolRequestParams::new("per__ask"));
        let result = tokio::time::timeout(DEADLINE, call).await.context("the call hung")??;
        let text = result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone());
        assert_eq!(text.as_deref(), Some("heard pelican"), "round {round}: {result:?}");
    }
    Ok(())
}

/// A 2026-07-28 host answers a shared 2025 upstream's elicitation through the balancer: the
/// call is parked on the replica that started it (each runs its own child of the server), and
/// a retry that lands on another replica is sent to that one over MCP (its session endpoint),
/// where the call resumes. Every round completes with the host's answer (before, a retry
/// elsewhere answered "requestState is unknown or expired").
#[tokio::test(flavor = "multi_thread")]
async fn a_modern_hosts_call_on_a_shared_upstream_resumes_on_the_replica_it_waits_on() -> anyhow::Result<()> {
    let (cluster, _policies) = start_with(3, "shared").await?;
    elicited_through_the_balancer(&cluster, 10).await?;
    let all: Vec<&ProxyProcess> = cluster.replicas.iter().collect();
    assert!(
        forwards(all.iter().copied(), "forwarded").await? >= 1.0,
        "some retries went to the replica their call waits on"
    );
    assert!(forwards(all.iter().copied(), "resumed").await? >= 1.0, "and resumed it there, over MCP");
    Ok(())
}
