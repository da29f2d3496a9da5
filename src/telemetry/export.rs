//! The OTLP/HTTP (protobuf) exporter over the process's own HTTP client (reqwest with the ring
//! provider, [`crate::crypto::http_client`]; no second TLS stack), batched by the SDK's span
//! processor. The processor exports from a thread of its own; each export's POST runs as one
//! short task on the tokio runtime `install` was called in, bounded by the client's timeout.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler as SdkSampler, SdkTracerProvider};

use crate::config::{Root, Sampler, TelemetryConfig};

/// How long one export may take, its reply included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("traces: the OTLP exporter could not be built: {0}")]
    Exporter(String),
    #[error("traces: the exporter is installed already")]
    Twice,
    #[error("traces: the exporter needs a tokio runtime")]
    NoRuntime,
}

/// The tracer provider that exports to `endpoint` as `config` says.
pub(super) fn provider(config: &TelemetryConfig, endpoint: &str) -> Result<SdkTracerProvider, InstallError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| InstallError::NoRuntime)?;
    let client = crate::crypto::http_client()
        .timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|error| InstallError::Exporter(error.to_string()))?;
    let headers: HashMap<String, String> = config.headers.iter().cloned().collect();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(OnRuntime { client, runtime })
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_timeout(EXPORT_TIMEOUT)
        .with_headers(headers)
        .build()
        .map_err(|error| InstallError::Exporter(error.to_string()))?;
    let resource = Resource::builder_empty()
        .with_service_name(config.service_name.clone())
        .with_attributes(config.resource.iter().map(|(key, value)| KeyValue::new(key.clone(), value.clone())))
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler(config.sampler))
        .with_resource(resource)
        .build())
}

fn sampler(sampler: Sampler) -> SdkSampler {
    match sampler {
        Sampler::AlwaysOn => SdkSampler::AlwaysOn,
        Sampler::AlwaysOff => SdkSampler::AlwaysOff,
        Sampler::Ratio(ratio) => SdkSampler::TraceIdRatioBased(ratio),
        Sampler::ParentBased(root) => SdkSampler::ParentBased(Box::new(match root {
            Root::AlwaysOn => SdkSampler::AlwaysOn,
            Root::AlwaysOff => SdkSampler::AlwaysOff,
            Root::Ratio(ratio) => SdkSampler::TraceIdRatioBased(ratio),
        })),
    }
}

/// The process's reqwest client, each request run on the tokio runtime (the SDK's processor
/// thread awaits it without one).
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let (parts, body) = request.into_parts();
        let post = async move {
            let response = client.request(parts.method, parts.uri.to_string()).headers(parts.headers).body(body);
            let response = response.send().await.map_err(|error| error.without_url())?;
            let mut answer = Response::builder().status(response.status());
            if let Some(headers) = answer.headers_mut() {
                *headers = response.headers().clone();
            }
            let body = response.bytes().await.map_err(|error| error.without_url())?;
            Ok::<_, reqwest::Error>(answer.body(body).expect("a response of parts already valid"))
        };
        // One export's POST, bounded by the client's timeout.
        Ok(self.runtime.spawn(post).await??)
    }
}
