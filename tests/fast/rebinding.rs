//! DNS-rebinding protection of `/mcp`, in both eras, with raw HTTP (the proxy in process, bound
//! to 127.0.0.1:0, so its origin is known only after bind): a browser page of the proxy's own
//! origin (`http://127.0.0.1:<port>`, `http://localhost:<port>`, `http://[::1]:<port>`) is
//! served, as are `server.allowed_origins`; any other `Origin` and any `Host` that is not
//! allowed get 403 — above all the rebinding page itself, whose `Host` and `Origin` both name
//! the attacker's domain.

use anyhow::Context;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::inproc::InProcessProxy;
use crate::support::proxy::toml_str;
use crate::support::raw_http::{self, LEGACY, Reply};

const MODERN: &str = "2026-07-28";
const URI: &str = "docs+file:///a.txt";

#[derive(Debug, Clone, Copy)]
enum Era {
    Legacy,
    Modern,
}

const ERAS: [Era; 2] = [Era::Legacy, Era::Modern];

/// The listener's own origins, and one `allowed_origins` entry next to them, are served: a
/// 2025 session opened, used and read from, a 2026-07-28 stateless read.
#[tokio::test]
async fn the_proxys_own_origin_is_served_in_both_eras_next_to_allowed_origins() -> anyhow::Result<()> {
    let served = Served::start("allowed_origins = [\"http://app.example:*\"]").await?;
    let port = served.port;
    let own = [format!("http://127.0.0.1:{port}"), format!("http://localhost:{port}"), format!("http://[::1]:{port}")];
    for origin in own.iter().map(String::as_str).chain(["http://app.example:3000"]) {
        for era in ERAS {
            let text = served.read(era, Some(origin)).await.with_context(|| format!("{era:?}, Origin {origin}"))?;
            assert_eq!(text, "alpha", "{era:?}, Origin {origin}");
        }
    }
    Ok(())
}

/// Every other `Origin` gets 403 in both eras — another port, scheme or name of the proxy's
/// host, the attacker's domain, `null` (not configured) — and so does a request carrying one
/// inside a 2025 session opened without `Origin`.
#[tokio::test]
async fn foreign_origins_are_refused_in_both_eras() -> anyhow::Result<()> {
    let served = Served::start("").await?;
    let port = served.port;
    let other_port = if port == u16::MAX { port - 1 } else { port + 1 };
    let foreign = [
        format!("http://127.0.0.1:{other_port}"),
        format!("https://127.0.0.1:{port}"),
        format!("http://evil.example:{port}"),
        format!("http://localhost.evil.example:{port}"),
        "http://127.0.0.1".to_string(),
        "null".to_string(),
    ];
    let session = served.open(None).await?;
    for origin in &foreign {
        let request = served.post(Era::Legacy, Some(origin)).json(&initialize());
        let reply = served.send(request).await?;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "initialize, Origin {origin}: {reply:?}");
        let request = served.post(Era::Modern, Some(origin)).json(&read(Era::Modern));
        let reply = served.send(request).await?;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "2026-07-28 read, Origin {origin}: {reply:?}");
        let reply = served.send(served.in_session(&session, Some(origin)).json(&read(Era::Legacy))).await?;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "read in a session, Origin {origin}: {reply:?}");
    }
    // The session itself is untouched.
    let reply = served.send(served.in_session(&session, None).json(&read(Era::Legacy))).await?;
    assert_eq!(reply.contents_text().as_deref(), Some("alpha"), "{reply:?}");
    Ok(())
}

