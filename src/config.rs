//! Configuration: `config.toml` + `MCP_PROXY_<SECTION>__<KEY>` environment + CLI flags, parsed
//! by figment into raw values, then validated into typed values with every problem reported
//! at once (each with where it is). This file holds the typed values and the raw shapes they are
//! read from; `load.rs` merges the sources and validates each section through its own file.
//!
//! Invariant: a [`Config`] that exists is valid — names unique and well formed, exactly one
//! transport per upstream, every `${VAR}` resolved, durations and addresses parsed, tokens
//! hashed (never kept plain), and the policy files compiled.
//!
//! `[policies] dir` is relative to the config file. Without it, a `policies` folder next to the
//! config file is used if there is one; otherwise there are no policies and everything is
//! allowed (the behaviour of a proxy without access control). An explicit `dir` that cannot be
//! read, or holds no `*.toml`, is a problem, never a silent allow-all. The only IO here is
//! reading the config file and the policy files.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use figment::value::Value;
use serde::Deserialize;

pub use self::access::{AuthConfig, AuthMode, JwksSource, JwtConfig, PoliciesConfig, TokenDigest};
use crate::policy::PolicySet;
pub use crate::problem::Problem;
use crate::sandbox::SandboxProfile;
pub use crate::serve_dir::UriBase;

mod access;
mod audit;
mod bridge;
mod cache;
mod checks;
mod cluster;
mod credentials;
mod extract;
mod load;
mod peer_tls;
mod rate_limits;
mod sandbox;
mod server;
mod telemetry;
mod transport;
mod upstream;

pub use self::audit::AuditConfig;
pub use self::bridge::BridgeConfig;
pub use self::cache::{CacheConfig, UpstreamCache, parse_size};
pub use self::cluster::{ClusterConfig, MIN_SECRET_BYTES, Secret, default_replica_id, is_valid_replica_id};
pub use self::credentials::{ClientCredentials, TokenExchange, UpstreamAuth};
pub use self::peer_tls::PeerTls;
pub use self::rate_limits::{Bucket, RateLimitsConfig};
pub use self::server::ServerConfig;
pub use self::telemetry::{Root, Sampler, TelemetryConfig};
pub use self::transport::CaFile;
pub(crate) use self::upstream::is_variable_name;
pub use self::upstream::{redact_url, redact_urls_in};

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerConfig,
    pub upstreams: Vec<UpstreamConfig>,
    pub auth: AuthConfig,
    pub policies: PoliciesConfig,
    pub cache: CacheConfig,
    /// `[bridge]`: resources as the proxy's own tools, for models.
    pub bridge: BridgeConfig,
    /// `[rate_limits]`: token buckets per principal (off unless a rate is given).
    pub rate_limits: RateLimitsConfig,
    /// `[cluster]`: replicas sharing state in Redis; `None` is one process on its own.
    pub cluster: Option<ClusterConfig>,
    /// `[audit]`: the audit trail (on by default).
    pub audit: AuditConfig,
    /// `[telemetry]` and the standard `OTEL_*` variables: traces over OTLP (off by default).
    pub telemetry: TelemetryConfig,
}

#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    pub name: String,
    pub transport: UpstreamTransport,
    pub protocol: ProtocolChoice,
    /// Each upstream request (list page, read) must answer within this.
    pub request_timeout: Duration,
    /// Reconnect backoff doubles from 250 ms up to this.
    pub reconnect_max: Duration,
    /// `/readyz` answers 200 only while every required upstream is connected.
    pub required: bool,
    /// How often a connected upstream is probed (`ping`); a failed probe means reconnect.
    pub health_interval: Duration,
    /// Its cache settings (`[upstreams.cache]`): on/off, lifetime bound, trust in its
    /// notifications.
    pub cache: UpstreamCache,
    /// The largest single message accepted from this upstream (an HTTP body or SSE event, a
    /// stdio line); a bigger reply fails its own request only.
    pub max_response_bytes: usize,
    /// `unprefixed = true`: its tools and prompts are presented under their own names, not
    /// `<upstream>__<name>` (at most one upstream; see [`crate::tools::names`]).
    pub unprefixed: bool,
    /// `roots`: the `file://` roots the proxy answers to this upstream's `roots/list` (the
    /// roots capability is declared to it only when there are some). A host's own roots are
    /// never passed on: the upstream is shared by every host.
    pub roots: Vec<String>,
    /// `[upstreams.rate_limits]`: token buckets per principal at this upstream (off unless a
    /// rate is given).
    pub rate_limits: RateLimitsConfig,
    /// `session`, `session_idle`, `max_sessions`, `max_sessions_per_principal`: whether hosts
    /// share one upstream session or each principal (or host session) gets its own.
    pub sessions: UpstreamSessions,
}

