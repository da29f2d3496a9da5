//! `[cluster]`: the own tools and prompts of a per-principal or per-host upstream session, as
//! they cross replicas. The replica holding such a session answers another replica's
//! `tools/list`/`prompts/list` on its session endpoint with what the session lists as its own
//! ([`Tools::own_lists_here`]), and tells each MCP session of that endpoint serving it when
//! they change ([`Tools::own_list_changes`]: the endpoint sends `notifications/tools/list_changed`
//! or `prompts/list_changed`), so the other replica asks again as it would any upstream. A
//! replica that serves a host of a principal (a host session, for a per-host upstream) opens its
//! connection to the session's owner as the host arrives ([`Tools::watch_own_lists`]), so that
//! it hears of them even before any request of that host went there.
//!
//! Invariant: a change is told only to the MCP sessions serving that very session (upstream,
//! principal and host session alike); one lost to a full queue is told as both lists changed.

use std::sync::Arc;

use rmcp::model::{Prompt, Tool};
use tokio::sync::broadcast;

use super::Tools;

/// Changes queued for the session endpoint's MCP sessions; one that falls behind is told both
/// lists changed.
pub(super) const OWN_LISTS_QUEUE: usize = 256;

/// A session's own tools or prompts changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnListsChanged {
    pub upstream: Arc<str>,
    pub principal: Arc<str>,
    /// A per-host session's host session key (none: the principal's session).
    pub host: Option<u64>,
    pub tools: bool,
    pub prompts: bool,
}

/// The channel the changes go out on.
pub(super) fn channel() -> broadcast::Sender<OwnListsChanged> {
    broadcast::channel(OWN_LISTS_QUEUE).0
}

impl Tools {
    /// Every change of a session's own lists from now on (see the module doc).
    pub fn own_list_changes(&self) -> broadcast::Receiver<OwnListsChanged> {
        self.inner.own_lists_changed.subscribe()
    }

    /// What `principal`'s session of `upstream` here (host session `host`'s) lists as its own
    /// tools and prompts (the upstream's names); `None` while it lists the upstream's, or none
    /// is open here. Opens nothing.
    pub fn own_lists_here(
        &self,
        upstream: &str,
        principal: &str,
        host: Option<u64>,
    ) -> Option<(Vec<Tool>, Vec<Prompt>)> {
        let offered = self.inner.upstreams.get(upstream)?.own_offerings_here(principal, host)?;
        Some((offered.tools.clone(), offered.prompts.clone()))
    }

    /// A host of `principal` (host session `host`) is served here: the own lists of its
    /// sessions that other replicas hold are asked for now, and heard of from then on.
    pub fn watch_own_lists(&self, principal: &str, host: Option<u64>) {
        let upstreams = self.inner.upstreams.snapshot();
        for upstream in upstreams.values().filter(|upstream| upstream.has_sessions()) {
            upstream.own_offerings(principal, host);
        }
    }

    /// Tell the session endpoint's MCP sessions of `changed`.
    pub(super) fn own_lists_changed(&self, changed: OwnListsChanged) {
        // Nobody listening (no other replica connected): nothing to tell.
        let _ = self.inner.own_lists_changed.send(changed);
    }
}
