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
//! JSON — and a request counts only when a JSON-RPC response with its id and a `result` came back
//! (for reads: a `result` with a `contents` array). One request in flight per connection, as
//! hosts do; a read's request bytes are prepared once per URI and its reply is checked with a
//! typed parse that skips what it does not check, so the generator's own CPU stays small.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Waker};

use anyhow::{Context, bail};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST, HeaderMap, HeaderValue};
use hyper::http::response::Parts;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde::de::IgnoredAny;
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
    connection: Connection,
    authority: String,
    authority_header: HeaderValue,
    path: hyper::Uri,
    era: HostEra,
    /// 2025: the session id and the negotiated version.
    session: Option<(HeaderValue, HeaderValue)>,
    next_id: u64,
    /// The last URI read, ready to send.
    prepared: Option<Prepared>,
}

impl RawClient {
    /// Connect to `url` (`http://host:port/path`) and, for the 2025 era, open a session.
    pub async fn connect(url: &str, era: HostEra) -> anyhow::Result<Self> {
        let rest = url.strip_prefix("http://").with_context(|| format!("{url}: only http:// URLs"))?;
        let (authority, path) = rest.split_once('/').map(|(a, p)| (a, format!("/{p}"))).unwrap_or((rest, "/".into()));
        let connection = open(authority).await?;
        let mut client = Self {
            connection,
            authority: authority.to_owned(),
            authority_header: HeaderValue::from_str(authority)?,
            path: path.parse()?,
            era,
            session: None,
            next_id: 1,
            prepared: None,
        };
        if era == HostEra::Y2025 {
            client.initialize().await?;
        }
        Ok(client)
    }

    /// `resources/read`; the number of contents in the result. The request is written from
    /// bytes prepared once per URI and the reply checked with a typed parse (id, `result` with
    /// its `contents`), so the load generator spends little per request.
    pub async fn read(&mut self, uri: &str) -> anyhow::Result<usize> {
        let id = self.next_id;
        self.next_id += 1;
        if self.prepared.as_ref().is_none_or(|p| p.uri != uri) {
            self.prepared = Some(Prepared::new(uri, self.era)?);
        }
        let prepared = self.prepared.as_ref().expect("prepared above");
        let mut body = Vec::with_capacity(prepared.body_head.len() + prepared.body_tail.len() + 20);
        body.extend_from_slice(&prepared.body_head);
        body.extend_from_slice(id.to_string().as_bytes());
        body.extend_from_slice(&prepared.body_tail);
        let name = prepared.name.clone();
        let (headers, reply) = self.send(Bytes::from(body), "resources/read", Some(name)).await?;
        let checked = read_reply_with_id(&headers, &reply, id)?;
        checked.with_context(|| format!("read {uri}: {}", String::from_utf8_lossy(&reply)))
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
        let name = name.map(HeaderValue::from_str).transpose()?;
        self.send(Bytes::from(serde_json::to_vec(body)?), method, name).await
    }

    async fn send(
        &mut self,
        body: Bytes,
        method: &str,
        name: Option<HeaderValue>,
    ) -> anyhow::Result<(HeaderMap, Bytes)> {
        // Node servers close keep-alive connections idle for 5 s (between rounds): reopen, and
        // send once more when the connection turns out closed under the request (reads and
        // the handshake's steps are safe to repeat); a 2025 session lives on across connections.
        if self.connection.closed() {
            self.connection = open(&self.authority).await?;
        }
        let first = self.connection.exchange(self.request(body.clone(), method, name.clone())?).await;
        let (parts, body) = match first {
            Ok(reply) => reply,
            Err(_) if self.connection.closed() => {
                self.connection = open(&self.authority).await?;
                self.connection.exchange(self.request(body, method, name)?).await
            }
            .with_context(|| format!("{method}: after reconnecting"))?,
            Err(error) => return Err(error.context(format!("{method}: exchange"))),
        };
        if !parts.status.is_success() {
            bail!("{method}: HTTP {} {}", parts.status, String::from_utf8_lossy(&body));
        }
        Ok((parts.headers, body))
    }

