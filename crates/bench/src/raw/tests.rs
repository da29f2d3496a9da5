//! The raw host's response reader (`wire`) and reply checks, on replies fed in pieces.

use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use super::{read_reply_with_id, response_with_id};
use crate::wire::{self, Head, Reader};

/// Yields its pieces one per read, then end of stream.
struct Pieces(Vec<Vec<u8>>);

impl AsyncRead for Pieces {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if !self.0.is_empty() {
            let piece = self.0.remove(0);
            assert!(piece.len() <= buf.remaining(), "test pieces fit the buffer");
            buf.put_slice(&piece);
        }
        Poll::Ready(Ok(()))
    }
}

fn bytes(pieces: &[&str]) -> Pieces {
    Pieces(pieces.iter().map(|p| p.as_bytes().to_vec()).collect())
}

/// Every byte a piece of its own.
fn byte_by_byte(text: &str) -> Pieces {
    Pieces(text.bytes().map(|b| vec![b]).collect())
}

const RESULT: &str = r#"{"jsonrpc":"2.0","id":7,"result":{"contents":[{"uri":"fx://a","text":"hi"}]}}"#;

fn json_reply(body: &str) -> String {
    format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())
}

/// `body` chunked in pieces of `size` bytes, with a chunk extension and a trailer.
fn chunked_reply(content_type: &str, body: &str, size: usize) -> String {
    let mut reply = format!("HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n");
    for chunk in body.as_bytes().chunks(size) {
        reply.push_str(&format!("{:X};ext=1\r\n{}\r\n", chunk.len(), std::str::from_utf8(chunk).unwrap()));
    }
    reply.push_str("0\r\nx-trailer: 1\r\n\r\n");
    reply
}

fn sse(data: &str) -> String {
    format!("event: message\nid: 1\ndata: {data}\n\n")
}

async fn read_one(io: &mut Pieces) -> (Head, Vec<u8>) {
    let mut reader = Reader::default();
    let head = reader.read(io).await.expect("a response").expect("not closed");
    (head, reader.body().to_vec())
}

#[tokio::test]
async fn content_length_reply_is_read_and_checked() {
    let (head, body) = read_one(&mut bytes(&[&json_reply(RESULT)])).await;
    assert_eq!((head.status, head.sse, head.close), (200, false, false));
    assert_eq!(body, RESULT.as_bytes());
    assert_eq!(read_reply_with_id(head.sse, &body, 7).unwrap(), Some(1));
}

#[tokio::test]
async fn chunked_reply_split_at_every_byte_is_read_whole() {
    let reply = chunked_reply("application/json", RESULT, 10);
    let (head, body) = read_one(&mut byte_by_byte(&reply)).await;
    assert_eq!(body, RESULT.as_bytes());
    assert_eq!(read_reply_with_id(head.sse, &body, 7).unwrap(), Some(1));
}

#[tokio::test]
async fn sse_reply_with_a_session_is_split_into_events() {
    let events = format!("{}{}", sse(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#), sse(RESULT));
    let reply = chunked_reply("text/event-stream", &events, 17).replace(
        "Transfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nmcp-session-id: abc\r\nConnection: close\r\n",
    );
    let (head, body) = read_one(&mut bytes(&[&reply[..30], &reply[30..]])).await;
    assert_eq!((head.sse, head.session.as_deref(), head.close), (true, Some("abc"), true));
    assert_eq!(read_reply_with_id(true, &body, 7).unwrap(), Some(1));
    assert_eq!(response_with_id(true, &body, 7).unwrap()["result"]["contents"][0]["text"], "hi");
}

#[tokio::test]
async fn a_reply_with_another_id_is_rejected() {
    let (head, body) = read_one(&mut bytes(&[&json_reply(RESULT)])).await;
    assert!(read_reply_with_id(head.sse, &body, 8).is_err());
    assert!(read_reply_with_id(true, sse(RESULT).as_bytes(), 8).is_err());
    assert!(response_with_id(true, sse(RESULT).as_bytes(), 8).is_err());
    let no_contents = r#"{"jsonrpc":"2.0","id":7,"result":{}}"#;
    assert!(read_reply_with_id(false, no_contents.as_bytes(), 7).is_err());
}

#[tokio::test]
async fn keep_alive_replies_back_to_back_and_1xx_skipped() {
    let second = RESULT.replace("\"id\":7", "\"id\":8");
    let stream =
        format!("HTTP/1.1 100 Continue\r\n\r\n{}{}", json_reply(RESULT), chunked_reply("application/json", &second, 5));
    let mut io = byte_by_byte(&stream);
    let mut reader = Reader::default();
    let first = reader.read(&mut io).await.unwrap().unwrap();
    assert_eq!(read_reply_with_id(first.sse, reader.body(), 7).unwrap(), Some(1));
    let next = reader.read(&mut io).await.unwrap().unwrap();
    assert_eq!(read_reply_with_id(next.sse, reader.body(), 8).unwrap(), Some(1));
    assert!(reader.read(&mut io).await.unwrap().is_none(), "closed before any byte of a third");
}

#[tokio::test]
async fn bad_framing_and_truncation_are_errors() {
    let mut reader = Reader::default();
    let cut = json_reply(RESULT);
    assert!(reader.read(&mut bytes(&[&cut[..cut.len() - 3]])).await.is_err(), "closed inside the body");
    let bad = chunked_reply("application/json", RESULT, 10).replacen("\r\n{\"", "\r\n{\"x", 1);
    assert!(Reader::default().read(&mut bytes(&[&bad])).await.is_err(), "chunk longer than its size");
    let (head, body) = read_one(&mut bytes(&["HTTP/1.1 202 Accepted\r\n\r\n", "ab"])).await;
    assert_eq!((head.status, head.close, body.as_slice()), (202, true, b"ab".as_slice()), "unframed: up to the close");
}

#[test]
fn requests_carry_their_length() {
    let head = wire::post_head("/mcp", "127.0.0.1:1", &[("mcp-name", "fx://a")]).unwrap();
    let mut out = Vec::new();
    wire::request(&mut out, &head, &[b"{\"id\":", wire::decimal(1234, &mut [0; 20]), b"}"]);
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:1\r\n"), "{text}");
    assert!(text.ends_with("mcp-name: fx://a\r\ncontent-length: 11\r\n\r\n{\"id\":1234}"), "{text}");
    assert_eq!(wire::decimal(0, &mut [0; 20]), b"0");
    assert!(wire::post_head("/", "h", &[("mcp-name", "a\r\nb")]).is_err());
}
