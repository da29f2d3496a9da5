//! The proxy in the test process: the library's `Proxy` serving streamable HTTP (and the admin
//! listener) on 127.0.0.1:0, wired the way `serve` wires them, on the test's tokio runtime. No
//! process to spawn and no logs to read: for tests about what crosses the MCP wire, not about the
//! binary (its CLI, stdio, signals and logs are [`super::proxy::ProxyProcess`]'s).
//!
//! - [`InProcessProxy::start`]: config text → serving; returns once the startup wait is over.
//! - [`InProcessProxy::wait_up`]: an upstream's state, from the `Proxy` itself.
//!
//! Invariant: dropping the handle cancels every task the proxy started (its spine's shutdown).

use std::sync::Arc;

use anyhow::Context;
use mcp_resource_proxy::admin::{self, AdminState};
use mcp_resource_proxy::config::{CliOverrides, Config};
use mcp_resource_proxy::downstream;
use mcp_resource_proxy::listener::ConnectionLimits;
use mcp_resource_proxy::proxy::Proxy;
use mcp_resource_proxy::spine::Spine;
use mcp_resource_proxy::upstream::LinkState;
use tokio::net::TcpListener;

use super::proxy::write_config;
use super::{DEADLINE, eventually};

/// A proxy serving inside the test process; stopped when dropped.
pub struct InProcessProxy {
    /// `http://127.0.0.1:PORT/mcp`
    pub url: String,
    /// `http://127.0.0.1:PORT` of the admin listener.
    pub admin: String,
    pub proxy: Proxy,
    spine: Spine,
    pub dir: tempfile::TempDir,
}

impl Drop for InProcessProxy {
    fn drop(&mut self) {
        self.spine.shutdown().cancel();
    }
}

impl InProcessProxy {
    /// Write `config` to a temporary `config.toml`, load it as `serve` does, and serve it.
    pub async fn start(config: &str) -> anyhow::Result<Self> {
        mcp_resource_proxy::crypto::install();
        let dir = tempfile::tempdir()?;
        let path = write_config(dir.path(), config)?;
        let overrides = CliOverrides { listen: Some("127.0.0.1:0".into()), admin_listen: Some("127.0.0.1:0".into()) };
        let config = Config::load(&path, &overrides).map_err(|e| anyhow::anyhow!("{e}"))?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let admin_listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/mcp", listener.local_addr()?);
        let admin = format!("http://{}", admin_listener.local_addr()?);
        let spine = Spine::new();
        let shutdown = spine.shutdown();
        let startup_wait = config.server.startup_wait;
        let proxy = Proxy::start(config, &spine);
        let status = {
            let proxy = proxy.clone();
            move || proxy.status_report()
        };
        let state = AdminState { metrics: proxy.metrics().clone(), status: Arc::new(status) };
        let server = &proxy.config().server;
        let limits = ConnectionLimits::of(server);
        spine.spawn(
            "admin",
            admin::serve_admin(admin_listener, state, limits, server.allowed_hosts.clone(), shutdown.clone()),
        );
        proxy.wait_settled(startup_wait).await;
        spine.spawn("mcp-server", downstream::serve_http(proxy.clone(), listener, shutdown));
        Ok(Self { url, admin, proxy, spine, dir })
    }

    /// Wait until `upstream` has come up `times` times since start.
    pub async fn wait_up(&self, upstream: &str, times: u64) -> anyhow::Result<()> {
        let what = format!("upstream {upstream} up {times} time(s)");
        eventually(DEADLINE, &what, || async {
            let statuses = self.proxy.statuses();
            let status = statuses.iter().find(|s| s.name == upstream).context("no such upstream")?;
            match status.state == LinkState::Up && status.reconnects + 1 >= times {
                true => Ok(()),
                false => Err(anyhow::anyhow!("{:?}, {} reconnect(s)", status.state, status.reconnects)),
            }
        })
        .await
    }

    /// `GET` an admin path; the body of a 2xx answer.
    pub async fn admin_get(&self, path: &str) -> anyhow::Result<String> {
        let response = reqwest::get(format!("{}{path}", self.admin)).await?.error_for_status()?;
        Ok(response.text().await?)
    }
}
