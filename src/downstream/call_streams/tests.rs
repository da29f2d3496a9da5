#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.

use super::*;
use futures::StreamExt;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, ListToolsRequest, LoggingLevel, LoggingMessageNotification,
    LoggingMessageNotificationParam, ServerNotification,
};

fn request(id: i64, request: ClientRequest) -> ClientJsonRpcMessage {
    JsonRpcMessage::request(request, RequestId::Number(id))
}

fn tool_call(id: i64) -> ClientJsonRpcMessage {
    request(id, ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("t"))))
}

/// A log message, marked as request `call`'s when given.
fn log(data: &str, call: Option<i64>) -> ServerJsonRpcMessage {
    let params = LoggingMessageNotificationParam::new(LoggingLevel::Info, data.into());
    let mut notification = LoggingMessageNotification::new(params);
    if let Some(call) = call {
        notification.extensions.insert(OriginatingRequestId(RequestId::Number(call)));
    }
    JsonRpcMessage::notification(ServerNotification::LoggingMessageNotification(notification))
}

fn data_of(message: &ServerSseMessage) -> String {
    serde_json::to_value(message.message.as_deref().expect("a message")).expect("serialises")["params"]["data"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_marked_notification_finds_its_calls_stream_only_while_it_is_open() {
    let open = Arc::new(OpenCalls::default());
    let (one, two): (SessionId, SessionId) = (Arc::from("one"), Arc::from("two"));
    assert!(open.book(&one, &request(9, ClientRequest::ListToolsRequest(ListToolsRequest::default()))).is_none());
    let booked = open.book(&one, &tool_call(1)).expect("a call relays");
    assert!(open.queue_of(&one, &log("mine", Some(1))).is_some());
    assert!(open.queue_of(&one, &log("unmarked", None)).is_none(), "no mark: rmcp's way");
    assert!(open.queue_of(&one, &log("other call", Some(2))).is_none());
    assert!(open.queue_of(&two, &log("other session", Some(1))).is_none());
    let again = open.book(&one, &tool_call(1)).expect("the same id again");
    drop(booked);
    assert!(open.queue_of(&one, &log("the later stream keeps its booking", Some(1))).is_some());
    drop(again);
    assert!(open.queue_of(&one, &log("gone", Some(1))).is_none());
    assert!(open.streams.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_calls_own_messages_go_out_before_rmcps_and_rmcps_end_ends_the_stream() {
    let open = Arc::new(OpenCalls::default());
    let session: SessionId = Arc::from("s");
    let CallQueue { own, booking } = open.book(&session, &tool_call(1)).expect("booked");
    let queue = open.queue_of(&session, &log("before the answer", Some(1))).expect("its queue");
    let answers = futures::stream::iter([ServerSseMessage::from_message(log("the answer", None))]);
    queue.try_send(ServerSseMessage::from_message(log("before the answer", Some(1)))).expect("room");
    let stream = CallStream { own, answers, _booking: booking, kept: None };
    let heard: Vec<String> = stream.map(|message| data_of(&message)).collect().await;
    assert_eq!(heard, ["before the answer", "the answer"]);
    assert!(open.streams.lock().unwrap().is_empty(), "the ended stream gave up its booking");
}
