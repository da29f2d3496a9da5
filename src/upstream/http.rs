//! The HTTP client of streamable HTTP upstreams: rmcp's reqwest client behind a guard that
//! keeps one bad reply from looking like a dead connection.
//!
//! rmcp reports a reply body over its byte limit, a body that does not parse, or an SSE event
//! that is too large or not UTF-8 as a transport error (or a closed response stream), which a
//! caller cannot tell from a connection that is gone. Here each POST knows the request it
//! carries, so such a reply becomes a [`Fault`] error for exactly that request; a response
//! carrying another request's id becomes one too. Errors that are about the connection (refused,
//! reset, HTTP status) pass through unchanged — without the URL, which may hold credentials.
//!
//! Notifications on a POST's response stream are marked with the request it carried, and marks
//! are taken off whatever arrives elsewhere, so they can be relayed to that call's host (`relay`).
//!
//! The guard also records what rmcp's list and read requests carry (session, headers, `_meta`)
//! for the connection's thin read client (`thin`). With traces on, a request's trace context
//! (which its CLIENT span put in `_meta`) goes in the W3C `traceparent`/`tracestate` headers too.
//!
//! With client credentials (`[upstreams.auth]`), every request carries the upstream's current
//! access token (`credentials`) — a request made for a host's call that came with a JWT (a
//! [`SubjectToken`] in its extensions), a token exchanged for that JWT; a 401 answer to it gets
//! a new token and the request is sent once more. When no token can be had, a request fails alone with a [`Fault::NoToken`] error,
//! and is not sent.
//!
//! Invariant: a request whose reply is faulty gets exactly one answer, the fault; nothing of
//! the faulty reply reaches rmcp.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, GetExtensions, GetMeta, JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::Sse;

use super::credentials::{TokenFailure, TokenSource};
use super::faults::Fault;
use super::owner_link::{Carried, OwnerLink};
use crate::host::{KeptAs, SubjectToken};
use crate::telemetry;

mod replies;

use replies::{check_json, guard_sse, marked};

type HttpError = StreamableHttpError<reqwest::Error>;
type SseStream = BoxStream<'static, Result<Sse, SseError>>;

/// A pooled reqwest client that fails a faulty reply's request alone (see the module doc).
#[derive(Clone)]
pub(crate) struct GuardedHttpClient {
    inner: reqwest::Client,
    /// The limit the transport was configured with, for the error text.
    max_response_bytes: usize,
    /// What rmcp's requests carry, for the thin read client of this connection (`thin`).
    recorder: super::thin::Recorder,
    /// The upstream's access tokens, when it has client credentials.
    credentials: Option<TokenSource>,
    /// `[cluster]`: the replica holding the session this connection serves; every request
    /// carries a fresh pass for it (see `owners`).
    owner: Option<OwnerLink>,
}

impl GuardedHttpClient {
    /// `roots`: CA certificates trusted for this upstream besides the system's (`ca_file`);
    /// `credentials`: where its access tokens come from, if it takes them.
    pub fn new(max_response_bytes: usize, roots: Vec<reqwest::Certificate>, credentials: Option<TokenSource>) -> Self {
        Self { inner: pooled_client(roots), max_response_bytes, recorder: Default::default(), credentials, owner: None }
    }

    /// The client of a connection to the session endpoint of the replica `owner` names: the
    /// client between replicas, each request with a pass of its own.
    pub fn to_owner(max_response_bytes: usize, owner: OwnerLink) -> Self {
        let inner = owner.client();
        Self { inner, max_response_bytes, recorder: Default::default(), credentials: None, owner: Some(owner) }
    }

    /// `headers` with a fresh pass carrying `carried`, on a connection to an owner.
    fn with_pass(
        &self,
        mut headers: HashMap<HeaderName, HeaderValue>,
        carried: &Carried<'_>,
    ) -> HashMap<HeaderName, HeaderValue> {
        if let Some((name, value)) = self.owner.as_ref().and_then(|owner| owner.pass(carried)) {
            headers.insert(name, value);
        }
        headers
    }

