//! What an operator sees, through the real proxy binary and real upstream processes: why an
//! upstream is down (`/status` and the log, in plain words, with a stdio child's last stderr
//! lines), a quiet log (nothing while healthy and idle, one line per state change), a host
//! answered without waiting for a dead upstream, few `list_changed` across a restart,
//! metric series present at 0 from the start, and a human log whose lines a host cannot forge.
//!
//! The quiet log (nothing while healthy and idle or under ordinary traffic, one line per state
//! change) is `quiet_log`.

mod quiet_log;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::eventually;
use crate::support::fixture::{
    self, DEADLINE, Era, FixtureEvent, HttpFixture, call_json, connect_stdio_proxy, list_all_resources,
};
use crate::support::proxy::{ProxyProcess, fixture_upstream, http_upstream, toml_str, write_config};
use anyhow::{Context, ensure};
use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams};
use serde_json::{Value, json};

/// A stdio upstream whose command says why it cannot start, and exits.
const FATAL_LINE: &str = "fatal: GITHUB_TOKEN is not set";

/// How long after the last expected `list_changed` an extra one is still looked for (the
/// debounce is 100 ms); a measurement window, not synchronisation.
const LATE_NOTICE_WINDOW: Duration = Duration::from_secs(1);

/// A `[[upstreams]]` entry running `sh -c SCRIPT`, retried quickly, not required.
fn shell_upstream(name: &str, script: &str) -> String {
    format!(
        "[[upstreams]]\nname = \"{name}\"\ncommand = \"sh\"\nargs = [\"-c\", {}]\nrequired = false\n\
         reconnect_max = \"250ms\"\n\n",
        toml_str(script)
    )
}

/// A folder upstream over `dir`, probed every 200 ms.
fn folder_upstream(name: &str, dir: &Path) -> String {
    format!(
        "[[upstreams]]\nname = \"{name}\"\ndir = {}\nhealth_interval = \"200ms\"\n\n",
        toml_str(dir.to_str().expect("utf-8"))
    )
}

/// A folder with two files.
fn folder() -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("README.md"), "# hello\n")?;
    std::fs::write(dir.path().join("notes.txt"), "notes\n")?;
    Ok(dir)
}

/// The proxy's logs with the shipped default filter (`RUST_LOG` empty counts as unset).
async fn start_with_default_logging(config: &str) -> anyhow::Result<ProxyProcess> {
    ProxyProcess::start_with(config, &[], &[("RUST_LOG", "")]).await
}

#[tokio::test]
async fn a_stdio_child_that_dies_shows_its_stderr_and_why_in_status_and_the_log() -> anyhow::Result<()> {
    let script = format!("echo starting >&2; echo '{FATAL_LINE}' >&2; exit 3");
    let config = format!("[server]\nstartup_wait = \"0s\"\n\n{}", shell_upstream("gh", &script));
    let proxy = ProxyProcess::start(&config).await?;
    // Down lasts one backoff before the next attempt shows `connecting` (with the last tail
    // kept): wait for a report taken while down, not just for the tail.
    let down_with_tail = |s: &Value| s["state"] == "down" && s["stderr_tail"].as_array().is_some_and(|t| !t.is_empty());
    let status = proxy.status_when("gh", down_with_tail).await?;
    assert_eq!(status["state"], "down", "{status}");
    assert_eq!(status["stderr_tail"], json!(["starting", FATAL_LINE]), "{status}");
    let error = status["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("`sh` exited") && error.contains("exit status: 3"), "a plain reason: {status}");
    let line = proxy.wait_log(&["\"upstream down\"", "\"upstream\":\"gh\"", FATAL_LINE]).await?;
    assert!(line.contains("\"level\":\"ERROR\""), "the down line is an error: {line}");
    let event: Value = serde_json::from_str(&line)?;
    assert_eq!(event["fields"]["upstream"], "gh", "`upstream` is a field of the event, not only of its span: {line}");
    assert_eq!(event["fields"]["stderr"], format!("starting\n{FATAL_LINE}"), "{line}");
    Ok(())
}

#[tokio::test]
async fn an_http_upstream_on_a_closed_port_says_connection_refused() -> anyhow::Result<()> {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?.port()
    };
    let url = format!("http://127.0.0.1:{port}/mcp");
    let config = format!(
        "[server]\nstartup_wait = \"0s\"\n\n{}",
        http_upstream("remote", &url, "required = false\nreconnect_max = \"250ms\"")
    );
    let proxy = ProxyProcess::start(&config).await?;
    let status = proxy.status_when("remote", |s| s["state"] == "down").await?;
    let shown = format!("http://127.0.0.1:{port}/***");
    assert_eq!(status["last_error"], json!(format!("connection refused ({shown})")), "{status}");
    assert!(status.get("stderr_tail").is_none(), "no stderr for HTTP: {status}");
    Ok(())
}

