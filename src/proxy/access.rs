//! Access control on every path: the policy in force, checks on the URIs hosts name, filters
//! on what the proxy shows them, and what a policy reload changes for hosts already connected.
//!
//! Invariant: a URI a principal may not see gets the same answer as one that does not exist,
//! and nothing about it reaches that principal — not in lists, templates, reads, subscriptions
//! or notifications.

use rmcp::model::{CacheScope, ResourceTemplate};

use super::Proxy;
use crate::error::ProxyError;
use crate::metrics::DenialAction;
use crate::namespace;
use crate::policy::PolicySet;
use crate::uri;

/// Where a checked URI goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub upstream: String,
    /// The upstream's own URI (normalised, namespace stripped): what is sent upstream.
    pub original: String,
}

impl Proxy {
    /// The policy in force.
    pub fn policy(&self) -> PolicySet {
        self.inner.policy.read().expect("policy lock").clone()
    }

    /// Check a URI a host named: normalise it, decide, and route it. Denied, unroutable and
    /// malformed URIs all get the same not-found answer, naming the URI as the host sent it;
    /// only a URI over [`uri::MAX_URI_BYTES`] gets its own invalid-params error (that depends on
    /// nothing but its length).
    pub(crate) fn route_for(
        &self,
        principal: &str,
        requested: &str,
        action: DenialAction,
    ) -> Result<Route, ProxyError> {
        let not_found = || ProxyError::not_found(requested);
        let policy = self.policy();
        let (normalized, decision) =
            policy.normalize_and_decide(principal, requested).map_err(|error| match error {
                // Says nothing about any resource, and a not-found would echo the whole URI back.
                uri::UriError::TooLong => ProxyError::InvalidParams(format!("URI {error}")),
                _ => not_found(),
            })?;
        if !decision.allowed {
            tracing::debug!(principal, uri = requested, file = ?decision.file, pattern = ?decision.pattern, "denied");
            self.inner.metrics.policy_denied(action, decision.file.as_deref());
            return Err(not_found());
        }
        let (upstream, original) = namespace::split(&normalized).ok_or_else(not_found)?;
        if !self.inner.upstreams.contains_key(upstream) {
            return Err(not_found());
        }
        Ok(Route { upstream: upstream.to_string(), original: original.to_string() })
    }

    /// May `principal` see this namespaced URI (as the proxy presents it)?
    pub(crate) fn visible(&self, policy: &PolicySet, principal: &str, namespaced: &str) -> bool {
        policy.is_allow_all()
            || uri::normalize(namespaced).is_ok_and(|normalized| policy.decide(principal, &normalized).allowed)
    }

    /// `visible` for a list entry; a hidden one is counted as a list denial under the file
    /// that decided it.
    pub(crate) fn listable(&self, policy: &PolicySet, principal: &str, namespaced: &str) -> bool {
        if policy.is_allow_all() {
            return true;
        }
        let decision = uri::normalize(namespaced).map(|normalized| policy.decide(principal, &normalized));
        let allowed = decision.as_ref().is_ok_and(|d| d.allowed);
        if !allowed {
            let file = decision.ok().and_then(|d| d.file);
            self.inner.metrics.policy_denied(DenialAction::List, file.as_deref());
        }
        allowed
    }

    pub(crate) fn template_visible(&self, policy: &PolicySet, principal: &str, template: &ResourceTemplate) -> bool {
        policy.is_allow_all() || policy.template_visible(principal, &template.uri_template)
    }

    /// The `cacheScope` a host is told: `public` only when the upstream said so and what a
    /// host sees does not depend on who it is.
    pub fn downstream_scope(&self, upstream_scope: CacheScope) -> CacheScope {
        match (upstream_scope, self.policy().is_allow_all()) {
            (CacheScope::Public, true) => CacheScope::Public,
            _ => CacheScope::Private,
        }
    }

    /// Put a new policy in force: later requests use it, subscriptions it forbids are
    /// dropped, and hosts whose visible list changed hear `list_changed`.
    pub fn replace_policy(&self, next: PolicySet) {
        let previous = std::mem::replace(&mut *self.inner.policy.write().expect("policy lock"), next.clone());
        self.inner.tools.policy_replaced(&previous, &next);
        for (holder, info) in self.inner.fanout.outlets() {
            for (upstream, original) in self.inner.watches.held_by(holder) {
                let Some(namespaced) = namespace::namespaced(&upstream, &original) else { continue };
                if !self.visible(&next, &info.principal, &namespaced) {
                    tracing::info!(principal = %info.principal, uri = %namespaced, "subscription no longer allowed; dropped");
                    self.inner.watches.release(holder, &upstream, &original);
                }
            }
        }
        let sent = self.announce_list_changes();
        tracing::info!(files = ?next.files(), hosts_told = sent, "policies reloaded");
    }
}

impl Proxy {
    /// Load the policies folder again. On success the new rules are in force; on failure the
    /// old ones stay and every problem is logged.
    pub fn reload_policies(&self) -> bool {
        let Some(dir) = self.inner.config.policies.dir.clone() else {
            tracing::info!("no policies folder configured; nothing to reload");
            return false;
        };
        match PolicySet::load(&dir) {
            Ok(next) => {
                self.replace_policy(next);
                true
            }
            Err(problems) => {
                for problem in &problems {
                    tracing::error!(at = %problem.at, problem = %problem.message, "policy reload refused");
                }
                tracing::warn!(count = problems.len(), "policies unchanged: the new files have problems");
                false
            }
        }
    }

    /// Reload the policies whenever a file in their folder changes (bursts coalesced).
    pub fn watch_policies(&self, shutdown: tokio_util::sync::CancellationToken) {
        let Some(dir) = self.inner.config.policies.dir.clone() else { return };
        let (changed_tx, mut changed) = tokio::sync::mpsc::unbounded_channel();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|e| !e.kind.is_access()) {
                let _ = changed_tx.send(());
            }
        });
        let mut watcher = match watcher {
            Ok(watcher) => watcher,
            Err(error) => return tracing::warn!(error = %error, "cannot watch the policies folder; reload with SIGHUP"),
        };
        if let Err(error) = notify::Watcher::watch(&mut watcher, &dir, notify::RecursiveMode::NonRecursive) {
            return tracing::warn!(error = %error, "cannot watch the policies folder; reload with SIGHUP");
        }
        let proxy = self.clone();
        tokio::spawn(async move {
            let _watcher = watcher;
            loop {
                tokio::select! {
                    Some(()) = changed.recv() => {}
                    _ = shutdown.cancelled() => return,
                }
                // Editors write in several steps: wait for the burst to end.
                while let Ok(Some(())) = tokio::time::timeout(POLICY_SETTLE, changed.recv()).await {}
                proxy.reload_policies();
            }
        });
    }
}

/// Quiet time after the last change in the policies folder before it is reloaded.
const POLICY_SETTLE: std::time::Duration = std::time::Duration::from_millis(200);
