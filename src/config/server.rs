//! The `[server]` section: listeners, sessions and the limits that keep a hostile client from
//! exhausting the proxy (see docs/security.md#bounds-and-what-they-cost).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use figment::value::Value;
use serde::Deserialize;

use super::{Problem, duration, integer, push, report_unknown};

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Streamable HTTP listener; the MCP endpoint is `/mcp`.
    pub listen: SocketAddr,
    /// The admin listener (`/metrics`, `/healthz`, `/readyz`, `/status`); `None` when "off".
    pub admin_listen: Option<SocketAddr>,
    /// Resources (and templates) per downstream list page.
    pub page_size: usize,
    /// Extra `Host` header values accepted besides loopback names and the listen address.
    pub allowed_hosts: Vec<String>,
    /// How long a legacy HTTP session holding no subscriptions may stay silent before it is
    /// closed.
    pub session_idle_timeout: Duration,
    /// The same for a session holding subscriptions (quiet while it waits for notifications);
    /// a bound for hosts that vanished without closing their session.
    pub subscribed_session_idle_timeout: Duration,
    /// How long a legacy HTTP session that made no request after its `initialize` (and holds no
    /// GET stream) may stay silent before it is closed; zero turns this off (the idle timeouts
    /// alone apply). Without effect with `[cluster]` (the records' expiry reaps there).
    pub unused_session_idle_timeout: Duration,
    /// Upstream list changes within this window reach hosts as one `list_changed`.
    pub list_changed_debounce: Duration,
    /// Log level (`error`, `warn`, `info`, `debug`, `trace`) unless `RUST_LOG` is set.
    pub log_level: String,
    /// How long `serve` waits for every upstream to connect before it answers hosts, so a
    /// host's first list is complete. Upstreams still down after it join when they come up.
    pub startup_wait: Duration,
    /// `Origin` values `/mcp` accepts besides the listener's own (`listener::own_origins`:
    /// `http://<listen ip>:<port>` and, on loopback or every address, the loopback names with
    /// the bound port); a request with any other `Origin` gets 403, one without an `Origin`
    /// header is served.
    pub allowed_origins: Vec<String>,
    /// Open legacy HTTP sessions, in all; a new one past it gets 503.
    pub max_sessions: usize,
    /// Open legacy HTTP sessions of one principal.
    pub max_sessions_per_principal: usize,
    /// URIs one host session (or listen stream) may hold subscribed.
    pub max_subscriptions_per_session: usize,
    /// URIs all of one principal's hosts may hold subscribed, across their sessions and listen
    /// streams.
    pub max_subscriptions_per_principal: usize,
    /// Open connections on `/mcp`; more wait to be accepted. At start lowered to what the file
    /// descriptor limit allows (`listener::fds`).
    pub max_connections: usize,
    /// Open connections on the admin listener: not a key of its own, `max_connections` at
    /// first, then its share of the file descriptor limit (`listener::fds`).
    pub admin_max_connections: usize,
    /// Routed calls (`tools/call`, `prompts/get`, `completion/complete`) one principal's hosts
    /// may have in flight at once; the next is refused.
    pub max_calls_per_principal: usize,
    /// A connection must send a whole request head within this, or it is closed.
    pub header_read_timeout: Duration,
    /// A request body must arrive whole within this of its head, or it is cut (`/mcp` and
    /// the replicas' requests to the session endpoint).
    pub body_read_timeout: Duration,
    /// Bytes of request bodies one principal's hosts may be sending at once, between them; a
    /// body past it is refused (`413`) or cut.
    pub max_body_bytes_per_principal: usize,
    /// Upstream events (`updated`, list changes, connection state) that may wait for the event
    /// loop; past it an upstream's dropped events are coalesced (`upstream::events`).
    pub event_queue: usize,
    /// Answer reads and lists of plain 2026-07-28 requests and open 2025 sessions in front of
    /// rmcp (`downstream::fast`); `false` sends every request through rmcp.
    pub fast_path: bool,
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct RawServer {
    listen: Option<String>,
    admin_listen: Option<String>,
    page_size: Option<i64>,
    allowed_hosts: Option<Vec<String>>,
    session_idle_timeout: Option<String>,
    subscribed_session_idle_timeout: Option<String>,
    unused_session_idle_timeout: Option<String>,
    startup_wait: Option<String>,
    list_changed_debounce: Option<String>,
    log_level: Option<String>,
    allowed_origins: Option<Vec<String>>,
    max_sessions: Option<i64>,
    max_sessions_per_principal: Option<i64>,
    max_subscriptions_per_session: Option<i64>,
    max_subscriptions_per_principal: Option<i64>,
    max_connections: Option<i64>,
    max_calls_per_principal: Option<i64>,
    header_read_timeout: Option<String>,
    body_read_timeout: Option<String>,
    max_body_bytes_per_principal: Option<i64>,
    fast_path: Option<bool>,
    event_queue: Option<i64>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

pub(super) fn validate_server(raw: RawServer, problems: &mut Vec<Problem>) -> ServerConfig {
    report_unknown("server", &raw.unknown, problems);
    let (listen, admin_listen) = validate_addresses(raw.listen, raw.admin_listen, problems);
    let page_size = integer(raw.page_size, 100, 1..=10_000, "server.page_size", problems);
    let session_idle_timeout =
        duration(raw.session_idle_timeout.as_deref(), "1h", "server.session_idle_timeout", problems);
    let subscribed_session_idle_timeout = duration(
        raw.subscribed_session_idle_timeout.as_deref(),
        "24h",
        "server.subscribed_session_idle_timeout",
        problems,
    );
    let unused_session_idle_timeout =
        duration(raw.unused_session_idle_timeout.as_deref(), "5m", "server.unused_session_idle_timeout", problems);
    let startup_wait = duration(raw.startup_wait.as_deref(), "10s", "server.startup_wait", problems);
    let log_level = raw.log_level.unwrap_or_else(|| "info".into());
    if !["error", "warn", "info", "debug", "trace"].contains(&log_level.as_str()) {
        push(problems, "server.log_level", format!("`{log_level}` is not one of error, warn, info, debug, trace"));
    }
    let list_changed_debounce =
        duration(raw.list_changed_debounce.as_deref(), "100ms", "server.list_changed_debounce", problems);
    let max_sessions = count(raw.max_sessions, 10_000, "server.max_sessions", problems);
    let max_sessions_per_principal =
        count(raw.max_sessions_per_principal, 1_000, "server.max_sessions_per_principal", problems);
    let max_subscriptions_per_session =
        count(raw.max_subscriptions_per_session, 1_000, "server.max_subscriptions_per_session", problems);
    let max_subscriptions_per_principal =
        count(raw.max_subscriptions_per_principal, 10_000, "server.max_subscriptions_per_principal", problems);
    let max_connections = count(raw.max_connections, 1_024, "server.max_connections", problems);
    let max_calls_per_principal = count(raw.max_calls_per_principal, 256, "server.max_calls_per_principal", problems);
    // The default is `upstream::events::EVENT_CAPACITY`.
    let event_queue = count(raw.event_queue, 1_024, "server.event_queue", problems);
    let header_read_timeout =
        duration(raw.header_read_timeout.as_deref(), "10s", "server.header_read_timeout", problems);
    if header_read_timeout.is_zero() {
        push(problems, "server.header_read_timeout", "must be more than 0s".into());
    }
    let body_read_timeout = duration(raw.body_read_timeout.as_deref(), "10s", "server.body_read_timeout", problems);
    if body_read_timeout.is_zero() {
        push(problems, "server.body_read_timeout", "must be more than 0s".into());
    }
    let max_body_bytes_per_principal = integer(
        raw.max_body_bytes_per_principal,
        16 << 20,
        65_536..=4_294_967_296,
        "server.max_body_bytes_per_principal",
        problems,
    );
    let allowed_origins = validate_origins(raw.allowed_origins.unwrap_or_default(), problems);
    ServerConfig {
        listen,
        admin_listen,
        page_size,
        allowed_hosts: raw.allowed_hosts.unwrap_or_default(),
        session_idle_timeout,
        subscribed_session_idle_timeout,
        unused_session_idle_timeout,
        startup_wait,
        list_changed_debounce,
        log_level,
        allowed_origins,
        max_sessions,
        max_sessions_per_principal,
        max_subscriptions_per_session,
        max_subscriptions_per_principal,
        max_connections,
        admin_max_connections: max_connections,
        max_calls_per_principal,
        header_read_timeout,
        body_read_timeout,
        max_body_bytes_per_principal,
        fast_path: raw.fast_path.unwrap_or(true),
        event_queue,
    }
}

/// `listen` and `admin_listen` (`"off"` for none).
fn validate_addresses(
    listen: Option<String>,
    admin: Option<String>,
    problems: &mut Vec<Problem>,
) -> (SocketAddr, Option<SocketAddr>) {
    let listen_text = listen.unwrap_or_else(|| "127.0.0.1:8080".into());
    let listen = listen_text.parse().unwrap_or_else(|_| {
        push(problems, "server.listen", format!("`{listen_text}` is not an address like 127.0.0.1:8080"));
        SocketAddr::from(([127, 0, 0, 1], 8080))
    });
    let admin_text = admin.unwrap_or_else(|| "127.0.0.1:9464".into());
    let admin_listen = match admin_text.as_str() {
        "off" => None,
        text => Some(text.parse().unwrap_or_else(|_| {
            push(
                problems,
                "server.admin_listen",
                format!("`{text}` is not an address like 127.0.0.1:9464, or \"off\""),
            );
            SocketAddr::from(([127, 0, 0, 1], 9464))
        })),
    };
    (listen, admin_listen)
}

/// Each origin has a scheme (or is `"null"`).
fn validate_origins(origins: Vec<String>, problems: &mut Vec<Problem>) -> Vec<String> {
    for origin in &origins {
        if !(origin == "null" || origin.starts_with("http://") || origin.starts_with("https://")) {
            let message = format!("`{origin}` is not an origin like https://app.example.com:443 or \"null\"");
            push(problems, "server.allowed_origins", message);
        }
    }
    origins
}

/// A limit in 1..=1,000,000 (`default` when absent).
fn count(raw: Option<i64>, default: usize, at: &str, problems: &mut Vec<Problem>) -> usize {
    integer(raw, default, 1..=1_000_000, at, problems)
}
