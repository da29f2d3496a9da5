//! The processes under test, as their release binaries next to this one: the fixture upstream
//! (`mcp-proxy-fixture --http`) and the proxy (`mcp-resource-proxy serve` on a temporary config,
//! JSON logs on a pipe). Also what `/proc` says about a process: CPU seconds and RSS.
//!
//! Invariant: every child is spawned with kill-on-drop and every temporary folder is removed on
//! drop, so a scenario that fails leaves nothing running.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};

/// `ttlMs` the fixture puts on its results in the read scenarios: an upstream that allows
/// caching. (A 2026-07-28 result without it says `ttlMs: 0`, which the proxy does not cache
/// unless the upstream has `trust_notifications`.)
pub const UPSTREAM_TTL_MS: &str = "3600000";

/// How long a fixture or a proxy may take to say it is listening (catalog loads included).
const START_DEADLINE: Duration = Duration::from_secs(300);

/// A fixture serving streamable HTTP; killed on drop.
pub struct Fixture {
    pub url: String,
    _child: Child,
}

/// A running proxy; killed on drop, its config folder removed.
pub struct ProxyProcess {
    pub url: String,
    /// From spawn until it logged `serving MCP at`.
    pub ready_after: Duration,
    /// Lines at WARN or above it logged before it was serving.
    pub startup_warnings: Vec<String>,
    /// `http://ADDR` of its admin listener, when started with one.
    admin: Option<String>,
    child: Child,
    _dir: TempDir,
}

/// A folder under the system temp dir, removed on drop.
pub struct TempDir {
    pub path: PathBuf,
}

impl Fixture {
    /// `mcp-proxy-fixture --http 127.0.0.1:0 ARGS…`, once it printed `LISTENING <url>`.
    pub async fn spawn(args: &[&str]) -> anyhow::Result<Self> {
        let mut child = Command::new(sibling("mcp-proxy-fixture")?)
            .args(["--http", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("spawn mcp-proxy-fixture")?;
        let mut stdout = BufReader::new(child.stdout.take().context("fixture stdout")?);
        let mut line = String::new();
        tokio::time::timeout(START_DEADLINE, stdout.read_line(&mut line))
            .await
            .context("fixture start timed out")??;
        let url = line.trim().strip_prefix("LISTENING ").with_context(|| format!("fixture said {line:?}"))?.to_owned();
        Ok(Self { url, _child: child })
    }

    pub fn pid(&self) -> anyhow::Result<u32> {
        self._child.id().context("the fixture has exited")
    }
}

impl ProxyProcess {
    /// Write `config` into a temporary folder and serve it on 127.0.0.1:0 with the admin
    /// listener off; returns once the proxy logs that it is serving.
    pub async fn start(config: &str) -> anyhow::Result<Self> {
        Self::start_with_env(config, &[]).await
    }

    /// [`ProxyProcess::start`] with `env` set for the proxy (its bearer tokens, a cluster secret).
    pub async fn start_with_env(config: &str, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        Self::spawn(config, env, false).await
    }

    /// [`ProxyProcess::start_with_env`] with its admin listener on 127.0.0.1:0 (`/status`,
    /// `/metrics`: [`ProxyProcess::admin_get`]).
    pub async fn start_with_admin(config: &str, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        Self::spawn(config, env, true).await
    }

    async fn spawn(config: &str, env: &[(&str, &str)], admin: bool) -> anyhow::Result<Self> {
        let dir = TempDir::new()?;
        let path = dir.path.join("config.toml");
        std::fs::write(&path, config).context("write proxy config")?;
        let ready_file = dir.path.join("ready.json");
        let spawned = Instant::now();
        let mut child = Command::new(proxy_binary()?)
            .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0", "--admin-listen"])
            .arg(if admin { "127.0.0.1:0" } else { "off" })
            .arg("--config")
            .arg(&path)
            .arg("--ready-file")
            .arg(&ready_file)
            .env("RUST_LOG", "warn,mcp_resource_proxy::downstream=info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("spawn mcp-resource-proxy")?;
        let stderr = child.stderr.take().context("proxy stderr")?;
        let (address, startup_warnings) =
            tokio::time::timeout(START_DEADLINE, wait_serving(stderr)).await.context("proxy start timed out")??;
        let ready_after = spawned.elapsed();
        let admin = match admin {
            true => Some(admin_address(&ready_file).await?),
            false => None,
        };
        Ok(Self { url: format!("http://{address}/mcp"), ready_after, startup_warnings, admin, child, _dir: dir })
    }

    /// The body of `GET path` on the admin listener (HTTP/1.1, one connection per request).
    pub async fn admin_get(&self, path: &str) -> anyhow::Result<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let admin = self.admin.as_deref().context("this proxy was started without an admin listener")?;
        let mut stream = tokio::net::TcpStream::connect(admin.trim_start_matches("http://")).await?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut head = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(length) = head.parse(&response)? else { bail!("GET {path}: a partial head") };
        anyhow::ensure!(head.code == Some(200), "GET {path}: status {:?}", head.code);
        Ok(String::from_utf8_lossy(&response[length..]).into_owned())
    }

    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child.id().context("the proxy has exited")
    }

    /// `kill -9`: the process ends without a word to anyone.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.child.start_kill().context("kill the proxy")
    }
}

