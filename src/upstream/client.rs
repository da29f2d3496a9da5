//! The proxy's client side of one upstream connection: it identifies the proxy and turns the
//! upstream's legacy notifications into [`Notice`]s for the supervisor.

use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProtocolVersion, ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, RoleClient};
use tokio::sync::mpsc;

/// What an upstream said, for its supervisor.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Notice {
    ListChanged,
    /// The upstream said this URI changed.
    Updated(String),
    /// The URI may have changed unseen (a fresh connection, a listen stream that ended).
    MayHaveChanged(String),
    /// It said `tools/list_changed` or `prompts/list_changed`.
    OfferingsChanged,
    /// The upstream sent something faulty that no request could be failed for (for `/status`).
    Fault(String),
}

/// One per connection; rmcp runs each callback in its own task.
#[derive(Clone)]
pub(crate) struct UpstreamClient {
    notices: mpsc::UnboundedSender<Notice>,
    protocol_version: ProtocolVersion,
}

impl UpstreamClient {
    pub fn new(notices: mpsc::UnboundedSender<Notice>, protocol_version: ProtocolVersion) -> Self {
        Self { notices, protocol_version }
    }
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")),
        );
        info.protocol_version = self.protocol_version.clone();
        info
    }

    async fn on_resource_updated(&self, params: ResourceUpdatedNotificationParam, _: NotificationContext<RoleClient>) {
        let _ = self.notices.send(Notice::Updated(params.uri));
    }

    async fn on_resource_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.notices.send(Notice::ListChanged);
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.notices.send(Notice::OfferingsChanged);
    }

    async fn on_prompt_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.notices.send(Notice::OfferingsChanged);
    }
}
