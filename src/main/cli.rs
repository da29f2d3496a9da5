//! The command line as clap reads it: the subcommands, their flags and the log format.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use super::{CONFIG_ENV, connect};

#[derive(Parser)]
#[command(version, about = "One MCP endpoint in front of many upstream MCP servers' resources")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
pub(crate) enum PolicyCommand {
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
pub(crate) enum LogFormat {
    Human,
    Json,
}
