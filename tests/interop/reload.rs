//! Live reload of the upstream set (SIGHUP and a change of the config file), through real
//! processes: the proxy binary on a config file in a temporary folder, the fixture binary over
//! HTTP and stdio, and the real npm server-memory over stdio. A host with a live 2025 session
//! and subscriptions stays connected through every reload.

use std::path::PathBuf;

use crate::support::eventually;
use crate::support::fixture::{
    self, DEADLINE, Era, FixtureClient, FixtureEvent, HttpFixture, call_json, wait_for_stats,
};
use crate::support::peers::memory_upstream;
use crate::support::proxy::{ProxyProcess, fixture_upstream, http_upstream};
use rmcp::model::{ReadResourceRequestParams, SubscribeRequestParams};
use serde_json::{Value, json};

/// The proxy, the HTTP fixture `fx` (driven through `side`), and the host's 2025 session.
struct Setup {
    proxy: ProxyProcess,
    _fx: HttpFixture,
    fx_url: String,
    side: FixtureClient,
    host: FixtureClient,
    events: fixture::Events,
    memory_file: PathBuf,
}

impl Setup {
    /// `fx` and `mem` configured; the host subscribed to `fx+fx://fx/item/1` and the memory graph.
    async fn start() -> anyhow::Result<Setup> {
        let fx = HttpFixture::spawn(&["--era", "legacy", "--resources", "3"]).await?;
        let memory_dir = tempfile::tempdir()?;
        let memory_file = memory_dir.keep().join("memory.jsonl");
        let config = [http_upstream("fx", &fx.url, ""), memory_upstream("mem", &memory_file, "")].concat();
        let proxy = ProxyProcess::start(&config).await?;
        proxy.wait_up("fx", 1).await?;
        proxy.wait_up("mem", 1).await?;
        let (side, _) = fixture::connect_http(&fx.url, Era::Legacy).await?;
        let (host, events) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
        for uri in ["fx+fx://fx/item/1", "mem+memory://knowledge-graph"] {
            #[allow(deprecated)]
            host.subscribe(SubscribeRequestParams::new(uri)).await?;
        }
        wait_watchers(&side, "fx://fx/item/1", 1).await?;
        let fx_url = fx.url.clone();
        Ok(Setup { proxy, _fx: fx, fx_url, side, host, events, memory_file })
    }

    fn config_with(&self, extra: &str) -> String {
        [http_upstream("fx", &self.fx_url, ""), memory_upstream("mem", &self.memory_file, ""), extra.to_string()]
            .concat()
    }

    async fn uris(&self) -> anyhow::Result<Vec<String>> {
        let (resources, _) = fixture::list_all_resources(&self.host).await?;
        Ok(resources.into_iter().map(|r| r.uri.clone()).collect())
    }

    /// The next thing the host hears.
    async fn heard(&mut self) -> anyhow::Result<FixtureEvent> {
        self.events.next().await
    }

    /// `touch` a fixture URI upstream; the host must hear exactly that next.
    async fn touch_and_hear(&mut self, uri: &str) -> anyhow::Result<()> {
        call_json(&self.side, "touch", json!({ "uri": uri })).await?;
        assert_eq!(self.heard().await?, FixtureEvent::Updated(format!("fx+{uri}")));
        Ok(())
    }

    async fn status(&self) -> anyhow::Result<Value> {
        Ok(serde_json::from_str(&self.proxy.admin_get("/status").await?)?)
    }

    /// Send SIGHUP to the proxy.
    fn hang_up(&self) -> anyhow::Result<()> {
        let pid = self.proxy.pid().ok_or_else(|| anyhow::anyhow!("proxy exited"))?;
        let status = std::process::Command::new("kill").args(["-HUP", &pid.to_string()]).status()?;
        anyhow::ensure!(status.success(), "kill -HUP failed");
        Ok(())
    }

    /// Wait until `/status` shows a config reload whose `outcome` satisfies `done`; its report.
    async fn wait_reload(&self, done: impl Fn(&str) -> bool) -> anyhow::Result<Value> {
        eventually(DEADLINE, "a config reload in /status", || async {
            let reload = self.status().await?["config_reload"].clone();
            match reload["outcome"].as_str() {
                Some(outcome) if done(outcome) => Ok(reload),
                _ => Err(anyhow::anyhow!("config_reload: {reload}")),
            }
        })
        .await
    }
}

