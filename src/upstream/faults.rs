//! Faults of one upstream reply: too large, not UTF-8, not JSON-RPC, or answering a request
//! that was not asked. The guarded transports (`http.rs`, `stdio.rs`) turn such a reply into a
//! JSON-RPC error for the request it belongs to, so that request fails at once with a clear
//! reason — and only that request: the connection, the catalog and the subscriptions stay.
//!
//! Invariant: a fault error is recognised only by a per-process random token in its `data`, so
//! an upstream cannot forge one (nor make its own error text look like ours).

use std::sync::OnceLock;

use rmcp::model::{ErrorData, RequestId, ServerJsonRpcMessage};
use serde_json::json;

use super::credentials::TokenFailure;

/// The key under `data` that marks a fault error made by this proxy.
const MARKER: &str = "mcpProxyUpstreamFault";

/// What was wrong with a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Bigger than `max_response_bytes` (the limit).
    TooLarge(usize),
    /// Not valid UTF-8.
    InvalidUtf8,
    /// Not a JSON-RPC message.
    Malformed,
    /// A response whose id matches no request waiting for one.
    WrongId,
    /// No request was sent: no access token could be had for it (`credentials`).
    NoToken(TokenFailure),
}

impl Fault {
    /// A bounded label for logs.
    pub fn kind(self) -> &'static str {
        match self {
            Fault::TooLarge(_) => "too_large",
            Fault::InvalidUtf8 => "invalid_utf8",
            Fault::Malformed => "malformed",
            Fault::WrongId => "wrong_id",
            Fault::NoToken(_) => "no_token",
        }
    }

    /// What a client, `/status` and the log are told (ours, no upstream text).
    pub fn describe(self) -> String {
        match self {
            Fault::TooLarge(limit) => format!("upstream reply too large (over {limit} bytes)"),
            Fault::InvalidUtf8 => "upstream reply is not valid UTF-8".into(),
            Fault::Malformed => "upstream reply is not a valid JSON-RPC message".into(),
            Fault::WrongId => "upstream replied with an id no request was waiting for".into(),
            Fault::NoToken(failure) => failure.describe(),
        }
    }

    /// The JSON-RPC error that stands in for the faulty reply to request `id`.
    pub fn reply(self, id: RequestId) -> ServerJsonRpcMessage {
        ServerJsonRpcMessage::error(self.error(), Some(id))
    }

    /// The error itself (what [`Fault::of`] recognises).
    pub fn error(self) -> ErrorData {
        let (failure, status) = match self {
            Fault::NoToken(failure) => (failure.kind(), failure.status()),
            _ => ("", 0),
        };
        let marker = json!({ "token": token(), "kind": self.kind(), "limit": self.limit(), "failure": failure, "status": status });
        let data = json!({ MARKER: marker });
        ErrorData::internal_error(self.describe(), Some(data))
    }

    /// The fault a [`Fault::reply`] error stands for; `None` for any other error (the
    /// upstream's own, or a forged one).
    pub fn of(error: &ErrorData) -> Option<Fault> {
        let marker = error.data.as_ref()?.get(MARKER)?;
        if marker.get("token")?.as_str()? != token() {
            return None;
        }
        match marker.get("kind")?.as_str()? {
            "too_large" => Some(Fault::TooLarge(usize::try_from(marker.get("limit")?.as_u64()?).ok()?)),
            "invalid_utf8" => Some(Fault::InvalidUtf8),
            "malformed" => Some(Fault::Malformed),
            "wrong_id" => Some(Fault::WrongId),
            "no_token" => {
                let status = u16::try_from(marker.get("status")?.as_u64()?).ok()?;
                Some(Fault::NoToken(TokenFailure::from_parts(marker.get("failure")?.as_str()?, status)?))
            }
            _ => None,
        }
    }

    fn limit(self) -> usize {
        match self {
            Fault::TooLarge(limit) => limit,
            _ => 0,
        }
    }
}

/// A random token fixed for the life of the process.
fn token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| format!("{:032x}", rand::random::<u128>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_reply_round_trips_and_a_forged_one_does_not() {
        let no_token =
            [TokenFailure::Unreachable, TokenFailure::TimedOut, TokenFailure::Refused(401), TokenFailure::Unusable];
        let faults = [Fault::TooLarge(7), Fault::InvalidUtf8, Fault::Malformed, Fault::WrongId];
        for fault in faults.into_iter().chain(no_token.map(Fault::NoToken)) {
            let ServerJsonRpcMessage::Error(error) = fault.reply(RequestId::Number(3)) else { panic!() };
            assert_eq!(Fault::of(&error.error), Some(fault));
        }
        let forged = ErrorData::internal_error(
            "x",
            Some(json!({ MARKER: { "token": "guess", "kind": "malformed", "limit": 0 } })),
        );
        assert_eq!(Fault::of(&forged), None);
    }
}
