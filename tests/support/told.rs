//! A 2025 host (rmcp over streamable HTTP) that records, in order, the `updated` and
//! `tools/list_changed` it hears; and what tests ask of a host's tools.

use anyhow::Context;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};

use super::fixture::DEADLINE;

/// What a [`Told`] host heard, in order: `updated <uri>` or `tools/list_changed`.
pub type Heard = tokio::sync::mpsc::UnboundedReceiver<String>;

/// A 2025 host that records the `updated` and `tools/list_changed` it hears, in order.
#[derive(Clone)]
pub struct Told(tokio::sync::mpsc::UnboundedSender<String>);

impl Told {
    /// A handler, and what it will have heard.
    pub fn new() -> (Told, Heard) {
        let (told, heard) = tokio::sync::mpsc::unbounded_channel();
        (Told(told), heard)
    }
}

impl rmcp::ClientHandler for Told {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(format!("updated {}", params.uri));
    }

    async fn on_tool_list_changed(&self, _: rmcp::service::NotificationContext<RoleClient>) {
        let _ = self.0.send("tools/list_changed".into());
    }
}

/// A [`Told`] host of the principal whose bearer token is `token`, connected to `url`.
pub async fn told_host(url: &str, token: &str) -> anyhow::Result<(RunningService<RoleClient, Told>, Heard)> {
    let (told, heard) = Told::new();
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    let host = tokio::time::timeout(DEADLINE, told.serve(transport)).await.context("connect")??;
    Ok((host, heard))
}

/// The next thing a [`Told`] host heard.
pub async fn next_heard(heard: &mut Heard) -> anyhow::Result<String> {
    tokio::time::timeout(DEADLINE, heard.recv()).await.context("nothing heard")?.context("the host closed")
}

/// The names of every tool `peer` is listed.
pub async fn tool_names(peer: &Peer<RoleClient>) -> anyhow::Result<Vec<String>> {
    let tools = tokio::time::timeout(DEADLINE, peer.list_all_tools()).await.context("the list hung")??;
    Ok(tools.into_iter().map(|tool| tool.name.to_string()).collect())
}

/// The text `name` answers `peer`, or the error's message.
pub async fn answered(peer: &Peer<RoleClient>, name: &str) -> anyhow::Result<Result<String, String>> {
    let answer = tokio::time::timeout(DEADLINE, peer.call_tool(CallToolRequestParams::new(name.to_string())))
        .await
        .context("the call hung")?;
    Ok(match answer {
        Ok(result) => Ok(result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default()),
        Err(rmcp::ServiceError::McpError(error)) => Err(error.message.to_string()),
        Err(other) => return Err(other.into()),
    })
}
