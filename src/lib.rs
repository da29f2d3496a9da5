//! mcp-resource-proxy: one MCP endpoint in front of many upstream MCP servers.
//!
//! Module map:
//! - [`config`]: figment config → validated [`config::Config`], every problem at once.
//! - [`error`]: [`error::ProxyError`], its `kind()` label and the one conversion to the wire.
//! - [`namespace`]: `<upstream>+<uri>` both ways, for URIs and templates (pure).
//! - [`uri`]: URI normalisation: the one form policies decide on and upstreams get (pure).
//! - [`policy`]: `policies/*.toml` → per-principal and per-group allow/deny globs; decisions (pure after load).
//! - [`auth`]: bearer tokens (static, or JWT access tokens with groups) → [`auth::Principal`] on every HTTP request, before any MCP; RFC 9728 metadata.
//! - [`cursor`]: opaque, authenticated pagination cursors (pure).
//! - [`coherence`]: the one owner of cache coherence: generations, watch holds, admission, the watch book.
//! - [`cache`]: the store behind it (`Store`; moka as `LocalStore`: byte-bounded, single flight).
//! - [`catalog`]: per-upstream resource/template snapshots, generations, merged pages.
//! - [`upstream`]: connecting (stdio, HTTP, in-process folder), era detection, supervision.
//! - [`downstream`]: the rmcp `ServerHandler` hosts talk to, over stdio and streamable HTTP.
//! - [`subscriptions`]: who holds which upstream URI; reference counts (pure).
//! - [`fanout`]: per-host bounded queues and sender tasks for notifications.
//! - [`proxy`]: the `Proxy` handle tying the parts together; the read path.
//! - [`tools`]: tools, prompts and completion of every upstream under `<upstream>__<name>`; merged lists, routed calls, policy over `tool://`/`prompt://`.
//! - [`bridge`]: `[bridge]`: resources as the proxy's own tools for models (list, search, read, templates), through the resource paths with the caller's principal.
//! - [`serve_dir`]: the built-in folder server.
//! - [`metrics`]: the one [`metrics::Metrics`] handle with its own prometheus registry; bounded labels only.
//! - [`admin`]: the admin listener: `/metrics`, `/healthz`, `/readyz`, `/status`.

pub mod admin;
pub mod auth;
pub mod bridge;
pub mod cache;
pub mod catalog;
pub mod coherence;
pub mod config;
pub mod cursor;
pub mod downstream;
pub mod error;
pub mod fanout;
pub mod metrics;
pub mod namespace;
pub mod policy;
pub mod proxy;
pub mod serve_dir;
pub mod subscriptions;
pub mod tools;
pub mod upstream;
pub mod uri;
