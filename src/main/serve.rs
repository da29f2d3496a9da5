//! `serve`: the proxy, its listeners and its signal handlers on one spine, drained on shutdown;
//! and how the configuration is loaded again on reload.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::admin::{self, AdminState};
use crate::config::{CliOverrides, Config};
use crate::downstream;
use crate::proxy::{ConfigSource, Proxy};
use crate::spine::Spine;
use crate::upstream::LinkState;
use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::commands::Loaded;
use super::logs::apply_log_level;

const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How the configuration is loaded again on reload: the same file, environment and command
/// line as at start (see [`served_as_asked`]).
pub(crate) fn config_source(
    loaded: Loaded,
    cli: CliOverrides,
    stdio: bool,
    admin_unasked: bool,
) -> (PathBuf, ConfigSource) {
    let path = loaded.path().to_path_buf();
    let source: ConfigSource = Arc::new(move || Ok(served_as_asked(loaded.load(&cli, false)?, stdio, admin_unasked)));
    (path, source)
}

/// A stdio proxy serves one principal (its stdio upstreams are shared unless `session` says
/// otherwise), and keeps its admin listener off unless the command line asked for one.
pub(crate) fn served_as_asked(mut config: Config, stdio: bool, admin_unasked: bool) -> Config {
    if stdio {
        config.serve_one_principal();
        if admin_unasked {
            config.server.admin_listen = None;
        }
    }
    config
}

/// Every task runs on one [`Spine`]: the signal handlers, the admin listener, the MCP server,
/// and the proxy's own (supervisors, event loop, housekeeping, watches). On SIGTERM/ctrl-c the
/// spine's shutdown is cancelled and everything is drained within [`SHUTDOWN_GRACE`]: the
/// server stops taking requests and upstream connections are closed (children end, listen
/// streams are cancelled).
pub(crate) async fn serve(
    mut config: Config,
    stdio: bool,
    principal: String,
    source: (PathBuf, ConfigSource),
    ready_file: Option<PathBuf>,
) -> anyhow::Result<()> {
    apply_log_level(&config.server.log_level);
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    for missing in config.missing_folders() {
        tracing::warn!(at = missing.at, "{}; the upstream stays down until it exists", missing.message);
    }
    let traces = crate::telemetry::install(&config.telemetry)?;
    let upstreams = config.upstreams.len();
    crate::listener::fds::settle(&mut config.server, upstreams);
    let spine = Spine::new();
    let shutdown = spine.shutdown();
    spine.spawn("signals", cancel_on_signal(shutdown.clone()));
    let (listener, admin) = bind(&config, stdio).await?;
    let startup_wait = config.server.startup_wait;
    let bound = (listener.as_ref().and_then(|l| l.local_addr().ok()), admin.as_ref().and_then(|l| l.local_addr().ok()));
    let proxy = Proxy::start(config, &spine);
    let (path, source) = source;
    proxy.watch_config(&path, source.clone());
    if let Some(admin) = admin {
        serve_admin(&spine, &proxy, admin);
    }
    spine.spawn("sighup", reload_on_hangup(proxy.clone(), source, shutdown.clone()));
    proxy.wait_settled(startup_wait).await;
    let down: Vec<_> = proxy.statuses().into_iter().filter(|s| s.state != LinkState::Up).map(|s| s.name).collect();
    if !down.is_empty() {
        tracing::warn!(?down, "serving without upstreams that are not up yet; they join when they come up");
    }
    if let Some(path) = &ready_file {
        crate::ready_file::write(path, bound.0, bound.1)
            .with_context(|| format!("cannot write the ready file {}", path.display()))?;
    }
    let serving = shutdown.clone();
    let server = spine.spawn("mcp-server", async move {
        let result = match listener {
            None => downstream::serve_stdio(proxy, &principal, serving.clone()).await.map_err(|e| anyhow::anyhow!(e)),
            Some(listener) => downstream::serve_http(proxy, listener, serving.clone()).await.map_err(Into::into),
        };
        // The server ending on its own (stdin closed) ends the process too.
        serving.cancel();
        result
    });
    shutdown.cancelled().await;
    let drained = spine.drain(SHUTDOWN_GRACE).await;
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
    if let Err(late) = drained {
        tracing::warn!(?late, "shutdown grace period over; exiting");
        return Ok(());
    }
    server.await?
}

/// The MCP listener (none with `--stdio`) and the admin listener (when configured).
async fn bind(
    config: &Config,
    stdio: bool,
) -> anyhow::Result<(Option<tokio::net::TcpListener>, Option<tokio::net::TcpListener>)> {
    let listen = config.server.listen;
    let listener = match stdio {
        true => None,
        false => {
            Some(tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?)
        }
    };
    let admin = match config.server.admin_listen {
        Some(address) => {
            Some(tokio::net::TcpListener::bind(address).await.with_context(|| format!("cannot listen on {address}"))?)
        }
        None => None,
    };
    Ok((listener, admin))
}

fn serve_admin(spine: &Spine, proxy: &Proxy, admin: tokio::net::TcpListener) {
    let state = AdminState {
        metrics: proxy.metrics().clone(),
        status: Arc::new({
            let proxy = proxy.clone();
            move || proxy.status_report()
        }),
    };
    let server = &proxy.config().server;
    let limits = crate::listener::ConnectionLimits::admin(server);
    spine.spawn("admin", admin::serve_admin(admin, state, limits, server.allowed_hosts.clone(), spine.shutdown()));
}

/// SIGHUP reloads the configuration: the upstream set and the policies.
async fn reload_on_hangup(proxy: Proxy, source: ConfigSource, shutdown: CancellationToken) {
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else { return };
    loop {
        tokio::select! {
            Some(()) = hangups.recv() => {
                tracing::info!("SIGHUP: reloading the configuration and policies");
                proxy.reload_config(source()).await;
            }
            _ = shutdown.cancelled() => return,
        }
    }
}

async fn cancel_on_signal(shutdown: CancellationToken) {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
        _ = shutdown.cancelled() => return,
    }
    tracing::info!("shutting down");
    shutdown.cancel();
}
