//! The one error type of the proxy's request paths, and its one conversion to the wire.
//!
//! Invariant: what reaches a client says what went wrong and where (which upstream), never
//! upstream internals — an upstream's own error text, stack traces or credentials are logged
//! at most, never forwarded. The one exception is why a stdio child could not start or exited
//! ([`ProxyError::UpstreamDown`]'s `cause`): its command, how it ended and its last stderr
//! line with the values of the variables its entry names masked, told only where the upstream
//! is already named to the host. With `[cluster]`, an error crosses replicas as a
//! [`RemoteError`] (`crossing`), so a host gets the same error whichever replica ran its request.

use std::time::Duration;

use rmcp::model::{ErrorCode, ErrorData};
use serde_json::json;

mod crossing;

pub use crossing::RemoteError;

/// Everything a downstream request can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProxyError {
    /// The URI names no upstream, no resource, or one the caller may not see (the proxy does
    /// not reveal which).
    #[error("resource not found: {uri}")]
    NotFound { uri: String },
    /// A tool or prompt name that names nothing the caller may use: unknown, denied, or of an
    /// upstream that is not connected (the proxy does not reveal which). `-32602`, as the spec
    /// asks for an unknown tool.
    #[error("unknown {offering}: {name}")]
    UnknownName { offering: &'static str, name: String },
    /// A list cursor that was not minted by this proxy for this caller, or whose catalog
    /// generation is gone.
    #[error("invalid or expired cursor: list again without a cursor")]
    InvalidCursor,
    /// The request itself is malformed.
    #[error("invalid request: {0}")]
    InvalidParams(String),
    /// The upstream the URI routes to is not connected right now. `cause` is why its stdio
    /// child could not start (its command and how it failed or exited, never its environment),
    /// when that is why; said only where the upstream is already named to the host (a URI it
    /// may read, a tool or prompt it may call).
    #[error("upstream `{upstream}` is not connected{}; try again later", because(cause.as_deref()))]
    UpstreamDown { upstream: String, cause: Option<String> },
    /// The upstream did not answer in time.
    #[error("upstream `{upstream}` did not answer within {}", humantime(*.timeout))]
    UpstreamTimeout { upstream: String, timeout: Duration },
    /// The upstream answered with an error or an unusable result. `reason` is ours, not theirs.
    #[error("upstream `{upstream}` failed: {reason}")]
    UpstreamFailed { upstream: String, reason: String },
    /// A subscribe past a cap on what one session (or listen stream) or one principal may hold.
    #[error(
        "subscription limit reached: {subscriber} holds {limit} subscriptions ({setting}); unsubscribe from one first"
    )]
    SubscriptionLimit { subscriber: &'static str, limit: usize, setting: &'static str },
    /// A rate limit's bucket is empty (`[rate_limits]`, `[upstreams.rate_limits]`): the
    /// request was refused before any work; the next token comes after `retry_after`.
    #[error("rate limit reached: too many {kind} for this principal{}; retry after {}", at_upstream(upstream.as_deref(), scope), retry_text(*.retry_after))]
    RateLimited { kind: &'static str, scope: &'static str, upstream: Option<String>, retry_after: Duration },
    /// A per-principal or per-host upstream session is needed past a bound on how many may be
    /// open (on the upstream, or for one principal).
    #[error("upstream `{upstream}`: {limit} sessions are open, the most `{setting}` allows; try again when one closes")]
    SessionLimit { upstream: String, limit: usize, setting: &'static str },
    /// The upstream needs input from the host first (2026-07-28 MRTR). Not a failure: the read
    /// path passes it through to the host (uncached) instead of a result.
    #[error("the upstream needs input before it can answer")]
    InputRequired(Box<rmcp::model::InputRequiredResult>),
}