/// How many upstream sessions an upstream has, and for whom (see `crate::upstream`'s `sessions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSessions {
    pub mode: SessionMode,
    /// Whether the operator wrote `session`; when not, `mode` is the default for the
    /// upstream's transport (see [`UpstreamSessions::describe`]).
    pub set: bool,
    /// A per-principal or per-host session unused this long is closed.
    pub idle: Duration,
    /// At most this many such sessions open on this upstream at once.
    pub max: usize,
    /// At most this many of them for one principal.
    pub max_per_principal: usize,
}

/// `session = "shared" | "per-principal" | "per-host"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionMode {
    /// One connection for every host (the default of an HTTP upstream, and of a stdio one
    /// that serves one principal).
    Shared,
    /// One connection per principal, opened on its first use (the default of a stdio upstream).
    PerPrincipal,
    /// One connection per host session (a 2025 session or a stdio host), opened on its first
    /// use and closed when the host session ends.
    PerHost,
}

impl Default for UpstreamSessions {
    fn default() -> Self {
        Self { mode: SessionMode::Shared, set: false, idle: Duration::from_secs(300), max: 64, max_per_principal: 8 }
    }
}

impl UpstreamSessions {
    /// The effective mode and where it comes from, as `check` prints it.
    pub fn describe(&self, stdio: bool) -> String {
        let mode = self.mode.name();
        match (self.set, stdio, self.mode) {
            (true, _, _) => format!("session = \"{mode}\""),
            (false, true, SessionMode::PerPrincipal) => format!(
                "session {mode} (the default of a stdio upstream: a child per principal that uses it, \
                 beside the one that lists)"
            ),
            (false, true, _) => format!(
                "session {mode} (the default of a stdio upstream when one principal is served: \
                 [auth] mode = \"none\", or serve --stdio)"
            ),
            (false, false, _) => format!("session {mode} (the default)"),
        }
    }
}

impl SessionMode {
    /// The mode as `session` spells it.
    pub fn name(self) -> &'static str {
        match self {
            SessionMode::Shared => "shared",
            SessionMode::PerPrincipal => "per-principal",
            SessionMode::PerHost => "per-host",
        }
    }
}

/// How the proxy reaches an upstream.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamTransport {
    /// The built-in folder server, in process; files named as `uri_base` says.
    Dir { path: PathBuf, uri_base: UriBase },
    /// A child process speaking MCP over stdio.
    /// Its environment is cleared but for a small default allowlist, `inherit_env`, and `env`.
    Command {
        program: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        inherit_env: Vec<String>,
        cwd: Option<PathBuf>,
        /// `[upstreams.sandbox]`: what it may touch; none, it runs as the proxy's user with its
        /// files and network (docs/sandbox.md).
        sandbox: Option<SandboxProfile>,
    },
    /// Streamable HTTP; an `https://` upstream's certificate is checked against the system's
    /// roots and its `ca_file`. With `auth`, each request carries an access token obtained with
    /// the proxy's client credentials or, on a principal's own session, exchanged for that
    /// principal's JWT (`[upstreams.auth]`).
    Http { url: String, headers: BTreeMap<String, String>, ca: Option<CaFile>, auth: Option<UpstreamAuth> },
}

/// Which protocol era to speak to an upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolChoice {
    /// The 2025 handshake, kept for an upstream that offers tools or prompts or is given roots;
    /// for the others a probe of 2026-07-28 (`server/discover`), falling back to the handshake
    /// (see `upstream::connect`).
    Auto,
    /// The given version, no probing.
    Pinned(String),
}

