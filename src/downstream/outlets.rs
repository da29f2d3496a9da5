//! rmcp ends of the fan-out: a legacy session's peer and a 2026-07-28 listen stream's sink.

use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::{Peer, RoleServer, SubscriptionSink};

use crate::fanout::{Outgoing, Outlet, SendError, SendFuture};

/// A 2025-era session: notifications go on its server→client stream.
pub(super) struct SessionOutlet(pub Peer<RoleServer>);

impl Outlet for SessionOutlet {
    fn send(&self, message: Outgoing) -> SendFuture<'_> {
        Box::pin(async move {
            let sent = match message {
                Outgoing::Updated(uri) => {
                    self.0.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await
                }
                Outgoing::ListChanged => self.0.notify_resource_list_changed().await,
                Outgoing::ToolsListChanged => self.0.notify_tool_list_changed().await,
                Outgoing::PromptsListChanged => self.0.notify_prompt_list_changed().await,
            };
            match sent {
                Ok(()) => Ok(()),
                Err(_) if self.0.is_transport_closed() => Err(SendError::Closed),
                Err(error) => {
                    tracing::debug!(error = %error, "notification not sent");
                    Err(SendError::Closed)
                }
            }
        })
    }
}

/// A `subscriptions/listen` stream: the sink stamps its subscription id.
pub(super) struct ListenOutlet(pub SubscriptionSink);

impl Outlet for ListenOutlet {
    fn send(&self, message: Outgoing) -> SendFuture<'_> {
        Box::pin(async move {
            let sent = match message {
                Outgoing::Updated(uri) => self.0.notify_resource_updated(uri).await,
                Outgoing::ListChanged => self.0.notify_resource_list_changed().await,
                Outgoing::ToolsListChanged => self.0.notify_tool_list_changed().await,
                Outgoing::PromptsListChanged => self.0.notify_prompt_list_changed().await,
            };
            sent.map_err(|_| SendError::Closed)
        })
    }
}
