//! The caller of one downstream request: who it is and the policy snapshot its request is
//! decided with.
//!
//! Invariant: a request takes its policy snapshot once, when its `Caller` is made; every
//! decision of that request (route, list filter, content filter, cache scope) uses that
//! snapshot, so a policy reload in the middle of a request cannot split it between two sets of
//! rules.

use rmcp::model::{CacheScope, ResourceTemplate};

use crate::policy::PolicySet;

/// One principal and the policies in force when its request began. Cheap to clone.
#[derive(Clone)]
pub struct Caller {
    principal: String,
    policy: PolicySet,
}

impl Caller {
    pub(crate) fn new(principal: &str, policy: PolicySet) -> Self {
        Self { principal: principal.to_string(), policy }
    }

    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// The policy snapshot this caller's request is decided with.
    pub fn policy(&self) -> &PolicySet {
        &self.policy
    }

    /// May this caller see a namespaced URI (as the proxy presents it)?
    pub fn may_see(&self, namespaced: &str) -> bool {
        self.policy.is_allow_all()
            || self.policy.judge(&self.principal, namespaced).is_ok_and(|judged| judged.decision.allowed)
    }

    pub fn may_see_template(&self, template: &ResourceTemplate) -> bool {
        self.policy.is_allow_all() || self.policy.template_visible(&self.principal, &template.uri_template)
    }

    /// The `cacheScope` a host is told: `public` only when the upstream said so and what a
    /// host sees does not depend on who it is.
    pub fn downstream_scope(&self, upstream_scope: CacheScope) -> CacheScope {
        match (upstream_scope, self.policy.is_allow_all()) {
            (CacheScope::Public, true) => CacheScope::Public,
            _ => CacheScope::Private,
        }
    }
}
