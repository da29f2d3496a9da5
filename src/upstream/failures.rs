//! The one mapping of an upstream's failed answer (rmcp's `ServiceError`) to the proxy's
//! [`ProxyError`], for a read and for any other request alike: a faulty reply fails alone
//! (recorded in `/status`); a reply that failed while the connection stays open fails alone; an
//! error the upstream answered becomes ours (a read's "no such resource", a request's refused
//! arguments, the 2026 era's missing back channel, else "it answered with error N" — never its
//! own text, but for the proxy's own folder server); anything else means the connection broke.
//!
//! Invariant: an upstream's own error text never reaches a host (the folder server's excepted:
//! its messages are the proxy's own).

use rmcp::ServiceError;
use rmcp::model::{ErrorCode, ErrorData};
use rmcp::transport::streamable_http_client::StreamableHttpError;

use super::Connection;
use super::faults::Fault;
use crate::error::ProxyError;
use crate::protocol::Era;

/// Why a 2026-07-28 upstream failed a call with -32600, in the host's words: what servers that
/// serve both eras (the Python SDK 2.x) answer when a call asks the host for sampling,
/// elicitation or roots, requests that era has no channel for.
const NO_BACK_CHANNEL: &str = "it refused the call as invalid (-32600); the proxy speaks 2026-07-28 to it, and in that era a \
     server cannot ask the host for sampling, elicitation or roots during a call (its operator can set \
     `protocol = \"2025-11-25\"` for this upstream)";

/// What was asked of the upstream.
#[derive(Clone, Copy)]
enum Asked<'a> {
    /// `resources/read` of this (un-namespaced) URI.
    Read(&'a str),
    /// Any other request, by method.
    Request(&'static str),
}

impl<'a> Asked<'a> {
    fn method(self) -> &'static str {
        match self {
            Asked::Read(_) => "resources/read",
            Asked::Request(method) => method,
        }
    }

    fn uri(self) -> Option<&'a str> {
        match self {
            Asked::Read(uri) => Some(uri),
            Asked::Request(_) => None,
        }
    }
}

impl Connection {
    /// The error for a failed `resources/read` of `uri`.
    pub(super) fn read_error(&self, uri: &str, error: ServiceError, connection_open: bool) -> ProxyError {
        self.answer_error(Asked::Read(uri), error, connection_open)
    }

    /// The error for a failed request `method` (a list, a routed call, …).
    pub(super) fn request_error(&self, method: &'static str, error: ServiceError, connection_open: bool) -> ProxyError {
        self.answer_error(Asked::Request(method), error, connection_open)
    }

    fn answer_error(&self, asked: Asked<'_>, error: ServiceError, connection_open: bool) -> ProxyError {
        if let ServiceError::McpError(e) = &error
            && let Some(fault) = Fault::of(e)
        {
            let (method, uri) = (asked.method(), asked.uri());
            tracing::warn!(
                upstream = self.name(),
                method,
                uri,
                fault = fault.kind(),
                "upstream request failed: faulty reply"
            );
            self.record_fault(format!("{method}: {}", fault.describe()));
            return self.failed(fault.describe());
        }
        let (method, uri) = (asked.method(), asked.uri());
        if let Some(reason) = self.reply_failure(&error, connection_open) {
            tracing::warn!(upstream = self.name(), method, uri, error = %error, "upstream request failed; connection kept");
            return self.failed(reason);
        }
        match error {
            ServiceError::McpError(e) => self.answered_error(asked, e),
            ServiceError::UnexpectedResponse => self.failed("it sent an unexpected response".into()),
            other => {
                tracing::warn!(upstream = self.name(), method, uri, error = %other, "upstream connection broken");
                self.inner.broken.notify_one();
                self.down()
            }
        }
    }

    /// The upstream answered with error `e`.
    fn answered_error(&self, asked: Asked<'_>, e: ErrorData) -> ProxyError {
        if self.owner().is_some() {
            return self.owner_error(asked.uri(), e);
        }
        let code = e.code;
        match asked {
            // -32602 is what 2026-07-28 servers (and some 2025 ones) say for an unknown URI.
            Asked::Read(uri) if code == ErrorCode::RESOURCE_NOT_FOUND || code == ErrorCode::INVALID_PARAMS => {
                ProxyError::not_found(uri)
            }
            // The folder server is the proxy's own: its message is ours, and names the cause.
            Asked::Read(_) if self.is_folder() => self.failed(e.message.to_string()),
            Asked::Read(uri) => {
                tracing::debug!(upstream = self.name(), uri, error = %e.message, "upstream read failed");
                self.failed(format!("it answered with error {}", code.0))
            }
            Asked::Request(method) if code == ErrorCode::INVALID_PARAMS => {
                tracing::debug!(upstream = self.name(), method, error = %e.message, "upstream refused the params");
                ProxyError::InvalidParams(format!("upstream `{}` refused the {method} arguments", self.name()))
            }
            Asked::Request(method) if code == ErrorCode::INVALID_REQUEST && self.speaks_2026(method) => {
                tracing::debug!(upstream = self.name(), method, error = %e.message, "upstream refused a request of its era");
                self.failed(NO_BACK_CHANNEL.into())
            }
            Asked::Request(method) => {
                tracing::debug!(upstream = self.name(), method, error = %e.message, "upstream request failed");
                self.failed(format!("it answered with error {}", code.0))
            }
        }
    }

    /// Is `method` a routed call on a 2026-07-28 connection (where the upstream cannot ask the
    /// host anything by a request of its own)?
    fn speaks_2026(&self, method: &str) -> bool {
        matches!(method, "tools/call" | "prompts/get") && self.link().is_ok_and(|link| link.era == Era::Modern)
    }

    /// Note a faulty reply in `/status` (`last_error`, the connection stays up).
    pub(super) fn record_fault(&self, fault: String) {
        self.update_status(|status| status.last_error = Some(fault));
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
