//! The wire floor: every byte-level rule of MCP over streamable HTTP that the proxy writes or
//! checks itself instead of leaving it to rmcp — the fast path (`downstream::fast`), the thin
//! upstream read (`upstream::thin`) and the cache's contents JSON take them from here, none
//! carries a copy.
//!
//! - [`headers`]: header names, and the checks of a request head rmcp's streamable HTTP server
//!   makes (`Host`, `Accept`, `Content-Type`, single-valued headers, SEP-2243 `Mcp-Method` /
//!   `Mcp-Name`, which values travel as they are); the headers an MCP client request carries.
//! - [`era`]: the era of a POST from its head and its request metadata (one rule, on
//!   [`crate::protocol::Era`]).
//! - [`status`]: the JSON-RPC error code a peer of an era gets, and the HTTP status per error.
//! - [`sse`]: SSE framing: one event written as rmcp writes it, and the reply headers.
//! - [`sse_parse`]: SSE framing read, by the rules of rmcp's parser (`sse-stream`).
//! - [`contents_json`]: a read result's contents as the JSON bytes rmcp writes for them.
//!
//! Invariant: what is here mirrors rmcp as pinned in Cargo.toml (`=3.11.0`); the differential
//! test (`tests/fast/differential.rs`) sends one corpus through the fast path and through rmcp
//! and compares status, headers and body bytes. Taking a new rmcp means running it. This floor
//! imports nothing of the crate but [`crate::protocol`].

pub mod contents_json;
pub mod era;
pub mod headers;
pub mod sse;
pub mod sse_parse;
pub mod status;
