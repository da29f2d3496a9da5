//! The cluster tier: `cargo test --test cluster`. Three replicas of the proxy binary with one
//! `[cluster]` secret, sharing a real `redis-server`, behind a real `haproxy` (round-robin, no
//! affinity), with real upstreams and real hosts (rmcp, and the TypeScript and Python SDK
//! clients): any replica answers any request. `redis-server` and `haproxy` are Debian's
//! packages (`.ci/install-cluster.sh`; `bash .ci/run` runs it); the SDK clients come from
//! `.ci/install-peers.sh`.

#[path = "../support/mod.rs"]
pub mod support;

mod answers;
mod bad_input;
mod bare_metal;
mod between_replicas;
mod cache;
mod caps;
mod parked;
mod peers;
mod redis_outage;
mod rediss;
mod replicas;
mod resumption;
mod sealed;
mod session_endpoint;
mod sessions;
mod stdio_default;
mod third_party;
mod token_exchange;
mod traces;
mod uploads;
mod upstream_sessions;
