//! The SSE parse against rmcp's own (`sse-stream`): the same events and the same errors for
//! every input below, however it is split into chunks.

use futures::StreamExt;
use hyper::body::Bytes;

use super::*;

/// What a parse gave: each event's data, then the error that ended it, if one did.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    events: Vec<Option<String>>,
    error: Option<SseError>,
}

fn ours(chunks: &[&[u8]]) -> Outcome {
    let (mut parser, mut events) = (Events::default(), Vec::new());
    for chunk in chunks {
        let mut ended = Vec::new();
        if let Err(error) = parser.feed(chunk, &mut ended) {
            return Outcome { events, error: Some(error) };
        }
        events.append(&mut ended);
    }
    Outcome { events, error: None }
}

async fn rmcps(chunks: &[&[u8]]) -> Outcome {
    let owned: Vec<Result<Bytes, std::io::Error>> = chunks.iter().map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    let mut stream = sse_stream::SseStream::from_bytes_stream(futures::stream::iter(owned));
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event.data),
            Err(sse_stream::Error::Utf8Parse(_)) => return Outcome { events, error: Some(SseError::Utf8) },
            Err(_) => return Outcome { events, error: Some(SseError::Malformed) },
        }
    }
    Outcome { events, error: None }
}

const INPUTS: &[&[u8]] = &[
    b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
    b"event: message\r\ndata: {\"a\":1}\r\n\r\n",
    b"data: one\rdata: two\r\rdata:three\n\n",
    b"\xEF\xBB\xBFdata: after a byte order mark\n\n",
    b"data: a\n\xEF\xBB\xBFdata: a mark later is a field name\n\n",
    b": a comment\ndata: x\n: another\n\n",
    b"id: 7\nevent: message\nretry: 3000\ndata: x\n\nid: 8\ndata: y\n\n",
    b"data\n\n",
    b"data:\n\ndata:  two spaces\n\n",
    b"data: 1\ndata: 2\ndata:\n\n",
    b"event: only\n\n",
    b"id: a\0b\n\n",
    b"id: a\0b\ndata: x\n\n",
    b"\n\n\ndata: x\n\n\n",
    b"data: never ended",
    b"data: never ended\n",
    b"event: a\nevent: b\ndata: x\n\n",
    b"id: 1\nid: 2\n\n",
    b"retry: 1\nretry: 2\n\n",
    b"retry: soon\n\n",
    b"retry:  42 \n\n",
    b"no colon\n\n",
    b"data: ok\n\nunknown: field\n\n",
    b"data: \xFF\xFE\n\n",
    b"event: \xC3\n\n",
    b"data: caf\xC3\xA9\n\n",
    b"data: x\r\n\r\ndata: y\r\r\n\n",
];

/// Every way of cutting `input` in two, in three at a few places, and one byte at a time.
fn splits(input: &[u8]) -> Vec<Vec<&[u8]>> {
    let mut all = vec![vec![input]];
    for at in 1..input.len() {
        all.push(vec![&input[..at], &input[at..]]);
    }
    for at in (1..input.len()).step_by(3) {
        let rest = &input[at..];
        let mid = rest.len() / 2;
        if mid > 0 {
            all.push(vec![&input[..at], &rest[..mid], &rest[mid..]]);
        }
    }
    all.push(input.chunks(1).collect());
    all
}

#[tokio::test]
async fn every_input_gives_rmcps_events_and_errors_however_it_is_chunked() {
    for input in INPUTS {
        for chunks in splits(input) {
            let (ours, rmcps) = (ours(&chunks), rmcps(&chunks).await);
            assert_eq!(ours, rmcps, "input {:?} in chunks {chunks:?}", String::from_utf8_lossy(input));
        }
    }
}

#[test]
fn a_reply_event_gives_its_data_and_a_broken_line_an_error() {
    let reply = b"event: message\ndata: {\"id\":1}\n\n";
    assert_eq!(ours(&[reply]), Outcome { events: vec![Some("{\"id\":1}".into())], error: None });
    let joined = b"data: a\ndata: b\n\n";
    assert_eq!(ours(&[joined]).events, vec![Some("a\nb".into())]);
    assert_eq!(ours(&[b"data: \xFF\n\n"]).error, Some(SseError::Utf8));
    assert_eq!(ours(&[b"what\n\n"]).error, Some(SseError::Malformed));
}