impl TempDir {
    pub fn new() -> anyhow::Result<Self> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("proxy-bench-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&path).with_context(|| format!("create {}", path.display()))?;
        Ok(Self { path })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A binary built next to this one (`target/release/NAME`).
pub fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("current_exe")?;
    let path = me.parent().context("executable folder")?.join(name);
    if !path.is_file() {
        bail!("{} not found: run `cargo build --release --bins` first", path.display());
    }
    Ok(path)
}

/// The proxy under test: `PROXY_BENCH_PROXY` when set (to compare builds), else the sibling.
fn proxy_binary() -> anyhow::Result<PathBuf> {
    match std::env::var_os("PROXY_BENCH_PROXY") {
        Some(path) => Ok(PathBuf::from(path)),
        None => sibling("mcp-resource-proxy"),
    }
}

/// A TOML string literal.
pub fn toml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The fixture binary as a TOML string, for `command = …` in a proxy config.
pub fn fixture_command_toml() -> anyhow::Result<String> {
    Ok(toml_string(&path_text(&sibling("mcp-proxy-fixture")?)?))
}

/// A `[[upstreams]]` entry for a streamable HTTP upstream.
pub fn http_upstream(name: &str, url: &str) -> String {
    format!("[[upstreams]]\nname = {}\nurl = {}\n\n", toml_string(name), toml_string(url))
}

/// User + system CPU seconds a process has used so far (`/proc/<pid>/stat`).
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).context("read /proc/<pid>/stat")?;
    let after_name = stat.rsplit_once(')').context("stat format")?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of stat; after the `comm` field they are at indices 11 and 12.
    let ticks: u64 =
        fields.get(11).context("utime")?.parse::<u64>()? + fields.get(12).context("stime")?.parse::<u64>()?;
    Ok(ticks as f64 / clock_ticks_per_second())
}

/// The processes whose parent is `pid` (`/proc/*/stat`).
pub fn children(pid: u32) -> anyhow::Result<Vec<u32>> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").context("read /proc")? {
        let Ok(child) = entry?.file_name().to_string_lossy().parse::<u32>() else { continue };
        // A process may end between the listing and the read.
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else { continue };
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if parent.and_then(|parent| parent.parse::<u32>().ok()) == Some(pid) {
            children.push(child);
        }
    }
    Ok(children)
}

/// A `/proc/<pid>/status` memory field (`VmRSS`, `VmHWM`) in MiB.
pub fn memory_mib(pid: u32, field: &str) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("read /proc/<pid>/status")?;
    let line = status.lines().find(|line| line.starts_with(field)).with_context(|| format!("no {field}"))?;
    let kib: f64 = line.split_whitespace().nth(1).context("value")?.parse()?;
    Ok(kib / 1024.0)
}

fn clock_ticks_per_second() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

fn path_text(path: &Path) -> anyhow::Result<String> {
    path.to_str().map(str::to_owned).with_context(|| format!("{} is not UTF-8", path.display()))
}

/// Read JSON log lines until `serving MCP at`; keep draining the pipe afterwards so the proxy
/// never blocks on a full stderr.
/// The admin address the proxy wrote into its ready file (written once it serves).
async fn admin_address(ready_file: &Path) -> anyhow::Result<String> {
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        if let Ok(text) = tokio::fs::read_to_string(ready_file).await
            && let Ok(ready) = serde_json::from_str::<Value>(&text)
            && let Some(admin) = ready["admin"].as_str()
        {
            return Ok(format!("http://{admin}"));
        }
        anyhow::ensure!(Instant::now() < deadline, "no admin address in {}", ready_file.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_serving(stderr: ChildStderr) -> anyhow::Result<(String, Vec<String>)> {
    let mut lines = BufReader::new(stderr).lines();
    let mut warnings = Vec::new();
    while let Some(line) = lines.next_line().await? {
        let parsed: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if matches!(parsed["level"].as_str(), Some("WARN" | "ERROR")) {
            warnings.push(line.clone());
        }
        if let Some(address) = parsed["fields"]["address"].as_str() {
            let address = address.to_owned();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Ok((address, warnings));
        }
    }
    bail!("the proxy exited before serving; its warnings: {warnings:?}")
}
