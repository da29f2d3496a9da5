//! Faults of one upstream reply: too large, not UTF-8, not JSON-RPC, or answering a request
//! that was not asked. The guarded transports (`http.rs`, `stdio.rs`) turn such a reply into a
//! JSON-RPC error for the request it belongs to, so that request fails at once with a clear
//! reason — and only that request: the connection, the catalog and the subscriptions stay.
//!
//! Invariant: a fault error is recognised only by a per-process random token in its `data`, so
//! an upstream cannot forge one (nor make its own error text look like ours).

use std::sync::OnceLock;

use rmcp::model::{ErrorData, RequestId, ServerJsonRpcMessage};
use rmcp::service::ServiceError;
use rmcp::transport::streamable_http_client::StreamableHttpError;
use serde_json::json;

use super::credentials::TokenFailure;
use crate::error::ProxyError;

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

impl super::Upstream {
    /// Note a faulty reply in `/status` (`last_error`, the connection stays up).
    pub(super) fn record_fault(&self, fault: String) {
        self.update_status(|status| status.last_error = Some(fault));
    }

    /// A read that got `fault` for an answer fails alone: logged, shown in `/status`, and told
    /// to the client in our words.
    pub(super) fn read_fault(&self, uri: &str, fault: Fault) -> ProxyError {
        tracing::warn!(upstream = self.name(), uri, fault = fault.kind(), "upstream read failed: faulty reply");
        self.record_fault(format!("resources/read: {}", fault.describe()));
        ProxyError::UpstreamFailed { upstream: self.name().to_string(), reason: fault.describe() }
    }

    /// Whether a read's error is about the reply rather than the connection: the reply stream
    /// of this request closed while the connection is still open, or an HTTP status answered
    /// it. Such a read fails alone; the health probe judges the connection.
    pub(super) fn reply_failure(&self, error: &ServiceError, connection_open: bool) -> Option<String> {
        match error {
            ServiceError::TransportClosed if connection_open => {
                Some("the upstream closed its reply before answering".into())
            }
            ServiceError::TransportSend(error) => match error
                .error
                .downcast_ref::<StreamableHttpError<reqwest::Error>>()
            {
                Some(StreamableHttpError::HttpStatus(status)) => Some(format!("it answered HTTP {}", status.status)),
                _ => None,
            },
            _ => None,
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
