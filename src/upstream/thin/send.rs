//! A thin request on the wire: its headers and body from the template, sent on hyper's
//! connection-level client for plain `http://` upstreams ([`plain`](super::plain)) or on the
//! connection's pooled reqwest client (https, a private CA, a proxy in the environment); and
//! the `notifications/cancelled` for a read that was abandoned.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use hyper::body::Bytes;
use rmcp::model::RequestId;
use serde::Serialize;
use serde_json::{Map, Value};

use super::Template;
use super::plain::{Plain, WireError};
use crate::wire;

/// How long the `notifications/cancelled` of an abandoned read may take.
const CANCEL_FOR: Duration = Duration::from_secs(5);

/// A reply body as it arrives.
pub(super) type Chunks = BoxStream<'static, Result<Bytes, std::io::Error>>;

/// A reply: its status, media type (lower case, no parameters) and body.
pub(super) struct Answer {
    pub status: StatusCode,
    pub media: String,
    pub body: Chunks,
}

/// Where a connection's thin requests go.
pub(super) enum Sender {
    Plain(Arc<Plain>),
    Pooled(reqwest::Client),
}

#[derive(Serialize)]
struct Outgoing<'a> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a RequestId>,
    method: &'static str,
    params: Map<String, Value>,
}

impl Sender {
    /// POST `method` (a request when `id` is given) with `params` and the template's headers;
    /// `name` is the standard `Mcp-Name` header, when the method has one; `trace` (a
    /// `traceparent` and a `tracestate`, maybe empty) goes in `_meta` and in the headers of the
    /// same names. `None`: the request cannot be sent as the template says (a header value that
    /// is not one).
    pub async fn post(
        &self,
        template: &Template,
        id: Option<&RequestId>,
        method: &'static str,
        name: Option<&str>,
        mut params: Map<String, Value>,
        trace: Option<&(String, String)>,
    ) -> Option<Result<Answer, WireError>> {
        let mut meta = template.meta.clone();
        if let Some((traceparent, tracestate)) = trace {
            let meta = meta.get_or_insert_with(Map::new);
            meta.insert("traceparent".into(), Value::String(traceparent.clone()));
            if !tracestate.is_empty() {
                meta.insert("tracestate".into(), Value::String(tracestate.clone()));
            }
        }
        if let Some(meta) = meta {
            params.insert("_meta".into(), Value::Object(meta));
        }
        let body = serde_json::to_vec(&Outgoing { jsonrpc: "2.0", id, method, params }).expect("JSON serialises");
        let mut headers = headers(template, method, name)?;
        if let Some((traceparent, tracestate)) = trace {
            headers.insert("traceparent", HeaderValue::from_str(traceparent).ok()?);
            if !tracestate.is_empty() {
                headers.insert("tracestate", HeaderValue::from_str(tracestate).ok()?);
            }
        }
        Some(match self {
            Self::Plain(plain) => plain.post(&headers, Bytes::from(body)).await.map(|reply| {
                let chunks = futures::stream::unfold(reply.body, |mut body| async move {
                    let chunk = body.chunk().await?;
                    Some((chunk.map_err(std::io::Error::other), body))
                });
                Answer { status: reply.status, media: wire::headers::media_type(&reply.headers), body: chunks.boxed() }
            }),
            Self::Pooled(client) => {
                let sent = client.post(template.url.as_ref()).headers(headers).body(body).send().await;
                match sent {
                    Ok(response) => Ok(Answer {
                        status: response.status(),
                        media: wire::headers::media_type(response.headers()),
                        body: response.bytes_stream().map(|chunk| chunk.map_err(std::io::Error::other)).boxed(),
                    }),
                    Err(error) => Err(error.without_url().into()),
                }
            }
        })
    }

    /// Tell the upstream that the read `id` was abandoned (its timeout), as rmcp's path does.
    pub async fn cancel(&self, template: &Template, id: RequestId) {
        let mut params = Map::with_capacity(3);
        params.insert("requestId".into(), serde_json::to_value(&id).expect("an id serialises"));
        params.insert("reason".into(), Value::String("the read timed out".into()));
        let sent = async {
            let Some(Ok(mut answer)) = self.post(template, None, "notifications/cancelled", None, params, None).await
            else {
                return;
            };
            while let Some(Ok(_)) = answer.body.next().await {}
        };
        if tokio::time::timeout(CANCEL_FOR, sent).await.is_err() {
            tracing::debug!("thin read: the cancellation was not delivered in time");
        }
    }
}

/// The request headers: the template's, and the per-request ones rmcp would add.
fn headers(template: &Template, method: &str, name: Option<&str>) -> Option<HeaderMap> {
    let mut headers = template.headers.clone();
    wire::headers::set_client_request(&mut headers, template.standard_headers, method, name)?;
    if let Some(auth) = &template.auth {
        let mut value = HeaderValue::from_str(&format!("Bearer {auth}")).ok()?;
        value.set_sensitive(true);
        headers.insert(header::AUTHORIZATION, value);
    }
    if let Some(session) = &template.session {
        headers.insert(wire::headers::SESSION_ID, HeaderValue::from_str(session).ok()?);
    }
    Some(headers)
}
