//! Raw MCP over HTTP (reqwest, no MCP client), for tests about status codes and headers: send a
//! request and read its [`Reply`] — the body to its end, or an SSE stream to the first JSON-RPC
//! answer — and the bodies of a 2025-11-25 handshake; and a `GET /healthz` on a raw kept-alive
//! connection, for tests of the listener's connection bounds.

use std::time::Duration;

use anyhow::Context;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The era a 2025 session is opened in.
pub const LEGACY: &str = "2025-11-25";
/// How long one exchange may take.
const EXCHANGE_DEADLINE: Duration = Duration::from_secs(10);

/// What came back: the status, the `Mcp-Session-Id` a session was opened with, the body.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub session: Option<String>,
    pub body: String,
}

impl Reply {
    /// The JSON-RPC message: the whole body, or the first SSE `data:` line that is JSON.
    pub fn message(&self) -> Option<Value> {
        if let Ok(value) = serde_json::from_str::<Value>(&self.body) {
            return Some(value);
        }
        self.body.lines().filter_map(|l| l.strip_prefix("data:")).find_map(|d| serde_json::from_str(d.trim()).ok())
    }

    /// The text of a read's first content.
    pub fn contents_text(&self) -> Option<String> {
        self.message()?["result"]["contents"][0]["text"].as_str().map(str::to_owned)
    }
}

/// Send, and read the body to its end or (SSE) to the first JSON-RPC answer.
pub async fn send(request: reqwest::RequestBuilder) -> anyhow::Result<Reply> {
    let mut response = tokio::time::timeout(EXCHANGE_DEADLINE, request.send()).await.context("no reply")??;
    let status = response.status();
    let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut reply = Reply { status, session, body: String::new() };
    let deadline = tokio::time::Instant::now() + EXCHANGE_DEADLINE;
    while let Some(chunk) = tokio::time::timeout_at(deadline, response.chunk()).await.context("body hung")?? {
        reply.body.push_str(&String::from_utf8_lossy(&chunk));
        if reply.message().is_some_and(|m| m.get("id").is_some()) && reply.body.ends_with('\n') {
            break;
        }
    }
    Ok(reply)
}

/// A 2025-11-25 `initialize` (id 0) from a client named `client`.
pub fn initialize(client: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": client, "version": "0"}}})
}

/// The `notifications/initialized` that completes a 2025 handshake.
pub fn initialized() -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
}

/// One `GET /healthz` on a kept-alive raw connection (either listener answers it, the MCP one
/// with 404), read to the end of its `Content-Length` body: the reply's head and body.
pub async fn healthz(stream: &mut TcpStream) -> anyhow::Result<String> {
    stream.write_all(HEALTHZ).await?;
    let mut received = Vec::new();
    let mut buffer = [0u8; 1024];
    tokio::time::timeout(EXCHANGE_DEADLINE, async {
        loop {
            let n = stream.read(&mut buffer).await?;
            anyhow::ensure!(n > 0, "closed before a whole reply");
            received.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&received).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                if body.len() >= length {
                    return Ok(text);
                }
            }
        }
    })
    .await
    .context("no reply")?
}

/// `GET /healthz`, kept alive.
pub const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
