//! The subscriptions an MCP session of the session endpoint (`owned`) holds for the other
//! replica: each `resources/subscribe` is a hold on this replica's upstream session of the
//! identity the pass names (`Proxy::hold_for_replica`), and each change that session says of
//! the URI (or of one under it) goes to the other replica as `notifications/resources/updated`
//! on the MCP session's stream, so its HTTP upstream code hears it as from any upstream.
//!
//! Invariant: a URI is held at most once per MCP session; unsubscribing it, or the MCP session's
//! end, lets go of it here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::Peer;
use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::RoleServer;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::proxy::ReplicaHold;
use crate::spine::Spine;

/// One MCP session's holds, by the upstream's own URI; dropping it lets go of every one.
#[derive(Clone, Default)]
pub(super) struct OwnedHolds {
    held: Arc<Mutex<HashMap<String, DropGuard>>>,
}

impl OwnedHolds {
    /// Keep `hold` of `uri` until it is released, the MCP session ends or the process stops:
    /// each change goes to `peer`. A second hold of the same URI replaces the first.
    pub(super) fn keep(&self, spine: &Spine, uri: String, hold: ReplicaHold, peer: Peer<RoleServer>) {
        let stop = spine.shutdown().child_token();
        let task = relay_changes(hold, peer, stop.clone());
        spine.spawn(format!("owned-hold:{uri}"), task);
        self.held.lock().expect("owned holds lock").insert(uri, stop.drop_guard());
    }

    /// Let go of `uri` (a no-op when it is not held).
    pub(super) fn release(&self, uri: &str) {
        self.held.lock().expect("owned holds lock").remove(uri);
    }
}

/// Each change of `hold` as `notifications/resources/updated` to `peer`, until stopped (released,
/// the MCP session's end, shutdown), the hold's session lets go, or `peer` is gone.
async fn relay_changes(mut hold: ReplicaHold, peer: Peer<RoleServer>, stop: CancellationToken) {
    loop {
        let uri = tokio::select! {
            _ = stop.cancelled() => return,
            changed = hold.changes.recv() => match changed {
                Some(uri) => uri,
                None => return,
            },
        };
        if peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await.is_err() {
            return;
        }
    }
}
