//! The thin read client's pure parts: the template, the answer's id, what is handed on.

use super::*;
use serde_json::json;

/// A transport that never receives anything itself.
struct Silent;

impl Transport<RoleClient> for Silent {
    type Error = std::io::Error;

    fn send(
        &mut self,
        _: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        std::future::ready(Ok(()))
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        std::future::pending().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

fn reader() -> (ThinReader, Recorder, mpsc::Receiver<ServerJsonRpcMessage>) {
    let (inlet, handed_on) = mpsc::channel(HANDED_ON_QUEUE);
    let recorder = Recorder::default();
    (
        ThinReader::new(
            crate::crypto::http_client().build().unwrap(),
            "http://127.0.0.1:9/mcp",
            1024,
            recorder.clone(),
            inlet,
            None,
        ),
        recorder,
        handed_on,
    )
}

fn server_message(value: Value) -> ServerJsonRpcMessage {
    serde_json::from_value(value).expect("a server message")
}

#[tokio::test]
async fn a_notification_before_the_answer_reaches_rmcp_marked_with_the_read() {
    let (reader, _, handed_on) = reader();
    let id = RequestId::String(format!("{ID_PREFIX}1").into());
    let note = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "x://a"}});
    assert!(reader.classify(server_message(note.clone()), &id).is_none(), "not an answer");
    reader.hand_on(&note.to_string(), &id).await;
    let mut inlet = Inlet::new(Silent, handed_on);
    let Some(JsonRpcMessage::Notification(received)) = inlet.receive().await else { panic!("not handed on") };
    let received = serde_json::to_value(&received).expect("serialises");
    assert_eq!(received["params"]["uri"], "x://a");
    assert_eq!(received["params"]["_meta"][crate::upstream::relay::CALL_KEY], json!(format!("{ID_PREFIX}1")));
}

#[test]
fn only_a_response_with_the_reads_id_answers_it() {
    let (reader, _, _) = reader();
    let id = RequestId::String(format!("{ID_PREFIX}7").into());
    let answer = json!({"jsonrpc": "2.0", "id": format!("{ID_PREFIX}7"), "result": {"contents": []}});
    assert!(matches!(
        reader.classify(server_message(answer), &id),
        Some(ThinRead::Done(Ok(ReadResourceResponse::Complete(_))))
    ));
    let other = json!({"jsonrpc": "2.0", "id": 7, "result": {"contents": []}});
    let Some(ThinRead::Done(Err(ServiceError::McpError(error)))) = reader.classify(server_message(other), &id) else {
        panic!("another id must be a fault")
    };
    assert_eq!(Fault::of(&error), Some(Fault::WrongId));
    let unrouted = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32602, "message": "no"}});
    assert!(matches!(
        reader.classify(server_message(unrouted), &id),
        Some(ThinRead::Done(Err(ServiceError::McpError(e)))) if e.code.0 == -32602
    ));
}

/// The typed parse of a plain answer gives what rmcp's message parse gives, and takes nothing
/// else: another id, an extra key, another kind of message or result are left to that parse.
#[test]
fn a_plain_answer_is_read_as_rmcps_parse_reads_it_and_nothing_else_is_taken() {
    let (reader, _, _) = reader();
    let id = RequestId::String(format!("{ID_PREFIX}3").into());
    let contents = json!([
        {"uri": "x://a", "mimeType": "text/plain", "text": "alpha é \"q\" \\n", "_meta": {"k": 1}},
        {"uri": "x://b", "blob": "AAEC"},
        {"uri": "x://c", "mimeType": "image/png", "blob": "AAEC", "_meta": null, "annotations": {"audience": ["user"]}},
        {"uri": "x://d", "text": "both", "blob": "AAEC", "mimeType": null},
        {"uri": "x://e", "text": null, "blob": "AAEC"},
        {"text": "", "uri": "x://f", "size": 0}
    ]);
    let results = [
        json!({"contents": contents}),
        json!({"contents": [], "resultType": "complete", "_meta": {"m": 2}}),
        json!({"ttlMs": 5000, "cacheScope": "private", "contents": [{"uri": "x://a", "text": "t"}], "resultType": "complete"}),
    ];
    for result in results {
        let answer = json!({"jsonrpc": "2.0", "id": format!("{ID_PREFIX}3"), "result": result});
        let typed = answered(&answer.to_string(), &id).expect("a plain answer");
        let Some(ThinRead::Done(Ok(ReadResourceResponse::Complete(parsed)))) =
            reader.classify(server_message(answer.clone()), &id)
        else {
            panic!("rmcp's parse reads a read result: {answer}")
        };
        assert_eq!(typed, parsed, "{answer}");
    }
    let left = [
        json!({"jsonrpc": "2.0", "id": 3, "result": {"contents": []}}),
        json!({"jsonrpc": "2.0", "id": format!("{ID_PREFIX}3"), "result": {"contents": []}, "extra": 1}),
        json!({"jsonrpc": "1.0", "id": format!("{ID_PREFIX}3"), "result": {"contents": []}}),
        json!({"jsonrpc": "2.0", "id": format!("{ID_PREFIX}3"), "error": {"code": -32002, "message": "no"}}),
        json!({"jsonrpc": "2.0", "id": format!("{ID_PREFIX}3"), "result": {"resultType": "input_required"}}),
        json!({"jsonrpc": "2.0", "id": format!("{ID_PREFIX}3"), "result": {"contents": [{"uri": "x://a"}]}}),
        json!({"jsonrpc": "2.0", "id": format!("{ID_PREFIX}3"), "result": {"contents": [{"uri": 1, "text": "t"}]}}),
        json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": 1}}),
    ];
    for message in left {
        assert!(answered(&message.to_string(), &id).is_none(), "taken: {message}");
    }
}

#[test]
fn the_template_keeps_session_and_headers_but_not_the_per_request_ones() {
    let (_, recorder, _) = reader();
    let list: ClientJsonRpcMessage = serde_json::from_value(json!({
        "jsonrpc": "2.0", "id": 3, "method": "resources/list",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "progressToken": 9}}
    }))
    .expect("a client message");
    let headers: HashMap<HeaderName, HeaderValue> = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "resources/list"),
        ("mcp-name", "x"),
        ("mcp-param-a", "b"),
        ("x-api-key", "k"),
    ]
    .into_iter()
    .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
    .collect();
    recorder.note(&Arc::from("http://u/mcp"), &list, &Some(Arc::from("s1")), &None, &headers);
    let template = recorder.current().expect("recorded");
    assert_eq!(template.session.as_deref(), Some("s1"));
    assert!(template.standard_headers);
    let mut names: Vec<&str> = template.headers.keys().map(HeaderName::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["mcp-protocol-version", "x-api-key"]);
    let meta = template.meta.as_ref().expect("protocol meta");
    assert_eq!(meta.keys().collect::<Vec<_>>(), ["io.modelcontextprotocol/protocolVersion"]);
}