/// How many sessions of the fixture watch `uri`.
async fn wait_watchers(side: &FixtureClient, uri: &str, count: usize) -> anyhow::Result<Value> {
    wait_for_stats(side, |stats| {
        let subscribed = stats["subscribed"].as_array().cloned().unwrap_or_default();
        subscribed.iter().filter(|u| u.as_str() == Some(uri)).count() == count
    })
    .await
}

/// The config file is made a symlink to a file in another folder: the proxy's file watch (on
/// the config's own folder) sees the swap once, never a later edit of the target, so what
/// follows is reloaded by SIGHUP alone.
async fn edit_behind_the_watch(setup: &Setup, text: &str) -> anyhow::Result<PathBuf> {
    let elsewhere = tempfile::tempdir()?.keep().join("real.toml");
    std::fs::write(&elsewhere, text)?;
    let link = setup.proxy.dir.path().join("config.toml.link");
    std::os::unix::fs::symlink(&elsewhere, &link)?;
    std::fs::rename(&link, setup.proxy.dir.path().join("config.toml"))?;
    setup.wait_reload(|outcome| outcome != "rejected").await?;
    Ok(elsewhere)
}

/// SIGHUP: an upstream added joins (its resources listed, the host told once) and a broken
/// edit keeps the running set serving and says why, in the log and in `/status`.
#[tokio::test]
async fn sighup_adds_an_upstream_and_refuses_a_broken_config() -> anyhow::Result<()> {
    let mut setup = Setup::start().await?;
    let before = setup.uris().await?;
    assert!(before.iter().any(|u| u.starts_with("mem+")), "{before:?}");
    let target = edit_behind_the_watch(&setup, &setup.config_with("")).await?;

    std::fs::write(&target, setup.config_with(&fixture_upstream("more", &["--resources", "2"])))?;
    setup.hang_up()?;
    setup.proxy.wait_up("more", 1).await?;
    assert_eq!(setup.heard().await?, FixtureEvent::ListChanged, "the host is told its list grew");
    let after = setup.uris().await?;
    assert!(after.iter().any(|u| u.starts_with("more+")), "{after:?}");
    let kept: Vec<&String> = after.iter().filter(|u| !u.starts_with("more+")).collect();
    assert_eq!(kept, before.iter().collect::<Vec<_>>(), "the others' resources are untouched");
    // Exactly one list_changed: the next thing heard is the update sent after it.
    setup.touch_and_hear("fx://fx/item/1").await?;

    std::fs::write(&target, format!("{}[[upstreams]]\nname = \"bad name\"\n", setup.config_with("")))?;
    setup.hang_up()?;
    setup.wait_reload(|outcome| outcome == "rejected").await?;
    let status = setup.status().await?;
    assert_eq!(status["config_reload"]["outcome"], "rejected", "{status}");
    assert!(!status["config_reload"]["problems"].as_array().unwrap().is_empty(), "{status}");
    let names: Vec<&str> = status["upstreams"].as_array().unwrap().iter().filter_map(|u| u["name"].as_str()).collect();
    assert_eq!(names, ["fx", "mem", "more"], "the running set is kept");
    let read = setup.host.read_resource(ReadResourceRequestParams::new("more+fx://fx/item/0")).await?;
    assert_eq!(read.contents.len(), 1);
    setup.touch_and_hear("fx://fx/item/1").await?;
    Ok(())
}

