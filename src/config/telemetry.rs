//! The `[telemetry]` section: OpenTelemetry traces over OTLP/HTTP (see [`crate::telemetry`]).
//! Each key says what a standard `OTEL_*` variable says; a key the file sets wins, a variable
//! fills what the file leaves out (as an SDK's own settings win over the environment). Off
//! unless an endpoint is given, by the file or by `OTEL_EXPORTER_OTLP_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; `OTEL_SDK_DISABLED=true` or `enabled = false` turns it
//! off whatever else says.
//!
//! Invariant: a [`TelemetryConfig`] with an endpoint has a parsed `http(s)://` URL, header names
//! and values that HTTP accepts, a known sampler with its argument in range; header values
//! (credentials) are never shown (`Debug` and [`TelemetryConfig::describe`] name the headers only).

use std::collections::BTreeMap;
use std::fmt;

use figment::value::Value;
use serde::Deserialize;

use super::{Problem, push, report_unknown};

/// The traces' settings.
#[derive(Clone, PartialEq)]
pub struct TelemetryConfig {
    /// Where spans are POSTed (the whole URL, `/v1/traces` included); `None`: traces are off.
    pub endpoint: Option<String>,
    /// Headers sent with every export (often a collector's credentials).
    pub headers: Vec<(String, String)>,
    /// `service.name` of the resource.
    pub service_name: String,
    /// The resource's other attributes (`OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: Vec<(String, String)>,
    pub sampler: Sampler,
    /// Put `mcp.resource.uri` on spans (off: a URI can name what a policy protects).
    pub resource_uris: bool,
}

/// Which traces are kept (`OTEL_TRACES_SAMPLER`, its ratio from `OTEL_TRACES_SAMPLER_ARG`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
    /// A host's sampled flag decides; a request without a parent is decided by the inner one.
    ParentBased(Root),
}

/// The decision of a parent-based sampler for a request that starts a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Root {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            headers: Vec::new(),
            service_name: DEFAULT_SERVICE.into(),
            resource: Vec::new(),
            sampler: Sampler::ParentBased(Root::AlwaysOn),
            resource_uris: false,
        }
    }
}

impl fmt::Debug for TelemetryConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("TelemetryConfig")
            .field("endpoint", &self.endpoint)
            .field("headers", &headers)
            .field("service_name", &self.service_name)
            .field("resource", &self.resource)
            .field("sampler", &self.sampler)
            .field("resource_uris", &self.resource_uris)
            .finish()
    }
}

impl TelemetryConfig {
    pub fn enabled(&self) -> bool {
        self.endpoint.is_some()
    }

    /// A replica of a cluster: the resource's `service.instance.id` is its id (unless the
    /// operator named one), so a trace across replicas shows which span came from which.
    pub(super) fn name_instance(&mut self, replica: &str) {
        if !self.resource.iter().any(|(key, _)| key == INSTANCE_ID) {
            self.resource.push((INSTANCE_ID.into(), replica.into()));
        }
    }

    /// One line for `check`: where traces go and how they are sampled; header names only.
    pub fn describe(&self) -> String {
        let Some(endpoint) = &self.endpoint else { return "traces: off (no OTLP endpoint configured)".into() };
        let headers: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        let headers = if headers.is_empty() { String::new() } else { format!(", headers {}", headers.join(", ")) };
        let uris = if self.resource_uris { ", resource URIs on spans" } else { "" };
        format!(
            "traces: to {} (http/protobuf), service {}, sampler {}{headers}{uris}",
            super::redact_url(endpoint),
            self.service_name,
            self.sampler.label()
        )
    }
}

impl Sampler {
    /// The sampler's `OTEL_TRACES_SAMPLER` name, with its ratio.
    pub fn label(&self) -> String {
        match self {
            Sampler::AlwaysOn => "always_on".into(),
            Sampler::AlwaysOff => "always_off".into(),
            Sampler::Ratio(ratio) => format!("traceidratio {ratio}"),
            Sampler::ParentBased(Root::AlwaysOn) => "parentbased_always_on".into(),
            Sampler::ParentBased(Root::AlwaysOff) => "parentbased_always_off".into(),
            Sampler::ParentBased(Root::Ratio(ratio)) => format!("parentbased_traceidratio {ratio}"),
        }
    }
}

const DEFAULT_SERVICE: &str = "mcp-resource-proxy";
const INSTANCE_ID: &str = "service.instance.id";