/// Hosts name URIs, tools and prompts with CR, LF and ESC in them, in both eras; with
/// `RUST_LOG=debug` and the human log format, the proxy logs the failed read with its URI (and
/// the upstream's error quoting it), yet no raw control character reaches its stderr: no line
/// starts with the forged text, and the URI is there escaped.
#[tokio::test]
async fn host_input_in_the_human_log_is_escaped_at_debug() -> anyhow::Result<()> {
    let proxy = ProxyProcess::start_human(&fixture_upstream("fx", &[]), &[("RUST_LOG", "debug")]).await?;
    proxy.wait_up("fx", 1).await?;
    let forged = "\r\nFORGED 2026-01-01T00:00:00Z ERROR forged line\x1b[2J\x1b]0;title\x07";
    for era in [Era::Legacy, Era::Modern] {
        let (host, _) = fixture::connect_http(&proxy.url, era).await?;
        let uri = format!("fx+fx://fx/item/404{forged}");
        assert!(host.read_resource(ReadResourceRequestParams::new(uri)).await.is_err(), "{era:?}: no such item");
        let tool = CallToolRequestParams::new(format!("fx__nope{forged}"));
        assert!(host.call_tool(tool).await.is_err(), "{era:?}: no such tool");
        let prompt = GetPromptRequestParams::new(format!("fx__nope{forged}"));
        assert!(host.get_prompt(prompt).await.is_err(), "{era:?}: no such prompt");
        host.cancel().await?;
    }
    // The read's failure is logged at debug, its URI escaped.
    proxy.wait_log(&["read failed", r"fx://fx/item/404\r\nFORGED"]).await?;
    let lines = proxy.logs();
    let raw: Vec<&String> = lines.iter().filter(|line| line.chars().any(char::is_control)).collect();
    assert!(raw.is_empty(), "raw control characters in the log: {raw:#?}");
    let forged_lines: Vec<&String> = lines.iter().filter(|line| line.starts_with("FORGED")).collect();
    assert!(forged_lines.is_empty(), "forged log lines: {forged_lines:#?}");
    Ok(())
}

/// With one upstream dead and `startup_wait` at 20 s, a stdio host's first list comes as soon
/// as the dead one failed its first attempt, and holds the reachable upstream's resources.
#[tokio::test]
async fn a_host_gets_its_first_list_without_waiting_for_a_dead_upstream() -> anyhow::Result<()> {
    let docs = folder()?;
    let dir = tempfile::tempdir()?;
    let config = format!(
        "[server]\nstartup_wait = \"20s\"\n\n{}{}",
        folder_upstream("docs", docs.path()),
        shell_upstream("dead", "exit 1")
    );
    let path = write_config(dir.path(), &config)?;
    let started = Instant::now();
    let (host, _) = connect_stdio_proxy(&path, Era::Legacy).await?;
    let (listed, _) = list_all_resources(&host).await?;
    let waited = started.elapsed();
    ensure!(listed.iter().filter(|r| r.uri.starts_with("docs+")).count() == 2, "{listed:?}");
    assert!(waited < Duration::from_secs(10), "the host waited {waited:?} (startup_wait is 20 s)");
    Ok(())
}

/// A legacy session hears at most two `list_changed` when an upstream restarts: it left, it
/// came back.
#[tokio::test]
async fn an_upstream_restart_costs_a_legacy_session_at_most_two_list_changed() -> anyhow::Result<()> {
    let address = free_address()?;
    let mut fx = HttpFixture::spawn_at(&address, &["--era", "legacy"]).await?;
    let url = format!("http://{address}/mcp");
    // A health probe that meets the dying upstream may wait out its request timeout rather
    // than fail at once (the connection closing under it): keep that well inside the wait below.
    let tuning = "reconnect_max = \"250ms\"\nhealth_interval = \"200ms\"\nrequest_timeout = \"3s\"";
    let proxy = ProxyProcess::start(&http_upstream("fx", &url, tuning)).await?;
    proxy.wait_up("fx", 1).await?;
    let (host, mut heard) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    list_all_resources(&host).await?;
    let (side, _) = fixture::connect_http(&url, Era::Legacy).await?;
    let _ = call_json(&side, "exit", json!({ "code": 0 })).await;
    fx.wait_exit().await?;
    proxy.wait_log(&["\"upstream down\"", "\"upstream\":\"fx\""]).await?;
    fx = HttpFixture::spawn_at(&address, &["--era", "legacy"]).await?;
    proxy.wait_up("fx", 2).await?;
    // Both changes are heard (a bound for the count), then the host reads the view again.
    let mut list_changed = 0;
    while list_changed < 2 {
        match tokio::time::timeout(DEADLINE, heard.next()).await.context("no list_changed")?? {
            FixtureEvent::ListChanged => list_changed += 1,
            FixtureEvent::Updated(_) => {}
        }
    }
    list_all_resources(&host).await?;
    // A measurement window well past the debounce: any further list_changed would arrive in it.
    tokio::time::sleep(LATE_NOTICE_WINDOW).await;
    while let Some(event) = heard.try_next() {
        list_changed += usize::from(event == FixtureEvent::ListChanged);
    }
    assert!(list_changed <= 2, "{list_changed} list_changed for one restart");
    drop(fx);
    Ok(())
}