    /// The thin read client of this connection to `url`: the same pooled client (or, for a
    /// plain `http://` URL, connections of its own), and the requests rmcp sends through this
    /// guard as its template; what it hands on goes to `inlet`.
    pub fn thin_reader(
        &self,
        url: &str,
        inlet: tokio::sync::mpsc::Sender<ServerJsonRpcMessage>,
    ) -> super::thin::ThinReader {
        let (limit, recorder) = (self.max_response_bytes, self.recorder.clone());
        super::thin::ThinReader::new(self.inner.clone(), url, limit, recorder, inlet, self.credentials.clone())
    }

    /// The bearer token to send: the upstream's current access token when it has credentials
    /// (for a request made for a host's request that came with a JWT, `subject`, exchanged for
    /// that one), else what rmcp gave.
    async fn bearer(
        &self,
        given: Option<String>,
        subject: Option<&SubjectToken>,
    ) -> Result<Option<String>, TokenFailure> {
        match &self.credentials {
            Some(credentials) => credentials.token_for(subject).await.map(|token| Some(token.to_string())),
            None => Ok(given),
        }
    }

    /// After a 401 to `sent`: the token to try once more with, when the upstream has
    /// credentials (`None` when it has none: the 401 stands).
    async fn after_refusal(
        &self,
        sent: &Option<String>,
        subject: Option<&SubjectToken>,
    ) -> Option<Result<String, TokenFailure>> {
        let credentials = self.credentials.as_ref()?;
        let replaced = credentials.replace_for(subject, sent.as_deref().unwrap_or_default()).await;
        Some(replaced.map(|token| token.to_string()))
    }

    /// What a request that could get no token is answered (a notification: a send error).
    fn no_token(
        &self,
        request: Option<RequestId>,
        failure: TokenFailure,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        match request {
            Some(id) => Ok(StreamableHttpPostResponse::Json(Fault::NoToken(failure).reply(id), None)),
            None => Err(StreamableHttpError::UnexpectedServerResponse(failure.describe().into())),
        }
    }

    /// A POST's outcome, with a faulty reply to a request replaced by that request's fault.
    fn guard(
        &self,
        request: Option<RequestId>,
        outcome: Result<StreamableHttpPostResponse, HttpError>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let Some(id) = request else { return outcome.map_err(without_url) };
        let fault = match outcome {
            Ok(StreamableHttpPostResponse::Json(message, session)) => {
                let message = check_json(&id, message);
                return Ok(StreamableHttpPostResponse::Json(message, session));
            }
            Ok(StreamableHttpPostResponse::Sse(stream, session)) => {
                let stream = guard_sse(stream, id, self.max_response_bytes);
                return Ok(StreamableHttpPostResponse::Sse(stream, session));
            }
            Ok(other) => return Ok(other),
            Err(StreamableHttpError::ResponseBodyTooLarge { .. }) => Fault::TooLarge(self.max_response_bytes),
            Err(StreamableHttpError::Deserialize(_) | StreamableHttpError::UnexpectedServerResponse(_)) => {
                Fault::Malformed
            }
            Err(other) => return Err(without_url(other)),
        };
        tracing::warn!(fault = fault.kind(), "faulty upstream reply; failing its request");
        Ok(StreamableHttpPostResponse::Json(fault.reply(id), None))
    }
}

