//! Logging: to stderr (stdout belongs to stdio MCP), human or JSON, its level from `RUST_LOG`
//! or else `server.log_level`, with rmcp's own logging held back.

use crate::logging::{EscapedFields, WithoutPeerGone};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use super::cli::LogFormat;

/// rmcp's own logging, held back: per-message lines at `info`, a warning for every error
/// answer (an unknown method, a missing resource: ordinary traffic), and its transport
/// worker's errors and its HTTP client's warnings about ended streams, which the proxy reports
/// itself (once per state change, in plain words).
const QUIET_RMCP: &str =
    "rmcp=warn,rmcp::service=error,rmcp::transport::worker=off,rmcp::transport::streamable_http_client=error";

type FilterHandle = tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>;

/// Where the log level can be changed once the configuration is read.
static LOG_FILTER: std::sync::OnceLock<FilterHandle> = std::sync::OnceLock::new();

/// Logs to stderr. `RUST_LOG` wins; otherwise `server.log_level` once the config is loaded
/// (`info` until then), with rmcp's own logging held back ([`QUIET_RMCP`]).
pub(crate) fn init_tracing(format: LogFormat) {
    let filter = rust_log()
        .and_then(|spec| EnvFilter::try_new(spec).ok())
        .unwrap_or_else(|| EnvFilter::new(format!("info,{QUIET_RMCP}")));
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let _ = LOG_FILTER.set(handle);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let registry = tracing_subscriber::registry().with(filter);
    let quiet = WithoutPeerGone;
    match format {
        LogFormat::Human => registry.with(fmt.fmt_fields(EscapedFields).with_filter(quiet)).init(),
        LogFormat::Json => registry.with(fmt.json().with_filter(quiet)).init(),
    }
}

pub(crate) fn apply_log_level(level: &str) {
    if rust_log().is_some() {
        return;
    }
    if let Some(handle) = LOG_FILTER.get() {
        let _ = handle.reload(EnvFilter::new(format!("{level},{QUIET_RMCP}")));
    }
}

/// `RUST_LOG`, when set to something (an empty value counts as unset).
fn rust_log() -> Option<String> {
    std::env::var("RUST_LOG").ok().filter(|spec| !spec.trim().is_empty())
}
