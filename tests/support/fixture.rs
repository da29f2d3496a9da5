//! The scriptable upstream `mcp-proxy-fixture` (`crates/fixture`) for integration tests: spawn it
//! over stdio or HTTP or serve it in process, connect a real rmcp client in either era (response
//! cache off), record the notifications that client receives, and drive the fixture through its tools.
//!
//! - [`fixture_bin`]: the fixture as a process: the product package's `mcp-proxy-fixture` example,
//!   built by `cargo test` and, on first use in a test process, by `cargo build --example` again
//!   (a no-op when fresh; [`super::cargo`]), so a filtered run (`cargo test --test fast`) never
//!   runs a stale one.
//! - [`fixture_command`]: a `Command` for the fixture binary (e.g. to hand to the proxy's config).
//! - [`HttpFixture::spawn`]: `--http 127.0.0.1:0`, reads the `LISTENING <url>` line; kills on drop.
//! - [`serve_in_process`]: the fixture library on 127.0.0.1:0 inside the test process.
//! - [`connect_stdio`] / [`connect_http`] / [`connect_http_with_token`]: a [`FixtureClient`] plus its
//!   [`Events`]; [`connect_stdio_proxy`] / [`connect_stdio_proxy_with`]: the same for the proxy
//!   binary that it spawns as `serve --stdio`.
//! - [`call_json`], [`stats`], [`wait_for_stats`], [`list_all_resources`], [`error_code`],
//!   [`read_control_file`].

use std::{
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    sync::OnceLock,
};

use anyhow::{Context, bail};
use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient,
    model::{
        CallToolRequestParams, PaginatedRequestParams, ProtocolVersion, Resource, ResourceUpdatedNotificationParam,
    },
    service::{ClientCacheConfig, NotificationContext, Peer, RunningService, ServiceError},
    transport::{
        StreamableHttpClientTransport, TokioChildProcess, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    sync::mpsc,
};

use super::PROXY_BIN;

pub use super::DEADLINE;
pub use mcp_proxy_fixture::{InProcess, serve_in_process};

/// The fixture binary (see the module doc); panics with cargo's output when it cannot be built.
pub fn fixture_bin() -> &'static Path {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BIN.get_or_init(build_fixture) {
        Ok(path) => path,
        Err(message) => panic!("building the mcp-proxy-fixture example failed: {message}"),
    }
}

/// `cargo build --example mcp-proxy-fixture` in the profile the tests were built in; the path of
/// the executable from cargo's JSON messages.
fn build_fixture() -> Result<PathBuf, String> {
    let product = Path::new(PROXY_BIN);
    let release = product.parent().and_then(Path::file_name).is_some_and(|dir| dir == "release");
    let mut command = super::cargo();
    command
        .args(["build", "--quiet", "--example", "mcp-proxy-fixture", "--message-format", "json", "--manifest-path"])
        .arg(super::repo_root().join("Cargo.toml"))
        .stdin(Stdio::null());
    if release {
        command.arg("--release");
    }
    let out = command.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("{}\n{}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["target"]["name"] == "mcp-proxy-fixture")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| "cargo built no mcp-proxy-fixture executable".to_owned())
}

/// A client connected to a fixture; it derefs to `Peer<RoleClient>`.
pub type FixtureClient = RunningService<RoleClient, EventRecorder>;

/// Which lifecycle the test client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// `initialize` handshake, 2025-11-25.
    Legacy,
    /// `server/discover`, 2026-07-28.
    Modern,
    /// rmcp's probe: discover, falling back to `initialize`.
    Auto,
}

/// A notification the client received outside a `listen` stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FixtureEvent {
    Updated(String),
    ListChanged,
}

/// Client handler that forwards legacy notifications into [`Events`].
#[derive(Clone)]
pub struct EventRecorder {
    events: mpsc::UnboundedSender<FixtureEvent>,
}

/// The receiving end of an [`EventRecorder`].
pub struct Events {
    events: mpsc::UnboundedReceiver<FixtureEvent>,
}

/// A fixture serving streamable HTTP; the child is killed when this is dropped.
pub struct HttpFixture {
    pub url: String,
    child: Child,
}

impl Era {
    pub fn lifecycle(self) -> ClientLifecycleMode {
        match self {
            Era::Legacy => ClientLifecycleMode::Initialize,
            Era::Modern => ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
            Era::Auto => ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
        }
    }
}

impl ClientHandler for EventRecorder {
    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.events.send(FixtureEvent::Updated(params.uri));
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.events.send(FixtureEvent::ListChanged);
    }
}

impl EventRecorder {
    pub fn new() -> (Self, Events) {
        let (events, receiver) = mpsc::unbounded_channel();
        (Self { events }, Events { events: receiver })
    }
}

