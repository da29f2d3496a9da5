//! Loading a configuration: the file (or a text standing for it), the `MCP_PROXY_<SECTION>__<KEY>`
//! environment and the CLI overrides merged by figment into raw values, then each section
//! validated into its typed value, every problem collected.

use std::collections::BTreeSet;
use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};

use super::{
    AuthMode, CliOverrides, Config, ConfigError, Problem, ProtocolChoice, RawConfig, RawUpstream, SessionMode,
    UpstreamAuth, UpstreamConfig, UpstreamTransport, access, audit, bridge, cache, cluster, duration, extract, push,
    rate_limits, report_unknown, server, single, telemetry, transport, upstream,
};
use crate::namespace::is_valid_upstream_name;
use crate::protocol::KNOWN_VERSIONS;

impl Config {
    /// Read `path` (must exist), the environment, and the CLI overrides; validate.
    pub fn load(path: &Path, cli: &CliOverrides) -> Result<Config, ConfigError> {
        Self::load_with(path, cli, &|name| std::env::var(name).ok())
    }

    pub(super) fn load_with(
        path: &Path,
        cli: &CliOverrides,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        if !path.is_file() {
            return Err(single(&path.display().to_string(), "no such config file"));
        }
        let figment = Figment::new()
            .merge(Toml::file_exact(path))
            .merge(settings_from_env())
            .merge(Serialized::default("server", cli));
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::from_figment(&figment, &base, lookup)
    }

    /// Like [`Config::load`] for a configuration that is no file of its own (`serve
    /// --mcp-json`): `text` stands for the file, its paths relative to `base`, `lookup` gives
    /// the value of a `${VAR}`.
    pub fn load_text(
        text: &str,
        base: &Path,
        cli: &CliOverrides,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let figment = Figment::new()
            .merge(Toml::string(text))
            .merge(settings_from_env())
            .merge(Serialized::default("server", cli));
        Self::from_figment(&figment, base, lookup)
    }

    /// Validate a TOML text (paths relative to `base`), with `lookup` standing in for the
    /// environment of `${VAR}`. For tests and for `load`.
    pub fn from_toml(text: &str, base: &Path, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        Self::from_figment(&Figment::from(Toml::string(text)), base, lookup)
    }

    fn from_figment(
        figment: &Figment,
        base: &Path,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut problems = Vec::new();
        let raw = extract::extract_leniently(figment, &mut problems)?;
        let config = validate(raw, base, lookup, &mut problems);
        if problems.is_empty() { Ok(config) } else { Err(ConfigError { problems }) }
    }
}

