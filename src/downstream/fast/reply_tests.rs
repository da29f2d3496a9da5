//! A reply carrying a cache entry's contents JSON, or its contents' JSON written for the reply,
//! is byte for byte the reply serialised from the typed message, in both host eras and both
//! framings, whatever the contents hold.

use std::time::Duration;

use axum::response::Response;
use rmcp::model::{CacheScope, JsonRpcMessage, NumberOrString, ReadResourceResult, RequestId, ServerResult};
use serde_json::{Value, json};

use super::{EMPTY_CONTENTS, Reply, json_reply, only_place, set_aside, sse_reply};
use crate::cache::Outcome;
use crate::proxy::ReadAnswer;
use crate::wire::contents_json::contents_json;

/// Contents as upstreams send them: escapes of every kind, non-ASCII text, blobs, metadata.
fn contents() -> Vec<Value> {
    let awkward = "quote \" backslash \\ newline \n tab \t nul \u{0} bell \u{7} del \u{7f} é ✓ 🦀 </script>";
    vec![
        json!([{"uri": "fx+fx://fx/item/1", "mimeType": "text/plain", "text": "x".repeat(1024)}]),
        json!([{"uri": "fx+fx://fx/a", "text": awkward}]),
        json!([{"uri": "fx+fx://fx/a", "text": ""}, {"uri": "fx+fx://fx/b", "blob": "AAEC/w==",
            "mimeType": "application/octet-stream", "_meta": {"contents": [], "k": [1, {"x": null}]}}]),
        json!([{"uri": "fx+fx://fx/\"odd\"", "text": "\"contents\":[]", "_meta": {"a": "b"}}]),
    ]
}

/// The result-level fields each era's reply carries around the contents.
fn shells() -> Vec<Value> {
    vec![
        // 2025 session: what the era rules leave.
        json!({}),
        json!({"_meta": {"trace": "t-1"}}),
        // 2026-07-28: resultType, the truthful ttlMs and cacheScope.
        json!({"resultType": "complete", "ttlMs": 3_599_123, "cacheScope": "public"}),
        json!({"resultType": "complete", "ttlMs": 0, "cacheScope": "private", "_meta": {"x": 1}}),
        // A `contents` key elsewhere in the message: the place is not unique, nothing is spliced.
        json!({"resultType": "complete", "ttlMs": 5, "cacheScope": "public", "_meta": {"contents": []}}),
    ]
}

fn ids() -> Vec<RequestId> {
    vec![NumberOrString::Number(7), NumberOrString::String("\"contents\":[]".into()), NumberOrString::Number(-1)]
}

fn message(result: ReadResourceResult, id: RequestId) -> rmcp::model::ServerJsonRpcMessage {
    JsonRpcMessage::response(ServerResult::ReadResourceResult(result), id)
}

async fn bytes(response: Response) -> Sent {
    let status = response.status().as_u16();
    let headers = response.headers().iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned())).collect();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
    (status, headers, body.to_vec())
}

type Sent = (u16, Vec<(String, String)>, Vec<u8>);

/// How a reply's contents are written.
#[derive(Clone, Copy, PartialEq)]
enum Splice {
    /// Serialised with the message (the reference).
    Typed,
    /// The cache entry's JSON spliced in.
    EntryJson,
    /// No entry JSON (a bypass): theirs written for the reply, spliced in.
    WrittenNow,
}

/// `result` answering `id` in both framings (JSON, SSE), its contents written as `splice` says.
async fn framings(result: &ReadResourceResult, id: &RequestId, splice: Splice) -> Vec<Sent> {
    let mut sent = Vec::new();
    for sse in [false, true] {
        let contents_json = (splice == Splice::EntryJson).then(|| contents_json(&result.contents).expect("serialises"));
        let mut answer = ReadAnswer::Result {
            result: result.clone(),
            ttl: Duration::from_secs(1),
            kept_for: Duration::from_secs(1),
            scope: CacheScope::Public,
            outcome: Outcome::Hit,
            contents_json,
        };
        let contents = (splice != Splice::Typed).then(|| set_aside(&mut answer).expect("a result"));
        let ReadAnswer::Result { result, .. } = answer else { unreachable!("a result") };
        let reply = Reply { message: message(result, id.clone()), contents };
        sent.push(bytes(if sse { sse_reply(reply) } else { json_reply(reply) }).await);
    }
    sent
}

#[tokio::test]
async fn spliced_contents_give_the_typed_replys_bytes_in_both_eras_and_framings() {
    let mut spliced = 0;
    for contents in contents() {
        for shell in shells() {
            let mut value = shell.clone();
            value["contents"] = contents.clone();
            let result: ReadResourceResult = serde_json::from_value(value).expect("a read result");
            for id in ids() {
                let typed = framings(&result, &id, Splice::Typed).await;
                let via_json = framings(&result, &id, Splice::EntryJson).await;
                assert_eq!(typed, via_json, "{shell} {contents} {id:?}");
                assert_eq!(typed, framings(&result, &id, Splice::WrittenNow).await, "{shell} {contents} {id:?}");
                let text = String::from_utf8(via_json[0].2.clone()).expect("utf-8");
                let parsed: Value = serde_json::from_str(&text).expect("json");
                assert_eq!(parsed["result"]["contents"], contents, "{text}");
                let mut emptied = result.clone();
                emptied.contents.clear();
                let envelope = serde_json::to_vec(&message(emptied, id.clone())).expect("json");
                spliced += usize::from(only_place(&envelope).is_some());
            }
        }
    }
    // Every case but the one with a second `contents` key went through the splice.
    assert_eq!(spliced, contents().len() * (shells().len() - 1) * ids().len());
}

#[test]
fn the_place_is_found_only_when_unique() {
    let at = |json: &str| only_place(json.as_bytes());
    assert_eq!(at(r#"{"contents":[]}"#), Some(1));
    assert_eq!(at(r#"{"a":"\"contents\":[]","contents":[]}"#), Some(23));
    assert_eq!(at(r#"{"contents":[],"_meta":{"contents":[]}}"#), None);
    assert_eq!(at(r#"{"contents":[1]}"#), None);
    assert_eq!(at(""), None);
    assert_eq!(EMPTY_CONTENTS, br#""contents":[]"#);
}
