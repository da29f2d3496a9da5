//! Hostile replies, for the proxy's fault tests (`--faults`). A read of `fx://P/fault/<kind>`
//! answers a text holding a marker; on the way out — the stdio line, or the HTTP body frame —
//! the marker is found and the reply spoilt as `<kind>` says:
//!
//! - `invalid_utf8`: the marker becomes the bytes `FF FE`;
//! - `malformed`: the marker becomes `"!`, so the JSON breaks (the id before it stays readable);
//! - `wrong_id`: the reply's first `"id":N` becomes `"id":N+1000000`;
//! - `hang`: the read never answers (the handler waits forever; no marker needed).
//!
//! Oversized replies need no marker: read `fx://P/sized/{bytes}`.

use axum::body::Body;
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const MARKER_PREFIX: &[u8] = b"@@FAULT:";
const MARKER_END: &[u8] = b"@@";

/// The fault kinds a `fault/<kind>` URI may name.
pub const KINDS: &[&str] = &["invalid_utf8", "malformed", "wrong_id", "hang"];

/// The text a read of `fault/<kind>` answers.
pub fn marker(kind: &str) -> String {
    format!("@@FAULT:{kind}@@")
}

/// `frame` spoilt as its marker says; `None` when it holds no marker.
pub fn corrupt(frame: &[u8]) -> Option<Vec<u8>> {
    let start = find(frame, MARKER_PREFIX)?;
    let after = start + MARKER_PREFIX.len();
    let end = after + find(&frame[after..], MARKER_END)?;
    let (head, tail) = (&frame[..start], &frame[end + MARKER_END.len()..]);
    let spoilt = |middle: &[u8]| [head, middle, tail].concat();
    match &frame[after..end] {
        b"invalid_utf8" => Some(spoilt(&[0xff, 0xfe])),
        b"malformed" => Some(spoilt(b"\"!")),
        b"wrong_id" => Some(wrong_id(&spoilt(b"wrong id"))),
        _ => None,
    }
}

/// Copy rmcp's stdout lines to the real stdout, spoiling those with a marker.
pub async fn pipe_stdout(from: tokio::io::DuplexStream) {
    let mut lines = BufReader::new(from);
    let mut stdout = tokio::io::stdout();
    let mut line = Vec::new();
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let out = corrupt(&line).unwrap_or_else(|| line.clone());
        if stdout.write_all(&out).await.is_err() || stdout.flush().await.is_err() {
            return;
        }
    }
}

/// An HTTP response with every body frame that holds a marker spoilt.
pub async fn spoil_response(response: axum::response::Response) -> axum::response::Response {
    let (parts, body) = response.into_parts();
    let frames = body.into_data_stream().map(|frame| {
        frame.map(|bytes| match corrupt(&bytes) {
            Some(spoilt) => axum::body::Bytes::from(spoilt),
            None => bytes,
        })
    });
    axum::response::Response::from_parts(parts, Body::from_stream(frames))
}

fn wrong_id(frame: &[u8]) -> Vec<u8> {
    let Some(at) = find(frame, b"\"id\":") else { return frame.to_vec() };
    let digits_start = at + 5;
    let digits = frame[digits_start..].iter().take_while(|b| b.is_ascii_digit()).count();
    let id: u64 =
        std::str::from_utf8(&frame[digits_start..digits_start + digits]).ok().and_then(|d| d.parse().ok()).unwrap_or(0);
    [&frame[..digits_start], (id + 1_000_000).to_string().as_bytes(), &frame[digits_start + digits..]].concat()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}
