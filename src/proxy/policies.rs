//! Putting policies in force while the proxy runs: a reload of the policies folder (its
//! `policy-watch` task, or a config reload that brings policies) replaces the set in
//! [`Access`], drops the subscriptions the new set forbids, and tells the hosts whose visible
//! lists changed (resources, tools, prompts).
//!
//! Invariant: a refused set changes nothing (every problem logged, counted in `/status`); an
//! applied one is in force for every request that begins after it.

use std::path::PathBuf;
use std::time::Duration;

use super::access::Access;
use super::subscriptions::Subscriptions;
use super::views::Views;
use crate::audit::{self, Audit};
use crate::policy::PolicySet;
use crate::spine::Spine;
use crate::tools::Tools;

/// Quiet time after the last change in the policies folder before it is reloaded.
const POLICY_SETTLE: Duration = Duration::from_millis(200);

/// The policy reloader, with what it uses. A cheap `Clone` handle.
#[derive(Clone)]
pub(super) struct Policies {
    /// Where the policy in force is.
    pub(super) access: Access,
    /// Drops the subscriptions a new set forbids.
    pub(super) subscriptions: Subscriptions,
    /// Tells hosts whose tools or prompts changed.
    pub(super) tools: Tools,
    /// Tells hosts whose resources or templates changed.
    pub(super) views: Views,
    /// Each reload of the policies folder is audited.
    pub(super) audit: Audit,
    /// `policies.dir`, as at start.
    pub(super) dir: Option<PathBuf>,
}

impl Policies {
    /// Put a new policy in force: later requests use it, subscriptions it forbids are
    /// dropped, and hosts whose visible lists changed hear `list_changed`.
    fn replace(&self, next: PolicySet) {
        let tools_told = self.install(next.clone());
        let sent = self.views.announce();
        self.access.reloaded(Some((sent, tools_told)));
        tracing::info!(files = ?next.files(), hosts_told = sent, tools_told, "policies reloaded");
        let mut event = audit::Event::new(audit::Kind::Reload, "applied");
        let changes = serde_json::json!({"what": "policies", "files": next.files(), "hosts_told": sent, "tools_told": tools_told});
        event.changes = Some(changes);
        self.audit.record(event);
    }

    /// Put a new policy in force and drop the subscriptions it forbids; hosts whose tools or
    /// prompts (the bridge's tools included) changed are told, and counted in the answer; the
    /// resources' `list_changed` is left to the caller.
    pub(super) fn install(&self, next: PolicySet) -> usize {
        self.access.install(next.clone());
        self.subscriptions.drop_forbidden(&next);
        self.tools.announce()
    }

    /// Load the policies folder again. On success the new rules are in force; on failure the
    /// old ones stay and every problem is logged.
    fn reload(&self) -> bool {
        let Some(dir) = &self.dir else {
            tracing::info!("no policies folder configured; nothing to reload");
            return false;
        };
        let applied = Access::load(dir).map(|next| self.replace(next)).is_some();
        if !applied {
            self.access.reloaded(None);
            let mut event = audit::Event::new(audit::Kind::Reload, "refused");
            event.changes = Some(serde_json::json!({"what": "policies"}));
            self.audit.record(event);
        }
        applied
    }

    /// Reload the policies whenever a file in their folder changes (bursts coalesced): the
    /// `policy-watch` task on `spine`.
    pub(super) fn watch(&self, spine: &Spine) {
        let Some(dir) = &self.dir else { return };
        let Some(mut changes) = super::watch::FileChanges::watch(dir, None, "policies folder") else { return };
        let policies = self.clone();
        let shutdown = spine.shutdown();
        spine.spawn("policy-watch", async move {
            while changes.next_burst(POLICY_SETTLE, &shutdown).await {
                policies.reload();
            }
        });
    }
}