impl Events {
    /// The next event, or an error after [`DEADLINE`].
    pub async fn next(&mut self) -> anyhow::Result<FixtureEvent> {
        match tokio::time::timeout(DEADLINE, self.events.recv()).await {
            Ok(Some(event)) => Ok(event),
            Ok(None) => bail!("the client closed before an event arrived"),
            Err(_) => bail!("no event within {DEADLINE:?}"),
        }
    }

    /// An event already received, if any.
    pub fn try_next(&mut self) -> Option<FixtureEvent> {
        self.events.try_recv().ok()
    }

    /// Wait (at most [`DEADLINE`] per event) for an `updated` of `uri`, passing over the rest.
    pub async fn updated(&mut self, uri: &str) -> anyhow::Result<()> {
        loop {
            if let FixtureEvent::Updated(heard) = self.next().await?
                && heard == uri
            {
                return Ok(());
            }
        }
    }
}

/// Wait (at most [`DEADLINE`]) for an `updated` of `uri` on a 2026-07-28 listen stream, passing
/// over the rest.
pub async fn listened_updated(stream: &mut rmcp::service::Subscription, uri: &str) -> anyhow::Result<()> {
    use rmcp::model::ServerNotification;
    let heard = async {
        loop {
            match stream.next().await? {
                Some(ServerNotification::ResourceUpdatedNotification(n)) if n.params.uri == uri => return Ok(()),
                Some(_) => continue,
                None => bail!("listen stream ended"),
            }
        }
    };
    tokio::time::timeout(DEADLINE, heard).await.map_err(|_| anyhow::anyhow!("no updated within {DEADLINE:?}"))?
}

impl HttpFixture {
    /// Spawn `mcp-proxy-fixture --http 127.0.0.1:0 ARGS…` and wait for its `LISTENING` line.
    pub async fn spawn(args: &[&str]) -> anyhow::Result<Self> {
        Self::spawn_at("127.0.0.1:0", args).await
    }

