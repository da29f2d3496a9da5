//! A quiet log: a healthy idle proxy logs nothing after startup, in front of every kind of
//! upstream; a host's ordinary traffic logs nothing by default; an upstream that stays down is
//! one line across its retries.

use std::time::Duration;

use anyhow::ensure;
use rmcp::model::{ClientRequest, CustomRequest, ReadResourceRequestParams};

use super::{folder, folder_upstream, shell_upstream, start_with_default_logging};
use crate::support::eventually;
use crate::support::fixture::{self, DEADLINE, Era, HttpFixture, list_all_resources};
use crate::support::proxy::{ProxyProcess, fixture_upstream, http_upstream, toml_str};

/// The window over which an idle proxy must stay silent: several health intervals (200 ms).
/// A measurement window, not synchronisation: what it measures is that nothing happens.
const QUIET_WINDOW: Duration = Duration::from_secs(1);

/// How often the upstreams of the idle test are probed.
const PROBED_EVERY: &str = "500ms";

/// The window after readiness over which a healthy idle proxy in front of every kind of upstream
/// must log nothing: five of its upstreams' health intervals ([`PROBED_EVERY`]), so each upstream
/// is probed in it several times. The one timed wait of its test, measuring that nothing happens.
const IDLE_WINDOW: Duration = Duration::from_millis(2500);

/// An `[[upstreams]]` entry probed every [`PROBED_EVERY`].
fn probed_often(entry: String) -> String {
    format!("{entry}health_interval = \"{PROBED_EVERY}\"\n\n")
}

/// A healthy proxy (with policies: without, it warns that everything is allowed) in front of
/// folder upstreams probed every 200 ms, then idle: after startup it logs nothing. rmcp is held
/// only at `warn` here (not the default's tighter hold), so a health probe answered with an
/// error (`ping` to a 2026-07-28 server) would show.
#[tokio::test]
async fn a_healthy_idle_proxy_logs_nothing_after_startup() -> anyhow::Result<()> {
    let (docs, more, policies) = (folder()?, folder()?, tempfile::tempdir()?);
    std::fs::write(policies.path().join("all.toml"), "principals = [\"*\"]\nallow = [\"**\"]\n")?;
    let config = format!(
        "[policies]\ndir = {}\n\n{}{}",
        toml_str(policies.path().to_str().unwrap()),
        folder_upstream("docs", docs.path()),
        folder_upstream("more", more.path())
    );
    let proxy = ProxyProcess::start_with(&config, &[], &[("RUST_LOG", "info,rmcp=warn")]).await?;
    proxy.wait_up("docs", 1).await?;
    proxy.wait_up("more", 1).await?;
    proxy.admin_url().await?;
    assert_silent_after_startup(&proxy, QUIET_WINDOW).await
}

/// The promise of docs/command-line.md ("A healthy idle proxy logs nothing after startup") at the
/// default log level, in front of every kind of upstream: the fixture over stdio (2025) and over
/// HTTP (2026-07-28: a listen stream for its list changes), a tools-only fixture (no resources,
/// so nothing to say about subscriptions) and the folder server, each probed every 500 ms (the
/// folder server is not probed). Startup logs its listeners and each `upstream up`, then nothing
/// for the window.
#[tokio::test]
async fn a_healthy_idle_proxy_logs_nothing_in_front_of_every_kind_of_upstream() -> anyhow::Result<()> {
    let (docs, policies) = (folder()?, tempfile::tempdir()?);
    std::fs::write(policies.path().join("all.toml"), "principals = [\"*\"]\nallow = [\"**\"]\n")?;
    let modern = HttpFixture::spawn(&["--era", "modern"]).await?;
    let config = format!(
        "[policies]\ndir = {}\n\n{}{}{}{}",
        toml_str(policies.path().to_str().unwrap()),
        probed_often(fixture_upstream("stdio", &[])),
        http_upstream("http", &modern.url, &format!("health_interval = \"{PROBED_EVERY}\"")),
        probed_often(fixture_upstream("tools", &["--offer", "tools"])),
        folder_upstream("docs", docs.path())
    );
    let proxy = start_with_default_logging(&config).await?;
    for upstream in ["stdio", "http", "tools", "docs"] {
        proxy.wait_up(upstream, 1).await?;
    }
    assert_silent_after_startup(&proxy, IDLE_WINDOW).await
}