#[derive(Debug, Deserialize, Default)]
pub(super) struct RawTelemetry {
    enabled: Option<bool>,
    endpoint: Option<String>,
    traces_endpoint: Option<String>,
    protocol: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    service_name: Option<String>,
    #[serde(default)]
    resource_attributes: BTreeMap<String, String>,
    sampler: Option<String>,
    sampler_arg: Option<Value>,
    resource_uris: Option<bool>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

/// Where a setting came from, for its problem's `at`.
struct Setting {
    value: String,
    at: String,
}

fn setting(file: Option<String>, key: &str, var: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Option<Setting> {
    match file {
        Some(value) => Some(Setting { value, at: format!("telemetry.{key}") }),
        None => lookup(var).filter(|v| !v.trim().is_empty()).map(|value| Setting { value, at: var.into() }),
    }
}

pub(super) fn validate_telemetry(
    raw: RawTelemetry,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> TelemetryConfig {
    report_unknown("telemetry", &raw.unknown, problems);
    let defaults = TelemetryConfig::default();
    let disabled = raw.enabled == Some(false)
        || (raw.enabled.is_none()
            && lookup("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")));
    let endpoint = endpoint(&raw, lookup, problems);
    if let Some(protocol) = setting(raw.protocol.clone(), "protocol", "OTEL_EXPORTER_OTLP_PROTOCOL", lookup)
        .or_else(|| setting(None, "protocol", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", lookup))
        && protocol.value.trim() != "http/protobuf"
    {
        let why = format!("`{}` is not supported: this build exports http/protobuf only", protocol.value.trim());
        push(problems, &protocol.at, why);
    }
    let headers = headers(raw.headers, lookup, problems);
    let service_name = setting(raw.service_name, "service_name", "OTEL_SERVICE_NAME", lookup)
        .map(|s| s.value.trim().to_string())
        .unwrap_or(defaults.service_name);
    let resource = resource(raw.resource_attributes, lookup, problems);
    let sampler = sampler(raw.sampler, raw.sampler_arg, lookup, problems);
    if raw.enabled == Some(true) && endpoint.is_none() {
        push(
            problems,
            "telemetry.enabled",
            "traces need an endpoint (`endpoint`, `traces_endpoint`, or OTEL_EXPORTER_OTLP_ENDPOINT)".into(),
        );
    }
    TelemetryConfig {
        endpoint: endpoint.filter(|_| !disabled),
        headers,
        service_name,
        resource,
        sampler,
        resource_uris: raw.resource_uris.unwrap_or(false),
    }
}

/// The traces URL: a traces endpoint as given, else a base endpoint with `/v1/traces` added.
fn endpoint(
    raw: &RawTelemetry,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Option<String> {
    let traces = setting(raw.traces_endpoint.clone(), "traces_endpoint", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", lookup);
    let (setting, whole) = match traces {
        Some(traces) => (traces, true),
        None => (setting(raw.endpoint.clone(), "endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", lookup)?, false),
    };
    let value = setting.value.trim();
    let parsed = value
        .parse::<http::Uri>()
        .ok()
        .filter(|uri| matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some_and(|h| !h.is_empty()));
    if parsed.is_none() {
        let shown = super::redact_url(value);
        push(problems, &setting.at, format!("`{shown}` is not an http:// or https:// URL"));
        return None;
    }
    Some(if whole { value.to_string() } else { format!("{}/v1/traces", value.trim_end_matches('/')) })
}

/// `key=value` pairs separated by commas, values percent-decoded (the W3C Baggage form the
/// `OTEL_*` variables use).
fn pairs(text: &str, at: &str, problems: &mut Vec<Problem>) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for item in text.split(',').map(str::trim).filter(|item| !item.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            push(problems, at, format!("`{}` is not key=value", item.split('=').next().unwrap_or_default()));
            continue;
        };
        let value = percent_encoding::percent_decode_str(value.trim()).decode_utf8_lossy().into_owned();
        pairs.push((key.trim().to_string(), value));
    }
    pairs
}

fn headers(
    file: BTreeMap<String, String>,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Vec<(String, String)> {
    let (headers, at) = match file.is_empty() {
        false => (file.into_iter().collect(), "telemetry.headers".to_string()),
        true => {
            let var = ["OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"]
                .into_iter()
                .find_map(|var| lookup(var).map(|text| (text, var)));
            match var {
                Some((text, var)) => (pairs(&text, var, problems), var.to_string()),
                None => (Vec::new(), String::new()),
            }
        }
    };
    for (name, value) in &headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            push(problems, &at, format!("`{name}` is not a header name"));
        } else if http::HeaderValue::from_str(value).is_err() {
            // The value is a credential more often than not: never shown.
            push(problems, &at, format!("the value of `{name}` is not a header value"));
        }
    }
    headers
}

fn resource(
    file: BTreeMap<String, String>,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Vec<(String, String)> {
    let mut resource: Vec<(String, String)> = match lookup("OTEL_RESOURCE_ATTRIBUTES") {
        Some(text) => pairs(&text, "OTEL_RESOURCE_ATTRIBUTES", problems),
        None => Vec::new(),
    };
    // The file's keys win over the variable's.
    resource.retain(|(key, _)| !file.contains_key(key) && key != "service.name");
    resource.extend(file.into_iter().filter(|(key, _)| key != "service.name"));
    resource
}

fn sampler(
    file: Option<String>,
    file_arg: Option<Value>,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Sampler {
    let default = TelemetryConfig::default().sampler;
    let Some(name) = setting(file, "sampler", "OTEL_TRACES_SAMPLER", lookup) else { return default };
    let arg = match file_arg {
        Some(value) => Some(Setting { value: arg_text(&value), at: "telemetry.sampler_arg".into() }),
        None => setting(None, "sampler_arg", "OTEL_TRACES_SAMPLER_ARG", lookup),
    };
    let mut ratio = || match &arg {
        None => 1.0,
        Some(arg) => match arg.value.trim().parse::<f64>() {
            Ok(ratio) if (0.0..=1.0).contains(&ratio) => ratio,
            _ => {
                push(problems, &arg.at, format!("`{}` is not a ratio between 0 and 1", arg.value.trim()));
                1.0
            }
        },
    };
    match name.value.trim() {
        "always_on" => Sampler::AlwaysOn,
        "always_off" => Sampler::AlwaysOff,
        "traceidratio" => Sampler::Ratio(ratio()),
        "parentbased_always_on" => Sampler::ParentBased(Root::AlwaysOn),
        "parentbased_always_off" => Sampler::ParentBased(Root::AlwaysOff),
        "parentbased_traceidratio" => Sampler::ParentBased(Root::Ratio(ratio())),
        other => {
            let known = "always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio";
            push(problems, &name.at, format!("`{other}` is not one of {known}"));
            default
        }
    }
}

fn arg_text(value: &Value) -> String {
    match value {
        Value::String(_, text) => text.clone(),
        Value::Num(_, number) => number.to_f64().map_or_else(String::new, |n| n.to_string()),
        _ => "(not a number)".into(),
    }
}

#[cfg(test)]
mod tests;
