//! mcp-resource-proxy: one MCP endpoint in front of many upstream MCP servers.
//!
//! Module map:
//! - [`config`]: figment config → validated [`config::Config`], every problem at once.
//! - [`error`]: [`error::ProxyError`], its `kind()` label and the one conversion to the wire.
//! - [`namespace`]: `<upstream>+<uri>` both ways, for URIs and templates (pure).
//! - [`cursor`]: opaque, authenticated pagination cursors (pure).
//! - [`catalog`]: per-upstream resource/template snapshots, generations, merged pages.
//! - [`upstream`]: connecting (stdio, HTTP, in-process folder), era detection, supervision.
//! - [`downstream`]: the rmcp `ServerHandler` hosts talk to, over stdio and streamable HTTP.
//! - [`proxy`]: the `Proxy` handle tying the parts together; the read path.
//! - [`serve_dir`]: the built-in folder server.

pub mod catalog;
pub mod config;
pub mod cursor;
pub mod downstream;
pub mod error;
pub mod namespace;
pub mod proxy;
pub mod serve_dir;
pub mod upstream;