/// A host's ordinary traffic — a list, a read of a missing URI, an unknown method, a
/// disconnect — logs nothing at the default level; its audit trail (on by default) goes to a
/// file of its own beside the config, where the read is one event.
#[tokio::test]
async fn ordinary_host_traffic_logs_nothing_by_default() -> anyhow::Result<()> {
    let docs = folder()?;
    let proxy = start_with_default_logging(&folder_upstream("docs", docs.path())).await?;
    proxy.wait_up("docs", 1).await?;
    proxy.admin_url().await?;
    let after_startup = proxy.logs().len();
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let (listed, _) = list_all_resources(&host).await?;
    ensure!(listed.len() == 2, "{listed:?}");
    assert!(host.read_resource(ReadResourceRequestParams::new("docs+file:///missing")).await.is_err());
    let unknown = ClientRequest::CustomRequest(CustomRequest::new("unknown/method", None));
    assert!(host.send_request(unknown).await.is_err(), "an unknown method is refused");
    host.cancel().await?;
    let audit_file = proxy.dir.path().join("audit.jsonl");
    let audit = eventually(fixture::DEADLINE, "the read in the audit file", || async {
        let lines: Vec<String> = std::fs::read_to_string(&audit_file)?.lines().map(str::to_owned).collect();
        match lines.iter().any(|line| line.contains(r#""event":"read""#)) {
            true => Ok(lines),
            false => Err(anyhow::anyhow!("{lines:?}")),
        }
    })
    .await?;
    tokio::time::sleep(QUIET_WINDOW).await;
    let new: Vec<String> = proxy.logs().into_iter().skip(after_startup).collect();
    assert!(new.is_empty(), "ordinary traffic logged: {new:#?}");
    assert_eq!(audit.len(), 1, "the read's audit event: {audit:#?}");
    assert!(audit[0].contains(r#""outcome":"not_found""#), "{}", audit[0]);
    Ok(())
}

/// The lines a healthy start logs: its listeners and each upstream coming up.
fn is_startup_line(line: &str) -> bool {
    ["serving MCP at", "admin listening at", "\"upstream up\""].iter().any(|m| line.contains(m))
}

/// An upstream that never comes up is retried many times; the default log says so once.
#[tokio::test]
async fn a_down_upstream_logs_one_line_across_its_retries() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let attempts = dir.path().join("attempts");
    let script = format!("echo attempt >> '{}'; exit 1", attempts.display());
    let config = format!("[server]\nstartup_wait = \"0s\"\n\n{}", shell_upstream("dead", &script));
    let proxy = start_with_default_logging(&config).await?;
    eventually(DEADLINE, "4 attempts", || async {
        match std::fs::read_to_string(&attempts).unwrap_or_default().lines().count() {
            n if n >= 4 => Ok(()),
            n => Err(format!("{n} attempts")),
        }
    })
    .await?;
    let down = proxy.matching(&["\"upstream\":\"dead\""]);
    assert_eq!(down.len(), 1, "one line for the state change, none per retry: {down:#?}");
    assert!(down[0].contains("\"upstream down\""), "{down:?}");
    Ok(())
}

/// What `proxy` logged up to now is startup alone, and over `window` it logs nothing more.
async fn assert_silent_after_startup(proxy: &ProxyProcess, window: Duration) -> anyhow::Result<()> {
    let after_startup = proxy.logs();
    tokio::time::sleep(window).await;
    let new: Vec<String> = proxy.logs().into_iter().skip(after_startup.len()).collect();
    let startup_noise: Vec<&String> = after_startup.iter().filter(|l| !is_startup_line(l)).collect();
    ensure!(new.is_empty(), "logged while idle: {new:#?}");
    ensure!(startup_noise.is_empty(), "logged more than startup: {startup_noise:#?}");
    Ok(())
}
