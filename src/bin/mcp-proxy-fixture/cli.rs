//! The fixture's command line: clap parses it into [`Args`], and [`Args::settings`] turns it into
//! the typed [`Settings`] the rest of the fixture reads. Nothing here does IO.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Parser, ValueEnum};
use rmcp::model::CacheScope;

/// A scriptable upstream MCP server for the proxy's integration tests and benchmarks.
///
/// Transport: stdio by default; `--http ADDR` serves streamable HTTP at `/mcp` instead and prints
/// `LISTENING http://HOST:PORT/mcp` on stdout. With stdio, `--control ADDR` additionally serves the
/// same state over HTTP (URL written to `--control-file` and printed as `CONTROL <url>` on stderr).
#[derive(Debug, Parser)]
#[command(name = "mcp-proxy-fixture", version)]
pub struct Args {
    /// Protocol era served: legacy (<= 2025-11-25, no server/discover), modern (2026-07-28 only), both.
    #[arg(long, value_enum, default_value_t = Era::Both)]
    pub era: Era,
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio.
    #[arg(long, value_name = "ADDR", conflicts_with = "control")]
    pub http: Option<SocketAddr>,
    /// With stdio: also serve the same state over streamable HTTP at ADDR.
    #[arg(long, value_name = "ADDR")]
    pub control: Option<SocketAddr>,
    /// With --control: write the control URL into PATH (atomically) once listening.
    #[arg(long, value_name = "PATH", requires = "control")]
    pub control_file: Option<PathBuf>,
    /// URI authority: resources are fx://P/...
    #[arg(long, value_name = "P", default_value = "fx")]
    pub prefix: String,
    /// Number of listed items fx://P/item/0..N.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub resources: u64,
    /// Page size of resources/list and resources/templates/list.
    #[arg(long, value_name = "K", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    pub page_size: u64,
    /// Do not advertise (or accept) resource subscriptions.
    #[arg(long)]
    pub no_subscribe: bool,
    /// Refuse `resources/subscribe` (an error reply) for URIs containing TEXT, and leave them
    /// out of `subscriptions/listen` acknowledgements; other URIs subscribe as usual.
    #[arg(long, value_name = "TEXT")]
    pub refuse_subscribe: Option<String>,
    /// Sleep this long inside every resources/read (also settable with the set_read_delay tool).
    #[arg(long, value_name = "D", default_value_t = 0)]
    pub read_delay_ms: u64,
    /// Pad item texts with '.' up to B bytes.
    #[arg(long, value_name = "B")]
    pub text_bytes: Option<usize>,
    /// ttlMs carried by list and read results.
    #[arg(long, value_name = "T")]
    pub ttl_ms: Option<u64>,
    /// cacheScope carried by list and read results.
    #[arg(long, value_enum)]
    pub scope: Option<Scope>,
    /// Also list a resource whose uri has no scheme: `no-scheme/item`.
    #[arg(long)]
    pub bad_uri: bool,
    /// Resolve reads on the URI without its query and fragment (as servers that route on the
    /// parsed URL's path do); contents still carry the URI as asked.
    #[arg(long)]
    pub lenient_uris: bool,
    /// Serve hostile replies: reads of fx://P/fault/{invalid_utf8,malformed,wrong_id,hang}.
    #[arg(long)]
    pub faults: bool,
    /// List fx://P/multi twice.
    #[arg(long)]
    pub duplicate_uris: bool,
    /// Idle time after which a legacy HTTP session is dropped.
    #[arg(long, value_name = "MS", default_value_t = 3_600_000)]
    pub session_keep_alive_ms: u64,
}

/// Which protocol revisions the fixture answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Era {
    Legacy,
    Modern,
    Both,
}

/// `cacheScope` on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scope {
    Public,
    Private,
}

/// What the catalog and the handler need to know, typed.
#[derive(Debug, Clone)]
pub struct Settings {
    pub era: Era,
    pub prefix: String,
    pub initial_items: u64,
    pub page_size: usize,
    pub subscribe: bool,
    pub refuse_subscribe: Option<String>,
    pub read_delay: Duration,
    pub text_bytes: Option<usize>,
    pub ttl_ms: Option<u64>,
    pub scope: Option<CacheScope>,
    pub bad_uri: bool,
    pub lenient_uris: bool,
    pub faults: bool,
    pub duplicate_uris: bool,
}

impl Settings {
    /// Is a subscription to `uri` refused?
    pub fn refuses(&self, uri: &str) -> bool {
        self.refuse_subscribe.as_deref().is_some_and(|text| uri.contains(text))
    }
}

impl Args {
    pub fn settings(&self) -> Settings {
        Settings {
            era: self.era,
            prefix: self.prefix.clone(),
            initial_items: self.resources,
            page_size: usize::try_from(self.page_size).unwrap_or(usize::MAX),
            subscribe: !self.no_subscribe,
            refuse_subscribe: self.refuse_subscribe.clone(),
            read_delay: Duration::from_millis(self.read_delay_ms),
            text_bytes: self.text_bytes,
            ttl_ms: self.ttl_ms,
            scope: self.scope.map(|scope| match scope {
                Scope::Public => CacheScope::Public,
                Scope::Private => CacheScope::Private,
            }),
            bad_uri: self.bad_uri,
            lenient_uris: self.lenient_uris,
            faults: self.faults,
            duplicate_uris: self.duplicate_uris,
        }
    }

    pub fn session_keep_alive(&self) -> Duration {
        Duration::from_millis(self.session_keep_alive_ms)
    }
}
