//! The `mcp-resource-proxy` command line: `serve`, `check`, `policy explain`, `serve-dir`,
//! `import`, `connect`.
//! Logs go to stderr; stdout belongs to stdio MCP.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use mcp_resource_proxy::admin::{self, AdminState};
use mcp_resource_proxy::config::{CliOverrides, Config};
use mcp_resource_proxy::logging::{EscapedFields, WithoutPeerGone};
use mcp_resource_proxy::policy;
use mcp_resource_proxy::proxy::{ConfigSource, Proxy};
use mcp_resource_proxy::spine::Spine;
use mcp_resource_proxy::upstream::LinkState;
use mcp_resource_proxy::{downstream, serve_dir};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// mimalloc instead of glibc's allocator: a cache hit makes about a hundred small allocations,
/// and glibc's malloc and free were a quarter of its instructions (docs/benchmarks-notebook.md).
/// Built without transparent huge pages (`no_thp`) and told to return freed memory at once
/// ([`return_freed_memory_at_once`]): with its defaults the proxy's resident memory was a third
/// to twice that under glibc (a 2 MiB page for every arena touched; freed pages kept for 1 s).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its position in `mi_option_e`, mimalloc.h, which keeps
/// retired options so that the numbers never move); libmimalloc-sys names no constant for it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Purge (return to the system) freed allocator pages at once instead of after 1 s.
fn return_freed_memory_at_once() {
    // SAFETY: `mi_option_set` stores an integer in mimalloc's table of options (an atomic
    // store, safe from any thread at any time); 0 is a valid purge delay ("immediately").
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
}

/// The environment variable naming the config file (what `--config` names).
const CONFIG_ENV: &str = "MCP_PROXY_CONFIG";
#[path = "main/commands.rs"]
mod commands;
#[path = "main/connect.rs"]
mod connect;