    fn request(
        &self,
        body: Bytes,
        method: &str,
        name: Option<HeaderValue>,
    ) -> anyhow::Result<hyper::Request<Full<Bytes>>> {
        let mut request = hyper::Request::new(Full::new(body));
        *request.method_mut() = hyper::Method::POST;
        *request.uri_mut() = self.path.clone();
        let headers = request.headers_mut();
        headers.insert(HOST, self.authority_header.clone());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        match (&self.session, self.era) {
            (Some((session, version)), _) => {
                headers.insert("mcp-session-id", session.clone());
                headers.insert("mcp-protocol-version", version.clone());
            }
            (None, HostEra::Y2026) => {
                headers.insert("mcp-protocol-version", HeaderValue::from_static(MODERN));
                headers.insert("mcp-method", HeaderValue::from_str(method)?);
                if let Some(name) = name {
                    headers.insert("mcp-name", name);
                }
            }
            (None, HostEra::Y2025) => {}
        }
        Ok(request)
    }
}

/// One HTTP/1.1 connection, driven by the task that uses it (no connection task of its own:
/// a request costs no wake-up of another task).
struct Connection {
    sender: SendRequest<Full<Bytes>>,
    driver: Pin<Box<http1::Connection<TokioIo<TcpStream>, Full<Bytes>>>>,
    ended: bool,
}

impl Connection {
    /// Whether the connection has ended (the server closed it); polls it once to find out.
    fn closed(&mut self) -> bool {
        if !self.ended {
            let mut cx = TaskContext::from_waker(Waker::noop());
            self.ended = self.driver.as_mut().poll(&mut cx).is_ready();
        }
        self.ended
    }

    /// One request and its whole reply.
    async fn exchange(&mut self, request: hyper::Request<Full<Bytes>>) -> anyhow::Result<(Parts, Bytes)> {
        let Self { sender, driver, ended } = self;
        let exchange = async {
            sender.ready().await?;
            let response = sender.send_request(request).await?;
            let (parts, body) = response.into_parts();
            anyhow::Ok((parts, body.collect().await?.to_bytes()))
        };
        tokio::select! {
            biased;
            reply = exchange => reply,
            end = driver.as_mut() => {
                *ended = true;
                end?;
                bail!("connection closed")
            }
        }
    }
}
/// The bytes of a `resources/read` of one URI around its id, and its `Mcp-Name` value.
struct Prepared {
    uri: String,
    body_head: Vec<u8>,
    body_tail: Vec<u8>,
    name: HeaderValue,
}

impl Prepared {
    fn new(uri: &str, era: HostEra) -> anyhow::Result<Self> {
        let mut params = json!({ "uri": uri });
        if era == HostEra::Y2026 {
            params["_meta"] = modern_meta();
        }
        let body_tail = format!(r#","method":"resources/read","params":{params}}}"#).into_bytes();
        let body_head = br#"{"jsonrpc":"2.0","id":"#.to_vec();
        Ok(Self { uri: uri.to_owned(), body_head, body_tail, name: HeaderValue::from_str(uri)? })
    }
}

fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": "proxy-bench", "version": "0" },
    })
}

/// One HTTP/1.1 connection to `authority`, with `TCP_NODELAY`.
async fn open(authority: &str) -> anyhow::Result<Connection> {
    let stream = TcpStream::connect(authority).await.with_context(|| format!("connect {authority}"))?;
    stream.set_nodelay(true)?;
    let (sender, driver) = http1::handshake(TokioIo::new(stream)).await?;
    Ok(Connection { sender, driver: Box::pin(driver), ended: false })
}

/// The JSON-RPC response with `id` in a JSON or SSE body.
fn response_with_id(headers: &HeaderMap, body: &[u8], id: u64) -> anyhow::Result<Value> {
    let sse = is_sse(headers);
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
fn read_reply_with_id(headers: &HeaderMap, body: &[u8], id: u64) -> anyhow::Result<Option<usize>> {
    let check = |json: &[u8]| -> anyhow::Result<Option<Option<usize>>> {
        let reply: ReadReply = serde_json::from_slice(json).context("reply is not a JSON-RPC response")?;
        match (reply.id.and_then(|v| v.as_u64()) == Some(id), reply.result, reply.error) {
            (false, _, _) => Ok(None),
            (true, Some(result), None) => Ok(Some(Some(result.contents.len()))),
            (true, None, Some(_)) => Ok(Some(None)),
            (true, _, _) => bail!("neither result nor error"),
        }
    };
    if !is_sse(headers) {
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
    let value = response_with_id(headers, body, id)?;
    match value.get("result").and_then(|r| r["contents"].as_array()) {
        Some(contents) => Ok(Some(contents.len())),
        None => Ok(None),
    }
}

fn is_sse(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|t| t.starts_with("text/event-stream"))
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
