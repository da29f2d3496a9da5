//! The fast path's replies: a JSON-RPC message as the bytes rmcp sends it — `application/json`
//! for a 2026-07-28 request, one SSE event for a 2025 session — with a read's contents copied
//! in from the cache entry's JSON when the reply carries exactly the entry's contents (escaping
//! a cached text again at every hit was the largest single cost of a hit's reply), else from
//! the same JSON written for this reply by [`contents_json::written`] (serde_json's bytes, made
//! faster).
//!
//! Invariant: a reply with the entry's JSON spliced in is byte for byte the reply serialised
//! from the typed message holding those contents; the splice is made only where the emptied
//! `"contents":[]` of the read result is the one such place in the message, otherwise the
//! contents go back into the message and it is serialised whole.

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, StatusCode};
use rmcp::model::{JsonRpcMessage, ResourceContents, ServerJsonRpcMessage, ServerResult};

use crate::proxy::ReadAnswer;
use crate::wire::{contents_json, headers, sse, status};

/// Where the set-aside contents go: the read result's emptied array.
const EMPTY_CONTENTS: &[u8] = br#""contents":[]"#;

/// A message to send, and the read result's contents when they were set aside for splicing.
pub(super) struct Reply {
    pub message: ServerJsonRpcMessage,
    pub contents: Option<SetAside>,
}

/// A read result's contents, taken out of it, with the JSON they serialise to.
pub(super) struct SetAside {
    json: Json,
    typed: Vec<ResourceContents>,
}

/// The cache entry's JSON, or JSON written for this reply alone (used as it is, not copied into
/// an `Arc` it would not be shared through).
enum Json {
    Entry(Arc<str>),
    Written(String),
}

impl Json {
    fn as_bytes(&self) -> &[u8] {
        match self {
            Json::Entry(json) => json.as_bytes(),
            Json::Written(json) => json.as_bytes(),
        }
    }
}

/// Take the contents out of `answer`, with the cache entry's JSON when it stands for them, else
/// their JSON written now.
pub(super) fn set_aside(answer: &mut ReadAnswer) -> Option<SetAside> {
    let ReadAnswer::Result { result, contents_json: entry_json, .. } = answer else { return None };
    let json = match entry_json {
        Some(json) => Json::Entry(json.clone()),
        None => Json::Written(contents_json::written(&result.contents)?),
    };
    Some(SetAside { json, typed: std::mem::take(&mut result.contents) })
}

/// A 2026-07-28 reply: the message as `application/json`, the status rmcp gives it (the
/// request's `_meta` was complete, or the fast path would not answer it).
pub(super) fn json_reply(reply: Reply) -> Response {
    let status = match &reply.message {
        JsonRpcMessage::Error(error) => status::http_status(error.error.code, false),
        _ => StatusCode::OK,
    };
    let mut body = Vec::with_capacity(reply.size_hint());
    reply.write(&mut body);
    let mut response = response(status, body);
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(headers::JSON));
    response
}

/// A 2025 session reply: the message as one SSE event, headers as rmcp sends them.
pub(super) fn sse_reply(reply: Reply) -> Response {
    let mut body = Vec::with_capacity(reply.size_hint() + sse::DATA.len() + sse::END.len());
    sse::event(&mut body, |body| reply.write(body));
    let mut response = response(StatusCode::OK, body);
    sse::reply_headers(response.headers_mut());
    response
}

impl Reply {
    /// Append the message's JSON to `body`.
    pub fn write(self, body: &mut Vec<u8>) {
        let Reply { mut message, contents } = self;
        let start = body.len();
        let emptied = read_contents(&mut message).is_some_and(|contents| contents.is_empty());
        let contents = contents.filter(|_| emptied);
        serde_json::to_writer(&mut *body, &message).expect("a JSON-RPC message serialises");
        let Some(contents) = contents else { return };
        if let Some(at) = only_place(&body[start..]) {
            splice(body, start + at + EMPTY_CONTENTS.len() - 2, contents.json.as_bytes());
            return;
        }
        body.truncate(start);
        if let Some(slot) = read_contents(&mut message) {
            *slot = contents.typed;
        }
        serde_json::to_writer(&mut *body, &message).expect("a JSON-RPC message serialises");
    }

    /// Room for the serialised message in one allocation (a read's contents are most of it;
    /// the rest is a few hundred bytes): growing the buffer from empty copied the body several
    /// times.
    fn size_hint(&self) -> usize {
        let spliced = self.contents.as_ref().map_or(0, |contents| contents.json.as_bytes().len());
        let typed = match &self.message {
            JsonRpcMessage::Response(response) => match &response.result {
                ServerResult::ReadResourceResult(read) => read.contents.iter().map(content_hint).sum(),
                _ => 1024,
            },
            _ => 0,
        };
        spliced + typed + 512
    }
}

fn content_hint(content: &ResourceContents) -> usize {
    match content {
        ResourceContents::TextResourceContents { uri, text, .. } => uri.len() + text.len() + text.len() / 16,
        ResourceContents::BlobResourceContents { uri, blob, .. } => uri.len() + blob.len(),
        _ => 256,
    }
}

/// The contents of the read result `message` answers with, if it is one.
fn read_contents(message: &mut ServerJsonRpcMessage) -> Option<&mut Vec<ResourceContents>> {
    match message {
        JsonRpcMessage::Response(response) => match &mut response.result {
            ServerResult::ReadResourceResult(read) => Some(&mut read.contents),
            _ => None,
        },
        _ => None,
    }
}

/// Where `"contents":[]` is in `json`, when it is there exactly once. (Inside a JSON string a
/// `"` is escaped, so only a key can match.)
fn only_place(json: &[u8]) -> Option<usize> {
    let at = find(json, EMPTY_CONTENTS)?;
    find(&json[at + 1..], EMPTY_CONTENTS).is_none().then_some(at)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let last = haystack.len().checked_sub(needle.len())?;
    (0..=last).find(|&i| haystack[i] == needle[0] && haystack[i..i + needle.len()] == *needle)
}

/// Replace the two bytes `[]` at `at` in `body` with `json` (a JSON array, so at least `[]`).
fn splice(body: &mut Vec<u8>, at: usize, json: &[u8]) {
    debug_assert_eq!(&body[at..at + 2], b"[]");
    let (end, grow) = (body.len(), json.len() - 2);
    body.resize(end + grow, 0);
    body.copy_within(at + 2..end, at + 2 + grow);
    body[at..at + json.len()].copy_from_slice(json);
}

fn response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
#[path = "reply_tests.rs"]
mod tests;
