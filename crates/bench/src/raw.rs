//! A raw streamable-HTTP MCP client: one keep-alive HTTP/1.1 connection (the codec of `wire`:
//! TCP_NODELAY, one request per `write`, a reused read buffer), hand-written JSON-RPC, for the `matrix` scenario. Two host eras:
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
//! JSON — and a request counts only when a JSON-RPC response with its id and a `result` came back
//! (for reads: a `result` with a `contents` array). One request in flight per connection, as
//! hosts do; a read's request bytes are prepared once per URI and its reply is checked with a
//! typed parse that skips what it does not check, so the generator's own CPU stays small.

use anyhow::{Context, bail};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::wire::{self, Head, Reader};

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
    stream: Option<TcpStream>,
    reader: Reader,
    /// The request being sent, reused.
    out: Vec<u8>,
    authority: String,
    path: String,
    era: HostEra,
    /// 2025: the session id and the negotiated version.
    session: Option<(String, String)>,
    next_id: u64,
    /// The last URI read, ready to send.
    prepared: Option<Prepared>,
    /// `Authorization: Bearer <token>` on every request (2026-07-28 hosts; see `with_bearer`).
    authorization: Option<String>,
    /// Reads carry a host's trace context in `_meta` (see `with_trace_context`).
    trace_context: bool,
}

impl RawClient {
    /// Connect to `url` (`http://host:port/path`) and, for the 2025 era, open a session.
    pub async fn connect(url: &str, era: HostEra) -> anyhow::Result<Self> {
        let rest = url.strip_prefix("http://").with_context(|| format!("{url}: only http:// URLs"))?;
        let (authority, path) = rest.split_once('/').map(|(a, p)| (a, format!("/{p}"))).unwrap_or((rest, "/".into()));
        let stream = open(authority).await?;
        let mut client = Self {
            stream: Some(stream),
            reader: Reader::default(),
            out: Vec::with_capacity(1024),
            authority: authority.to_owned(),
            path,
            era,
            session: None,
            next_id: 1,
            prepared: None,
            authorization: None,
            trace_context: false,
        };
        if era == HostEra::Y2025 {
            client.initialize().await?;
        }
        Ok(client)
    }

    /// Send `Authorization: Bearer <token>` from now on (a 2026-07-28 host: it has no handshake
    /// that went without).
    pub fn with_bearer(mut self, token: &str) -> Self {
        self.authorization = Some(format!("Bearer {token}"));
        self.prepared = None;
        self
    }

    /// Every read from now on carries `_meta.traceparent` and `tracestate`, as a traced host's do.
    pub fn with_trace_context(mut self) -> Self {
        self.trace_context = true;
        self.prepared = None;
        self
    }

    /// `resources/read`; the number of contents in the result. The request is written from
    /// bytes prepared once per URI (only the id and the length change) and the reply checked
    /// with a typed parse (id, `result` with its `contents`), so the load generator spends
    /// little per request.
    pub async fn read(&mut self, uri: &str) -> anyhow::Result<usize> {
        let id = self.next_id;
        self.next_id += 1;
        if self.prepared.as_ref().is_none_or(|p| p.uri != uri) {
            self.prepared =
                Some(Prepared::new(uri, self.head("resources/read", Some(uri))?, self.era, self.trace_context));
        }
        let prepared = self.prepared.as_ref().expect("prepared above");
        let mut digits = [0; 20];
        let id_text = wire::decimal(id, &mut digits);
        wire::request(&mut self.out, &prepared.head, &[&prepared.body_head, id_text, &prepared.body_tail]);
        let head = self.exchange("resources/read").await?;
        let body = self.reader.body();
        let checked = read_reply_with_id(head.sse, body, id)?;
        checked.with_context(|| format!("read {uri}: {}", String::from_utf8_lossy(body)))
    }

