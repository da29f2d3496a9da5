//! Access: the policy in force, as one snapshot a request takes once ([`Caller`]), and the
//! decisions that need more than the snapshot — routing a URI a host named, counting list
//! denials. Loading and reloading policies (at start, on SIGHUP, on a change in their folder)
//! all go through [`Access::load`] and `policies::Policies::replace`.
//!
//! Invariant: a URI a principal may not see gets the same answer as one that does not exist,
//! and nothing about it reaches that principal — not in lists, templates, reads, subscriptions
//! or notifications.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use super::caller::Caller;
use crate::admin::PolicyReloadReport;
use crate::audit::scope;
use crate::error::ProxyError;
use crate::metrics::{DenialAction, DenialKind, Metrics};
use crate::namespace;
use crate::policy::PolicySet;
use crate::upstream::Registry;
use crate::uri;

/// Where a checked URI goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub upstream: String,
    /// The upstream's own URI (normalised, namespace stripped): what is sent upstream.
    pub original: String,
}

/// The access service: a cheap `Clone` handle, shared by every service that decides a URI.
#[derive(Clone)]
pub(crate) struct Access {
    /// Shared with the tools-and-prompts service (`crate::tools`), which reads it per request.
    policy: Arc<RwLock<PolicySet>>,
    upstreams: Registry,
    metrics: Metrics,
    /// What the last reload of the policies folder did, for `/status`.
    last_reload: Arc<Mutex<Option<PolicyReloadReport>>>,
}

impl Access {
    pub(crate) fn new(policy: PolicySet, upstreams: Registry, metrics: Metrics) -> Self {
        Self { policy: Arc::new(RwLock::new(policy)), upstreams, metrics, last_reload: Arc::default() }
    }

    /// What the last reload of the policies folder did (`None` until one ran).
    pub(crate) fn last_reload(&self) -> Option<PolicyReloadReport> {
        self.last_reload.lock().expect("policy reload lock").clone()
    }

    /// Count a reload of the policies folder: applied (with the hosts it told) or refused.
    pub(super) fn reloaded(&self, told: Option<(usize, usize)>) {
        let mut last = self.last_reload.lock().expect("policy reload lock");
        let reloads = last.as_ref().map_or(0, |report| report.reloads) + 1;
        let (outcome, (hosts_told, tools_told)) = match told {
            Some(told) => ("applied", told),
            None => ("refused", (0, 0)),
        };
        *last = Some(PolicyReloadReport { reloads, outcome, hosts_told, tools_told });
    }

    /// Load a policies folder: every problem is logged (one line each) and the set refused.
    pub(crate) fn load(dir: &Path) -> Option<PolicySet> {
        match PolicySet::load(dir) {
            Ok(set) => Some(set),
            Err(problems) => {
                for problem in &problems {
                    tracing::error!(at = %problem.at, problem = %problem.message, "policy reload refused");
                }
                tracing::warn!(count = problems.len(), "policies unchanged: the new files have problems");
                None
            }
        }
    }

    /// The policy in force now.
    pub(crate) fn policy(&self) -> PolicySet {
        self.policy.read().expect("policy lock").clone()
    }

    /// The caller of one request: `principal` with the policy in force now (taken once).
    pub(crate) fn caller(&self, principal: &str) -> Caller {
        Caller::new(principal, self.policy())
    }

    /// Put `next` in force; later callers decide with it. The policy it replaced.
    pub(crate) fn install(&self, next: PolicySet) -> PolicySet {
        std::mem::replace(&mut *self.policy.write().expect("policy lock"), next)
    }

    /// The policy in force, as the handle the tools service reads it through.
    pub(crate) fn shared_policy(&self) -> Arc<RwLock<PolicySet>> {
        self.policy.clone()
    }

    /// Check a URI a host named: normalise it, decide, and route it. Denied, unroutable and
    /// malformed URIs all get the same not-found answer, naming the URI as the host sent it;
    /// only a URI over [`uri::MAX_URI_BYTES`] gets its own invalid-params error (that depends on
    /// nothing but its length).
    pub(crate) fn route(&self, caller: &Caller, requested: &str, action: DenialAction) -> Result<Route, ProxyError> {
        let not_found = || ProxyError::not_found(requested);
        let principal = caller.principal();
        // Memoised in the caller's policy snapshot: the same answer as normalising and deciding.
        let judged = caller.policy().judge(principal, requested).map_err(|error| match error {
            // Says nothing about any resource, and a not-found would echo the whole URI back.
            uri::UriError::TooLong => ProxyError::InvalidParams(format!("URI {error}")),
            _ => not_found(),
        })?;
        let (normalized, decision) = (&judged.normalized, &judged.decision);
        scope::decided_by(decision.file.as_deref());
        if !decision.allowed {
            tracing::debug!(principal, uri = requested, file = ?decision.file, pattern = ?decision.pattern, "denied");
            self.metrics.policy_denied(action, decision.file.as_deref());
            let kind = if action == DenialAction::Subscribe { DenialKind::Subscribe } else { DenialKind::Read };
            let upstream = namespace::split(normalized).map(|(upstream, _)| upstream);
            scope::denied(&self.metrics, kind, requested, upstream);
            return Err(not_found());
        }
        let (upstream, original) = namespace::split(normalized).ok_or_else(not_found)?;
        if !self.upstreams.contains(upstream) {
            return Err(not_found());
        }
        scope::routed(upstream);
        Ok(Route { upstream: upstream.to_string(), original: original.to_string() })
    }

    /// The upstream a URI routes to when `caller` may read it; `None` when it is denied,
    /// malformed or names no upstream (nothing is counted: this is the rate limits' question,
    /// and the read that follows decides and counts).
    pub(crate) fn upstream_of(&self, caller: &Caller, requested: &str) -> Option<String> {
        let judged = caller.policy().judge(caller.principal(), requested).ok()?;
        if !judged.decision.allowed {
            return None;
        }
        let (upstream, _) = namespace::split(&judged.normalized)?;
        self.upstreams.contains(upstream).then(|| upstream.to_string())
    }

    /// `name` is a running upstream's.
    /// The upstream named `name`, if configured.
    pub(crate) fn upstream(&self, name: &str) -> Option<crate::upstream::Upstream> {
        self.upstreams.get(name)
    }

    pub(crate) fn is_upstream(&self, name: &str) -> bool {
        self.upstreams.contains(name)
    }

    /// [`Caller::may_see`] for a list entry; a hidden one is counted as a list denial under the
    /// file that decided it.
    pub(crate) fn listable(&self, caller: &Caller, namespaced: &str) -> bool {
        let policy = caller.policy();
        if policy.is_allow_all() {
            return true;
        }
        let decision = uri::normalize(namespaced).map(|normalized| policy.decide(caller.principal(), &normalized));
        let allowed = decision.as_ref().is_ok_and(|d| d.allowed);
        if !allowed {
            let file = decision.ok().and_then(|d| d.file);
            self.metrics.policy_denied(DenialAction::List, file.as_deref());
        }
        allowed
    }
}