/// `headers` with a request's trace context — the `traceparent`/`tracestate` its CLIENT span
/// put in its `_meta` — as the W3C headers too (rmcp's transport sends `_meta` only); unchanged
/// when traces are off or it carries none.
fn with_trace_headers(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    if !telemetry::on() {
        return headers;
    }
    let JsonRpcMessage::Request(request) = message else { return headers };
    let meta = request.request.get_meta();
    for (name, value) in [("traceparent", meta.get_traceparent()), ("tracestate", meta.get_tracestate())] {
        if let Some(value) = value.and_then(|value| HeaderValue::from_str(value).ok()) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    headers
}

/// rmcp's default client keeps no idle connections, so every upstream request would open a new
/// one. Ours keeps them (and follows no redirects: a redirect would replay our credentials).
/// `roots` were checked with the config (`config::CaFile`), so the client builds.
fn pooled_client(roots: Vec<reqwest::Certificate>) -> reqwest::Client {
    crate::crypto::http_client()
        .redirect(reqwest::redirect::Policy::none())
        .tcp_nodelay(true)
        .tls_certs_merge(roots)
        .build()
        .expect("a reqwest client with these settings and checked roots builds")
}

impl StreamableHttpClient for GuardedHttpClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits).await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let (request, subject, kept_as) = match &message {
            JsonRpcMessage::Request(request) => {
                let extensions = request.request.extensions();
                (
                    Some(request.id.clone()),
                    extensions.get::<SubjectToken>().cloned(),
                    extensions.get::<KeptAs>().cloned(),
                )
            }
            _ => (None, None, None),
        };
        let carried = Carried { subject: subject.as_ref(), kept_as: kept_as.as_ref().map(|kept| kept.0.as_str()) };
        let custom_headers = self.with_pass(custom_headers, &carried);
        let auth_header = match self.bearer(auth_header, subject.as_ref()).await {
            Ok(auth_header) => auth_header,
            Err(failure) => return self.no_token(request, failure),
        };
        // Recorded without the request's trace context: the thin read sends its own.
        self.recorder.note(&uri, &message, &session_id, &auth_header, &custom_headers);
        let custom_headers = with_trace_headers(&message, custom_headers);
        let again = self
            .credentials
            .is_some()
            .then(|| (uri.clone(), message.clone(), session_id.clone(), custom_headers.clone()));
        let outcome = self
            .inner
            .post_message_with_response_limits(uri, message, session_id, auth_header.clone(), custom_headers, limits)
            .await;
        let outcome = match (outcome, again) {
            (Err(error), Some((uri, message, session_id, custom_headers))) if unauthorized(&error) => {
                match self.after_refusal(&auth_header, subject.as_ref()).await {
                    Some(Ok(token)) => {
                        let inner = &self.inner;
                        inner
                            .post_message_with_response_limits(
                                uri,
                                message,
                                session_id,
                                Some(token),
                                custom_headers,
                                limits,
                            )
                            .await
                    }
                    Some(Err(failure)) => return self.no_token(request, failure),
                    None => Err(error),
                }
            }
            (outcome, _) => outcome,
        };
        self.guard(request, outcome)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        let auth_header = self
            .bearer(auth_header, None)
            .await
            .map_err(|failure| StreamableHttpError::UnexpectedServerResponse(failure.describe().into()))?;
        let custom_headers = self.with_pass(custom_headers, &Carried::default());
        self.inner.delete_session(uri, session_id, auth_header, custom_headers).await.map_err(without_url)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<SseStream, HttpError> {
        let max = self.max_response_bytes;
        self.get_stream_with_max_sse_event_size(uri, session_id, last_event_id, auth_header, custom_headers, max).await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream, HttpError> {
        let no_token = |failure: TokenFailure| StreamableHttpError::UnexpectedServerResponse(failure.describe().into());
        let auth_header = self.bearer(auth_header, None).await.map_err(no_token)?;
        let custom_headers = self.with_pass(custom_headers, &Carried::default());
        let inner = &self.inner;
        let (id, last, headers, max) =
            (session_id.clone(), last_event_id.clone(), custom_headers.clone(), max_sse_event_size);
        let mut outcome =
            inner.get_stream_with_max_sse_event_size(uri.clone(), id, last, auth_header.clone(), headers, max).await;
        if let Err(error) = &outcome
            && unauthorized(error)
            && let Some(token) = self.after_refusal(&auth_header, None).await
        {
            let token = Some(token.map_err(no_token)?);
            outcome = inner
                .get_stream_with_max_sse_event_size(uri, session_id, last_event_id, token, custom_headers, max)
                .await;
        }
        outcome.map(|stream| stream.map(|event| event.map(|event| marked(event, None))).boxed()).map_err(without_url)
    }
}

/// Whether the upstream answered 401 (with a challenge, or without one).
fn unauthorized(error: &HttpError) -> bool {
    match error {
        StreamableHttpError::AuthRequired(_) => true,
        StreamableHttpError::HttpStatus(status) => status.status == 401,
        StreamableHttpError::UnexpectedServerResponse(text) => text.starts_with("HTTP 401"),
        _ => false,
    }
}

/// reqwest errors quote the URL they failed on, which may carry credentials.
fn without_url(error: HttpError) -> HttpError {
    match error {
        StreamableHttpError::Client(error) => StreamableHttpError::Client(error.without_url()),
        other => other,
    }
}