    /// `tools/call` of `name` with `arguments`; the JSON-RPC response (a result or an error).
    pub async fn call_tool(&mut self, name: &str, arguments: Value) -> anyhow::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut params = json!({ "name": name, "arguments": arguments });
        if self.era == HostEra::Y2026 {
            params["_meta"] = modern_meta();
        }
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params });
        let head = self.head("tools/call", Some(name))?;
        wire::request(&mut self.out, &head, &[&serde_json::to_vec(&body)?]);
        let head = self.exchange("tools/call").await?;
        response_with_id(head.sse, self.reader.body(), id)
    }

    async fn initialize(&mut self) -> anyhow::Result<()> {
        let params = json!({
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": { "name": "proxy-bench", "version": "0" },
        });
        let body = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params });
        let head = self.post(&body, "initialize").await?;
        let session = head.session.context("initialize: no Mcp-Session-Id")?;
        let value = response_with_id(head.sse, self.reader.body(), 0)?;
        let version = value["result"]["protocolVersion"].as_str().with_context(|| format!("initialize: {value}"))?;
        self.session = Some((session, version.to_owned()));
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        self.post(&initialized, "notifications/initialized").await?;
        Ok(())
    }

    async fn post(&mut self, body: &Value, method: &str) -> anyhow::Result<Head> {
        let head = self.head(method, None)?;
        wire::request(&mut self.out, &head, &[&serde_json::to_vec(body)?]);
        self.exchange(method).await
    }

    /// The request head a host sends for `method` (and the `Mcp-Name` of a read).
    fn head(&self, method: &str, name: Option<&str>) -> anyhow::Result<Vec<u8>> {
        let mut headers = Vec::new();
        match (&self.session, self.era) {
            (Some((session, version)), _) => {
                headers.push(("mcp-session-id", session.as_str()));
                headers.push(("mcp-protocol-version", version.as_str()));
            }
            (None, HostEra::Y2026) => {
                headers.push(("mcp-protocol-version", MODERN));
                headers.push(("mcp-method", method));
                if let Some(name) = name {
                    headers.push(("mcp-name", name));
                }
            }
            (None, HostEra::Y2025) => {}
        }
        if let Some(authorization) = &self.authorization {
            headers.push(("authorization", authorization.as_str()));
        }
        wire::post_head(&self.path, &self.authority, &headers)
    }

    /// Sends `self.out` and reads the whole reply (its body in `self.reader`). Node servers
    /// close keep-alive connections idle for 5 s (between rounds): when the connection turns out
    /// closed under the request, reopen and send once more (reads and the handshake's steps are
    /// safe to repeat); a 2025 session lives on across connections.
    async fn exchange(&mut self, method: &str) -> anyhow::Result<Head> {
        for attempt in 0..2 {
            let Self { stream, reader, out, authority, .. } = self;
            if stream.is_none() {
                *stream = Some(open(authority).await?);
                reader.reset();
            }
            let io = stream.as_mut().expect("opened above");
            let reply = match io.write_all(out).await {
                Ok(()) => reader.read(io).await.with_context(|| format!("{method}: reply"))?,
                Err(_) => None,
            };
            let Some(head) = reply else {
                *stream = None;
                if attempt == 0 {
                    continue;
                }
                bail!("{method}: connection closed again after reconnecting");
            };
            if head.close {
                *stream = None;
            }
            if !(200..300).contains(&head.status) {
                bail!("{method}: HTTP {} {}", head.status, String::from_utf8_lossy(reader.body()));
            }
            return Ok(head);
        }
        unreachable!("the second attempt returns")
    }
}

/// The bytes of a `resources/read` of one URI around its id, and its request head.
struct Prepared {
    uri: String,
    head: Vec<u8>,
    body_head: Vec<u8>,
    body_tail: Vec<u8>,
}

impl Prepared {
    fn new(uri: &str, head: Vec<u8>, era: HostEra, trace_context: bool) -> Self {
        let mut params = json!({ "uri": uri });
        if era == HostEra::Y2026 {
            params["_meta"] = modern_meta();
        }
        if trace_context {
            params["_meta"]["traceparent"] = json!("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
            params["_meta"]["tracestate"] = json!("host=1");
        }
        let body_tail = format!(r#","method":"resources/read","params":{params}}}"#).into_bytes();
        let body_head = br#"{"jsonrpc":"2.0","id":"#.to_vec();
        Self { uri: uri.to_owned(), head, body_head, body_tail }
    }
}

fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": "proxy-bench", "version": "0" },
    })
}

/// A TCP connection to `authority`, with `TCP_NODELAY`.
async fn open(authority: &str) -> anyhow::Result<TcpStream> {
    let stream = TcpStream::connect(authority).await.with_context(|| format!("connect {authority}"))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// The JSON-RPC response with `id` in a JSON or SSE body.
fn response_with_id(sse: bool, body: &[u8], id: u64) -> anyhow::Result<Value> {
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

/// What a read's check needs of a reply; every other field is skipped unparsed.
#[derive(Deserialize)]
struct ReadReply {
    id: Option<Value>,
    result: Option<ReadResult>,
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct ReadResult {
    contents: Vec<IgnoredAny>,
}

/// The number of contents of the read result with `id` in a JSON or SSE body; `None` when the
/// reply is an error; an error when no response with `id` is in the body.
fn read_reply_with_id(sse: bool, body: &[u8], id: u64) -> anyhow::Result<Option<usize>> {
    let check = |json: &[u8]| -> anyhow::Result<Option<Option<usize>>> {
        let reply: ReadReply = serde_json::from_slice(json).context("reply is not a JSON-RPC response")?;
        match (reply.id.and_then(|v| v.as_u64()) == Some(id), reply.result, reply.error) {
            (false, _, _) => Ok(None),
            (true, Some(result), None) => Ok(Some(Some(result.contents.len()))),
            (true, None, Some(_)) => Ok(Some(None)),
            (true, _, _) => bail!("neither result nor error"),
        }
    };
    if !sse {
        return check(body)?.with_context(|| format!("reply without id {id}"));
    }
    for event in split_events(body) {
        let mut data = event.split(|b| *b == b'\n').filter_map(|line| line.strip_prefix(b"data:"));
        let (Some(first), None) = (data.next(), data.next()) else {
            // Several data lines (or none): the general path.
            continue;
        };
        let first = first.strip_prefix(b" ").unwrap_or(first);
        if first.is_empty() {
            continue;
        }
        if let Some(answer) = check(first)? {
            return Ok(answer);
        }
    }
    let value = response_with_id(sse, body, id)?;
    match value.get("result").and_then(|r| r["contents"].as_array()) {
        Some(contents) => Ok(Some(contents.len())),
        None => Ok(None),
    }
}

/// The events of an SSE body (separated by an empty line).
fn split_events(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = body;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = rest.windows(2).position(|w| w == b"\n\n");
        let (event, next) = match end {
            Some(end) => (&rest[..end], &rest[end + 2..]),
            None => (rest, &rest[rest.len()..]),
        };
        rest = next;
        Some(event)
    })
}

#[cfg(test)]
mod tests;
