//! The typed parse against rmcp's: whatever it accepts, rmcp reads the same; what hosts send
//! plainly, it accepts.

use serde_json::{Value, json};

use super::{Parsed, typed, via_rmcp};
use crate::downstream::fast::Op;

const V: &str = "io.modelcontextprotocol/protocolVersion";
const CAPS: &str = "io.modelcontextprotocol/clientCapabilities";
const INFO: &str = "io.modelcontextprotocol/clientInfo";

/// The typed parse may decline (`None`); when it answers, rmcp's parse answers the same.
fn check(body: &str, typed_accepts: bool) {
    let fast = typed(body.as_bytes());
    let rmcp = via_rmcp(body.as_bytes());
    assert_eq!(fast.is_some(), typed_accepts, "typed parse of {body}: {fast:?} (rmcp: {rmcp:?})");
    if let Some(fast) = fast {
        assert_eq!(Some(fast), rmcp, "typed and rmcp parses differ on {body}");
    }
}

fn modern_meta() -> Value {
    json!({V: "2026-07-28", CAPS: {"roots": {"listChanged": true}, "sampling": {}}, INFO: {"name": "h", "version": "1"}})
}

#[test]
fn plain_requests_of_both_eras_are_read_by_the_typed_parse_as_rmcp_reads_them() {
    let accepted = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "a+x://y", "_meta": modern_meta()}}),
        json!({"method": "resources/read", "params": {"_meta": modern_meta(), "uri": "a+x://y/é"}, "id": "s-1", "jsonrpc": "2.0"}),
        json!({"jsonrpc": "2.0", "id": -7, "method": "resources/read", "params": {"uri": "a+x://y", "_meta": {"progressToken": 3}}}),
        json!({"jsonrpc": "2.0", "id": 9_223_372_036_854_775_807_i64, "method": "resources/read", "params": {"uri": "u"}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": {"cursor": "abc", "_meta": modern_meta()}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/templates/list", "params": {"_meta": {"progressToken": "t"}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/templates/list", "params": {"_meta": {V: 5}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": {"_meta": {V: "2026-07-28", CAPS: {}}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": {"_meta": {V: "2025-06-18"}}}),
        // A host that traces: W3C trace context keys in either era.
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "a+x://y", "_meta": {
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v",
            "baggage": "b=1", "progressToken": 1}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "resources/list", "params": {"_meta": {
            V: "2026-07-28", CAPS: {}, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}),
    ];
    for body in accepted {
        let text = body.to_string();
        // serde_json writes `V: 5` as a number: the typed parse declines a non-string version.
        check(&text, !text.contains(&format!("\"{V}\":5")));
    }
    let parsed = typed(br#"{"jsonrpc":"2.0","id":"x","method":"resources/read","params":{"uri":"a\"b\\u00e9"}}"#);
    assert_eq!(parsed.map(|p| p.op), Some(Op::Read("a\"b\\u00e9".into())), "escapes in values are read");
}

#[test]
fn anything_not_plainly_one_of_ours_is_left_to_rmcps_parse() {
    let declined = [
        // Not a request of the three, or not a request at all.
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"[{"jsonrpc":"2.0","id":1,"method":"resources/list"}]"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/list","result":{}}"#,
        r#"{"jsonrpc":"1.0","id":1,"method":"resources/list"}"#,
        r#"{"id":1,"method":"resources/list"}"#,
        r#"{"jsonrpc":"2.0","method":"resources/list"}"#,
        // Shapes rmcp reads (or refuses) by rules of its own.
        r#"{"jsonrpc":"2.0","id":1.0,"method":"resources/list"}"#,
        r#"{"jsonrpc":"2.0","id":1e2,"method":"resources/list"}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"resources/list"}"#,
        r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"resources/list"}"#,
        r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"resources/list"}"#,
        r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"resources/list"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/list","extra":true}"#,
        r#"{"jsonrpc":"2.0","\u0069d":1,"method":"resources/list"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/list","params":null}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/list","params":[]}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{"cursor":null}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{"cursor":7}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{"uri":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{"_meta":null}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x","cursor":"c"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x","uri":"y"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x","requestState":"s"}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x","inputResponses":{}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x","other":1}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x","_meta":{"other":1}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x","_meta":{"progressToken":1,"progressToken":2}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x","_meta":{"io.modelcontextprotocol/clientCapabilities":7}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":7}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x"}} trailing"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x"}"#,
        "",
    ];
    for body in declined {
        check(body, false);
    }
}

#[test]
fn every_prefix_of_a_plain_request_is_declined_or_read_as_rmcp_reads_it() {
    let body = json!({"jsonrpc": "2.0", "id": 12, "method": "resources/read",
        "params": {"uri": "a+x://y", "_meta": modern_meta()}})
    .to_string();
    for end in 0..body.len() {
        let prefix = &body.as_bytes()[..end];
        let fast: Option<Parsed> = typed(prefix);
        assert!(fast.is_none() || fast == via_rmcp(prefix), "prefix {end}");
    }
}
