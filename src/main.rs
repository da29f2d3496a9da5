//! The `mcp-resource-proxy` command line: `serve`, `check`, `serve-dir`. Logs go to stderr;
//! stdout belongs to stdio MCP.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use mcp_resource_proxy::config::{CliOverrides, Config};
use mcp_resource_proxy::upstream::LinkState;
use mcp_resource_proxy::{downstream, proxy::Proxy, serve_dir};
use tokio_util::sync::CancellationToken;

/// EX_CONFIG from sysexits.h: the configuration is invalid.
const EXIT_CONFIG: u8 = 78;
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[derive(Parser)]
#[command(version, about = "One MCP endpoint in front of many upstream MCP servers' resources")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    log_format: LogFormat,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the merged endpoint (streamable HTTP at /mcp, or one host over stdio).
    Serve {
        #[arg(long, default_value = "config.toml")]
        config: PathBuf,
        /// Serve one host over stdin/stdout instead of HTTP.
        #[arg(long)]
        stdio: bool,
        /// Override `server.listen`.
        #[arg(long)]
        listen: Option<String>,
        /// Override `server.admin_listen` ("off" disables the admin listener).
        #[arg(long)]
        admin_listen: Option<String>,
    },
    /// Validate the configuration without connecting; print every problem. Exit 0 when valid, 78 otherwise.
    Check {
        #[arg(long, default_value = "config.toml")]
        config: PathBuf,
    },
    /// Serve a folder's files as MCP resources over stdio (the built-in folder server).
    ServeDir { dir: PathBuf },
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "exiting");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Check { config } => Ok(check(&config)),
        Command::ServeDir { dir } => {
            serve_dir::serve_stdio(&dir).await.map_err(|e| anyhow::anyhow!(e))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve { config, stdio, listen, admin_listen } => {
            let config = match Config::load(&config, &CliOverrides { listen, admin_listen }) {
                Ok(config) => config,
                Err(error) => {
                    eprint!("{error}");
                    return Ok(ExitCode::from(EXIT_CONFIG));
                }
            };
            serve(config, stdio).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn check(path: &std::path::Path) -> ExitCode {
    match Config::load(path, &CliOverrides::default()) {
        Ok(config) => {
            println!("{}: valid ({} upstreams)", path.display(), config.upstreams.len());
            ExitCode::SUCCESS
        }
        Err(error) => {
            print!("{}: {error}", path.display());
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

async fn serve(config: Config, stdio: bool) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let listen = config.server.listen;
    let listener = match stdio {
        true => None,
        false => Some(tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?),
    };
    let startup_wait = config.server.startup_wait;
    let proxy = Proxy::start(config, shutdown.clone());
    if !proxy.wait_ready(startup_wait).await {
        let down: Vec<_> = proxy.statuses().into_iter().filter(|s| s.state != LinkState::Up).map(|s| s.name).collect();
        tracing::warn!(?down, "serving without upstreams that are not up yet; they join when they come up");
    }
    let serving = shutdown.clone();
    let server = tokio::spawn(async move {
        match listener {
            None => downstream::serve_stdio(proxy, "local", serving).await.map_err(|e| anyhow::anyhow!(e)),
            Some(listener) => Ok(downstream::serve_http(proxy, listener, serving).await?),
        }
    });
    let mut server = std::pin::pin!(server);
    tokio::select! {
        result = &mut server => return result?,
        _ = shutdown.cancelled() => {}
    }
    match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
        Ok(result) => result?,
        Err(_) => {
            tracing::warn!("shutdown grace period over; exiting");
            Ok(())
        }
    }
}

async fn cancel_on_signal(shutdown: CancellationToken) {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("shutting down");
    shutdown.cancel();
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
