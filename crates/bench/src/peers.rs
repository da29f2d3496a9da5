//! Third-party processes for the `matrix` and `sparse` scenarios, installed into the repository's
//! `.peers/`: npm `@modelcontextprotocol/server-everything` (by `.ci/install-peers.sh`), npm
//! `mcp-proxy` (by `.ci/install-bench-peers.sh`) and the Rust gateway `mcp-proxy` 0.6.0 from
//! crates.io (by hand, [`RUST_GATEWAY_INSTALL`]: a ten-minute build the bench does not impose).
//! Each is spawned on a free loopback port and killed on drop.
//!
//! Invariant: nothing is downloaded here; a missing npm peer is an error that names the script to
//! run; a missing Rust gateway is a reason its cells are skipped with (the rest still runs).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use crate::processes::{TempDir, toml_string};
use crate::raw::{HostEra, RawClient};

/// How the Rust gateway is installed where [`rust_gateway_binary`] looks for it.
pub const RUST_GATEWAY_INSTALL: &str = "cargo install --locked --version =0.6.0 mcp-proxy --root .peers/bench-cargo";

/// The version of the Rust gateway measured.
const RUST_GATEWAY_VERSION: &str = "0.6.0";

/// How long a peer may take to listen.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// An HTTP peer process; killed on drop.
pub struct PeerProcess {
    pub url: String,
    pub pid: u32,
    _child: Child,
    /// The peer's config folder, if it has one.
    _dir: Option<TempDir>,
}

/// `.peers/` of this repository (two levels above this crate).
fn peers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.peers")
}

/// server-everything's entry point, as `node` arguments.
pub fn everything_entry() -> anyhow::Result<String> {
    let entry = peers_dir().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !entry.is_file() {
        bail!("{} missing: run `bash .ci/install-bench-peers.sh`", entry.display());
    }
    entry.to_str().map(str::to_owned).context("server-everything path is not UTF-8")
}

fn mcp_proxy_entry() -> anyhow::Result<String> {
    let entry = peers_dir().join("bench-npm/node_modules/mcp-proxy/dist/bin/mcp-proxy.mjs");
    if !entry.is_file() {
        bail!("{} missing: run `bash .ci/install-bench-peers.sh`", entry.display());
    }
    entry.to_str().map(str::to_owned).context("mcp-proxy path is not UTF-8")
}

/// The Rust gateway's binary: `PROXY_BENCH_RUST_GATEWAY` when set (taken as is), else
/// `.peers/bench-cargo/bin/mcp-proxy` when cargo's record there (`.crates.toml`) says 0.6.0 (the
/// binary has no `--version`); `Err` says why it cannot be used.
pub fn rust_gateway_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("PROXY_BENCH_RUST_GATEWAY") {
        return Ok(PathBuf::from(path));
    }
    let root = peers_dir().join("bench-cargo");
    let path = root.join("bin/mcp-proxy");
    if !path.is_file() {
        return Err(format!(
            "the Rust gateway mcp-proxy is not installed at {}: `{RUST_GATEWAY_INSTALL}`",
            path.display()
        ));
    }
    let record = std::fs::read_to_string(root.join(".crates.toml")).unwrap_or_default();
    match record.contains(&format!("\"mcp-proxy {RUST_GATEWAY_VERSION} ")) {
        true => Ok(path),
        false => Err(format!("{} is not mcp-proxy {RUST_GATEWAY_VERSION}: `{RUST_GATEWAY_INSTALL}`", path.display())),
    }
}

impl PeerProcess {
    /// The Rust gateway `mcp-proxy` 0.6.0 with one HTTP backend `name` at `url`, its resource
    /// cache on (an hour: no expiry inside a run). Resources are `<name>/<uri>`, served at `/`.
    pub async fn rust_gateway(binary: PathBuf, name: &str, url: &str) -> anyhow::Result<Self> {
        let port = free_port()?;
        let dir = TempDir::new()?;
        let config = dir.path.join("proxy.toml");
        let text = format!(
            "[proxy]\nname = \"bench\"\n\n[proxy.listen]\nhost = \"127.0.0.1\"\nport = {port}\n\n[[backends]]\nname = {}\ntransport = \"http\"\nurl = {}\n\n[backends.cache]\nresource_ttl_seconds = 3600\n",
            toml_string(name),
            toml_string(url)
        );
        std::fs::write(&config, text).context("write the Rust gateway's config")?;
        let mut command = Command::new(binary);
        command.arg("--config").arg(&config).env("RUST_LOG", "warn");
        let mut peer = Self::spawn(command, port, "/").await?;
        peer._dir = Some(dir);
        Ok(peer)
    }

    /// server-everything in `streamableHttp` mode.
    pub async fn everything_http() -> anyhow::Result<Self> {
        let port = free_port()?;
        let mut command = Command::new("node");
        command.arg(everything_entry()?).arg("streamableHttp").env("PORT", port.to_string());
        Self::spawn(command, port, "/mcp").await
    }

    /// npm `mcp-proxy` serving server-everything (over stdio) at `/mcp`, both eras.
    pub async fn mcp_proxy_over_everything() -> anyhow::Result<Self> {
        let port = free_port()?;
        let mut command = Command::new("node");
        command
            .arg(mcp_proxy_entry()?)
            .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--server", "stream", "--"])
            .args(["node", &everything_entry()?, "stdio"]);
        Self::spawn(command, port, "/mcp").await
    }

    async fn spawn(mut command: Command, port: u16, path: &str) -> anyhow::Result<Self> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("spawn the peer (is Node.js installed?)")?;
        // Both log per request: drain them so they never block.
        drain(child.stdout.take().context("stdout")?);
        drain(child.stderr.take().context("stderr")?);
        let pid = child.id().context("peer exited at once")?;
        let url = format!("http://127.0.0.1:{port}{path}");
        let deadline = Instant::now() + START_DEADLINE;
        // Bounded poll: the peer is ready once a 2025 session opens.
        loop {
            match RawClient::connect(&url, HostEra::Y2025).await {
                Ok(_) => return Ok(Self { url, pid, _child: child, _dir: None }),
                Err(error) if Instant::now() > deadline => return Err(error.context(format!("{url} never answered"))),
                Err(_) => {}
            }
            if let Some(status) = child.try_wait()? {
                bail!("peer at {url} exited before listening: {status}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn drain(stream: impl AsyncRead + Unpin + Send + 'static) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(_)) = lines.next_line().await {}
    });
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
