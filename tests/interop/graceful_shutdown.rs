//! Shutdown and host departures through the real binary: on SIGTERM a 2026-07-28 listen stream
//! ends with its final result (the PyPI `mcp` client and rmcp's client both see a graceful end,
//! not a lost subscription), and ordinary connects, disconnects and the shutdown itself add no
//! log line but `shutting down` at the default level (no `ERROR … channel closed`).

use std::process::{ExitStatus, Stdio};

use crate::support::PROXY_BIN;
use crate::support::eventually;
use crate::support::fixture::{self, DEADLINE, Era, list_all_resources};
use crate::support::peers::py_client;
use crate::support::proxy::{toml_str, write_config};
use anyhow::{Context, bail, ensure};
use rmcp::model::SubscriptionFilter;
use rmcp::service::SubscriptionEnd;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long one line from client.py may take (a Python start costs about a second).
const CLIENT_LINE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

const URI: &str = "docs+file:///a.md";

/// The proxy binary with a folder upstream, its stderr (JSON logs) as a stream of lines.
struct Served {
    child: Child,
    url: String,
    admin: String,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Served {
    /// Serve a folder holding `a.md` on 127.0.0.1:0; `rust_log` "" means the shipped default.
    async fn start(rust_log: &str) -> anyhow::Result<Served> {
        let dir = tempfile::tempdir()?;
        let docs = dir.path().join("docs");
        std::fs::create_dir(&docs)?;
        std::fs::write(docs.join("a.md"), "# a\n")?;
        // The audit trail on the log (not its own file): its lines are told apart there.
        let config = format!(
            "[audit]\nfile = \"-\"\n\n[[upstreams]]\nname = \"docs\"\ndir = {}\n",
            toml_str(&docs.display().to_string())
        );
        let path = write_config(dir.path(), &config)?;
        let mut child = Command::new(PROXY_BIN)
            .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", rust_log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("spawn mcp-resource-proxy")?;
        let (sender, lines) = mpsc::unbounded_channel();
        let mut stderr = BufReader::new(child.stderr.take().context("piped stderr")?).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                let _ = sender.send(line);
            }
        });
        let mut served = Served { child, url: String::new(), admin: String::new(), lines, seen: Vec::new(), _dir: dir };
        served.url = format!("http://{}/mcp", address(&served.line_with("serving MCP at").await?)?);
        served.admin = format!("http://{}", address(&served.line_with("admin listening at").await?)?);
        served.line_with("upstream up").await?;
        Ok(served)
    }

    /// The first line (seen or still to come) containing `needle`.
    async fn line_with(&mut self, needle: &str) -> anyhow::Result<String> {
        if let Some(line) = self.seen.iter().find(|l| l.contains(needle)) {
            return Ok(line.clone());
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return Ok(line);
                    }
                }
                Ok(None) => bail!("the proxy's stderr ended before {needle:?}: {:#?}", self.seen),
                Err(_) => bail!("no log line with {needle:?} within {DEADLINE:?}: {:#?}", self.seen),
            }
        }
    }

    fn sigterm(&self) -> anyhow::Result<()> {
        let pid = self.child.id().context("the proxy is running")?;
        let status = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status()?;
        ensure!(status.success(), "kill -TERM {pid}: {status}");
        Ok(())
    }

    /// Wait for the process to exit; every line it logged from start to end.
    async fn exit(mut self) -> anyhow::Result<(ExitStatus, Vec<String>)> {
        let status = tokio::time::timeout(DEADLINE, self.child.wait()).await.context("the proxy did not exit")??;
        while let Ok(Some(line)) = tokio::time::timeout(DEADLINE, self.lines.recv()).await {
            self.seen.push(line);
        }
        Ok((status, self.seen))
    }

    /// Poll `/metrics` (bounded) until the open 2026-07-28 HTTP sessions number `count`.
    async fn wait_listen_sessions(&self, count: f64) -> anyhow::Result<()> {
        let series = "mcp_proxy_downstream_sessions{era=\"2026-07-28\",transport=\"http\"}";
        eventually(DEADLINE, &format!("{series} at {count}"), || async {
            let text = reqwest::get(format!("{}/metrics", self.admin)).await?.text().await?;
            let value = text.lines().find_map(|l| l.strip_prefix(series)).and_then(|v| v.trim().parse::<f64>().ok());
            match value.unwrap_or(0.0) == count {
                true => Ok(()),
                false => Err(anyhow::anyhow!("{value:?}")),
            }
        })
        .await
    }
}

fn address(line: &str) -> anyhow::Result<String> {
    let value: Value = serde_json::from_str(line)?;
    value["fields"]["address"].as_str().map(str::to_owned).context("an address field")
}

fn message(line: &str) -> String {
    let value: Value = serde_json::from_str(line).unwrap_or_default();
    value["fields"]["message"].as_str().unwrap_or(line).to_string()
}

