//! Streams that outlive their token. A JWT is accepted until its `exp` (plus `leeway`); an
//! event stream opened with it — a 2025 `GET` stream, a `subscriptions/listen` stream, any
//! POST answered as SSE — ends at that instant, so the host must come back with a fresh token
//! (a reconnect with the expired one gets the 401). Static tokens do not expire.
//!
//! Invariant: no event leaves on a stream after the token it was opened with stopped being
//! accepted.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::response::Response;
use futures::StreamExt;
use http::header::CONTENT_TYPE;

/// When the proxy stops accepting the token of a request (seconds since the epoch), for a JWT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenExpiry(pub u64);

/// `response`, whose event stream (if it is one) ends at `expiry`.
pub fn end_stream_at(expiry: Option<TokenExpiry>, response: Response) -> Response {
    let Some(TokenExpiry(at)) = expiry else { return response };
    if !is_event_stream(&response) {
        return response;
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(at).saturating_sub(now);
    let (parts, body) = response.into_parts();
    let expired = async move {
        tokio::time::sleep_until(deadline).await;
        tracing::debug!("event stream ended: its token expired");
    };
    let stream = body.into_data_stream().take_until(expired);
    Response::from_parts(parts, Body::from_stream(stream))
}

fn is_event_stream(response: &Response) -> bool {
    let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    content_type.trim_start().to_ascii_lowercase().starts_with("text/event-stream")
}