/// Series whose labels are known at start (per upstream, per method and outcome) are exposed
/// at 0 before anything happened, so dashboards show 0 rather than "No data".
#[tokio::test]
async fn a_fresh_proxy_exposes_known_series_at_zero() -> anyhow::Result<()> {
    let docs = folder()?;
    let proxy = ProxyProcess::start(&folder_upstream("docs", docs.path())).await?;
    proxy.wait_up("docs", 1).await?;
    let metrics = proxy.admin_get("/metrics").await?;
    for series in [
        "mcp_proxy_catalog_unlisted_total{upstream=\"docs\"} 0",
        "mcp_proxy_cache_inserts_total{upstream=\"docs\"} 0",
        "mcp_proxy_served_bytes_total{upstream=\"docs\"} 0",
        "mcp_proxy_upstream_requests_total{method=\"resources/list\",outcome=\"upstream_failed\",upstream=\"docs\"} 0",
        "mcp_proxy_upstream_reconnects_total{upstream=\"docs\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == series), "{series} missing from:\n{metrics}");
    }
    Ok(())
}

/// A loopback address nobody listens on right now.
fn free_address() -> anyhow::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.to_string())
}

/// A reload that changes sections the running proxy cannot change (`[server]`, `[cache]`,
/// `[bridge]`) applies the rest and names each of them in `/status` `config_reload.restart_needed`;
/// the bridge's tools stay off until a restart. (The file watch may reload once more after the
/// SIGHUP: each reload compares with the running configuration, so each names the same sections.)
#[tokio::test]
async fn a_reload_names_every_section_that_needs_a_restart() -> anyhow::Result<()> {
    let docs = folder()?;
    let proxy = ProxyProcess::start(&folder_upstream("docs", docs.path())).await?;
    proxy.wait_up("docs", 1).await?;
    let more = folder()?;
    let next = format!(
        "[server]\npage_size = 7\n\n[cache]\nenabled = false\n\n[bridge]\nenabled = true\n\n{}{}",
        folder_upstream("docs", docs.path()),
        folder_upstream("more", more.path())
    );
    write_config(proxy.dir.path(), &next)?;
    let pid = proxy.pid().context("pid")?;
    ensure!(std::process::Command::new("kill").args(["-HUP", &pid.to_string()]).status()?.success());
    let reload = eventually(DEADLINE, "a reload that names restart_needed", || async {
        let reload = proxy.status().await?["config_reload"].clone();
        match reload["restart_needed"].as_array().is_some_and(|sections| !sections.is_empty()) {
            true => Ok(reload),
            false => Err(anyhow::anyhow!("config_reload: {reload}")),
        }
    })
    .await?;
    assert_eq!(reload["restart_needed"], json!(["server", "cache", "bridge"]), "{reload}");
    proxy.wait_up("more", 1).await.context("the rest applied")?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let tools = host.list_all_tools().await?;
    assert!(tools.iter().all(|tool| !tool.name.starts_with("proxy_")), "bridge tools offered: {tools:?}");
    Ok(())
}

/// Without a policies folder everything is allowed to everyone: `check` says so as a warning.
#[tokio::test]
async fn check_warns_that_no_policies_allow_everything() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), "[server]\npage_size = 10\n")?;
    let output = tokio::process::Command::new(crate::support::PROXY_BIN)
        .args(["check", "--config", config.to_str().unwrap()])
        .output()
        .await?;
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.lines().any(|l| l.starts_with("warning: no policies") && l.contains("everything")), "{text}");
    std::fs::create_dir(dir.path().join("policies"))?;
    std::fs::write(dir.path().join("policies/all.toml"), "principals = [\"*\"]\nallow = [\"**\"]\n")?;
    let guarded = tokio::process::Command::new(crate::support::PROXY_BIN)
        .args(["check", "--config", config.to_str().unwrap()])
        .output()
        .await?;
    assert!(!String::from_utf8_lossy(&guarded.stdout).contains("warning"), "{guarded:?}");
    Ok(())
}
