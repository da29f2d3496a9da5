//! The thin read client of streamable HTTP upstreams: a `resources/read` sent straight over
//! HTTP, without rmcp's peer, worker task and channels — on kept-alive connections of its own
//! driven by the reading task for a plain `http://` upstream ([`plain`]), else on the
//! connection's pooled reqwest client ([`send`]). A read abandoned before its answer (its
//! timeout dropped it) is cancelled upstream with `notifications/cancelled`, as rmcp does.
//!
//! What the request carries is copied from rmcp's own requests on the same connection: the guard
//! (`http`) records, from each `resources/list`, `resources/templates/list` or `resources/read`
//! rmcp posts, the URL, the `Mcp-Session-Id`, the auth header, the headers rmcp adds (custom ones
//! and `MCP-Protocol-Version`), whether it sends the SEP-2243 standard headers, and the protocol
//! keys of the request's `_meta` (2026-07-28: protocol version, client info and capabilities).
//! Until such a request was recorded, reads take rmcp's path. The header names, the headers an
//! MCP client's POST carries, which URIs travel as a bare `Mcp-Name` and the SSE parse are the
//! wire floor's ([`crate::wire`]).
//!
//! The reply, JSON or an SSE stream (split into events by [`sse_parse`], by the rules and with the
//! errors of rmcp's own SSE parser), is parsed once: a plain answer straight into the read's
//! result ([`answered`]), any other message by rmcp's parse. Anything else on that stream before the
//! answer (a notification, a request from the upstream) goes to rmcp as if rmcp had read it
//! ([`Inlet`]), marked with the read's id like the guard marks it. A faulty reply becomes its
//! read's [`Fault`]; a refused or reset connection is the same transport error rmcp would give.
//! Anything unusual — no recorded request, an HTTP status other than 200 (404 is an expired
//! session: rmcp's path re-initialises), an unknown content type, a stream that breaks off or
//! ends before the answer, a URI that would need a Base64 `Mcp-Name` — sends the read again on
//! rmcp's path (reads are idempotent), within the same request timeout.
//!
//! Invariant: a thin request's id is a string with a prefix of its own, so it never collides
//! with rmcp's numeric ids on the same session; nothing of a faulty reply reaches rmcp.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use http::{HeaderMap, HeaderName, HeaderValue};
use rmcp::model::{
    ClientJsonRpcMessage, GetExtensions, JsonRpcMessage, JsonRpcVersion2_0, ReadResourceResponse, ReadResourceResult,
    RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{InboundStreamOrigin, RoleClient, RxJsonRpcMessage, ServiceError, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use self::send::{Answer, Chunks, Sender};
use super::credentials::TokenSource;
use super::faults::Fault;
use crate::host::SubjectToken;
use crate::wire::era::META_PROTOCOL_PREFIX;
use crate::wire::{headers, sse_parse};

/// The prefix of every thin request id.
pub(crate) const ID_PREFIX: &str = "mcp-proxy-read-";

/// How many messages a read's stream may hand on ahead of rmcp taking them; past it, the read
/// waits (so a hostile upstream cannot queue without bound).
pub(crate) const HANDED_ON_QUEUE: usize = 64;

/// What rmcp's last comparable request on this connection carried (see the module doc).
#[derive(Clone)]
struct Template {
    url: Arc<str>,
    session: Option<Arc<str>>,
    auth: Option<String>,
    headers: HeaderMap,
    standard_headers: bool,
    meta: Option<Map<String, Value>>,
}

/// Kept by the guard: records rmcp's requests for the thin reader of the same connection.
#[derive(Clone, Default)]
pub(crate) struct Recorder {
    template: Arc<Mutex<Option<Arc<Template>>>>,
}

impl Recorder {
    /// Note what rmcp posts, when it is a request the thin read can copy.
    pub fn note(
        &self,
        url: &Arc<str>,
        message: &ClientJsonRpcMessage,
        session: &Option<Arc<str>>,
        auth: &Option<String>,
        custom: &HashMap<HeaderName, HeaderValue>,
    ) {
        let JsonRpcMessage::Request(request) = message else { return };
        let method = request.request.method();
        if !matches!(method, "resources/list" | "resources/templates/list" | "resources/read") {
            return;
        }
        let mut headers = HeaderMap::with_capacity(custom.len());
        let mut standard_headers = false;
        for (name, value) in custom {
            match name.as_str() {
                headers::METHOD => standard_headers = true,
                headers::NAME => {}
                other if other.starts_with(headers::PARAM_PREFIX) => {}
                _ => {
                    headers.insert(name.clone(), value.clone());
                }
            }
        }
        let template = Template {
            url: url.clone(),
            session: session.clone(),
            auth: auth.clone(),
            headers,
            standard_headers,
            meta: protocol_meta(message),
        };
        *self.template.lock().expect("template lock") = Some(Arc::new(template));
    }

    fn current(&self) -> Option<Arc<Template>> {
        self.template.lock().expect("template lock").clone()
    }
}

/// The `io.modelcontextprotocol/…` keys of a request's `_meta`, if it has any.
fn protocol_meta(message: &ClientJsonRpcMessage) -> Option<Map<String, Value>> {
    let mut value = serde_json::to_value(message).ok()?;
    let Value::Object(meta) = value.get_mut("params")?.get_mut("_meta")?.take() else { return None };
    let meta: Map<String, Value> = meta.into_iter().filter(|(key, _)| key.starts_with(META_PROTOCOL_PREFIX)).collect();
    (!meta.is_empty()).then_some(meta)
}

/// What became of a thin read.
pub(crate) enum ThinRead {
    /// Answered, or failed the way rmcp's path would have failed it.
    Done(Result<ReadResourceResponse, ServiceError>),
    /// Send it on rmcp's path instead; nothing was sent (why, for the debug log).
    Fallback(&'static str),
    /// It was sent, but what came back is not an answer this client takes: send it again on
    /// rmcp's path (why, for the debug log and the request's span).
    Resend(&'static str),
}

/// One connection's thin reader: a cheap `Clone` handle.
#[derive(Clone)]
pub(crate) struct ThinReader {
    inner: Arc<ReaderInner>,
}

struct ReaderInner {
    sender: Sender,
    limit: usize,
    recorder: Recorder,
    next_id: AtomicU64,
    /// What the upstream sent on a read's stream besides the answer, for rmcp.
    inlet: mpsc::Sender<ServerJsonRpcMessage>,
    /// The upstream's access tokens, when it has client credentials: each read carries the
    /// current one (not the one rmcp's recorded request carried, which may have been replaced).
    credentials: Option<TokenSource>,
}

impl ThinReader {
    /// `url`: the upstream's; a plain `http://` one gets connections of its own (`plain`).
    pub fn new(
        client: reqwest::Client,
        url: &str,
        limit: usize,
        recorder: Recorder,
        inlet: mpsc::Sender<ServerJsonRpcMessage>,
        credentials: Option<TokenSource>,
    ) -> Self {
        let sender = plain::Plain::new(url).map_or(Sender::Pooled(client), Sender::Plain);
        let inner = ReaderInner { sender, limit, recorder, next_id: AtomicU64::new(1), inlet, credentials };
        Self { inner: Arc::new(inner) }
    }

    /// Read `uri` with one POST (see the module doc); for a host's request that came with the
    /// JWT `subject`, with a token exchanged for that one. `trace`: the read's CLIENT span
    /// context (`traceparent`, `tracestate`), sent in `_meta` and as headers.
    pub async fn read(&self, uri: &str, subject: Option<&SubjectToken>, trace: Option<&(String, String)>) -> ThinRead {
        let Some(mut template) = self.inner.recorder.current() else {
            return ThinRead::Fallback("no request recorded yet");
        };
        if let Some(credentials) = &self.inner.credentials {
            let token = match credentials.token_for(subject).await {
                Ok(token) => token,
                // rmcp's path would wait for a token again: the read fails here, in our words.
                Err(failure) => return ThinRead::Done(Err(ServiceError::McpError(Fault::NoToken(failure).error()))),
            };
            if template.auth.as_deref() != Some(&*token) {
                template = Arc::new(Template { auth: Some(token.to_string()), ..Template::clone(&template) });
            }
        }
        if template.standard_headers && !headers::plain_value(uri) {
            return ThinRead::Fallback("the URI needs a Base64 Mcp-Name");
        }
        let n = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let id = RequestId::String(format!("{ID_PREFIX}{n}").into());
        // Armed until the read is answered: dropped before (its timeout), it is cancelled.
        let mut abandoned = Abandoned { reader: self, template: &template, id: Some(id.clone()) };
        let mut params = Map::with_capacity(2);
        params.insert("uri".into(), Value::String(uri.to_owned()));
        let sent = self.inner.sender.post(&template, Some(&id), "resources/read", Some(uri), params, trace).await;
        let outcome = match sent {
            None => ThinRead::Fallback("a header value the template cannot send"),
            Some(Ok(answer)) => self.reply(answer, &id).await,
            Some(Err(error)) => {
                tracing::debug!(error = %error, "thin read: the request failed");
                ThinRead::Done(Err(ServiceError::TransportClosed))
            }
        };
        abandoned.id = None;
        outcome
    }

    async fn reply(&self, answer: Answer, id: &RequestId) -> ThinRead {
        if answer.status != http::StatusCode::OK {
            return ThinRead::Resend("an HTTP status other than 200");
        }
        match answer.media.as_str() {
            headers::JSON => self.json_reply(answer.body, id).await,
            headers::EVENT_STREAM => self.sse_reply(answer.body, id).await,
            _ => ThinRead::Resend("an unexpected content type"),
        }
    }

    async fn json_reply(&self, mut chunks: Chunks, id: &RequestId) -> ThinRead {
        let mut body = Vec::new();
        while let Some(chunk) = chunks.next().await {
            let Ok(chunk) = chunk else { return ThinRead::Resend("the reply broke off") };
            if body.len() + chunk.len() > self.inner.limit {
                return fault(Fault::TooLarge(self.inner.limit), id);
            }
            body.extend_from_slice(&chunk);
        }
        // Not UTF-8 is not JSON, as for rmcp's parse; checked once here, not string by string.
        let Ok(body) = std::str::from_utf8(&body) else { return fault(Fault::Malformed, id) };
        match self.judge(body, id) {
            Ok(Some(done)) => done,
            // A JSON reply is the answer or nothing.
            Ok(None) | Err(NotAMessage) => fault(Fault::Malformed, id),
        }
    }

    async fn sse_reply(&self, mut chunks: Chunks, id: &RequestId) -> ThinRead {
        let limit = self.inner.limit;
        let (mut events, mut ended) = (sse_parse::Events::default(), Vec::new());
        // Bytes since the last event: one event may not be larger than the limit.
        let mut pending = 0;
        while let Some(chunk) = chunks.next().await {
            let Ok(chunk) = chunk else { return ThinRead::Resend("the reply broke off") };
            pending += chunk.len();
            if pending > limit {
                return fault(Fault::TooLarge(limit), id);
            }
            match events.feed(&chunk, &mut ended) {
                Ok(()) => {}
                Err(sse_parse::SseError::Utf8) => return fault(Fault::InvalidUtf8, id),
                Err(sse_parse::SseError::Malformed) => return fault(Fault::Malformed, id),
            }
            if !ended.is_empty() {
                pending = 0;
            }
            for data in std::mem::take(&mut ended) {
                let Some(data) = data.filter(|data| !data.trim().is_empty()) else { continue };
                match self.judge(&data, id) {
                    Ok(Some(done)) => return done,
                    Ok(None) => self.hand_on(&data, id).await,
                    Err(NotAMessage) => return fault(Fault::Malformed, id),
                }
            }
        }
        ThinRead::Resend("the reply ended before the answer")
    }

    /// What one message of a reply does to the read: the outcome when it answers it, `None`
    /// when it is another message. A plain answer is parsed straight into its types
    /// ([`answered`]), anything else by rmcp's parse.
    fn judge(&self, data: &str, id: &RequestId) -> Result<Option<ThinRead>, NotAMessage> {
        if let Some(result) = answered(data, id) {
            return Ok(Some(ThinRead::Done(Ok(ReadResourceResponse::Complete(result)))));
        }
        let message = serde_json::from_str::<ServerJsonRpcMessage>(data).map_err(|_| NotAMessage)?;
        Ok(self.classify(message, id))
    }

    /// The outcome, when `message` answers a request; `None` for anything else.
    fn classify(&self, message: ServerJsonRpcMessage, id: &RequestId) -> Option<ThinRead> {
        let result = match message {
            JsonRpcMessage::Response(response) if response.id == *id => match response.result {
                ServerResult::ReadResourceResult(result) => Ok(ReadResourceResponse::Complete(result)),
                ServerResult::InputRequiredResult(result) => Ok(ReadResourceResponse::InputRequired(result)),
                _ => Err(ServiceError::UnexpectedResponse),
            },
            JsonRpcMessage::Error(error) if error.id.as_ref().is_none_or(|answered| answered == id) => {
                Err(ServiceError::McpError(error.error))
            }
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => return Some(fault(Fault::WrongId, id)),
            _ => return None,
        };
        Some(ThinRead::Done(result))
    }

    /// A notification or request on the read's stream: to rmcp, as the guard would pass it.
    async fn hand_on(&self, data: &str, id: &RequestId) {
        let Ok(mut value) = serde_json::from_str::<Value>(data) else { return };
        super::relay::mark_notification(&mut value, Some(id));
        let Ok(mut message) = serde_json::from_value::<ServerJsonRpcMessage>(value) else { return };
        if let JsonRpcMessage::Request(request) = &mut message {
            request.request.extensions_mut().insert(InboundStreamOrigin::OutboundRequest(id.clone()));
        }
        // Bounded: a stream of notifications waits for rmcp to take them, as on rmcp's own path.
        let _ = self.inner.inlet.send(message).await;
    }
}

/// A reply's message that is not a JSON-RPC message rmcp would read.
struct NotAMessage;

/// The read's answer when `data` is plainly one: `{"jsonrpc": "2.0", "id": <the read's>,
/// "result": <a read result>}` and nothing else, parsed straight into its types. rmcp's message
/// parse tries each kind of message and then each kind of result in turn, building an error for
/// every kind that does not fit — a third of a miss's instructions. Anything else (another
/// shape, another id, a notification, an error) is left to that parse, as before.
fn answered(data: &str, id: &RequestId) -> Option<ReadResourceResult> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Answer {
        #[allow(dead_code, reason = "read to check it is 2.0")]
        jsonrpc: JsonRpcVersion2_0,
        id: RequestId,
        result: ReadResourceResult,
    }
    let answer: Answer = serde_json::from_str(data).ok()?;
    (answer.id == *id).then_some(answer.result)
}

/// A thin read in flight: dropped while `id` is still set (the read's timeout ended it), the
/// upstream is told with `notifications/cancelled`, from a task of its own.
struct Abandoned<'a> {
    reader: &'a ThinReader,
    template: &'a Arc<Template>,
    id: Option<RequestId>,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (reader, template) = (self.reader.clone(), self.template.clone());
        tracing::debug!(id = ?id, "thin read abandoned; cancelling it upstream");
        runtime.spawn(async move { reader.inner.sender.cancel(&template, id).await });
    }
}

/// A read that failed with `fault`, as the guard would have failed it.
fn fault(fault: Fault, id: &RequestId) -> ThinRead {
    tracing::warn!(fault = fault.kind(), "faulty upstream reply; failing its request");
    match fault.reply(id.clone()) {
        JsonRpcMessage::Error(error) => ThinRead::Done(Err(ServiceError::McpError(error.error))),
        _ => unreachable!("a fault reply is an error"),
    }
}

/// A transport whose receive side also yields what thin reads handed on (see the module doc).
pub(crate) struct Inlet<T> {
    transport: T,
    handed_on: mpsc::Receiver<ServerJsonRpcMessage>,
}

impl<T> Inlet<T> {
    pub fn new(transport: T, handed_on: mpsc::Receiver<ServerJsonRpcMessage>) -> Self {
        Self { transport, handed_on }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Inlet<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    /// Both sources are cancel-safe (channels), so neither loses a message to the other.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        tokio::select! {
            biased;
            Some(message) = self.handed_on.recv() => Some(message),
            message = self.transport.receive() => message,
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.transport.close()
    }
}

mod plain;
mod send;
#[cfg(test)]
mod tests;
