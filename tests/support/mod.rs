//! The one test harness every tier shares (`tests/fast`, `tests/interop`): what the tests start and
//! how they wait.
//!
//! - [`fixture`]: the scriptable upstream (`crates/fixture`) as a process (stdio, `--http`) or in
//!   process ([`fixture::serve_in_process`]), real rmcp clients in either era, their events.
//! - [`proxy`]: the real `mcp-resource-proxy` binary (for tests about the binary: CLI, stdio,
//!   signals, logs); [`inproc`]: the library's `Proxy` serving HTTP on 127.0.0.1:0 in the test
//!   process. Both report "ready" without reading logs (`--ready-file`, or the library call).
//! - [`cluster`]: replicas behind haproxy sharing a real `redis-server` ([`redis_server`]; the
//!   cluster tier).
//! - [`peers`]: third-party peers (npm, PyPI) — only the interop tier may use them; they install
//!   on first use.
//! - [`exposition`]: a Prometheus text parser for `/metrics`.
//! - [`processes`]: the processes below a proxy (its stdio children), their resident memory, a
//!   process's TCP sockets and environment from `/proc`.
//! - [`otlp`]: an OTLP/HTTP trace receiver (official protobuf definitions) that counts its connections.
//! - [`raw_http`]: raw MCP-over-HTTP exchanges (status, session header, body) for tests of the listener.
//! - [`wire`]: an rmcp host that logs what it reads in wire order (progress before answers).
//! - [`token_exchange`]: an OAuth authorization server for token exchange, and a gate in front of an upstream.
//! - [`eventually`]: the one way to wait for a condition: poll with a deadline.
//! - [`cargo`]: the one way a test starts cargo (the fixture's build, the README's `cargo run`).
//!
//! Every entry that starts something (a proxy, a fixture, Redis, a JWKS server, a test key) first
//! makes ring the test process's crypto provider (`mcp_resource_proxy::crypto::install`):
//! reqwest, rmcp's HTTP client and jsonwebtoken have none of their own.
//!
//! Invariants: nothing waits by sleeping; every wait ends at a deadline with an error that says
//! what it waited for and what it last saw. The modules here import one another without a
//! circle (what two of them need, such as [`PROXY_BIN`] and [`DEADLINE`], lives here).

pub mod bypass_corpus;
pub mod cluster;
pub mod exposition;
pub mod fixture;
pub mod folder;
pub mod inproc;
pub mod jwt;
pub mod observe;
pub mod otlp;
pub mod peers;
pub mod processes;
pub mod proxy;
pub mod raw_http;
pub mod reads;
pub mod redis_server;
pub mod token_exchange;
pub mod told;
pub mod wire;

use std::fmt::Display;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

/// The proxy binary of this build (cargo builds it for the integration tests); [`proxy`] runs it,
/// [`fixture`] connects to it over stdio.
pub const PROXY_BIN: &str = env!("CARGO_BIN_EXE_mcp-resource-proxy");

/// How long spawning, connecting, or waiting for one event may take.
pub const DEADLINE: Duration = Duration::from_secs(15);

/// How often [`eventually`] asks again.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The repository root (`CARGO_MANIFEST_DIR`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// This cargo (`$CARGO`), without the variables cargo sets in a test process for the package
/// under test (`CARGO_MANIFEST_DIR`, `CARGO_MANIFEST_PATH`, every `CARGO_PKG_*`; the product has no
/// build script, so no `OUT_DIR`). ring's build script asks to be rerun when those change: a cargo
/// seeing them would rerun it and rebuild ring and everything above it (rustls, reqwest, rmcp,
/// redis, the product), and the next cargo started without them all of it again.
pub fn cargo() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO"));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_") || name == "CARGO_MANIFEST_DIR" || name == "CARGO_MANIFEST_PATH" {
            command.env_remove(name.as_ref());
        }
    }
    command
}

/// Ask `probe` until it answers `Ok` (returned) or `within` has passed (an error naming `what`
/// and the last `Err` the probe gave). The probe runs at least once, every [`POLL_INTERVAL`].
pub async fn eventually<T, E, F, Fut>(within: Duration, what: &str, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Display,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let last = match probe().await {
            Ok(value) => return Ok(value),
            Err(last) => last,
        };
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("{what}: not within {within:?}; last: {last}");
        }
        tokio::time::sleep(POLL_INTERVAL).await; // poll interval; the deadline above ends the wait
    }
}
