//! SSE framing written: a complete reply as one event, as rmcp's session stream writes a message
//! (`data: <json>` and a blank line, no event name), and the headers rmcp sends an SSE reply with.

use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue};

use super::headers::{EVENT_STREAM, X_ACCEL_BUFFERING};

/// What opens an event carrying one line of data.
pub const DATA: &[u8] = b"data: ";
/// What ends an event.
pub const END: &[u8] = b"\n\n";

/// Append one event to `body` whose data `write` appends (one line: JSON has no raw line end).
pub fn event(body: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    body.extend_from_slice(DATA);
    write(body);
    body.extend_from_slice(END);
}

/// The headers of an SSE reply: the media type, no caching, no buffering on the way.
pub fn reply_headers(head: &mut HeaderMap) {
    head.insert(CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    head.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    head.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_is_data_and_a_blank_line() {
        let mut body = b"x".to_vec();
        event(&mut body, |body| body.extend_from_slice(br#"{"a":1}"#));
        assert_eq!(body, b"xdata: {\"a\":1}\n\n");
        let mut head = HeaderMap::new();
        reply_headers(&mut head);
        let names: Vec<(&str, &str)> = head.iter().map(|(n, v)| (n.as_str(), v.to_str().expect("text"))).collect();
        assert_eq!(
            names,
            [("content-type", "text/event-stream"), ("cache-control", "no-cache"), ("x-accel-buffering", "no")]
        );
    }
}
