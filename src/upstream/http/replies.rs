//! What comes back for one request on a streamable HTTP upstream, checked before rmcp sees it: a
//! JSON reply or an SSE stream whose first faulty event (too large, not UTF-8, not a JSON-RPC
//! message, a response to another id) becomes that request's [`Fault`], ending its stream; and
//! notifications marked with the request they came for (see `relay`).

use std::sync::Arc;

use futures::StreamExt;
use rmcp::model::{JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::SseError;
use sse_stream::Sse;

use super::SseStream;
use crate::upstream::faults::Fault;

/// An event with its notification marked as sent for `call` (or unmarked: see `relay`).
pub(super) fn marked(mut event: Sse, call: Option<&RequestId>) -> Sse {
    let Some(data) = event.data.as_deref().filter(|data| data.contains("\"method\"")) else { return event };
    let Ok(mut message) = serde_json::from_str::<serde_json::Value>(data) else { return event };
    super::super::relay::mark_notification(&mut message, call);
    event.data = Some(message.to_string());
    event
}

/// A JSON reply to request `id`: a response for another id is a fault; an error without an id
/// (which rmcp could not route) is this request's.
pub(super) fn check_json(id: &RequestId, message: ServerJsonRpcMessage) -> ServerJsonRpcMessage {
    if let JsonRpcMessage::Error(mut error) = message {
        error.id = Some(error.id.unwrap_or_else(|| id.clone()));
        return check_id(id, JsonRpcMessage::Error(error));
    }
    check_id(id, message)
}

fn check_id(id: &RequestId, message: ServerJsonRpcMessage) -> ServerJsonRpcMessage {
    match response_id(&message) {
        Some(Some(answered)) if answered != *id => {
            tracing::warn!(fault = Fault::WrongId.kind(), "faulty upstream reply; failing its request");
            Fault::WrongId.reply(id.clone())
        }
        _ => message,
    }
}

/// `Some(id)` of a response or error (`Some(None)` for an error without one); `None` otherwise.
fn response_id(message: &ServerJsonRpcMessage) -> Option<Option<RequestId>> {
    match message {
        JsonRpcMessage::Response(response) => Some(Some(response.id.clone())),
        JsonRpcMessage::Error(error) => Some(error.id.clone()),
        _ => None,
    }
}

/// The SSE reply to request `id`: the first faulty event (an event too large or not UTF-8,
/// lines that are not SSE, data that is not a JSON-RPC message, a response to another id) is
/// replaced by the fault, which ends the stream. A broken body passes on, so rmcp resumes it.
pub(super) fn guard_sse(stream: SseStream, id: RequestId, limit: usize) -> SseStream {
    let faulted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = faulted.clone();
    stream
        .take_while(move |_| futures::future::ready(!seen.load(std::sync::atomic::Ordering::Relaxed)))
        .map(move |event| {
            let fault = match &event {
                Ok(event) => event_fault(event, &id),
                Err(SseError::Body(body)) if body.to_string().contains("exceeded the maximum size") => {
                    Some(Fault::TooLarge(limit))
                }
                Err(SseError::Body(_)) => None,
                Err(SseError::Utf8Parse(_)) => Some(Fault::InvalidUtf8),
                Err(_) => Some(Fault::Malformed),
            };
            match fault {
                None => event.map(|event| marked(event, Some(&id))),
                Some(fault) => {
                    faulted.store(true, std::sync::atomic::Ordering::Relaxed);
                    Ok(fault_event(fault, &id))
                }
            }
        })
        .boxed()
}

/// What is wrong with one SSE event of the reply to `id`, if anything.
fn event_fault(event: &Sse, id: &RequestId) -> Option<Fault> {
    let data = event.data.as_deref().unwrap_or_default();
    if data.trim().is_empty() {
        return None;
    }
    match serde_json::from_str::<ServerJsonRpcMessage>(data) {
        Err(_) => Some(Fault::Malformed),
        Ok(message) => match response_id(&message) {
            Some(Some(answered)) if answered != *id => Some(Fault::WrongId),
            _ => None,
        },
    }
}

fn fault_event(fault: Fault, id: &RequestId) -> Sse {
    tracing::warn!(fault = fault.kind(), "faulty upstream reply; failing its request");
    let data = serde_json::to_string(&fault.reply(id.clone())).expect("a JSON-RPC error serialises");
    Sse { event: None, data: Some(data), id: None, retry: None }
}
