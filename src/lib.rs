//! mcp-resource-proxy: one MCP endpoint in front of many upstream MCP servers.
//!
//! Module map (each module imports only from modules on a lower floor, along listed edges: the
//! floors are in ARCHITECTURE.md, and the fast tier's `house` test checks them and the edges):
//! - [`crypto`]: the one crypto provider, ring: rustls's and jsonwebtoken's process default, the AEAD that seals cursors and upstreams' `requestState`s.
//! - [`protocol`]: the protocol facts: eras, version strings, the served methods, era detection.
//! - [`wire`]: the byte-level rules of MCP over HTTP the proxy writes itself (headers, request era, error statuses, SSE, contents JSON), mirroring rmcp.
//! - [`problem`]: one validation problem (where, what), as config and policy report them.
//! - [`config`]: figment config → validated [`config::Config`], every problem at once.
//! - [`error`]: [`error::ProxyError`], its `kind()` label and the one conversion to the wire (and between replicas, [`error::RemoteError`]).
//! - [`namespace`]: `<upstream>+<uri>` both ways, for URIs and templates (pure).
//! - [`uri`]: URI normalisation: the one form policies decide on and upstreams get (pure).
//! - [`policy`]: `policies/*.toml` → per-principal and per-group allow/deny globs; decisions (pure after load).
//! - [`rate_limits`]: token buckets for calls and reads per principal and per principal × upstream (`governor`).
//! - [`auth`]: bearer tokens (static, or JWT access tokens with groups) → [`auth::Principal`] on every HTTP request, before any MCP; RFC 9728 metadata.
//! - [`cursor`]: opaque, authenticated pagination cursors (pure).
//! - [`coherence`]: the one owner of cache coherence: generations, the cache's subscriptions, admission, the upstream subscriptions.
//! - [`audit`]: the audit trail: one JSON event per routed call, read, subscription, denial, refused token and reload; a bounded queue to its writer.
//! - [`cache`]: the store behind it (moka as `LocalStore`: byte-bounded, single flight).
//! - [`catalog`]: one catalog over what upstreams list (resources and templates, tools and prompts): snapshots, generations, merged pages and their cursors.
//! - [`upstream`]: connections (stdio, HTTP, in-process folder), the era probe, supervision; the shared one and sessions per principal or host.
//! - [`downstream`]: the rmcp `ServerHandler` hosts talk to, over stdio and streamable HTTP.
//! - [`subscription_table`]: who subscribes which upstream URI; reference counts (pure).
//! - [`host`]: what a routed call's host offers the upstream side (`HostRelay`, `ProgressOutlet`) and the host session it came on (`HostSession`): a contract both edges import.
//! - [`cluster`]: `[cluster]`: this replica's id, keys derived from the cluster secret, the Redis connection and its health, the replicas seen alive, the counts that hold across them, the seal of what is kept in Redis.
//! - [`fanout`]: per-host bounded queues and sender tasks for notifications; the one view-diff scheme for every `list_changed`.
//! - [`proxy`]: capability services (lists, reads, subscriptions, access) over one shared core, behind the `Proxy` handle; live config reload.
//! - [`spine`]: every background task, named, owned and drained in one place.
//! - [`tools`]: tools, prompts and completion of every upstream under `<upstream>__<name>`; merged lists, routed calls, policy over `tool://`/`prompt://`.
//! - [`bridge`]: `[bridge]`: resources as the proxy's own tools for models (list, search, read, templates), through the resource paths with the caller's principal.
//! - [`serve_dir`]: the built-in folder server.
//! - [`mcp_json`]: host `mcpServers` files (Claude Desktop, Cursor, VS Code) → upstreams, secrets as `${VAR}` (their
//!   values kept in memory for `serve --mcp-json`), a sandbox profile derived per stdio server for `import`
//!   (pure but for its look at the disk).
//! - [`telemetry`]: OpenTelemetry traces (MCP semantic conventions) over OTLP/HTTP: a SERVER span per host request, a CLIENT span per upstream request, a CONSUMER span per upstream `updated` and a PRODUCER span per host it is queued for; off unless configured.
//! - [`metrics`]: the one [`metrics::Metrics`] handle with its own prometheus registry; bounded labels only.
//! - [`listener`]: the accept loop of both HTTP listeners (connection cap, header timeout, `TCP_NODELAY`; other replicas' connections counted apart, TLS between replicas), allowed `Host`s.
//! - [`logging`]: what the logs leave out (rmcp's errors about a peer that went away).
//! - [`admin`]: the admin listener: `/metrics`, `/healthz`, `/readyz`, `/status`.
//! - [`sandbox`]: a stdio upstream's sandbox profile and the `sandbox-exec` launcher every stdio child starts through (Landlock, rlimits, no_new_privs; the tree killed with the proxy).
//! - [`command_line`]: the `mcp-resource-proxy` command (its flags, `serve` and the one-shot commands), in `src/main/`; the binary only sets the allocator and calls it.
//! - [`ready_file`]: `serve --ready-file`: the bound addresses, written once serving.

pub mod admin;
pub mod audit;
pub mod auth;
pub mod bridge;
pub mod cache;
pub mod catalog;
pub mod cluster;
pub mod coherence;
#[path = "main/mod.rs"]
pub mod command_line;
pub mod config;
pub mod crypto;
pub mod cursor;
pub mod downstream;
pub mod error;
pub mod fanout;
pub mod host;
pub mod listener;
pub mod logging;
pub mod mcp_json;
pub mod metrics;
pub mod namespace;
pub mod policy;
pub mod problem;
pub mod protocol;
pub mod proxy;
pub mod rate_limits;
pub mod ready_file;
pub mod sandbox;
pub mod serve_dir;
pub mod spine;
pub mod subscription_table;
pub mod telemetry;
pub mod tools;
pub mod upstream;
pub mod uri;
pub mod wire;
