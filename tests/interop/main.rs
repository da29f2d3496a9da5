//! The interop tier: `cargo test --test interop`. The proxy with real third-party peers — npm
//! `@modelcontextprotocol/server-everything`, `server-memory`, `server-filesystem` and
//! `server-sequential-thinking`, the Python SDK (PyPI `mcp`) as
//! server and client — and a real Prometheus. The peers install on first use
//! (`.ci/install-peers.sh`, pinned, into the ignored `.peers/`); Prometheus comes from
//! `.ci/install-prometheus.sh` (`bash .ci/run` runs both first).

#[path = "../support/mod.rs"]
pub mod support;

mod bridge;
mod cache;
mod conformance;
mod container;
mod content;
mod deploy;
mod everything_traces;
mod fast_path;
mod graceful_shutdown;
mod import;
mod jwt;
mod never_stale;
mod otlp_receiver;
mod prometheus;
mod python_client;
mod python_subscriptions;
mod python_traces;
mod relay;
mod relay_modern;
mod relay_post_only;
mod reload;
mod sandbox;
mod servers_people_run;
mod stdio_default;
mod third_party;
mod tools;
mod ts_client;
mod upstream_sessions;
mod url_spellings;