impl ProxyError {
    /// A bounded label for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotFound { .. } | Self::UnknownName { .. } => "not_found",
            Self::InvalidCursor => "invalid_cursor",
            Self::InvalidParams(_) => "invalid_params",
            Self::UpstreamDown { .. } => "upstream_down",
            Self::UpstreamTimeout { .. } => "upstream_timeout",
            Self::UpstreamFailed { .. } => "upstream_failed",
            Self::InputRequired(_) => "input_required",
            Self::SubscriptionLimit { .. } | Self::SessionLimit { .. } => "over_limit",
            Self::RateLimited { .. } => "rate_limited",
        }
    }

    pub fn not_found(uri: impl Into<String>) -> Self {
        Self::NotFound { uri: uri.into() }
    }

    /// The JSON-RPC error a client receives. Not-found uses the 2025 code (-32002); rmcp turns
    /// it into -32602 for 2026-07-28 requests, as that era asks.
    pub fn to_error_data(&self) -> ErrorData {
        let message = self.to_string();
        match self {
            Self::NotFound { uri } => ErrorData::resource_not_found(message, Some(json!({ "uri": uri }))),
            Self::InvalidCursor | Self::InvalidParams(_) | Self::UnknownName { .. } => {
                ErrorData::invalid_params(message, None)
            }
            Self::InputRequired(_) => ErrorData::internal_error(message, None),
            Self::SubscriptionLimit { .. } => ErrorData::invalid_request(message, None),
            Self::RateLimited { kind, scope, upstream, retry_after } => {
                let mut data = json!({ "retryAfterMs": retry_after_ms(*retry_after), "limit": kind, "scope": scope });
                if let (Some(upstream), &"upstream") = (upstream, scope) {
                    data["upstream"] = json!(upstream);
                }
                ErrorData::new(RATE_LIMITED, message, Some(data))
            }
            Self::SessionLimit { upstream, .. } => {
                ErrorData::invalid_request(message, Some(json!({ "upstream": upstream, "kind": self.kind() })))
            }
            Self::UpstreamDown { upstream, cause: Some(cause) } => ErrorData::internal_error(
                message,
                Some(json!({ "upstream": upstream, "kind": self.kind(), "cause": cause })),
            ),
            Self::UpstreamDown { upstream, cause: None }
            | Self::UpstreamTimeout { upstream, .. }
            | Self::UpstreamFailed { upstream, .. } => {
                ErrorData::internal_error(message, Some(json!({ "upstream": upstream, "kind": self.kind() })))
            }
        }
    }
}

impl From<ProxyError> for ErrorData {
    fn from(error: ProxyError) -> Self {
        error.to_error_data()
    }
}

/// The JSON-RPC code of a refusal by a rate limit: in the range JSON-RPC leaves to servers
/// (-32000..=-32099; the last digits recall HTTP's 429). Over HTTP the reply is also a `429`
/// with `Retry-After`.
pub const RATE_LIMITED: ErrorCode = ErrorCode(-32029);

/// Milliseconds until a refused request may succeed, rounded up (at least 1).
pub fn retry_after_ms(retry_after: Duration) -> u64 {
    u64::try_from(retry_after.as_micros().div_ceil(1000)).unwrap_or(u64::MAX).max(1)
}

/// Whole seconds for an HTTP `Retry-After`, rounded up (at least 1).
pub fn retry_after_secs(retry_after: Duration) -> u64 {
    retry_after_ms(retry_after).div_ceil(1000)
}

fn at_upstream(upstream: Option<&str>, scope: &str) -> String {
    match upstream {
        Some(upstream) if scope == "upstream" => format!(" at upstream `{upstream}`"),
        _ => String::new(),
    }
}

fn because(cause: Option<&str>) -> String {
    cause.map(|cause| format!(" ({cause})")).unwrap_or_default()
}

fn retry_text(retry_after: Duration) -> String {
    format!("{}ms", retry_after_ms(retry_after))
}

fn humantime(duration: Duration) -> String {
    if duration.subsec_millis() == 0 {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}
