//! The `[cluster]` section: several replicas behind a load balancer, sharing state in Redis (see
//! [`crate::cluster`]). Absent: one process on its own, nothing shared, no Redis touched.
//!
//! Invariant: the cluster secret and the Redis password are held only as [`Secret`]s, whose
//! `Debug` shows neither; the Redis URL is shown only through [`ClusterConfig::redis_url_redacted`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use figment::value::Value;
use serde::Deserialize;

mod secret;

pub use self::secret::{MIN_SECRET_BYTES, Secret};
use self::secret::{cluster_secret, env_value};
use super::peer_tls::{PeerTls, RawPeerTls, validate_peer_tls};
use super::{Problem, SessionMode, UpstreamConfig, duration, push, redact_url, report_unknown};

/// The validated `[cluster]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// `redis://` or `rediss://` (TLS), as written (it may hold a password: show it only
    /// through [`ClusterConfig::redis_url_redacted`]).
    pub redis_url: Secret,
    /// The Redis password from `password_env`, when set (it wins over one in the URL).
    pub redis_password: Option<Secret>,
    /// The secret every replica shares (from the variable `secret_env` names, or the file
    /// `secret_file` names: a systemd credential, a mounted secret).
    pub secret: Secret,
    /// This replica's name, unique in the cluster: in `/status`, metrics and Redis keys.
    pub replica_id: String,
    /// How often this replica says it is alive (and looks at who else is).
    pub heartbeat: Duration,
    /// A replica not heard from for this long is gone.
    pub replica_ttl: Duration,
    /// `/readyz` stays 200 while Redis is unreachable (the default: every replica shares one
    /// Redis, so turning them all unready at once would be an outage); `false` makes a replica
    /// that cannot reach Redis leave the load balancer's pool.
    pub ready_without_redis: bool,
    /// Where the other replicas reach this one's MCP listener (`http://10.0.0.5:8080`), with
    /// `{hostname}` replaced: requests for a per-principal upstream session held here are
    /// forwarded to it. `None`: the listen address once bound, when it names one (not
    /// `0.0.0.0` or `::`).
    pub advertise_url: Option<String>,
    /// TLS between replicas (`peer_tls`): the others are reached over `https://` and must present
    /// a certificate of the cluster's CA. `None`: requests between replicas travel as plain HTTP/2.
    pub peer_tls: Option<PeerTls>,
}

