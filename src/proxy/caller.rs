//! The caller of one downstream request: who it is, the policy snapshot its request is
//! decided with, and the JWT it came with (if any), which an upstream that exchanges tokens
//! exchanges for what this request sends it.
//!
//! Invariant: a request takes its policy snapshot once, when its `Caller` is made; every
//! decision of that request (route, list filter, content filter, cache scope) uses that
//! snapshot, so a policy reload in the middle of a request cannot split it between two sets of
//! rules.

use rmcp::model::{CacheScope, ResourceTemplate};

use crate::auth::SubjectToken;
use crate::policy::PolicySet;

/// One principal and the policies in force when its request began. Cheap to clone.
#[derive(Clone)]
pub struct Caller {
    principal: String,
    policy: PolicySet,
    subject: Option<SubjectToken>,
}

impl Caller {
    pub(crate) fn new(principal: &str, policy: PolicySet) -> Self {
        Self { principal: principal.to_string(), policy, subject: None }
    }

    /// The same caller, whose request came with the JWT `subject` (if any).
    pub fn with_subject(self, subject: Option<SubjectToken>) -> Self {
        Self { subject, ..self }
    }

    /// The JWT the request came with, if it came with one.
    pub fn subject(&self) -> Option<&SubjectToken> {
        self.subject.as_ref()
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