fn validate(
    raw: RawConfig,
    base: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Config {
    report_unknown("", &raw.unknown, problems);
    let server = server::validate_server(raw.server, problems);
    let auth = access::validate_auth(raw.auth, server.listen, base, lookup, problems);
    let policies = access::validate_policies(raw.policies, base, problems);
    let cache = cache::validate_cache(raw.cache, problems);
    let bridge = bridge::validate_bridge(raw.bridge, problems);
    let rate_limits = rate_limits::validate_rate_limits("rate_limits", &raw.rate_limits, problems);
    let cluster = cluster::validate_cluster(raw.cluster, base, lookup, problems);
    let audit = audit::validate_audit(raw.audit, base, lookup, problems);
    let mut telemetry = telemetry::validate_telemetry(raw.telemetry, lookup, problems);
    if let Some(cluster) = &cluster {
        telemetry.name_instance(&cluster.replica_id);
    }
    let mut seen = BTreeSet::new();
    let unprefixed: Vec<(usize, Option<String>)> = (raw.upstreams.iter().enumerate())
        .filter(|(_, upstream)| upstream.unprefixed == Some(true))
        .map(|(index, upstream)| (index, upstream.name.clone()))
        .collect();
    let mut upstreams: Vec<UpstreamConfig> = raw
        .upstreams
        .into_iter()
        .enumerate()
        .filter_map(|(index, upstream)| validate_upstream(index, upstream, base, lookup, &mut seen, problems))
        .collect();
    if auth.mode == AuthMode::None {
        upstream::one_principal_served(&mut upstreams);
    }
    upstream::at_most_one_unprefixed(&unprefixed, problems);
    cluster::advertised_when_needed(cluster.as_ref(), server.listen, &upstreams, problems);
    Config { server, upstreams, auth, policies, cache, bridge, rate_limits, cluster, audit, telemetry }
}

fn validate_upstream(
    index: usize,
    raw: RawUpstream,
    base: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    seen: &mut BTreeSet<String>,
    problems: &mut Vec<Problem>,
) -> Option<UpstreamConfig> {
    let at = match &raw.name {
        Some(name) => format!("upstreams[{index}] ({name})"),
        None => format!("upstreams[{index}]"),
    };
    report_unknown(&at, &raw.unknown, problems);
    let name = raw.name.clone().unwrap_or_default();
    if raw.name.is_none() {
        push(problems, &at, "missing `name`".into());
    } else if !is_valid_upstream_name(&name) {
        push(problems, &format!("{at}.name"), format!("`{name}` must match ^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"));
    } else if !seen.insert(name.clone()) {
        push(problems, &format!("{at}.name"), format!("`{name}` is used by another upstream"));
    }
    let transport = transport::validate_transport(&at, &raw, base, lookup, problems);
    let protocol = match raw.protocol.as_deref() {
        None | Some("auto") => ProtocolChoice::Auto,
        Some(version) if KNOWN_VERSIONS.contains(&version) => ProtocolChoice::Pinned(version.into()),
        Some(other) => {
            push(
                problems,
                &format!("{at}.protocol"),
                format!("`{other}` is not \"auto\" or one of {KNOWN_VERSIONS:?}"),
            );
            ProtocolChoice::Auto
        }
    };
    let request_timeout = duration(raw.request_timeout.as_deref(), "30s", &format!("{at}.request_timeout"), problems);
    let reconnect_max = duration(raw.reconnect_max.as_deref(), "30s", &format!("{at}.reconnect_max"), problems);
    let required = raw.required.unwrap_or(true);
    let health_interval = duration(raw.health_interval.as_deref(), "10s", &format!("{at}.health_interval"), problems);
    let max_response_bytes = upstream::max_response_bytes(&at, raw.max_response_bytes.as_ref(), problems);
    let folder = matches!(transport, Some(UpstreamTransport::Dir { .. }));
    let cache = cache::validate_upstream_cache(&at, folder, raw.trust_notifications, raw.cache.as_ref(), problems);
    let unprefixed = raw.unprefixed.unwrap_or(false);
    let roots = upstream::roots(&at, &raw.roots, problems);
    let rate_limits = rate_limits::validate_rate_limits(&format!("{at}.rate_limits"), &raw.rate_limits, problems);
    let kind = match transport {
        Some(UpstreamTransport::Dir { .. }) => upstream::Kind::Folder,
        Some(UpstreamTransport::Command { .. }) => upstream::Kind::Stdio,
        _ => upstream::Kind::Http,
    };
    let sessions = upstream::sessions(&at, kind, &raw, problems);
    if let Some(UpstreamTransport::Http { auth: Some(UpstreamAuth::TokenExchange(_)), .. }) = &transport
        && sessions.mode == SessionMode::Shared
    {
        let why = "`token_exchange` needs `session = \"per-principal\"` or `\"per-host\"` (each principal's token goes on its own upstream session)";
        push(problems, &format!("{at}.auth.kind"), why.into());
    }
    Some(UpstreamConfig {
        name,
        transport: transport?,
        protocol,
        request_timeout,
        reconnect_max,
        required,
        health_interval,
        max_response_bytes,
        cache,
        unprefixed,
        roots,
        rate_limits,
        sessions,
    })
}

/// `MCP_PROXY_<SECTION>__<KEY>` variables as settings. `MCP_PROXY_CONFIG` names the config
/// file itself (the command line's `--config`), so it is no setting.
fn settings_from_env() -> Env {
    Env::prefixed("MCP_PROXY_").filter(|key| key != CONFIG_PATH_KEY).split("__").lowercase(true)
}

/// `MCP_PROXY_CONFIG` without its prefix.
const CONFIG_PATH_KEY: &str = "config";