/// A file write: an upstream removed leaves (its resources and subscription gone, the host told
/// once, other subscriptions still delivering); an upstream changed reconnects, its
/// subscriptions are in place again upstream, and a host whose list ends up the same hears no
/// `list_changed`.
#[tokio::test]
async fn a_file_write_removes_one_upstream_and_reconnects_a_changed_one() -> anyhow::Result<()> {
    let mut setup = Setup::start().await?;
    let config = setup.proxy.dir.path().join("config.toml");
    let before = setup.uris().await?;

    std::fs::write(&config, http_upstream("fx", &setup.fx_url, ""))?;
    assert_eq!(setup.heard().await?, FixtureEvent::ListChanged, "the host is told its list shrank");
    let after = setup.uris().await?;
    assert!(!after.iter().any(|u| u.starts_with("mem+")), "{after:?}");
    assert_eq!(after.len(), before.iter().filter(|u| !u.starts_with("mem+")).count());
    setup.touch_and_hear("fx://fx/item/1").await?;
    let status = setup.status().await?;
    assert_eq!(status["config_reload"]["removed"], json!(["mem"]), "{status}");
    assert_eq!(status["subscriptions"]["upstream_uris"], 1, "only fx's URI is still held: {status}");

    #[allow(deprecated)]
    setup.host.subscribe(SubscribeRequestParams::new("fx+fx://fx/item/2")).await?;
    wait_watchers(&setup.side, "fx://fx/item/2", 1).await?;
    let subscribes = fixture::stats(&setup.side).await?["subscribes"].as_u64().unwrap_or(0);
    std::fs::write(&config, http_upstream("fx", &setup.fx_url, "request_timeout = \"9s\""))?;
    // The changed upstream is a new connection (its reconnect count starts again): wait for the
    // reload to name it, then for it to be up.
    eventually(DEADLINE, "the reload to name fx as changed", || async {
        let status = setup.status().await?;
        match status["config_reload"]["changed"] == json!(["fx"]) {
            true => Ok(()),
            false => Err(anyhow::anyhow!("{status}")),
        }
    })
    .await?;
    setup.proxy.wait_up("fx", 1).await?;
    // The new connection subscribes again to what the host holds (two URIs).
    wait_for_stats(&setup.side, |s| s["subscribes"].as_u64().unwrap_or(0) >= subscribes + 2).await?;
    let status = setup.status().await?;
    assert_eq!(status["config_reload"]["changed"], json!(["fx"]), "{status}");
    // Anything may have changed while it reconnected: each subscriber is told so. Its list is the
    // same once fx is back, so no list_changed; and its updates flow over the new connection.
    assert_eq!(setup.heard().await?, FixtureEvent::Updated("fx+fx://fx/item/1".into()));
    #[allow(deprecated)]
    setup.host.subscribe(SubscribeRequestParams::new("fx+fx://fx/item/0")).await?;
    wait_watchers(&setup.side, "fx://fx/item/0", 1).await?;
    call_json(&setup.side, "touch", json!({ "uri": "fx://fx/item/0" })).await?;
    loop {
        match setup.heard().await? {
            FixtureEvent::Updated(uri) if uri == "fx+fx://fx/item/0" => break,
            FixtureEvent::Updated(uri) if uri == "fx+fx://fx/item/1" || uri == "fx+fx://fx/item/2" => continue,
            other => anyhow::bail!("unexpected {other:?}"),
        }
    }
    assert_eq!(setup.uris().await?, after, "the same list once it is back");
    Ok(())
}

/// The process ids of `pid`'s children.
fn children_of(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    tasks
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| list.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
        .collect()
}

/// Gone or a zombie (exited, not yet reaped).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// SIGTERM drains everything on the spine within the grace period: the proxy exits without
/// giving up on a task, and its stdio upstream children are closed with it.
#[tokio::test]
async fn sigterm_drains_the_server_and_closes_upstream_children() -> anyhow::Result<()> {
    let fx = HttpFixture::spawn(&["--era", "modern"]).await?;
    let config = [fixture_upstream("stdio", &[]), http_upstream("http", &fx.url, "")].concat();
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("stdio", 1).await?;
    proxy.wait_up("http", 1).await?;
    let (host, _events) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let _stream = host.listen(rmcp::model::SubscriptionFilter::builder().resources_list_changed().build()).await?;
    let pid = proxy.pid().ok_or_else(|| anyhow::anyhow!("proxy exited"))?;
    let children = children_of(pid);
    assert!(!children.is_empty(), "the stdio upstream runs as a child");

    let started = std::time::Instant::now();
    std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status()?;
    eventually(DEADLINE, "the proxy and its children gone", || async {
        match exited(pid) && children.iter().all(|child| exited(*child)) {
            true => Ok(()),
            false => Err("still running"),
        }
    })
    .await?;
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "within the grace period: {:?}", started.elapsed());
    proxy.wait_log(&["shutting down"]).await?;
    assert!(proxy.matching(&["grace period over"]).is_empty(), "every task ended in time: {:?}", proxy.logs());
    Ok(())
}
