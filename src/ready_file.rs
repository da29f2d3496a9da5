//! `serve --ready-file PATH`: once the proxy serves (its listeners bound, the startup wait over),
//! it writes one JSON object naming the bound addresses, so supervisors and tests learn "ready"
//! and the ports of `127.0.0.1:0` listeners without reading logs:
//! `{"mcp":"127.0.0.1:41234","admin":"127.0.0.1:41235","pid":1234}` (`null` for a listener that is off).
//!
//! Invariant: a reader never sees a partial file (written beside it, then renamed into place).

use std::net::SocketAddr;
use std::path::Path;

/// Write the ready file for the given listener addresses.
pub fn write(path: &Path, mcp: Option<SocketAddr>, admin: Option<SocketAddr>) -> std::io::Result<()> {
    let body = serde_json::json!({
        "mcp": mcp.map(|a| a.to_string()),
        "admin": admin.map(|a| a.to_string()),
        "pid": std::process::id(),
    });
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    std::fs::write(&partial, format!("{body}\n"))?;
    std::fs::rename(&partial, path)
}