/// A `Host` that is not allowed gets 403 in both eras whatever the `Origin`: the rebinding page
/// (its own origin on the attacker's name, as the conformance suite sends it), the proxy's own
/// origin, or none. The same request with the proxy's own `Host` is served.
#[tokio::test]
async fn hosts_not_allowed_are_refused_even_with_a_matching_or_own_origin() -> anyhow::Result<()> {
    let served = Served::start("").await?;
    let port = served.port;
    let evil = format!("evil.example:{port}");
    let (rebinding, own) = (format!("http://{evil}"), format!("http://localhost:{port}"));
    for era in ERAS {
        for origin in [Some(rebinding.as_str()), Some(own.as_str()), None] {
            let body = if matches!(era, Era::Legacy) { initialize() } else { read(era) };
            let reply = served.send(served.post(era, origin).header("Host", &evil).json(&body)).await?;
            assert_eq!(reply.status, StatusCode::FORBIDDEN, "{era:?}, Host {evil}, Origin {origin:?}: {reply:?}");
        }
        let body = if matches!(era, Era::Legacy) { initialize() } else { read(era) };
        let request = served.post(era, Some(&own)).header("Host", format!("localhost:{port}")).json(&body);
        let reply = served.send(request).await?;
        assert_eq!(reply.status, StatusCode::OK, "{era:?}, the own Host and Origin: {reply:?}");
    }
    Ok(())
}

/// The proxy in process with one folder upstream `docs` (`a.txt`: `alpha`), no auth,
/// `server_extra` in `[server]`.
struct Served {
    proxy: InProcessProxy,
    port: u16,
    http: reqwest::Client,
    _files: tempfile::TempDir,
}

impl Served {
    async fn start(server_extra: &str) -> anyhow::Result<Self> {
        let files = tempfile::tempdir()?;
        std::fs::write(files.path().join("a.txt"), "alpha")?;
        let root = files.path().canonicalize()?;
        let root = toml_str(root.to_str().context("a UTF-8 path")?);
        let config = format!("[server]\n{server_extra}\n\n[[upstreams]]\nname = \"docs\"\ndir = {root}\n");
        let proxy = InProcessProxy::start(&config).await?;
        proxy.wait_up("docs", 1).await?;
        let port = reqwest::Url::parse(&proxy.url)?.port().context("a port")?;
        let http = reqwest::Client::builder().pool_max_idle_per_host(0).build()?;
        Ok(Self { proxy, port, http, _files: files })
    }

    /// `resources/read` of `a.txt` in `era` (2025: in a session opened for it), every request
    /// with `origin`; the text read.
    async fn read(&self, era: Era, origin: Option<&str>) -> anyhow::Result<String> {
        let request = match era {
            Era::Legacy => self.in_session(&self.open(origin).await?, origin),
            Era::Modern => self.post(era, origin),
        };
        let reply = self.send(request.json(&read(era))).await?;
        reply.contents_text().with_context(|| format!("no contents: {reply:?}"))
    }

    /// A 2025 session: `initialize` and `notifications/initialized`, with `origin`.
    async fn open(&self, origin: Option<&str>) -> anyhow::Result<String> {
        let reply = self.send(self.post(Era::Legacy, origin).json(&initialize())).await?;
        anyhow::ensure!(reply.status == StatusCode::OK, "initialize: {reply:?}");
        let session = reply.session.context("no Mcp-Session-Id")?;
        let reply = self.send(self.in_session(&session, origin).json(&raw_http::initialized())).await?;
        anyhow::ensure!(reply.status.is_success(), "initialized: {reply:?}");
        Ok(session)
    }

    /// A POST to `/mcp` with the headers of `era` (2026-07-28: those of a read of [`URI`]).
    fn post(&self, era: Era, origin: Option<&str>) -> reqwest::RequestBuilder {
        let mut request = (self.http.post(&self.proxy.url))
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json");
        if let Era::Modern = era {
            request = request.header("MCP-Protocol-Version", MODERN);
            request = request.header("Mcp-Method", "resources/read").header("Mcp-Name", URI);
        }
        match origin {
            Some(origin) => request.header("Origin", origin),
            None => request,
        }
    }

    fn in_session(&self, session: &str, origin: Option<&str>) -> reqwest::RequestBuilder {
        self.post(Era::Legacy, origin).header("Mcp-Session-Id", session).header("MCP-Protocol-Version", LEGACY)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> anyhow::Result<Reply> {
        raw_http::send(request).await
    }
}

fn initialize() -> Value {
    raw_http::initialize("rebinding")
}

fn read(era: Era) -> Value {
    let mut params = json!({"uri": URI});
    if let Era::Modern = era {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "rebinding", "version": "0"}});
    }
    json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": params})
}
