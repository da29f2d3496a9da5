//! The subscriptions an MCP session of the session endpoint (`owned`) makes for the other
//! replica: each `resources/subscribe` is a [`ReplicaSubscription`] on this replica's upstream
//! session of the identity the pass names (`Proxy::subscribe_for_replica`), and each change that session says of
//! the URI (or of one under it) goes to the other replica as `notifications/resources/updated`
//! on the MCP session's stream, so its HTTP upstream code hears it as from any upstream.
//!
//! Invariant: a URI is subscribed at most once per MCP session; unsubscribing it, or the MCP session's
//! end, lets go of it here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::Peer;
use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::RoleServer;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::proxy::ReplicaSubscription;
use crate::spine::Spine;

/// One MCP session's subscriptions, by the upstream's own URI; dropping it lets go of every one.
#[derive(Clone, Default)]
pub(super) struct ReplicaSubscriptions {
    subscribed: Arc<Mutex<HashMap<String, DropGuard>>>,
}

impl ReplicaSubscriptions {
    /// Keep `subscription` of `uri` until it is unsubscribed, the MCP session ends or the process stops:
    /// each change goes to `peer`. A second subscription of the same URI replaces the first.
    pub(super) fn keep(&self, spine: &Spine, uri: String, subscription: ReplicaSubscription, peer: Peer<RoleServer>) {
        let stop = spine.shutdown().child_token();
        let task = relay_changes(subscription, peer, stop.clone());
        spine.spawn(format!("replica-subscription:{uri}"), task);
        self.subscribed.lock().expect("replica subscriptions lock").insert(uri, stop.drop_guard());
    }

    /// Let go of `uri` (a no-op when it is not subscribed).
    pub(super) fn unsubscribe(&self, uri: &str) {
        self.subscribed.lock().expect("replica subscriptions lock").remove(uri);
    }
}

/// Each change of `subscription` as `notifications/resources/updated` to `peer`, until stopped (unsubscribed,
/// the MCP session's end, shutdown), its session lets go, or `peer` is gone.
async fn relay_changes(mut subscription: ReplicaSubscription, peer: Peer<RoleServer>, stop: CancellationToken) {
    loop {
        let uri = tokio::select! {
            _ = stop.cancelled() => return,
            changed = subscription.changes.recv() => match changed {
                Some(uri) => uri,
                None => return,
            },
        };
        if peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await.is_err() {
            return;
        }
    }
}