/// Every problem found in a configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.problems.len();
        writeln!(f, "{count} configuration problem{}:", if count == 1 { "" } else { "s" })?;
        for problem in &self.problems {
            writeln!(f, "  - {}: {}", problem.at, problem.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Overrides that come from the command line; they win over file and environment.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct CliOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_listen: Option<String>,
}

impl Config {
    /// Served to one principal only (a `serve --stdio` host): a stdio upstream whose `session`
    /// is not set is shared, as with `[auth] mode = "none"`.
    pub fn serve_one_principal(&mut self) {
        upstream::one_principal_served(&mut self.upstreams);
    }

    /// The policies loaded with this configuration.
    pub fn policy_set(&self) -> &PolicySet {
        &self.policies.set
    }
}

#[derive(Debug, Deserialize, Default)]
struct RawConfig {
    #[serde(default)]
    server: server::RawServer,
    #[serde(default)]
    upstreams: Vec<RawUpstream>,
    #[serde(default)]
    auth: access::RawAuth,
    #[serde(default)]
    policies: access::RawPolicies,
    #[serde(default)]
    cache: cache::RawCache,
    #[serde(default)]
    bridge: bridge::RawBridge,
    #[serde(default)]
    rate_limits: rate_limits::RawRateLimits,
    cluster: Option<cluster::RawCluster>,
    #[serde(default)]
    audit: audit::RawAudit,
    #[serde(default)]
    telemetry: telemetry::RawTelemetry,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize, Default)]
struct RawUpstream {
    name: Option<String>,
    dir: Option<PathBuf>,
    uri_base: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    inherit_env: Vec<String>,
    cwd: Option<PathBuf>,
    sandbox: Option<sandbox::RawSandbox>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    ca_file: Option<PathBuf>,
    auth: Option<credentials::RawUpstreamAuth>,
    protocol: Option<String>,
    request_timeout: Option<String>,
    reconnect_max: Option<String>,
    required: Option<bool>,
    health_interval: Option<String>,
    /// Kept for older configs; `[upstreams.cache] trust_notifications` is the place now.
    trust_notifications: Option<bool>,
    max_response_bytes: Option<Value>,
    unprefixed: Option<bool>,
    #[serde(default)]
    roots: Vec<String>,
    session: Option<String>,
    session_idle: Option<String>,
    max_sessions: Option<i64>,
    max_sessions_per_principal: Option<i64>,
    cache: Option<cache::RawUpstreamCache>,
    #[serde(default)]
    rate_limits: rate_limits::RawRateLimits,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

/// Replace every `${VAR}` with its value; `Err(name)` of the first one that is not set.
pub fn expand_vars(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    replace_vars(text, |name| lookup(name).ok_or_else(|| name.to_string()))
}

/// `text` with every `${…}` replaced by what `replace` makes of what is inside the braces; an
/// unclosed `${` stays as written. The first error ends it.
pub fn replace_vars<E>(text: &str, mut replace: impl FnMut(&str) -> Result<String, E>) -> Result<String, E> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        out.push_str(&replace(&after[..end])?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Parse `"30s"`, `"250ms"`, `"5m"`, `"1h"`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    match unit.trim() {
        "ms" => Some(Duration::from_millis(number)),
        "s" => Some(Duration::from_secs(number)),
        "m" => Some(Duration::from_secs(number * 60)),
        "h" => Some(Duration::from_secs(number * 3600)),
        _ => None,
    }
}

fn duration(text: Option<&str>, default: &str, at: &str, problems: &mut Vec<Problem>) -> Duration {
    let text = text.unwrap_or(default);
    parse_duration(text).unwrap_or_else(|| {
        push(problems, at, format!("`{text}` is not a duration like 250ms, 30s, 5m, 1h"));
        parse_duration(default).expect("defaults parse")
    })
}

/// An integer setting that must lie in `range` (`default` when absent).
fn integer(n: Option<i64>, default: usize, range: RangeInclusive<i64>, at: &str, problems: &mut Vec<Problem>) -> usize {
    let n = n.unwrap_or(default as i64);
    if range.contains(&n) {
        return n as usize;
    }
    push(problems, at, format!("{n} is outside {range:?}"));
    default
}

fn report_unknown(at: &str, unknown: &BTreeMap<String, Value>, problems: &mut Vec<Problem>) {
    for key in unknown.keys() {
        let path = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
        push(problems, &path, "unknown key".into());
    }
}

fn push(problems: &mut Vec<Problem>, at: &str, message: String) {
    problems.push(Problem { at: at.to_string(), message });
}

fn single(at: &str, message: &str) -> ConfigError {
    ConfigError { problems: vec![Problem { at: at.into(), message: message.into() }] }
}

fn where_of(path: &[String]) -> String {
    if path.is_empty() { "config".into() } else { path.join(".") }
}

#[cfg(test)]
mod tests;
