//! `mcp-proxy-fixture`: a scriptable upstream MCP server for the proxy's integration tests and
//! benchmarks. It does not depend on the proxy library. Logs go to stderr; stdout carries the
//! stdio MCP stream, or in `--http` mode exactly one `LISTENING <url>` line.
//!
//! Modules:
//! - `cli`: the command line and its typed settings.
//! - `catalog`: URIs, pages, cursors and read contents as plain data.
//! - `state`: the shared `Fixture` (versions, counters, read gate, watchers, fan-out).
//! - `handler`: the rmcp `ServerHandler` of one connection.
//! - `tools`: the control tools tests call.
//! - `faults`: hostile replies (`--faults`) for the proxy's fault tests.

mod catalog;
mod cli;
mod faults;
mod handler;
mod state;
mod tools;

use std::{
    io::Write,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::Context;
use clap::Parser;
use futures::FutureExt;
use rmcp::{
    ServiceExt,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use tokio_util::sync::CancellationToken;

use crate::{cli::Args, handler::FixtureHandler, state::Fixture};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logging();
    let args = Args::parse();
    let fixture = Fixture::new(args.settings());
    let shutdown = CancellationToken::new();
    let keep_alive = args.session_keep_alive();
    match args.http {
        Some(addr) => {
            let url = serve_http(fixture, addr, keep_alive, shutdown.clone()).await?;
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "LISTENING {url}")?;
            stdout.flush()?;
            drop(stdout);
            wait_for_signal().await;
        }
        None => {
            if let Some(addr) = args.control {
                let url = serve_http(fixture.clone(), addr, keep_alive, shutdown.clone()).await?;
                eprintln!("CONTROL {url}");
                if let Some(path) = &args.control_file {
                    write_atomically(path, &url)?;
                }
            }
            let faults = args.faults;
            serve_stdio(fixture, faults).await?;
        }
    }
    shutdown.cancel();
    Ok(())
}

/// Serve MCP over stdin/stdout until the client goes away or a signal arrives.
async fn serve_stdio(fixture: Fixture, faults: bool) -> anyhow::Result<()> {
    let handler = FixtureHandler::new(fixture);
    let serving = if faults {
        // rmcp writes into a pipe; `faults::pipe_stdout` spoils marked lines on their way out.
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        tokio::spawn(faults::pipe_stdout(theirs));
        handler.serve((tokio::io::stdin(), ours)).boxed()
    } else {
        handler.serve(rmcp::transport::stdio()).boxed()
    };
    let running = tokio::select! {
        running = serving => running,
        () = wait_for_signal() => return Ok(()),
    };
    let running = match running {
        Ok(running) => running,
        Err(error) => {
            tracing::info!(error = %error, "stdio client left before the lifecycle started");
            return Ok(());
        }
    };
    let cancel = running.cancellation_token();
    tokio::select! {
        quit = running.waiting() => tracing::info!(?quit, "stdio session ended"),
        () = wait_for_signal() => cancel.cancel(),
    }
    Ok(())
}

/// Bind `addr`, serve streamable HTTP MCP at `/mcp` in a named task, return the endpoint URL.
async fn serve_http(
    fixture: Fixture,
    addr: SocketAddr,
    keep_alive: Duration,
    shutdown: CancellationToken,
) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("bind {addr}"))?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(keep_alive);
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .disable_allowed_hosts()
        .with_cancellation_token(shutdown.child_token());
    let fixture_faults = fixture.settings().faults;
    let service =
        StreamableHttpService::new(move || Ok(FixtureHandler::new(fixture.clone())), Arc::new(sessions), config);
    let mut router = axum::Router::new().nest_service("/mcp", service);
    if fixture_faults {
        router = router.layer(axum::middleware::map_response(faults::spoil_response));
    }
    tracing::debug!(%url, "serving streamable HTTP");
    tokio::spawn(async move {
        // Without TCP_NODELAY a legacy session's SSE replies stall on Nagle meeting delayed ACK.
        let listener = axum::serve::ListenerExt::tap_io(listener, |socket| {
            let _ = socket.set_nodelay(true);
        });
        let served = axum::serve(listener, router).with_graceful_shutdown(shutdown.cancelled_owned()).await;
        if let Err(error) = served {
            tracing::error!(error = %error, "http server failed");
        }
    });
    Ok(url)
}

/// Write `contents` to `path` via a temporary file and a rename, so readers never see a torn file.
fn write_atomically(path: &Path, contents: &str) -> anyhow::Result<()> {
    let mut tmp = PathBuf::from(path);
    tmp.as_mut_os_string().push(format!(".tmp.{}", std::process::id()));
    std::fs::write(&tmp, contents).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))?;
    Ok(())
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("mcp_proxy_fixture=info,rmcp=warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).init();
}
