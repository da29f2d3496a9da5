//! `[cluster]`: a [`ProxyError`] as it crosses replicas. The replica running a request for
//! another (the owner of a per-principal or per-host upstream session) answers its error as its
//! own host would get it, carrying the error itself in `data` under [`CARRIED`]
//! ([`RemoteError::error_data`]); the replica that sent the request takes it back
//! ([`RemoteError::carried_in`]) and answers its host the same code, message and kind it would
//! give for a request served there. A kept call's error travels the same way, sealed into Redis
//! for a host that resumes its stream on another replica.
//!
//! Invariant: what travels is the proxy's own error, made from its fields on the replica that
//! answers the host; an upstream's own error text is in none of them (see [`ProxyError`]).

use std::time::Duration;

use rmcp::model::ErrorData;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ProxyError;

/// The key under an error's `data` that carries the [`RemoteError`] a replica answered.
pub const CARRIED: &str = "mcpProxyReplicaError";

/// A [`ProxyError`] of the replica that ran a request, as it travels (the upstream's name is
/// the receiving replica's to add, the same on every replica).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RemoteError {
    NotFound {
        uri: String,
    },
    UnknownName {
        offering: String,
        name: String,
    },
    InvalidParams {
        message: String,
    },
    /// The owner's session could not be opened; `cause` is why its stdio child could not
    /// start (masked as for a local host), when known.
    UpstreamDown {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<String>,
    },
    UpstreamTimeout {
        timeout_ms: u64,
    },
    /// `reason` is the proxy's (an error the upstream answered is "it answered with error N"),
    /// or for an error a request of another replica cannot get, the error's kind.
    UpstreamFailed {
        reason: String,
    },
    SessionLimit {
        limit: usize,
        setting: String,
    },
}

impl RemoteError {
    /// How `error` travels. A refusal decided where a request lands (a cursor, a rate limit, a
    /// subscription cap) or an `input_required` (which travels as an answer) is never a
    /// request's error at the replica running it: it travels as a failure naming its kind.
    pub fn of(error: &ProxyError) -> RemoteError {
        match error {
            ProxyError::NotFound { uri } => RemoteError::NotFound { uri: uri.clone() },
            ProxyError::UnknownName { offering, name } => {
                RemoteError::UnknownName { offering: offering.to_string(), name: name.clone() }
            }
            ProxyError::InvalidParams(message) => RemoteError::InvalidParams { message: message.clone() },
            ProxyError::UpstreamDown { cause, .. } => RemoteError::UpstreamDown { cause: cause.clone() },
            ProxyError::UpstreamTimeout { timeout, .. } => {
                RemoteError::UpstreamTimeout { timeout_ms: timeout.as_millis() as u64 }
            }
            ProxyError::UpstreamFailed { reason, .. } => RemoteError::UpstreamFailed { reason: reason.clone() },
            ProxyError::SessionLimit { limit, setting, .. } => {
                RemoteError::SessionLimit { limit: *limit, setting: setting.to_string() }
            }
            other => RemoteError::UpstreamFailed { reason: other.kind().to_string() },
        }
    }

    /// The error a caller of `upstream` gets.
    pub fn into_error(self, upstream: &str) -> ProxyError {
        let upstream = upstream.to_string();
        match self {
            RemoteError::NotFound { uri } => ProxyError::NotFound { uri },
            RemoteError::UnknownName { offering, name } => {
                let offering = if offering == "prompt" { "prompt" } else { "tool" };
                ProxyError::UnknownName { offering, name }
            }
            RemoteError::InvalidParams { message } => ProxyError::InvalidParams(message),
            RemoteError::UpstreamDown { cause } => ProxyError::UpstreamDown { upstream, cause },
            RemoteError::UpstreamTimeout { timeout_ms } => {
                ProxyError::UpstreamTimeout { upstream, timeout: Duration::from_millis(timeout_ms) }
            }
            RemoteError::UpstreamFailed { reason } => ProxyError::UpstreamFailed { upstream, reason },
            RemoteError::SessionLimit { limit, setting } => {
                let setting =
                    if setting == "max_sessions_per_principal" { "max_sessions_per_principal" } else { "max_sessions" };
                ProxyError::SessionLimit { upstream, limit, setting }
            }
        }
    }

    /// The JSON-RPC error for the replica that sent the request `error` ended: the one a host
    /// gets here, with the error itself under `data`'s `mcpProxyReplicaError` (`CARRIED`).
    pub fn error_data(error: &ProxyError) -> ErrorData {
        let mut answered = error.to_error_data();
        let Ok(carried) = serde_json::to_value(RemoteError::of(error)) else { return answered };
        match &mut answered.data {
            Some(Value::Object(data)) => {
                data.insert(CARRIED.into(), carried);
            }
            data => *data = Some(serde_json::json!({ CARRIED: carried })),
        }
        answered
    }

    /// The error another replica answered with [`RemoteError::error_data`]; `None` for any other
    /// (its session endpoint's own refusals, rmcp's).
    pub fn carried_in(error: &ErrorData) -> Option<RemoteError> {
        let carried = error.data.as_ref()?.get(CARRIED)?;
        serde_json::from_value(carried.clone()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error a host gets from the replica it asked, when `error` ended the request at
    /// another replica; and when it ended there.
    fn check(error: ProxyError) {
        let answered = RemoteError::error_data(&error);
        let carried = RemoteError::carried_in(&answered).expect("carried");
        let crossed = carried.into_error("fx");
        assert_eq!(crossed.kind(), error.kind(), "{error:?}");
        let (there, here) = (crossed.to_error_data(), error.to_error_data());
        assert_eq!((there.code, there.message, there.data), (here.code, here.message, here.data), "{error:?}");
    }

    #[test]
    fn an_error_crosses_with_its_code_message_and_kind() {
        let upstream = "fx".to_string();
        check(ProxyError::SessionLimit { upstream: upstream.clone(), limit: 1, setting: "max_sessions_per_principal" });
        check(ProxyError::SessionLimit { upstream: upstream.clone(), limit: 64, setting: "max_sessions" });
        let reason = "no access token for the upstream: its token endpoint is unreachable".to_string();
        check(ProxyError::UpstreamFailed { upstream: upstream.clone(), reason });
        check(ProxyError::UpstreamDown { upstream: upstream.clone(), cause: Some("`fx` exited with 1".into()) });
        check(ProxyError::UpstreamDown { upstream: upstream.clone(), cause: None });
        check(ProxyError::UpstreamTimeout { upstream, timeout: Duration::from_millis(1500) });
        check(ProxyError::InvalidParams("upstream `fx` refused the tools/call arguments".into()));
        check(ProxyError::not_found("fx://fx/item/9"));
        check(ProxyError::UnknownName { offering: "prompt", name: "greet".into() });
    }

    #[test]
    fn an_error_without_the_carrier_is_not_taken_for_one() {
        let plain = ErrorData::invalid_request("no pass", None);
        assert!(RemoteError::carried_in(&plain).is_none());
        let unknown = ErrorData::internal_error("x", Some(serde_json::json!({ CARRIED: { "kind": "unheard_of" } })));
        assert!(RemoteError::carried_in(&unknown).is_none());
    }
}
