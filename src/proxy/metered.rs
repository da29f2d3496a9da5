//! The rate limits' door: [`Proxy::admit`](super::Proxy::admit) takes one token for a host's
//! call or read (see [`crate::rate_limits`]) before any cache or upstream work, or refuses it
//! with [`ProxyError::RateLimited`] (counted in `mcp_proxy_rate_limited_total`).
//!
//! Invariant: a per-upstream bucket is spent only for a target the caller may use (a URI it
//! may read, a listed tool or prompt it may call): a name it may not see is charged to its own
//! bucket alone, so a refusal never tells it that something it may not see exists.

use super::access::Access;
use super::caller::Caller;
use crate::error::ProxyError;
use crate::metrics::Metrics;
use crate::namespace;
use crate::rate_limits::{Kind, RateLimits};
use crate::tools::Tools;

/// One request that spends a token, with what names its upstream.
#[derive(Debug, Clone, Copy)]
pub enum Metered<'a> {
    /// `resources/read` of a namespaced URI.
    Read(&'a str),
    /// `tools/call` of a presented name (a bridge tool names no upstream).
    Tool(&'a str),
    /// `prompts/get`, or `completion/complete` of a prompt, by presented name.
    Prompt(&'a str),
    /// `completion/complete` of a namespaced resource template.
    Template(&'a str),
    /// A call of no upstream (an unsupported completion reference, say).
    Other,
}

/// What the door uses.
pub(super) struct Door {
    pub(super) limits: RateLimits,
    pub(super) access: Access,
    pub(super) tools: Tools,
    pub(super) metrics: Metrics,
}

impl Door {
    pub(super) fn admit(&self, caller: &Caller, request: Metered<'_>) -> Result<(), ProxyError> {
        if !self.limits.is_on() {
            return Ok(());
        }
        let (kind, upstream) = self.target(caller, request);
        let Err(limited) = self.limits.check(kind, caller.principal(), upstream.as_deref()) else { return Ok(()) };
        let (kind, scope) = (limited.kind.label(), limited.scope.label());
        self.metrics.rate_limited(kind, scope, limited.upstream.as_deref());
        tracing::debug!(principal = caller.principal(), kind, scope, upstream = ?limited.upstream, retry_after = ?limited.retry_after, "rate limited");
        Err(ProxyError::RateLimited { kind, scope, upstream: limited.upstream, retry_after: limited.retry_after })
    }

    /// The kind of token and the upstream of a target the caller may use.
    fn target(&self, caller: &Caller, request: Metered<'_>) -> (Kind, Option<String>) {
        let (policy, principal) = (caller.policy(), caller.principal());
        match request {
            Metered::Read(uri) => (Kind::Reads, self.access.upstream_of(caller, uri)),
            Metered::Tool(name) => (Kind::Calls, self.tools.upstream_of(policy, principal, false, name)),
            Metered::Prompt(name) => (Kind::Calls, self.tools.upstream_of(policy, principal, true, name)),
            Metered::Template(template) => {
                let visible = policy.is_allow_all() || policy.template_visible(principal, template);
                let upstream = namespace::split(template).map(|(upstream, _)| upstream);
                let upstream = upstream.filter(|upstream| visible && self.access.is_upstream(upstream));
                (Kind::Calls, upstream.map(str::to_string))
            }
            Metered::Other => (Kind::Calls, None),
        }
    }
}
