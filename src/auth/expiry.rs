//! Streams that outlive their token. A JWT is accepted until its `exp` (plus `leeway`); an
//! event stream opened with it — a 2025 `GET` stream, a `subscriptions/listen` stream, any
//! POST answered as SSE — ends at that instant, so the host must come back with a fresh token
//! (a reconnect with the expired one gets the 401). Static tokens do not expire.
//!
//! A 2026-07-28 listen stream is a request still waiting for its answer: cut silently, a host
//! sees it end abruptly, as after a network failure, with no reason. So its last event is the
//! listen request's final answer, a JSON-RPC error saying the token expired ([`EXPIRED_CODE`],
//! `data.reason = "token_expired"`). The stream is known by its first event, the
//! `notifications/subscriptions/acknowledged` whose `_meta` names the subscription (the listen
//! request's id), which the stream is scanned for until it is seen.
//!
//! Invariant: no event leaves on a stream after the token it was opened with stopped being
//! accepted, but a listen stream's final error, which carries nothing but why it ended.

use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, BodyDataStream, Bytes};
use axum::response::Response;
use futures::StreamExt;
use http::header::CONTENT_TYPE;
use serde_json::{Value, json};

/// The error code of a listen stream's final answer when its token expired: the request is no
/// longer authorized (Invalid Request).
pub const EXPIRED_CODE: i32 = -32600;

/// The `_meta` key that names the subscription (the listen request's id) on a listen stream.
const SUBSCRIPTION_ID_KEY: &str = "io.modelcontextprotocol/subscriptionId";

/// A line longer than this is not scanned for the subscription id (the acknowledgement is short).
const MAX_SCANNED_LINE: usize = 64 * 1024;

/// When the proxy stops accepting the token of a request (seconds since the epoch), for a JWT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenExpiry(pub u64);

/// `response`, whose event stream (if it is one) ends at `expiry` — a listen stream with its
/// final error.
pub fn end_stream_at(expiry: Option<TokenExpiry>, response: Response) -> Response {
    let Some(TokenExpiry(at)) = expiry else { return response };
    if !is_event_stream(&response) {
        return response;
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(at).saturating_sub(now);
    let (parts, body) = response.into_parts();
    let state = Expiring {
        body: body.into_data_stream(),
        expired: Box::pin(tokio::time::sleep_until(deadline)),
        listen: ListenScan::default(),
        ended: false,
    };
    let stream = futures::stream::unfold(state, Expiring::next);
    Response::from_parts(parts, Body::from_stream(stream))
}

/// An event stream until its token expires.
struct Expiring {
    body: BodyDataStream,
    expired: Pin<Box<tokio::time::Sleep>>,
    listen: ListenScan,
    ended: bool,
}

impl Expiring {
    /// The next piece of the stream: the body's, or at expiry a listen stream's final error.
    async fn next(mut self) -> Option<(Result<Bytes, axum::Error>, Expiring)> {
        if self.ended {
            return None;
        }
        tokio::select! {
            biased;
            () = &mut self.expired => {
                self.ended = true;
                tracing::debug!(listen = self.listen.id.is_some(), "event stream ended: its token expired");
                let last = self.listen.final_event()?;
                Some((Ok(last), self))
            }
            piece = self.body.next() => {
                let piece = piece?;
                if let Ok(bytes) = &piece {
                    self.listen.scan(bytes);
                }
                Some((piece, self))
            }
        }
    }
}

/// What is known of a stream so far: the listen request's id once seen, and where the bytes
/// sent so far end.
#[derive(Default)]
struct ListenScan {
    id: Option<Value>,
    /// The line being read, until its end (while no id is known).
    line: Vec<u8>,
    /// The last two bytes sent (an event ends with a blank line).
    tail: Vec<u8>,
}

impl ListenScan {
    fn scan(&mut self, bytes: &Bytes) {
        self.tail.extend(bytes.iter().rev().take(2).rev());
        let keep = self.tail.len().saturating_sub(2);
        self.tail.drain(..keep);
        if self.id.is_some() {
            return;
        }
        for &byte in bytes.iter() {
            if byte != b'\n' {
                if self.line.len() <= MAX_SCANNED_LINE {
                    self.line.push(byte);
                }
                continue;
            }
            let line = std::mem::take(&mut self.line);
            self.id = self.id.take().or_else(|| subscription_id(&line));
        }
    }

    /// The listen request's final error as an SSE event, when this is a listen stream.
    fn final_event(&self) -> Option<Bytes> {
        let id = self.id.as_ref()?;
        let error = json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": EXPIRED_CODE,
            "message": "the token this listen stream was opened with has expired; listen again with a fresh token",
            "data": {"reason": "token_expired"},
        }});
        let between_events = self.tail.is_empty() || self.tail == b"\n\n";
        let separator = if between_events { "" } else { "\n\n" };
        Some(Bytes::from(format!("{separator}data: {error}\n\n")))
    }
}

/// The subscription a `data:` line's message names in its `params._meta`, if any.
fn subscription_id(line: &[u8]) -> Option<Value> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let data = line.strip_prefix(b"data:")?;
    let message: Value = serde_json::from_slice(data.trim_ascii_start()).ok()?;
    message.pointer("/params/_meta").and_then(|meta| meta.get(SUBSCRIPTION_ID_KEY)).cloned()
}

fn is_event_stream(response: &Response) -> bool {
    let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    content_type.trim_start().to_ascii_lowercase().starts_with("text/event-stream")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_stream_is_known_by_its_acknowledgement_even_split() {
        let ack = r#"data: {"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":7}}}"#;
        let mut scan = ListenScan::default();
        assert!(scan.final_event().is_none(), "not a listen stream (yet)");
        let (first, second) = ack.split_at(40);
        scan.scan(&Bytes::from(format!("id: 0\n{first}")));
        scan.scan(&Bytes::from(format!("{second}\n\n")));
        let last = String::from_utf8(scan.final_event().expect("a listen stream").to_vec()).unwrap();
        assert!(last.starts_with("data: ") && last.ends_with("\n\n"), "{last:?}");
        let message: Value = serde_json::from_str(last.trim_start_matches("data: ").trim()).unwrap();
        assert_eq!(message["id"], 7);
        assert_eq!(message["error"]["code"], EXPIRED_CODE);
        assert_eq!(message["error"]["data"]["reason"], "token_expired");
    }

    #[test]
    fn other_streams_end_without_one_and_a_cut_event_is_closed_first() {
        let mut scan = ListenScan::default();
        scan.scan(&Bytes::from_static(b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n"));
        assert!(scan.final_event().is_none());
        let mut scan = ListenScan { id: Some(json!("s")), ..ListenScan::default() };
        scan.scan(&Bytes::from_static(b"data: {\"partial\""));
        let last = scan.final_event().expect("a listen stream");
        assert!(last.starts_with(b"\n\ndata: "), "the cut event is ended before the final one");
    }
}
