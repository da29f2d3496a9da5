//! A raw streamable-HTTP MCP client: one keep-alive HTTP/1.1 connection (hyper), hand-written
//! JSON-RPC, for the `matrix` scenario. Two host eras:
//! - 2025: `initialize` + `notifications/initialized`, then every request with `Mcp-Session-Id`
//!   and `MCP-Protocol-Version`; replies are SSE bodies (or JSON) — what Claude Desktop and the
//!   Python and TypeScript SDKs do today;
//! - 2026-07-28: no handshake; every request carries the protocol `_meta` and the standard
//!   headers, and is answered on its own.
//!
//! It costs a small fraction of an rmcp client per request, so on a 2-core machine the load
//! generator leaves more CPU to the server under test.
//!
//! Invariant: every reply is really parsed — SSE events are split and their `data` decoded as
//! JSON — and a request counts only when a JSON-RPC response with its id and a `result` came back.

use anyhow::{Context, bail};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, HeaderValue};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

/// The era a raw host speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostEra {
    /// 2025-11-25: a session, SSE replies.
    Y2025,
    /// 2026-07-28: stateless.
    Y2026,
}

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "2025-11-25";

impl HostEra {
    pub fn label(self) -> &'static str {
        match self {
            HostEra::Y2025 => "2025 session",
            HostEra::Y2026 => "2026 stateless",
        }
    }
}

/// One host on one connection.
pub struct RawClient {
    sender: SendRequest<Full<Bytes>>,
    authority: String,
    path: String,
    era: HostEra,
    /// 2025: the session id and the negotiated version.
    session: Option<(HeaderValue, HeaderValue)>,
    next_id: u64,
}

/// What a request's reply said.
pub enum Reply {
    Result(Value),
    Error(Value),
}

impl RawClient {
    /// Connect to `url` (`http://host:port/path`) and, for the 2025 era, open a session.
    pub async fn connect(url: &str, era: HostEra) -> anyhow::Result<Self> {
        let rest = url.strip_prefix("http://").with_context(|| format!("{url}: only http:// URLs"))?;
        let (authority, path) = rest.split_once('/').map(|(a, p)| (a, format!("/{p}"))).unwrap_or((rest, "/".into()));
        let sender = open(authority).await?;
        let mut client = Self { sender, authority: authority.to_owned(), path, era, session: None, next_id: 1 };
        if era == HostEra::Y2025 {
            client.initialize().await?;
        }
        Ok(client)
    }

    /// `resources/read`; the number of contents in the result.
    pub async fn read(&mut self, uri: &str) -> anyhow::Result<usize> {
        match self.request("resources/read", json!({ "uri": uri }), Some(uri)).await? {
            Reply::Result(result) => {
                let contents = result["contents"].as_array().with_context(|| format!("read {uri}: {result}"))?;
                Ok(contents.len())
            }
            Reply::Error(error) => bail!("read {uri}: {error}"),
        }
    }

    /// One JSON-RPC request; its parsed reply.
    pub async fn request(&mut self, method: &str, mut params: Value, name: Option<&str>) -> anyhow::Result<Reply> {
        let id = self.next_id;
        self.next_id += 1;
        if self.era == HostEra::Y2026 {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": { "name": "proxy-bench", "version": "0" },
            });
        }
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let (headers, body) = self.post(&body, method, name).await?;
        let value = response_with_id(&headers, &body, id)?;
        match (value.get("result"), value.get("error")) {
            (Some(result), _) => Ok(Reply::Result(result.clone())),
            (None, Some(error)) => Ok(Reply::Error(error.clone())),
            _ => bail!("{method}: neither result nor error in {value}"),
        }
    }

    async fn initialize(&mut self) -> anyhow::Result<()> {
        let params = json!({
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": { "name": "proxy-bench", "version": "0" },
        });
        let body = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params });
        let (headers, reply) = self.post(&body, "initialize", None).await?;
        let session = headers.get("mcp-session-id").cloned().context("initialize: no Mcp-Session-Id")?;
        let value = response_with_id(&headers, &reply, 0)?;
        let version = value["result"]["protocolVersion"].as_str().with_context(|| format!("initialize: {value}"))?;
        self.session = Some((session, HeaderValue::from_str(version)?));
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        self.post(&initialized, "notifications/initialized", None).await?;
        Ok(())
    }

    async fn post(&mut self, body: &Value, method: &str, name: Option<&str>) -> anyhow::Result<(HeaderMap, Bytes)> {
        let mut request = hyper::Request::post(&self.path)
            .header("host", &self.authority)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        match (&self.session, self.era) {
            (Some((session, version)), _) => {
                request = request.header("mcp-session-id", session).header("mcp-protocol-version", version);
            }
            (None, HostEra::Y2026) => {
                request = request.header("mcp-protocol-version", MODERN).header("mcp-method", method);
                if let Some(name) = name {
                    request = request.header("mcp-name", name);
                }
            }
            (None, HostEra::Y2025) => {}
        }
        let request = request.body(Full::new(Bytes::from(serde_json::to_vec(body)?)))?;
        // Node servers close keep-alive connections idle for 5 s (between rounds): reopen; a
        // 2025 session lives on across connections.
        if self.sender.ready().await.is_err() {
            self.sender = open(&self.authority).await?;
        }
        let response = self.sender.send_request(request).await.with_context(|| format!("{method}: send"))?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.with_context(|| format!("{method}: body"))?.to_bytes();
        if !parts.status.is_success() {
            bail!("{method}: HTTP {} {}", parts.status, String::from_utf8_lossy(&body));
        }
        Ok((parts.headers, body))
    }
}

/// One HTTP/1.1 connection to `authority`, with `TCP_NODELAY`.
async fn open(authority: &str) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(authority).await.with_context(|| format!("connect {authority}"))?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// The JSON-RPC response with `id` in a JSON or SSE body.
fn response_with_id(headers: &HeaderMap, body: &[u8], id: u64) -> anyhow::Result<Value> {
    let sse =
        headers.get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|t| t.starts_with("text/event-stream"));
    let matches = |value: &Value| value.get("id").and_then(Value::as_u64) == Some(id);
    if !sse {
        let value: Value = serde_json::from_slice(body).context("JSON reply")?;
        return if matches(&value) { Ok(value) } else { bail!("reply without id {id}: {value}") };
    }
    let text = std::str::from_utf8(body).context("SSE reply is not UTF-8")?;
    for event in text.split("\n\n") {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|data| data.strip_prefix(' ').unwrap_or(data))
            .collect();
        if data.is_empty() || data.iter().all(|d| d.is_empty()) {
            continue;
        }
        let value: Value = serde_json::from_str(&data.join("\n")).context("SSE data is not JSON")?;
        if matches(&value) {
            return Ok(value);
        }
    }
    bail!("no response with id {id} in the SSE reply {text:?}")
}
