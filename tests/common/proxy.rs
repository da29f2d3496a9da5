//! The proxy under test, as its real binary: `mcp-resource-proxy serve` on a temporary config,
//! HTTP on 127.0.0.1:0 (or stdio), with its JSON logs captured so tests can wait on what it says.
//!
//! - [`ProxyProcess::start`]: spawn with a config text; waits for the HTTP listener.
//! - [`ProxyProcess::wait_up`] / [`ProxyProcess::wait_log`]: wait on a log line, with a deadline.
//! - [`ProxyProcess::admin_url`] / [`ProxyProcess::admin_get`], [`metric_value`]: the admin listener.
//! - [`connect_stdio_proxy`] / [`connect_stdio_proxy_with`]: an rmcp client that spawns `serve --stdio`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use rmcp::ClientServiceExt;
use rmcp::service::ClientCacheConfig;
use rmcp::transport::TokioChildProcess;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Notify;

use super::fixture::{DEADLINE, Era, EventRecorder, Events, FixtureClient};

pub const PROXY_BIN: &str = env!("CARGO_BIN_EXE_mcp-resource-proxy");

/// A running proxy; killed on drop.
pub struct ProxyProcess {
    pub url: String,
    child: Child,
    logs: Arc<Logs>,
    pub dir: tempfile::TempDir,
}

#[derive(Default)]
struct Logs {
    lines: Mutex<Vec<String>>,
    changed: Notify,
}

impl ProxyProcess {
    /// Write `config` to a temporary `config.toml` and serve it on 127.0.0.1:0.
    pub async fn start(config: &str) -> anyhow::Result<Self> {
        Self::start_with(config, &[], &[]).await
    }

    /// The same with extra CLI arguments and environment (which may override `RUST_LOG`).
    pub async fn start_with(config: &str, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let path = write_config(dir.path(), config)?;
        let mut command = Command::new(PROXY_BIN);
        command
            .args([
                "--log-format",
                "json",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--config",
            ])
            .arg(&path)
            .args(args)
            .env("RUST_LOG", "info,rmcp=warn,mcp_resource_proxy=debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().context("spawn mcp-resource-proxy")?;
        let logs = Arc::new(Logs::default());
        tokio::spawn(collect(child.stderr.take().expect("piped"), logs.clone()));
        let mut proxy = Self { url: String::new(), child, logs, dir };
        let line = proxy.wait_log(&["serving MCP at"]).await?;
        let address = json_field(&line, "address").context("listen address in log")?;
        proxy.url = format!("http://{address}/mcp");
        Ok(proxy)
    }

    /// Wait for a log line that contains every one of `needles`; returns it.
    pub async fn wait_log(&self, needles: &[&str]) -> anyhow::Result<String> {
        self.wait_log_count(needles, 1).await
    }

    /// Wait until `count` log lines contain every one of `needles`; returns the last.
    pub async fn wait_log_count(&self, needles: &[&str], count: usize) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let changed = self.logs.changed.notified();
            let found: Vec<String> = self.matching(needles);
            if found.len() >= count {
                return Ok(found[count - 1].clone());
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                bail!("no {count} log line(s) with {needles:?} within {DEADLINE:?}; logs:\n{}", self.logs().join("\n"));
            }
        }
    }

    /// Wait until `upstream` has come up `times` times since start.
    pub async fn wait_up(&self, upstream: &str, times: usize) -> anyhow::Result<()> {
        let tag = format!("\"upstream\":\"{upstream}\"");
        self.wait_log_count(&["\"upstream up\"", &tag], times).await.map(drop)
    }

    pub fn matching(&self, needles: &[&str]) -> Vec<String> {
        self.logs().into_iter().filter(|l| needles.iter().all(|n| l.contains(n))).collect()
    }

    pub fn logs(&self) -> Vec<String> {
        self.logs.lines.lock().unwrap().clone()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The admin listener's base URL (`http://ADDR`, no trailing slash), from the proxy's
    /// `admin listening at` log line (waits for it, with the usual deadline).
    pub async fn admin_url(&self) -> anyhow::Result<String> {
        let line = self.wait_log(&["admin listening at"]).await?;
        let address = json_field(&line, "address").context("admin address in log")?;
        Ok(format!("http://{address}"))
    }

    /// `GET` an admin path (`/metrics`, `/status`, …); the body of a 2xx answer.
    pub async fn admin_get(&self, path: &str) -> anyhow::Result<String> {
        let url = format!("{}{path}", self.admin_url().await?);
        let response =
            tokio::time::timeout(DEADLINE, reqwest::get(&url)).await.context("admin request timed out")??;
        let status = response.status();
        let body = response.text().await?;
        if !status.is_success() {
            bail!("GET {url}: {status}: {body}");
        }
        Ok(body)
    }
}

/// The value of an unlabelled sample `name` in a Prometheus text exposition.
pub fn metric_value(exposition: &str, name: &str) -> Option<f64> {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Write a config file into `dir`.
pub fn write_config(dir: &Path, config: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join("config.toml");
    std::fs::write(&path, config)?;
    Ok(path)
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

/// A TOML string literal.
pub fn toml_str(text: &str) -> String {
    toml_escape(text)
}

fn toml_escape(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A `[[upstreams]]` entry for the fixture binary over stdio.
pub fn fixture_upstream(name: &str, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| toml_escape(a)).collect();
    format!(
        "[[upstreams]]\nname = \"{name}\"\ncommand = {}\nargs = [{}]\n\n",
        toml_escape(super::fixture::FIXTURE_BIN),
        args.join(", ")
    )
}

/// A `[[upstreams]]` entry for an HTTP upstream.
pub fn http_upstream(name: &str, url: &str, extra: &str) -> String {
    format!("[[upstreams]]\nname = \"{name}\"\nurl = {}\n{extra}\n\n", toml_escape(url))
}

fn json_field(line: &str, field: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    value.get("fields")?.get(field)?.as_str().map(str::to_owned)
}

async fn collect(stderr: tokio::process::ChildStderr, logs: Arc<Logs>) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if std::env::var_os("PROXY_TEST_LOGS").is_some() {
            eprintln!("proxy: {line}");
        }
        logs.lines.lock().unwrap().push(line);
        logs.changed.notify_waiters();
    }
}
