//! The `mcp-resource-proxy` command line: `serve`, `check`, `policy explain`, `serve-dir`,
//! `import`, `connect`.
//! Logs go to stderr; stdout belongs to stdio MCP. The flags are `main/cli.rs`'s, `serve` is
//! `main/serve.rs`, the logging `main/logs.rs`, the one-shot commands `main/commands.rs` and
//! `main/connect.rs`.

use std::process::ExitCode;

use clap::Parser;
use mcp_resource_proxy::config::CliOverrides;
use mcp_resource_proxy::{downstream, policy, serve_dir};

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
#[path = "main/cli.rs"]
mod cli;
#[path = "main/commands.rs"]
mod commands;
#[path = "main/connect.rs"]
mod connect;
#[path = "main/logs.rs"]
mod logs;
#[path = "main/serve.rs"]
mod serve;

use cli::{Cli, Command, PolicyCommand};
use commands::{Loaded, check, explain, import};
use logs::init_tracing;
use serve::{config_source, serve, served_as_asked};

/// EX_CONFIG from sysexits.h: the configuration is invalid.
const EXIT_CONFIG: u8 = 78;

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
