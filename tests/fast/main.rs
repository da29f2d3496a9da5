//! The fast tier: `cargo test --test fast`. The proxy (as its binary or in process) in front of
//! the project's own fixture upstream and folder server; no npm, PyPI or Prometheus, nothing
//! installed. Each module is one area; `support` is the shared harness (tests/support).

#[path = "../support/mod.rs"]
pub mod support;

mod access;
mod audit;
mod book;
mod bounds;
mod cache;
mod capabilities;
mod cli;
mod closed_sessions;
mod core;
mod dashboard;
mod differential;
mod event_overflow;
mod faults;
mod fixture;
mod folder_policy;
mod hardening_http;
mod hostile_tools;
mod house;
mod import;
mod jwks_fetch;
mod jwt;
mod late_relay;
mod listen_ack;
mod malformed_http;
mod mrtr;
mod mrtr_prompts;
mod mrtr_replay;
mod mrtr_tools;
mod nested_cargo;
mod never_stale;
mod observability;
mod operators;
mod private_ca;
mod progress;
mod rate_limits;
mod readme;
mod rebinding;
mod relay_refusals;
mod sandbox;
mod serve_dir;
mod session_pool;
mod subscriptions;
mod thin_reads;
mod token_exchange;
mod traces;
mod traces_reads;
mod traces_reconnects;
mod traces_refusals;
mod traces_updated;
mod upstream_credentials;
mod upstream_sessions;
