//! An OTLP/HTTP trace receiver on 127.0.0.1:0: each POST's body is decoded as the official
//! `ExportTraceServiceRequest` (the `opentelemetry-proto` crate's messages) and its spans kept;
//! every TCP connection accepted is counted, so a test can say that nothing connected.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;

use super::{DEADLINE, eventually};

/// One span as the receiver got it; ids in lower-case hex, attributes as strings.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub name: String,
    /// `INTERNAL`, `SERVER`, `CLIENT`, `PRODUCER` or `CONSUMER` (or the kind's number otherwise).
    pub kind: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attributes: BTreeMap<String, String>,
    /// Linked contexts: (trace id, span id).
    pub links: Vec<(String, String)>,
    /// Its events: (name, attributes as strings).
    pub events: Vec<(String, BTreeMap<String, String>)>,
    /// `service.name` of the resource it came with.
    pub service: String,
    /// `service.instance.id` of the resource it came with (a replica's id), if any.
    pub instance: String,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    /// The attributes of its first event named `name`, if it has one.
    pub fn event(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.events.iter().find(|(event, _)| event == name).map(|(_, attributes)| attributes)
    }
}

/// The receiver: its spans and its connection count; it stops when dropped.
pub struct Receiver {
    pub endpoint: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let spans = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(accept(listener, spans.clone(), connections.clone()));
        Ok(Self { endpoint, spans, connections, task })
    }

    /// How many TCP connections it accepted.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// Wait (at most [`DEADLINE`]) until the spans received satisfy `ready`; all of them.
    pub async fn wait(&self, what: &str, ready: impl Fn(&[ReceivedSpan]) -> bool) -> anyhow::Result<Vec<ReceivedSpan>> {
        eventually(DEADLINE, what, || async {
            let spans = self.spans();
            if ready(&spans) { Ok(spans) } else { anyhow::bail!("spans so far: {spans:#?}") }
        })
        .await
    }
}

async fn accept(
    listener: tokio::net::TcpListener,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    connections: Arc<AtomicUsize>,
) {
    while let Ok((stream, _)) = listener.accept().await {
        connections.fetch_add(1, Ordering::SeqCst);
        let spans = spans.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let spans = spans.clone();
                async move {
                    let body = request.into_body().collect().await?.to_bytes();
                    let status = match ExportTraceServiceRequest::decode(body) {
                        Ok(export) => {
                            spans.lock().unwrap().extend(flatten(export));
                            hyper::StatusCode::OK
                        }
                        Err(_) => hyper::StatusCode::BAD_REQUEST,
                    };
                    let reply = ExportTraceServiceResponse::default().encode_to_vec();
                    let mut response = hyper::Response::new(Full::new(Bytes::from(reply)));
                    *response.status_mut() = status;
                    response.headers_mut().insert("content-type", "application/x-protobuf".parse().unwrap());
                    Ok::<_, hyper::Error>(response)
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
        });
    }
}

fn flatten(export: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut found = Vec::new();
    for resource_spans in export.resource_spans {
        let resource = resource_spans.resource.map(|r| attributes(r.attributes)).unwrap_or_default();
        let service = resource.get("service.name").cloned().unwrap_or_default();
        let instance = resource.get("service.instance.id").cloned().unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                let kind = match span.kind {
                    1 => "INTERNAL".to_string(),
                    2 => "SERVER".to_string(),
                    3 => "CLIENT".to_string(),
                    4 => "PRODUCER".to_string(),
                    5 => "CONSUMER".to_string(),
                    other => other.to_string(),
                };
                found.push(ReceivedSpan {
                    name: span.name,
                    kind,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: attributes(span.attributes),
                    links: span.links.iter().map(|link| (hex(&link.trace_id), hex(&link.span_id))).collect(),
                    events: span.events.into_iter().map(|event| (event.name, attributes(event.attributes))).collect(),
                    service: service.clone(),
                    instance: instance.clone(),
                });
            }
        }
    }
    found
}

fn attributes(list: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>) -> BTreeMap<String, String> {
    let text = |value: Option<Value>| match value {
        Some(Value::StringValue(text)) => text,
        Some(Value::IntValue(n)) => n.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    };
    list.into_iter().map(|kv| (kv.key, text(kv.value.and_then(|v| v.value)))).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The OTLP environment of a proxy that exports to `receiver` at once (a short batch delay).
pub fn exporting_to(receiver: &Receiver) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint.clone()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50".into()),
        ("OTEL_SERVICE_NAME", "proxy-under-test".into()),
    ]
}

/// A span's parent and trace as a `traceparent` value names them.
pub fn traceparent_ids(traceparent: &str) -> anyhow::Result<(String, String)> {
    let parts: Vec<&str> = traceparent.split('-').collect();
    let [_, trace, span, _] = parts[..] else { anyhow::bail!("not a traceparent: {traceparent}") };
    Ok((trace.to_string(), span.to_string()))
}
