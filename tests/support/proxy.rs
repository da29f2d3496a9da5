//! The proxy under test, as its real binary: `mcp-resource-proxy serve` on a temporary config,
//! HTTP on 127.0.0.1:0 (or stdio), with its JSON logs captured for tests about what it logs.
//!
//! - [`ProxyProcess::start`]: spawn with a config text (logging JSON; [`ProxyProcess::start_human`]:
//!   the human format); ready when the proxy has written its
//!   `--ready-file` (listeners bound, startup wait over): the addresses come from that file, not logs.
//!   It inherits none of the runner's `OTEL_*` or `MCP_PROXY_TELEMETRY__*` variables.
//!   [`ProxyProcess::start_with_fd_limit`]: the same under `ulimit -n`.
//!   [`ProxyProcess::start_unprivileged`]: the same as user nobody with no_new_privs.
//! - [`ProxyProcess::wait_up`] / [`ProxyProcess::wait_down`] / [`ProxyProcess::wait_offerings`]: an
//!   upstream's state, or its tools and prompts, in `/status`.
//! - [`ProxyProcess::wait_policy_reloads`]: reloads of the policies folder in `/status`.
//! - [`ProxyProcess::start_with_offerings`]: start, then wait until the named upstreams' tools are in.
//! - [`ProxyProcess::wait_log`]: wait on a log line, with a deadline (for tests about logging).
//! - [`ProxyProcess::admin_url`] / [`ProxyProcess::admin_get`] / [`ProxyProcess::status`],
//!   [`ProxyProcess::wait_metric`], [`metric_value`]: the admin listener.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Notify;

use super::exposition::Exposition;
use super::{DEADLINE, PROXY_BIN, eventually};

/// util-linux's `setpriv`, which starts the proxy as another user ([`ProxyProcess::start_unprivileged`]).
const SETPRIV: &str = "setpriv";