use commands::{Loaded, check, explain, import};

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
        #[arg(long, env = CONFIG_ENV, default_value = "config.toml")]
        config: PathBuf,
        /// Serve the servers of a host's `mcpServers` file (Claude Desktop, Cursor, VS Code
        /// `mcp.json`) instead of a config file, every other setting at its default.
        #[arg(long, value_name = "FILE")]
        mcp_json: Option<PathBuf>,
        /// Serve one host over stdin/stdout instead of HTTP.
        #[arg(long)]
        stdio: bool,
        /// Override `server.listen`.
        #[arg(long)]
        listen: Option<String>,
        /// Override `server.admin_listen` ("off" disables the admin listener). With --stdio the
        /// admin listener runs only when this is given.
        #[arg(long)]
        admin_listen: Option<String>,
        /// The principal policies apply to for the stdio host.
        #[arg(long, default_value = "local", requires = "stdio")]
        principal: String,
        /// Once serving, write the bound listener addresses here as JSON (see `ready_file`).
        #[arg(long)]
        ready_file: Option<PathBuf>,
    },
    /// Validate the configuration and its policies without connecting; print every problem.
    /// Exit 0 when valid, 78 otherwise.
    Check {
        #[arg(long, env = CONFIG_ENV, default_value = "config.toml")]
        config: PathBuf,
    },
    /// Write a config from a host's `mcpServers` file (Claude Desktop, Cursor `.cursor/mcp.json`,
    /// VS Code `.vscode/mcp.json`). Secrets become `${VAR}` references; what was changed or
    /// left out is reported on stderr. Exit 0 when written, 78 when the file has problems.
    Import {
        file: PathBuf,
        /// Write the config here instead of stdout (an existing file is kept unless --force).
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Overwrite the --output file.
        #[arg(long, requires = "output")]
        force: bool,
    },
    /// Make a host use the proxy: write (or merge) its entry into the host's MCP config file,
    /// showing the change on stderr and keeping the file as it was in FILE.mcp-resource-proxy.bak.
    Connect {
        #[arg(value_enum)]
        host: connect::Host,
        /// The host's config file (default: the host's usual one; VS Code's in this folder).
        #[arg(long)]
        file: Option<PathBuf>,
        /// The server's name in the host's file.
        #[arg(long, default_value = "mcp-resource-proxy")]
        name: String,
        /// The config the host starts the proxy with (`serve --stdio --config`, made absolute).
        #[arg(long, env = CONFIG_ENV, default_value = "config.toml")]
        config: PathBuf,
        /// Connect over streamable HTTP at URL instead (Cursor, VS Code).
        #[arg(long, value_name = "URL", conflicts_with = "undo")]
        http: Option<String>,
        /// With --http: the variable holding the bearer token the host sends (`${env:VAR}`).
        #[arg(long, value_name = "VAR", requires = "http")]
        token_env: Option<String>,
        /// Show the change, write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Put the file back as it was before `connect` (from its backup), remove the backup.
        #[arg(long)]
        undo: bool,
    },
    /// Access policies.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// The launcher of one stdio upstream (started by `serve`, not by hand): starts PROGRAM
    /// under its sandbox profile, and kills everything it started when the lifeline closes.
    #[command(hide = true, name = "sandbox-exec")]
    SandboxExec {
        /// The launcher's end of the proxy's lifeline pipe.
        #[arg(long)]
        lifeline: i32,
        /// The sandbox profile as JSON (none: unrestricted).
        #[arg(long)]
        profile: Option<String>,
        /// The server and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Serve a folder's files as MCP resources over stdio (the built-in folder server).
    ServeDir {
        dir: PathBuf,
        /// Name files by absolute host path (`file:///srv/docs/a.md`) instead of relative to
        /// DIR (`file:///a.md`).
        #[arg(long)]
        absolute_uris: bool,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// For each URI: its normalised form, allowed or denied for the principal, and the policy
    /// file and pattern that decided. Exit 0 (whatever the decisions), 78 on invalid config.
    Explain {
        /// The principal to decide for (`anonymous` is every HTTP client without auth).
        #[arg(long)]
        principal: String,
        /// A group the principal belongs to (as a JWT groups claim gives it); repeatable.
        #[arg(long = "group")]
        groups: Vec<String>,
        #[arg(long, env = CONFIG_ENV, default_value = "config.toml")]
        config: PathBuf,
        /// Namespaced URIs, as a client would send them (`docs+file:///guide.md`).
        #[arg(required = true)]
        uris: Vec<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

fn main() -> ExitCode {
    return_freed_memory_at_once();
    // ring for rustls (reqwest, rmcp, `rediss://`) and jsonwebtoken, before any of them runs.
    mcp_resource_proxy::crypto::install();
    let cli = Cli::parse();
    // The launcher forks its server: it must stay one thread, so it runs before any runtime.
    if let Command::SandboxExec { lifeline, profile, command } = &cli.command {
        return mcp_resource_proxy::sandbox::sandbox_exec(*lifeline, profile.as_deref(), &command[0], &command[1..]);
    }
    if let Ok(binary) = std::env::current_exe() {
        mcp_resource_proxy::sandbox::set_launcher(binary);
    }
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
        Command::SandboxExec { .. } => unreachable!("sandbox-exec runs before the runtime starts"),
        Command::Policy { command: PolicyCommand::Explain { principal, groups, config, uris } } => {
            Ok(explain(&config, &policy::identity(&principal, &groups), &uris))
        }
        Command::ServeDir { dir, absolute_uris } => {
            let base = if absolute_uris { serve_dir::UriBase::Absolute } else { serve_dir::UriBase::Relative };
            serve_dir::serve_stdio(&dir, base).await.map_err(|e| anyhow::anyhow!(e))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Import { file, output, force } => Ok(import(&file, output.as_deref(), force)),
        Command::Connect { host, file, name, config, http, token_env, dry_run, undo } => {
            Ok(connect::connect(&connect::Request { host, file, name, config, http, token_env, dry_run, undo }))
        }
        Command::Serve { config, mcp_json, stdio, listen, admin_listen, principal, ready_file } => {
            let config = Loaded::of(config, mcp_json);
            let (config_path, listen_override, admin_override) = (config.clone(), listen.clone(), admin_listen.clone());
            if !policy::is_valid_principal(&principal) {
                eprintln!(
                    "--principal `{principal}` is not a principal name (non-empty, no spaces or glob characters, not `group:…`)"
                );
                return Ok(ExitCode::from(EXIT_CONFIG));
            }
            // A host may start several stdio proxies at once: they open the admin listener only
            // when asked to on the command line, so they never fight over its port.
            let admin_asked = admin_listen.is_some();
            let config = match config.load(&CliOverrides { listen, admin_listen }, true) {
                Ok(config) => served_as_asked(config, stdio, !admin_asked),
                Err(error) => {
                    eprint!("{error}");
                    if stdio {
                        // The host sees the problems as its requests' error, not a closed pipe.
                        let problems: Vec<String> =
                            error.problems.iter().map(|p| format!("{}: {}", p.at, p.message)).collect();
                        downstream::refuse_stdio(&problems).await?;
                    }
                    return Ok(ExitCode::from(EXIT_CONFIG));
                }
            };
            let source = config_source(
                config_path,
                CliOverrides { listen: listen_override, admin_listen: admin_override },
                stdio,
                !admin_asked,
            );
            serve(config, stdio, principal, source, ready_file).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// How the configuration is loaded again on reload: the same file, environment and command
/// line as at start (see [`served_as_asked`]).
fn config_source(loaded: Loaded, cli: CliOverrides, stdio: bool, admin_unasked: bool) -> (PathBuf, ConfigSource) {
    let path = loaded.path().to_path_buf();
    let source: ConfigSource = Arc::new(move || Ok(served_as_asked(loaded.load(&cli, false)?, stdio, admin_unasked)));
    (path, source)
}

/// A stdio proxy serves one principal (its stdio upstreams are shared unless `session` says
/// otherwise), and keeps its admin listener off unless the command line asked for one.
fn served_as_asked(mut config: Config, stdio: bool, admin_unasked: bool) -> Config {
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
async fn serve(
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
    let traces = mcp_resource_proxy::telemetry::install(&config.telemetry)?;
    let upstreams = config.upstreams.len();
    mcp_resource_proxy::listener::fds::settle(&mut config.server, upstreams);
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
        mcp_resource_proxy::ready_file::write(path, bound.0, bound.1)
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
    let limits = mcp_resource_proxy::listener::ConnectionLimits::admin(server);
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

/// rmcp's own logging, held back: per-message lines at `info`, a warning for every error
/// answer (an unknown method, a missing resource: ordinary traffic), and its transport
/// worker's errors and its HTTP client's warnings about ended streams, which the proxy reports
/// itself (once per state change, in plain words).
const QUIET_RMCP: &str =
    "rmcp=warn,rmcp::service=error,rmcp::transport::worker=off,rmcp::transport::streamable_http_client=error";

type FilterHandle = tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>;

/// Where the log level can be changed once the configuration is read.
static LOG_FILTER: std::sync::OnceLock<FilterHandle> = std::sync::OnceLock::new();

/// Logs to stderr. `RUST_LOG` wins; otherwise `server.log_level` once the config is loaded
/// (`info` until then), with rmcp's own logging held back ([`QUIET_RMCP`]).
fn init_tracing(format: LogFormat) {
    let filter = rust_log()
        .and_then(|spec| EnvFilter::try_new(spec).ok())
        .unwrap_or_else(|| EnvFilter::new(format!("info,{QUIET_RMCP}")));
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let _ = LOG_FILTER.set(handle);
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let registry = tracing_subscriber::registry().with(filter);
    let quiet = WithoutPeerGone;
    match format {
        LogFormat::Human => registry.with(fmt.fmt_fields(EscapedFields).with_filter(quiet)).init(),
        LogFormat::Json => registry.with(fmt.json().with_filter(quiet)).init(),
    }
}

fn apply_log_level(level: &str) {
    if rust_log().is_some() {
        return;
    }
    if let Some(handle) = LOG_FILTER.get() {
        let _ = handle.reload(EnvFilter::new(format!("{level},{QUIET_RMCP}")));
    }
}

/// `RUST_LOG`, when set to something (an empty value counts as unset).
fn rust_log() -> Option<String> {
    std::env::var("RUST_LOG").ok().filter(|spec| !spec.trim().is_empty())
}
