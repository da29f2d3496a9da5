//! What the observability tests of both tiers share (the metrics tests in `fast/observability`,
//! the Prometheus test in `interop/prometheus.rs`): the admin listener's answers (`/metrics`
//! parsed, `/readyz`, `/status`), a fixture that can be stopped and started where the proxy
//! expects it, one policy file, and the small steps of their workloads. Waits poll with a deadline.
use std::path::Path;

use super::eventually;
use super::exposition::Exposition;
use super::fixture::{self, DEADLINE, Era, FixtureClient, FixtureEvent, HttpFixture, call_json};
use super::proxy::{ProxyProcess, toml_str};
use anyhow::{Context, ensure};
use rmcp::RoleClient;
use rmcp::model::{ReadResourceRequestParams, ReadResourceResult, ResourceContents};
use rmcp::service::Peer;
use serde_json::{Value, json};

/// The one policy file: anyone may read everything but `fx`'s blob.
pub const POLICY_FILE: &str = "readers.toml";
pub const POLICY: &str = "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"fx+fx://fx/blob\"]\n";
pub const DENIED: &str = "fx+fx://fx/blob";
/// A URI the `fx` fixture does not have.
pub const MISSING: &str = "fx+fx://fx/missing";
/// Supervision quick enough that a restart is noticed and recovered from within a second.
pub const TUNING: &str = "reconnect_max = \"500ms\"\nhealth_interval = \"200ms\"";

/// Wait until `/metrics` counts an eviction for size. The cache settles evictions as it is used,
/// so keep using it (reads of a cached item) while waiting.
pub async fn wait_evicted(proxy: &ProxyProcess, host: &Peer<RoleClient>) -> anyhow::Result<()> {
    eventually(DEADLINE, "/metrics counts an eviction for size", || async {
        let metrics = scrape(proxy).await?;
        if metrics.value("mcp_proxy_cache_evictions_total", &[("cause", "size")]).unwrap_or(0.0) > 0.0 {
            return Ok(());
        }
        read(host, "st+fx://fx/item/0").await?;
        Err(anyhow::anyhow!("none yet:\n{}", proxy.admin_get("/metrics").await?))
    })
    .await
}

/// A fixture over HTTP on a fixed address, so it can be stopped and started again where the
/// proxy expects it.
pub struct RestartableFixture {
    address: String,
    args: Vec<String>,
    process: HttpFixture,
}

impl RestartableFixture {
    pub async fn spawn(args: &[&str]) -> anyhow::Result<Self> {
        let address = free_address()?;
        let process = HttpFixture::spawn_at(&address, args).await?;
        Ok(Self { address, args: args.iter().map(|a| a.to_string()).collect(), process })
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.address)
    }

    /// A direct connection, for the control tools.
    pub async fn side(&self) -> anyhow::Result<FixtureClient> {
        Ok(fixture::connect_http(&self.url(), Era::Legacy).await?.0)
    }

    /// Ask it to exit (the `exit` tool) and wait until it has.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        let side = self.side().await?;
        let _ = call_json(&side, "exit", json!({ "code": 0 })).await;
        self.process.wait_exit().await?;
        Ok(())
    }

    pub async fn start(&mut self) -> anyhow::Result<()> {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.process = HttpFixture::spawn_at(&self.address, &args).await?;
        Ok(())
    }
}

pub async fn scrape(proxy: &ProxyProcess) -> anyhow::Result<Exposition> {
    Exposition::parse(&proxy.admin_get("/metrics").await?)
}

/// Scrape until `ready` holds (at most [`DEADLINE`]); returns that scrape.
pub async fn scrape_until(
    proxy: &ProxyProcess,
    what: &str,
    ready: impl Fn(&Exposition) -> bool,
) -> anyhow::Result<Exposition> {
    eventually(DEADLINE, &format!("/metrics shows {what}"), || async {
        let metrics = scrape(proxy).await?;
        match ready(&metrics) {
            true => Ok(metrics),
            false => Err(anyhow::anyhow!("\n{}", proxy.admin_get("/metrics").await?)),
        }
    })
    .await
}

/// The proxy subscribes upstream asynchronously: once the fixture holds a subscription for
/// `uri`, touch it and check exactly one `updated` went out.
pub async fn touch_once_subscribed(side: &FixtureClient, uri: &str) -> anyhow::Result<()> {
    fixture::wait_for_stats(side, |s| s["subscribed"].as_array().is_some_and(|held| held.iter().any(|u| u == uri)))
        .await?;
    let touched = call_json(side, "touch", json!({ "uri": uri })).await?;
    ensure!(touched["notified"] == 1, "the upstream sent one `updated`: {touched}");
    Ok(())
}

pub fn up(metrics: &Exposition, upstream: &str) -> Option<f64> {
    metrics.value("mcp_proxy_upstream_up", &[("upstream", upstream)])
}

/// `GET /readyz` until it answers `code` (at most [`DEADLINE`]); its JSON body.
pub async fn wait_readyz(proxy: &ProxyProcess, code: u16) -> anyhow::Result<Value> {
    let url = format!("{}/readyz", proxy.admin_url().await?);
    let body = eventually(DEADLINE, &format!("/readyz answers {code}"), || async {
        let response = reqwest::get(&url).await?;
        let status = response.status().as_u16();
        let body = response.text().await?;
        if status == code { Ok(body) } else { Err(anyhow::anyhow!("{status} ({body})")) }
    })
    .await?;
    serde_json::from_str(&body).with_context(|| format!("/readyz body {body:?}"))
}

pub async fn admin_json(proxy: &ProxyProcess, path: &str) -> anyhow::Result<Value> {
    Ok(serde_json::from_str(&proxy.admin_get(path).await?)?)
}

/// One upstream's entry in a `/status` body.
pub fn upstream_status<'a>(status: &'a Value, name: &str) -> anyhow::Result<&'a Value> {
    let upstreams = status["upstreams"].as_array().context("/status has upstreams")?;
    upstreams.iter().find(|u| u["name"] == name).with_context(|| format!("no {name} in /status: {status}"))
}

/// A policies folder holding [`POLICY`] as [`POLICY_FILE`].
pub fn policies_folder() -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join(POLICY_FILE), POLICY)?;
    Ok(dir)
}

pub fn policies_section(dir: &Path) -> String {
    format!("[policies]\ndir = {}\n\n", toml_str(dir.to_str().expect("utf-8 path")))
}

/// Wait until the host hears `updated` for `uri`.
pub async fn wait_updated(events: &mut fixture::Events, uri: &str) -> anyhow::Result<()> {
    loop {
        match events.next().await? {
            FixtureEvent::Updated(heard) if heard == uri => return Ok(()),
            FixtureEvent::Updated(_) | FixtureEvent::ListChanged => continue,
        }
    }
}

pub fn item(id: u64) -> String {
    format!("fx+fx://fx/item/{id}")
}

pub async fn read(host: &Peer<RoleClient>, uri: &str) -> anyhow::Result<ReadResourceResult> {
    Ok(host.read_resource(ReadResourceRequestParams::new(uri)).await?)
}

/// The bytes of the text contents of a result (what `served_bytes` counts for text).
pub fn text_bytes(result: &ReadResourceResult) -> u64 {
    let text = |content: &ResourceContents| match content {
        ResourceContents::TextResourceContents { text, .. } => text.len() as u64,
        _ => 0,
    };
    result.contents.iter().map(text).sum()
}

pub fn free_address() -> anyhow::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.to_string())
}