/// A running proxy; killed on drop.
pub struct ProxyProcess {
    pub url: String,
    admin: String,
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
        Self::spawn(Command::new(PROXY_BIN), config, args, env).await
    }

    /// The same logging in the human format (`--log-format human`) instead of JSON.
    pub async fn start_human(config: &str, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        Self::spawn_logging(Command::new(PROXY_BIN), "human", config, &[], env).await
    }

    /// The same under a limit (soft and hard) of `open_files` file descriptors (`ulimit -n`).
    pub async fn start_with_fd_limit(config: &str, env: &[(&str, &str)], open_files: u64) -> anyhow::Result<Self> {
        let mut command = Command::new("sh");
        command.args(["-c", &format!("ulimit -n {open_files} && exec \"$0\" \"$@\""), PROXY_BIN]);
        Self::spawn(command, config, &[], env).await
    }

    /// The same run as an unprivileged user with no_new_privs, as the shipped unit runs it
    /// (`DynamicUser`, `NoNewPrivileges`): `setpriv` to uid and gid 65534 (nobody), no groups.
    /// Its temporary folder is open to that user (the config, the ready file).
    pub async fn start_unprivileged(config: &str) -> anyhow::Result<Self> {
        let mut command = Command::new(SETPRIV);
        command.args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--no-new-privs", PROXY_BIN]);
        Self::spawn(command, config, &[], &[]).await
    }

    async fn spawn(command: Command, config: &str, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Self> {
        Self::spawn_logging(command, "json", config, args, env).await
    }

    async fn spawn_logging(
        mut command: Command,
        log_format: &str,
        config: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        mcp_resource_proxy::crypto::install();
        let dir = tempfile::tempdir()?;
        if command.as_std().get_program() == SETPRIV {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))?;
        }
        let path = write_config(dir.path(), config)?;
        let ready_file = dir.path().join("ready.json");
        command
            .args([
                "--log-format",
                log_format,
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--config",
            ])
            .arg(&path)
            .arg("--ready-file")
            .arg(&ready_file)
            .args(args)
            .env("RUST_LOG", "info,rmcp=warn,mcp_resource_proxy=debug");
        // Traces only as the test configures them: none of the runner's own telemetry settings.
        let telemetry = |name: &str| name.starts_with("OTEL_") || name.starts_with("MCP_PROXY_TELEMETRY__");
        for (name, _) in std::env::vars_os().filter(|(name, _)| name.to_str().is_some_and(telemetry)) {
            command.env_remove(name);
        }
        command
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().context("spawn mcp-resource-proxy")?;
        let logs = Arc::new(Logs::default());
        tokio::spawn(collect(child.stderr.take().expect("piped"), logs.clone()));
        let child = std::cell::RefCell::new(child);
        let ready: serde_json::Value = eventually(DEADLINE, "the proxy writes its ready file", || async {
            if let Ok(Some(status)) = child.borrow_mut().try_wait() {
                let logs = logs.lines.lock().unwrap().join("\n");
                bail!("the proxy exited with {status} before it was ready; logs:\n{logs}");
            }
            Ok(serde_json::from_str(&tokio::fs::read_to_string(&ready_file).await?)?)
        })
        .await?;
        let mut proxy = Self { url: String::new(), admin: String::new(), child: child.into_inner(), logs, dir };
        proxy.url = format!("http://{}/mcp", ready["mcp"].as_str().context("mcp address in the ready file")?);
        proxy.admin = format!("http://{}", ready["admin"].as_str().context("admin address in the ready file")?);
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

    /// Wait until `upstream` has come up `times` times since start: `/status` shows it up with
    /// `times - 1` reconnections (or more).
    pub async fn wait_up(&self, upstream: &str, times: u64) -> anyhow::Result<()> {
        let what = format!("upstream {upstream} up {times} time(s) in /status");
        eventually(DEADLINE, &what, || async {
            let report = self.upstream_status(upstream).await?;
            match report["state"] == "up" && report["reconnects"].as_u64() >= Some(times - 1) {
                true => Ok(()),
                false => Err(anyhow::anyhow!("{report}")),
            }
        })
        .await
    }

    /// `start_with` (no extra arguments), then wait until every one of `upstreams` has its tools
    /// and prompts in ([`Self::wait_offerings`]).
    pub async fn start_with_offerings(config: &str, env: &[(&str, &str)], upstreams: &[&str]) -> anyhow::Result<Self> {
        let proxy = Self::start_with(config, &[], env).await?;
        for upstream in upstreams {
            proxy.wait_offerings(upstream).await?;
        }
        Ok(proxy)
    }

    /// Wait until `/status` shows tools or prompts of `upstream`: its offerings are in the
    /// proxy's catalog, so hosts list them.
    pub async fn wait_offerings(&self, upstream: &str) -> anyhow::Result<serde_json::Value> {
        self.status_when(upstream, |report| report["tools"].as_u64() > Some(0) || report["prompts"].as_u64() > Some(0))
            .await
    }

    /// Wait until `/status` shows `reloads` reloads of the policies folder (or more); the last
    /// one's report (`outcome`, `hosts_told`, `tools_told`).
    pub async fn wait_policy_reloads(&self, reloads: u64) -> anyhow::Result<serde_json::Value> {
        eventually(DEADLINE, &format!("{reloads} policy reload(s) in /status"), || async {
            let report = self.status().await?["policy_reload"].clone();
            match report["reloads"].as_u64() >= Some(reloads) {
                true => Ok(report),
                false => Err(anyhow::anyhow!("policy_reload: {report}")),
            }
        })
        .await
    }

    /// Wait until `/status` shows `upstream` gone down: not up, with the reason it went down
    /// (`last_error` is set when a connection is lost or cannot be made, cleared when it is up).
    pub async fn wait_down(&self, upstream: &str) -> anyhow::Result<serde_json::Value> {
        let what = format!("upstream {upstream} down in /status");
        eventually(DEADLINE, &what, || async {
            let report = self.upstream_status(upstream).await?;
            match report["state"] != "up" && !report["last_error"].is_null() {
                true => Ok(report),
                false => Err(anyhow::anyhow!("{report}")),
            }
        })
        .await
    }

    /// `/status` as JSON.
    pub async fn status(&self) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::from_str(&self.admin_get("/status").await?)?)
    }

    /// One upstream's entry in `/status`.
    pub async fn upstream_status(&self, upstream: &str) -> anyhow::Result<serde_json::Value> {
        let status = self.status().await?;
        let upstreams = status["upstreams"].as_array().context("upstreams in /status")?;
        upstreams.iter().find(|u| u["name"] == upstream).cloned().with_context(|| format!("{upstream} in {status}"))
    }

    /// `upstream`'s entry in `/status`, once `done` holds for it (polled, with a deadline).
    pub async fn status_when(
        &self,
        upstream: &str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> anyhow::Result<serde_json::Value> {
        eventually(DEADLINE, &format!("{upstream} gets there in /status"), || async {
            let status = self.upstream_status(upstream).await?;
            if done(&status) { Ok(status) } else { Err(anyhow::anyhow!("{status}")) }
        })
        .await
    }

    /// Wait until the `/metrics` sample `name` with exactly `labels` (0 while absent) satisfies
    /// `done`; its value.
    pub async fn wait_metric(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        done: impl Fn(f64) -> bool,
    ) -> anyhow::Result<f64> {
        eventually(DEADLINE, &format!("{name}{labels:?} in /metrics"), || async {
            let value = Exposition::parse(&self.admin_get("/metrics").await?)?.value(name, labels).unwrap_or(0.0);
            if done(value) { Ok(value) } else { Err(anyhow::anyhow!("{name}{labels:?} = {value}")) }
        })
        .await
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

    /// The admin listener's base URL (`http://ADDR`, no trailing slash), from the ready file.
    pub async fn admin_url(&self) -> anyhow::Result<String> {
        Ok(self.admin.clone())
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
        toml_escape(super::fixture::fixture_bin().to_str().expect("UTF-8 path")),
        args.join(", ")
    )
}

/// A config with `server` (the `[server]` section's lines; none when empty), bearer principals
/// alice and bob (tokens from `$ALICE_TOKEN` and `$BOB_TOKEN`), `[policies]` from `policies`, then
/// `upstreams`.
pub fn alice_and_bob_under_policies(server: &str, policies: &Path, upstreams: &str) -> String {
    let server = if server.is_empty() { String::new() } else { format!("[server]\n{server}\n\n") };
    format!(
        "{server}[auth]\nmode = \"bearer\"\n\n\
         [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n\
         [policies]\ndir = {}\n\n{upstreams}",
        toml_escape(policies.to_str().expect("utf-8 path"))
    )
}

/// A policies folder holding `alice.toml` and `bob.toml`: each principal's line, then its rules
/// (`allow = […]`, `deny = […]`).
pub fn alice_and_bob_policies(alice: &str, bob: &str) -> anyhow::Result<tempfile::TempDir> {
    let policies = tempfile::tempdir()?;
    std::fs::write(policies.path().join("alice.toml"), format!("principals = [\"alice\"]\n{alice}"))?;
    std::fs::write(policies.path().join("bob.toml"), format!("principals = [\"bob\"]\n{bob}"))?;
    Ok(policies)
}

/// A `[[upstreams]]` entry for an HTTP upstream.
pub fn http_upstream(name: &str, url: &str, extra: &str) -> String {
    format!("[[upstreams]]\nname = \"{name}\"\nurl = {}\n{extra}\n\n", toml_escape(url))
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