/// Read `reader` line by line until one contains `needle` (bounded).
async fn line_from<R: tokio::io::AsyncRead + Unpin>(
    lines: &mut tokio::io::Lines<BufReader<R>>,
    needle: &str,
) -> anyhow::Result<String> {
    let deadline = Instant::now() + CLIENT_LINE_DEADLINE;
    loop {
        match tokio::time::timeout_at(deadline, lines.next_line()).await {
            Ok(Ok(Some(line))) if line.contains(needle) => return Ok(line),
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => bail!("client.py's output ended before {needle:?}"),
            Ok(Err(error)) => return Err(error.into()),
            Err(_) => bail!("client.py printed no {needle:?} within {CLIENT_LINE_DEADLINE:?}"),
        }
    }
}

/// The PyPI `mcp` client listens in 2026-07-28 mode; SIGTERM to the proxy ends its stream with
/// the server's graceful close (without it the SDK raises `SubscriptionLost`).
#[tokio::test]
async fn sigterm_ends_a_listen_stream_gracefully_for_the_python_client() -> anyhow::Result<()> {
    let proxy = Served::start("info,rmcp=warn").await?;
    let listen = format!("listen:{URI}");
    let wait = format!("wait_updated:{URI}:60");
    let mut client = Command::from(py_client(&["--url", &proxy.url, "--mode", "2026-07-28", &listen, "ready", &wait]))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdout = BufReader::new(client.stdout.take().context("stdout")?).lines();
    let mut stderr = BufReader::new(client.stderr.take().context("stderr")?).lines();
    let listened = line_from(&mut stdout, "\"op\":\"listen\"").await?;
    ensure!(listened.contains(URI) && !listened.contains("error"), "{listened}");
    line_from(&mut stdout, "\"op\":\"ready\"").await?;

    proxy.sigterm()?;
    let end = line_from(&mut stderr, "client.py: listen").await?;
    assert!(end.contains("ended") && !end.contains("SubscriptionLost"), "the listen stream was lost: {end}");
    let (status, logs) = proxy.exit().await?;
    assert!(status.success(), "{status}: {logs:#?}");
    Ok(())
}

/// rmcp's client tells a graceful end (the final `SubscriptionsListenResult`) from an abrupt
/// one: after SIGTERM it sees the graceful end.
#[tokio::test]
async fn sigterm_ends_a_listen_stream_with_its_final_result_for_an_rmcp_client() -> anyhow::Result<()> {
    let proxy = Served::start("info,rmcp=warn").await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let mut stream = host.listen(SubscriptionFilter::builder().resource_subscriptions([URI]).build()).await?;
    proxy.wait_listen_sessions(1.0).await?;

    proxy.sigterm()?;
    let ended = tokio::time::timeout(DEADLINE, async {
        while stream.next().await?.is_some() {}
        anyhow::Ok(())
    });
    ended.await.context("the listen stream did not end")??;
    assert!(matches!(stream.end(), Some(SubscriptionEnd::Graceful(_))), "ended {:?}", stream.end());
    let (status, _) = proxy.exit().await?;
    assert!(status.success(), "{status}");
    Ok(())
}

/// At the shipped default level: a legacy host connects, lists and leaves, a 2026-07-28 host
/// listens and leaves, another listens while SIGTERM arrives. The proxy logs exactly one line
/// after startup, `shutting down`, besides its audit trail — no `ERROR … channel closed` for any
/// of it.
#[tokio::test]
async fn connects_disconnects_and_shutdown_log_only_shutting_down() -> anyhow::Result<()> {
    let proxy = Served::start("").await?;
    let after_startup = proxy.seen.len();
    let (legacy, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let (listed, _) = list_all_resources(&legacy).await?;
    ensure!(listed.len() == 1, "{listed:?}");
    legacy.cancel().await?;

    let filter = || SubscriptionFilter::builder().resource_subscriptions([URI]).build();
    let (leaving, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let stream = leaving.listen(filter()).await?;
    proxy.wait_listen_sessions(1.0).await?;
    drop(stream);
    leaving.cancel().await?;
    proxy.wait_listen_sessions(0.0).await?;

    let (staying, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let _stream = staying.listen(filter()).await?;
    proxy.wait_listen_sessions(1.0).await?;
    proxy.sigterm()?;
    let (status, logs) = proxy.exit().await?;
    assert!(status.success(), "{status}");
    // Besides the audit trail (the `audit` target: one `listen` event per listen stream).
    let (audit, after): (Vec<&String>, Vec<&String>) =
        logs[after_startup..].iter().partition(|line| line.contains("\"target\":\"audit\""));
    assert_eq!(audit.len(), 2, "one audit event per listen: {audit:#?}");
    let after: Vec<String> = after.into_iter().map(|l| message(l)).collect();
    assert_eq!(after, ["shutting down"], "lines after startup: {:#?}", &logs[after_startup..]);
    Ok(())
}
