//! What a closed 2025 session leaves behind: nothing. Sessions that finished their handshake
//! (so the proxy registered an outlet for their notifications) are closed by their host's
//! `DELETE` (a real rmcp host) or by the reaper (raw HTTP hosts that stop after their handshake,
//! closed as unused; the rmcp hosts, which list, stay until their `DELETE`); afterwards
//! the proxy holds no outlet for them and runs no task of theirs. The resident-memory figure
//! this bookkeeping explains is measured by `scripts/session_memory.py`, not asserted here.

use std::time::Duration;

use anyhow::Context;
use rmcp::model::PaginatedRequestParams;

use crate::support::eventually;
use crate::support::fixture::Era;
use crate::support::inproc::InProcessProxy;
use crate::support::proxy::toml_str;
use crate::support::raw_http::{self, LEGACY};
use crate::support::wire;

/// Sessions ended each way.
const DELETED: usize = 12;
const REAPED: usize = 12;
const DEADLINE: Duration = Duration::from_secs(30);

/// The proxy's own tasks serving hosts' notifications (`outlet:<id>` on the spine), and the
/// outlets registered for them.
fn outlet_tasks_and_outlets(proxy: &InProcessProxy) -> (usize, usize) {
    let tasks = proxy.proxy.spine().running().iter().filter(|name| name.starts_with("outlet:")).count();
    (tasks, proxy.proxy.status_report().subscriptions.hosts)
}

#[tokio::test]
async fn a_closed_session_leaves_no_outlet_and_no_task_behind() -> anyhow::Result<()> {
    let folder = tempfile::tempdir()?;
    std::fs::write(folder.path().join("a.md"), "a")?;
    let config = format!(
        "[server]\nsession_idle_timeout = \"1h\"\nunused_session_idle_timeout = \"1s\"\n\n[[upstreams]]\nname = \"docs\"\ndir = {}\n",
        toml_str(folder.path().to_str().context("utf-8 path")?)
    );
    let proxy = InProcessProxy::start(&config).await?;

    let mut hosts = Vec::new();
    for _ in 0..DELETED {
        let (host, _) = wire::connect(&proxy.url, Era::Legacy, None).await?;
        host.list_resources(Some(PaginatedRequestParams::default())).await?;
        hosts.push(host);
    }
    let http = reqwest::Client::new();
    for _ in 0..REAPED {
        open_and_walk_away(&http, &proxy.url).await?;
    }
    // Every session finished its handshake: each has its outlet and its task.
    eventually(DEADLINE, "an outlet per open session", || async {
        let (tasks, outlets) = outlet_tasks_and_outlets(&proxy);
        anyhow::ensure!(outlets >= DELETED, "{outlets} outlets, {tasks} tasks");
        Ok(())
    })
    .await?;

    for host in hosts {
        host.cancel().await?;
    }
    eventually(DEADLINE, "no outlet and no outlet task once every session closed", || async {
        match outlet_tasks_and_outlets(&proxy) {
            (0, 0) => Ok(()),
            (tasks, outlets) => anyhow::bail!("{tasks} outlet tasks and {outlets} outlets still there"),
        }
    })
    .await?;
    Ok(())
}

/// A 2025 session over raw HTTP that completes its handshake and then goes quiet without
/// `DELETE`: only the reaper ends it (as unused).
async fn open_and_walk_away(http: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    let post = |body: serde_json::Value, session: Option<&str>| {
        let mut request = http
            .post(url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .json(&body);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session).header("mcp-protocol-version", LEGACY);
        }
        raw_http::send(request)
    };
    let opened = post(raw_http::initialize("walks-away"), None).await?;
    let session = opened.session.context("no Mcp-Session-Id")?;
    let initialized = post(raw_http::initialized(), Some(&session)).await?;
    anyhow::ensure!(initialized.status.is_success(), "{initialized:?}");
    Ok(())
}
