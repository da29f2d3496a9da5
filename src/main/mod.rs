//! The `mcp-resource-proxy` command line: `serve`, `check`, `policy explain`, `serve-dir`,
//! `import`, `connect`, `sandbox-exec`. Logs go to stderr; stdout belongs to stdio MCP. The flags
//! are `cli.rs`'s, `serve` is `serve.rs`, the logging `logs.rs`, the one-shot commands
//! `commands.rs` and `connect.rs`; `src/main.rs` (the binary) sets the allocator and calls [`main`].
//!
//! It is a module of the library, not of the binary, so that the proxy's async code is generated
//! once: a future is compiled where it is polled, and polled from the binary crate every future
//! of `serve` was compiled a second time there (the binary took 77 s of a 474 s cold release
//! build; `cargo build --release --timings`).

use std::process::ExitCode;

use crate::config::CliOverrides;
use crate::{downstream, policy, serve_dir};
use clap::Parser;

/// The environment variable naming the config file (what `--config` names).
const CONFIG_ENV: &str = "MCP_PROXY_CONFIG";
mod cli;
mod commands;
mod connect;
mod logs;
mod serve;

use cli::{Cli, Command, PolicyCommand};
use commands::{Loaded, check, explain, import};
use logs::init_tracing;
use serve::{config_source, serve, served_as_asked};

/// EX_CONFIG from sysexits.h: the configuration is invalid.
const EXIT_CONFIG: u8 = 78;

pub fn main() -> ExitCode {
    // ring for rustls (reqwest, rmcp, `rediss://`) and jsonwebtoken, before any of them runs.
    crate::crypto::install();
    let cli = Cli::parse();
    // The launcher forks its server: it must stay one thread, so it runs before any runtime.
    if let Command::SandboxExec { lifeline, profile, command } = &cli.command {
        return crate::sandbox::sandbox_exec(*lifeline, profile.as_deref(), &command[0], &command[1..]);
    }
    if let Ok(binary) = std::env::current_exe() {
        crate::sandbox::set_launcher(binary);
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