impl ClusterConfig {
    /// The Redis URL as it may be shown (no user, password, path or query values).
    pub fn redis_url_redacted(&self) -> String {
        redact_url(self.redis_url.expose())
    }
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct RawCluster {
    redis_url: Option<String>,
    password_env: Option<String>,
    secret_env: Option<String>,
    secret_file: Option<String>,
    replica_id: Option<String>,
    heartbeat: Option<String>,
    ready_without_redis: Option<bool>,
    advertise_url: Option<String>,
    peer_tls: Option<RawPeerTls>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

/// `None` when there is no `[cluster]` section.
pub(super) fn validate_cluster(
    raw: Option<RawCluster>,
    base: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Option<ClusterConfig> {
    let raw = raw?;
    report_unknown("cluster", &raw.unknown, problems);
    let redis_url = redis_url(raw.redis_url, problems);
    let redis_password = raw.password_env.and_then(|name| {
        let value = env_value("cluster.password_env", &name, lookup, problems)?;
        Some(Secret::new(value))
    });
    let secret = cluster_secret(raw.secret_env, raw.secret_file, base, lookup, problems);
    let replica_id = match raw.replica_id {
        Some(id) if is_valid_replica_id(&id) => id,
        Some(id) => {
            push(problems, "cluster.replica_id", format!("`{id}` must be 1 to 64 of A-Z a-z 0-9 . _ -"));
            default_replica_id()
        }
        None => default_replica_id(),
    };
    let heartbeat = duration(raw.heartbeat.as_deref(), "2s", "cluster.heartbeat", problems);
    if heartbeat < Duration::from_millis(100) || heartbeat > Duration::from_secs(60) {
        push(problems, "cluster.heartbeat", format!("{heartbeat:?} is outside 100ms..=60s"));
    }
    let advertise_url = raw.advertise_url.and_then(|url| advertise_url(&url, problems));
    let peer_tls = raw.peer_tls.and_then(|tls| validate_peer_tls(tls, base, lookup, problems));
    if let Some(url) = advertise_url.as_deref().filter(|url| peer_tls.is_some() && url.starts_with("http://")) {
        let message = format!("`{}`: with `peer_tls` the others connect over https://", redact_url(url));
        push(problems, "cluster.advertise_url", message);
    }
    Some(ClusterConfig {
        redis_url: Secret::new(redis_url),
        redis_password,
        secret: Secret::new(secret),
        replica_id,
        heartbeat,
        replica_ttl: heartbeat * 3,
        ready_without_redis: raw.ready_without_redis.unwrap_or(true),
        advertise_url,
        peer_tls,
    })
}

/// A replica that may hold per-principal or per-host upstream sessions must be reachable by the
/// others: `advertise_url`, or a listen address that names one (the default taken from it once
/// bound).
pub(super) fn advertised_when_needed(
    cluster: Option<&ClusterConfig>,
    listen: SocketAddr,
    upstreams: &[UpstreamConfig],
    problems: &mut Vec<Problem>,
) {
    let Some(cluster) = cluster else { return };
    let own_sessions = upstreams.iter().any(|upstream| upstream.sessions.mode != SessionMode::Shared);
    if own_sessions && cluster.advertise_url.is_none() && listen.ip().is_unspecified() {
        let message = format!(
            "missing: per-principal and per-host upstream sessions are forwarded between replicas, and \
             `server.listen = \"{listen}\"` names no address the others can reach (also MCP_PROXY_CLUSTER__ADVERTISE_URL, e.g. `http://{{hostname}}:{}`)",
            listen.port()
        );
        push(problems, "cluster.advertise_url", message);
    }
}

/// `advertise_url` with `{hostname}` replaced, checked: `http(s)://host[:port]`, no path beyond `/`.
fn advertise_url(raw: &str, problems: &mut Vec<Problem>) -> Option<String> {
    let url = raw.replace("{hostname}", &hostname());
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    let authority = rest.map(|rest| rest.strip_suffix('/').unwrap_or(rest));
    match authority {
        Some(authority) if !authority.is_empty() && !authority.contains(['/', '?', '#', '@', ' ']) => {
            Some(url.trim_end_matches('/').to_string())
        }
        _ => {
            let shown = redact_url(&url);
            push(problems, "cluster.advertise_url", format!("`{shown}` is not an http(s)://host:port URL"));
            None
        }
    }
}

/// This machine's name (`HOSTNAME`, else `/etc/hostname`), trimmed; empty when unknown.
fn hostname() -> String {
    let host =
        std::env::var("HOSTNAME").ok().or_else(|| std::fs::read_to_string("/etc/hostname").ok()).unwrap_or_default();
    host.trim().to_string()
}

/// A replica id as written in config, metrics and Redis keys.
pub fn is_valid_replica_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// `<hostname>-<pid>`: readable, and unique among replicas on one host or one per host.
pub fn default_replica_id() -> String {
    let host: String =
        hostname().chars().filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c)).take(48).collect();
    let host = if host.is_empty() { "replica".to_string() } else { host };
    format!("{host}-{}", std::process::id())
}

fn redis_url(raw: Option<String>, problems: &mut Vec<Problem>) -> String {
    let Some(url) = raw else {
        push(problems, "cluster.redis_url", "missing (also MCP_PROXY_CLUSTER__REDIS_URL)".into());
        return String::new();
    };
    let scheme_ok = url.starts_with("redis://") || url.starts_with("rediss://");
    if !scheme_ok || redis::parse_redis_url(&url).is_none() {
        push(problems, "cluster.redis_url", format!("`{}` is not a redis:// or rediss:// URL", redact_url(&url)));
    } else if let Err(error) = redis::IntoConnectionInfo::into_connection_info(url.as_str()) {
        let kind = format!("{:?}", error.kind());
        push(problems, "cluster.redis_url", format!("`{}` is not usable ({kind})", redact_url(&url)));
    }
    url
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn lookup(name: &str) -> Option<String> {
        match name {
            "CLUSTER_SECRET" => Some(SECRET.into()),
            "SHORT_SECRET" => Some("short".into()),
            "EMPTY_SECRET" => Some(String::new()),
            "REDIS_PASSWORD" => Some("hunter2".into()),
            _ => None,
        }
    }

    #[test]
    fn no_cluster_section_means_no_cluster() {
        let config = Config::from_toml("", Path::new("."), &lookup).expect("valid");
        assert!(config.cluster.is_none());
    }

    #[test]
    fn a_cluster_section_is_validated_with_defaults() {
        let text = "[cluster]\nredis_url = \"redis://:pw@127.0.0.1:6379/0\"\nsecret_env = \"CLUSTER_SECRET\"\npassword_env = \"REDIS_PASSWORD\"\n";
        let config = Config::from_toml(text, Path::new("."), &lookup).expect("valid");
        let cluster = config.cluster.expect("clustered");
        assert_eq!(cluster.secret.expose(), SECRET);
        assert_eq!(cluster.redis_password.as_ref().map(|p| p.expose()), Some("hunter2"));
        assert_eq!(cluster.heartbeat, std::time::Duration::from_secs(2));
        assert!(cluster.ready_without_redis);
        assert!(super::is_valid_replica_id(&cluster.replica_id), "{}", cluster.replica_id);
        assert_eq!(cluster.redis_url_redacted(), "redis://***@127.0.0.1:6379/***");
        let shown = format!("{cluster:?}");
        for secret in [SECRET, "hunter2", ":pw@"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }

    #[test]
    fn advertise_url_is_checked_and_required_only_where_it_cannot_be_guessed() {
        let cluster = "[cluster]\nredis_url = \"redis://h\"\nsecret_env = \"CLUSTER_SECRET\"\n";
        let per = "[[upstreams]]\nname = \"per\"\nurl = \"http://127.0.0.1:9/mcp\"\nsession = \"per-principal\"\n";
        let load = |text: String| Config::from_toml(&text, Path::new("."), &lookup);
        let advertised =
            |line: &str| load(format!("{cluster}{line}\n")).expect("valid").cluster.expect("c").advertise_url;
        assert_eq!(advertised("advertise_url = \"http://10.0.0.5:8080/\""), Some("http://10.0.0.5:8080".into()));
        let named = advertised("advertise_url = \"http://{hostname}:8080\"").expect("set");
        assert!(!named.contains("{hostname}") && named.ends_with(":8080"), "{named}");
        for bad in ["10.0.0.5:8080", "http://", "http://h:1/mcp", "ftp://h:1"] {
            let error = load(format!("{cluster}advertise_url = \"{bad}\"\n")).expect_err(bad);
            assert_eq!(error.problems[0].at, "cluster.advertise_url", "{bad}: {error}");
        }
        // Listening on every address with a per-principal upstream: the others cannot guess where.
        let open = "[auth]\nallow_unauthenticated = true\n";
        let anywhere = format!("[server]\nlisten = \"0.0.0.0:8080\"\n{open}{cluster}{per}");
        let error = load(anywhere.clone()).expect_err("no advertise_url");
        assert_eq!(error.problems[0].at, "cluster.advertise_url", "{error}");
        let per_host = load(anywhere.replace("per-principal", "per-host")).expect_err("no advertise_url, per-host");
        assert_eq!(per_host.problems[0].at, "cluster.advertise_url", "{per_host}");
        let fixed = anywhere.replace("[[upstreams]]", "advertise_url = \"http://{hostname}:8080\"\n[[upstreams]]");
        load(fixed).expect("advertised");
        load(format!("[server]\nlisten = \"127.0.0.1:8080\"\n{cluster}{per}"))
            .expect("the listen address is the default");
        load(format!("[server]\nlisten = \"0.0.0.0:8080\"\n{open}{cluster}")).expect("no per-principal upstream");
    }

    #[test]
    fn the_secret_may_come_from_a_file_its_path_naming_variables() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cluster-secret"), format!("{SECRET}\n")).unwrap();
        std::fs::write(dir.path().join("short"), "short\n").unwrap();
        let credentials = dir.path().display().to_string();
        let lookup = |name: &str| match name {
            "CREDENTIALS_DIRECTORY" => Some(credentials.clone()),
            other => lookup(other),
        };
        let text = |line: &str| format!("[cluster]\nredis_url = \"redis://h\"\n{line}\n");
        let secret_of = |line: &str, base: &Path| {
            let config = Config::from_toml(&text(line), base, &lookup).unwrap_or_else(|e| panic!("{line}: {e}"));
            config.cluster.expect("clustered").secret.expose().to_string()
        };
        let systemd = "secret_file = \"${CREDENTIALS_DIRECTORY}/cluster-secret\"";
        assert_eq!(secret_of(systemd, Path::new("/elsewhere")), SECRET);
        assert_eq!(secret_of("secret_file = \"cluster-secret\"", dir.path()), SECRET, "relative to the config");
        let cases = [
            ("secret_file = \"${NO_SUCH_DIRECTORY}/cluster-secret\"", "`NO_SUCH_DIRECTORY` is not set"),
            ("secret_file = \"missing\"", "cannot be read"),
            ("secret_file = \"short\"", "holds 5 bytes"),
            ("secret_file = \"cluster-secret\"\nsecret_env = \"CLUSTER_SECRET\"", "not both"),
        ];
        for (line, said) in cases {
            let error = Config::from_toml(&text(line), dir.path(), &lookup).expect_err(line);
            assert_eq!(error.problems.len(), 1, "{line}: {error}");
            assert_eq!(error.problems[0].at, "cluster.secret_file", "{line}: {error}");
            assert!(error.problems[0].message.contains(said), "{line}: {error}");
            assert!(!error.to_string().contains(SECRET), "{error}");
        }
    }

    #[test]
    fn every_cluster_problem_is_reported_at_once() {
        let cases: &[(&str, &[&str])] = &[
            ("[cluster]\n", &["cluster.redis_url", "cluster.secret_env"]),
            (
                "[cluster]\nredis_url = \"http://x\"\nsecret_env = \"SHORT_SECRET\"\nreplica_id = \"a b\"\nheartbeat = \"1ms\"\ncolour = 1\n",
                &[
                    "cluster.redis_url",
                    "cluster.secret_env",
                    "cluster.replica_id",
                    "cluster.heartbeat",
                    "cluster.colour",
                ],
            ),
            ("[cluster]\nredis_url = \"redis://h\"\nsecret_env = \"EMPTY_SECRET\"\n", &["cluster.secret_env"]),
            ("[cluster]\nredis_url = \"redis://h\"\nsecret_env = \"UNSET_SECRET\"\n", &["cluster.secret_env"]),
            (
                "[cluster]\nredis_url = \"redis://h\"\nsecret_env = \"MCP_PROXY_SECRET\"\npassword_env = \"NOPE\"\n",
                &["cluster.secret_env", "cluster.password_env"],
            ),
        ];
        for (text, expected) in cases {
            let error = Config::from_toml(text, Path::new("."), &lookup).expect_err(text);
            let mut at: Vec<&str> = error.problems.iter().map(|p| p.at.as_str()).collect();
            let mut expected = expected.to_vec();
            at.sort();
            expected.sort();
            assert_eq!(at, expected, "{text}: {error}");
            assert!(!error.to_string().contains("short"), "no secret in {error}");
        }
    }
}