    /// The same on a given address (e.g. a port a proxy was configured with before it existed).
    pub async fn spawn_at(address: &str, args: &[&str]) -> anyhow::Result<Self> {
        let mut command = fixture_command(&[&["--http", address], args].concat());
        command.stdout(Stdio::piped());
        let mut child = command.spawn().context("spawn mcp-proxy-fixture")?;
        let stdout = child.stdout.take().context("fixture stdout")?;
        let mut line = String::new();
        let mut stdout = BufReader::new(stdout);
        tokio::time::timeout(DEADLINE, stdout.read_line(&mut line))
            .await
            .context("fixture did not print LISTENING in time")??;
        let url = line
            .trim()
            .strip_prefix("LISTENING ")
            .with_context(|| format!("unexpected first stdout line {line:?}"))?
            .to_owned();
        Ok(Self { url, child })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Wait (at most [`DEADLINE`]) for the fixture to exit, e.g. after the `exit` tool.
    pub async fn wait_exit(&mut self) -> anyhow::Result<ExitStatus> {
        Ok(tokio::time::timeout(DEADLINE, self.child.wait()).await.context("fixture did not exit in time")??)
    }
}

/// `mcp-proxy-fixture ARGS…` with stderr inherited and kill-on-drop.
pub fn fixture_command(args: &[&str]) -> Command {
    mcp_resource_proxy::crypto::install();
    let mut command = Command::new(fixture_bin());
    command.args(args).stderr(Stdio::inherit()).kill_on_drop(true);
    command
}

/// Spawn the fixture over stdio with `args` and connect to it in `era`.
pub async fn connect_stdio(args: &[&str], era: Era) -> anyhow::Result<(FixtureClient, Events)> {
    let transport = TokioChildProcess::new(fixture_command(args)).context("spawn fixture")?;
    let (recorder, events) = EventRecorder::new();
    let connecting = recorder.serve_with_lifecycle(transport, era.lifecycle());
    let client = tokio::time::timeout(DEADLINE, connecting).await.context("connect timed out")??;
    client.set_response_cache_config(ClientCacheConfig::disabled()).await;
    Ok((client, events))
}

/// Connect to a fixture's streamable HTTP endpoint in `era`.
pub async fn connect_http(url: &str, era: Era) -> anyhow::Result<(FixtureClient, Events)> {
    connect_http_config(StreamableHttpClientTransportConfig::with_uri(url), era).await
}

/// Connect to a streamable HTTP endpoint in `era`, sending `Authorization: Bearer <token>` on
/// every request (`token` without the `Bearer ` prefix).
pub async fn connect_http_with_token(url: &str, era: Era, token: &str) -> anyhow::Result<(FixtureClient, Events)> {
    connect_http_config(StreamableHttpClientTransportConfig::with_uri(url).auth_header(token), era).await
}

/// Connect with a transport config (session re-initialisation is always off).
pub async fn connect_http_config(
    config: StreamableHttpClientTransportConfig,
    era: Era,
) -> anyhow::Result<(FixtureClient, Events)> {
    mcp_resource_proxy::crypto::install();
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    let (recorder, events) = EventRecorder::new();
    let connecting = recorder.serve_with_lifecycle(transport, era.lifecycle());
    let client = tokio::time::timeout(DEADLINE, connecting).await.context("connect timed out")??;
    client.set_response_cache_config(ClientCacheConfig::disabled()).await;
    Ok((client, events))
}

/// Spawn `mcp-resource-proxy serve --stdio --config PATH` and connect to it in `era`.
pub async fn connect_stdio_proxy(config_path: &Path, era: Era) -> anyhow::Result<(FixtureClient, Events)> {
    connect_stdio_proxy_with(config_path, era, &[], &[]).await
}

/// The same with extra `serve` arguments (e.g. `--principal NAME`) and environment.
pub async fn connect_stdio_proxy_with(
    config_path: &Path,
    era: Era,
    args: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<(FixtureClient, Events)> {
    let mut command = Command::new(PROXY_BIN);
    command
        .arg("serve")
        .arg("--stdio")
        .arg("--config")
        .arg(config_path)
        .args(args)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .kill_on_drop(true);
    let transport = TokioChildProcess::builder(command).stderr(Stdio::inherit()).spawn()?.0;
    let (recorder, events) = EventRecorder::new();
    let client = tokio::time::timeout(DEADLINE, recorder.serve_with_lifecycle(transport, era.lifecycle()))
        .await
        .context("connect timed out")??;
    client.set_response_cache_config(ClientCacheConfig::disabled()).await;
    Ok((client, events))
}

/// Call a fixture tool and parse its JSON text reply.
pub async fn call_json(peer: &Peer<RoleClient>, tool: &str, arguments: Value) -> anyhow::Result<Value> {
    let Value::Object(arguments) = arguments else { bail!("tool arguments must be an object") };
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    let result = peer.call_tool(params).await?;
    let text = result
        .content
        .first()
        .and_then(|content| content.as_text())
        .with_context(|| format!("{tool} returned no text"))?;
    Ok(serde_json::from_str(&text.text)?)
}

/// The `stats` tool's JSON.
pub async fn stats(peer: &Peer<RoleClient>) -> anyhow::Result<Value> {
    call_json(peer, "stats", serde_json::json!({})).await
}

/// Poll `stats` until `ready` holds (at most [`DEADLINE`]); returns the stats that satisfied it.
pub async fn wait_for_stats(peer: &Peer<RoleClient>, ready: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
    super::eventually(DEADLINE, "fixture stats satisfy the condition", || async {
        let current = stats(peer).await?;
        if ready(&current) { Ok(current) } else { Err(anyhow::anyhow!("{current}")) }
    })
    .await
}

/// URIs the fixture holds upstream subscriptions for (its `stats`), whatever the era it was
/// asked in: legacy `subscribed` and 2026-07-28 `listen_uris`.
pub fn watched(stats: &Value) -> Vec<String> {
    let legacy = stats["subscribed"].as_array().cloned().unwrap_or_default();
    let modern = stats["listen_uris"].as_array().cloned().unwrap_or_default();
    legacy.into_iter().chain(modern).filter_map(|v| v.as_str().map(str::to_owned)).collect()
}

/// Follow `nextCursor` to the end; returns every resource and the number of pages.
pub async fn list_all_resources(peer: &Peer<RoleClient>) -> anyhow::Result<(Vec<Resource>, usize)> {
    let mut resources = Vec::new();
    let mut cursor = None;
    for pages in 1.. {
        let params = cursor.map(|cursor| PaginatedRequestParams::default().with_cursor(Some(cursor)));
        let page = peer.list_resources(params).await?;
        resources.extend(page.resources);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok((resources, pages)),
        }
        if pages > 10_000 {
            bail!("resources/list never ended");
        }
    }
    unreachable!("the loop returns")
}

/// The JSON-RPC error code inside a client error, if it is one.
pub fn error_code(error: &ServiceError) -> Option<i32> {
    match error {
        ServiceError::McpError(data) => Some(data.code.0),
        _ => None,
    }
}

/// Wait for a `--control-file` to appear and return the URL in it.
pub async fn read_control_file(path: &Path) -> anyhow::Result<String> {
    let what = format!("{} appears", path.display());
    super::eventually(DEADLINE, &what, || async {
        tokio::fs::read_to_string(path).await.map(|url| url.trim().to_owned())
    })
    .await
}

/// The keys of the `_meta` the fixture's `traceparent` tool saw its call arrive with, from its
/// `result`.
pub fn meta_keys_seen(result: &rmcp::model::CallToolResult) -> anyhow::Result<Vec<String>> {
    let text = result.content.first().and_then(|block| block.as_text()).context("a text block")?;
    let seen: Value = serde_json::from_str(&text.text)?;
    let keys = seen["keys"].as_array().context("keys")?;
    Ok(keys.iter().filter_map(|key| key.as_str().map(str::to_owned)).collect())
}
