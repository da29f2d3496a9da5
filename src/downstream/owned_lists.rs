//! The list changes an MCP session of the session endpoint (`owned`) tells the other replica:
//! when what the upstream session it serves lists as its own changes here, that replica hears
//! `notifications/tools/list_changed` or `notifications/prompts/list_changed` on the MCP
//! session's stream, and its HTTP upstream code asks `tools/list`/`prompts/list` again as it
//! would of any upstream.
//!
//! Invariant: an MCP session hears only of the upstream session it is bound to; one that fell
//! behind the queue hears both lists changed.

use rmcp::Peer;
use rmcp::service::RoleServer;
use tokio::sync::broadcast::{Receiver, error::RecvError};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::cluster::session_pass::Identity;
use crate::spine::Spine;
use crate::tools::OwnListsChanged;

/// Tell `peer` of each change of `identity`'s session's own lists that `changes` carries,
/// until the returned guard is dropped (the MCP session's end), the process stops or `peer` is
/// gone.
pub(super) fn relay(
    spine: &Spine,
    changes: Receiver<OwnListsChanged>,
    identity: Identity,
    peer: Peer<RoleServer>,
) -> DropGuard {
    let stop = spine.shutdown().child_token();
    spine.spawn(format!("owned-lists:{}", identity.upstream), relay_changes(changes, identity, peer, stop.clone()));
    stop.drop_guard()
}

async fn relay_changes(
    mut changes: Receiver<OwnListsChanged>,
    identity: Identity,
    peer: Peer<RoleServer>,
    stop: CancellationToken,
) {
    let host = identity.host.map(|host| host.id);
    loop {
        let (tools, prompts) = tokio::select! {
            _ = stop.cancelled() => return,
            changed = changes.recv() => match changed {
                Ok(changed) => {
                    let ours = *changed.upstream == *identity.upstream
                        && *changed.principal == *identity.principal
                        && changed.host == host;
                    if !ours {
                        continue;
                    }
                    (changed.tools, changed.prompts)
                }
                Err(RecvError::Lagged(_)) => (true, true),
                Err(RecvError::Closed) => return,
            },
        };
        let told = match (tools, prompts) {
            (true, true) => peer.notify_tool_list_changed().await.and(peer.notify_prompt_list_changed().await),
            (true, false) => peer.notify_tool_list_changed().await,
            (false, true) => peer.notify_prompt_list_changed().await,
            (false, false) => Ok(()),
        };
        if told.is_err() {
            return;
        }
    }
}
