//! `proxy-bench`: the proxy's benchmark harness. It treats the proxy as a black box: it spawns the
//! release binaries `mcp-resource-proxy` and `mcp-proxy-fixture` found next to its own executable,
//! writes their configs into temporary folders, drives them with real rmcp clients over
//! streamable HTTP, and prints one Markdown table per scenario (JSON with `--json`).
//!
//! ```text
//! cargo build --release --bins
//! cargo run --release --bin proxy-bench -- <matrix|sparse|read-latency|throughput|catalog|fanout|memory|cluster|rate-limits|searches|traces|all> \
//!     [--json] [--quick] [--target URL --uri URI]
//! ```
//!
//! Modules:
//! - `processes`: spawning the fixture and the proxy, temp configs, `/proc` CPU and RSS.
//! - `clients`: connecting rmcp clients, timing operations at a concurrency, percentiles.
//! - `raw`: a raw HTTP/1.1 MCP client (2025 session with SSE replies; 2026-07-28 stateless).
//! - `peers`: server-everything and npm `mcp-proxy` from `.peers/` (`.ci/install-bench-peers.sh`), and
//!   the Rust gateway `mcp-proxy` 0.6.0 when installed by hand (`.peers/bench-cargo`).
//! - `report`: the figures of one scenario and their Markdown / JSON rendering.
//! - `matrix`, `sparse`, `read_latency`, `throughput`, `catalog`, `fanout`, `memory`, `cluster`,
//!   `rate_limits`, `searches`, `traces`: one scenario each (`rate-limits`, `searches` and `traces` are not part of `all`).
//!
//! Every figure of a scenario is measured in the same run, side by side; on a shared machine the
//! ratios, medians and p99s are what to compare, not single absolute times.

mod catalog;
mod clients;
mod cluster;
mod fanout;
mod matrix;
mod memory;
mod peers;
mod processes;
mod rate_limits;
mod raw;
mod read_latency;
mod report;
mod searches;
mod sparse;
mod throughput;
mod traces;
mod wire;

use std::process::ExitCode;

use clap::{Parser, ValueEnum};

use crate::report::Report;

#[derive(Debug, Parser)]
#[command(name = "proxy-bench", about = "Benchmarks of mcp-resource-proxy, measured side by side in one run")]
struct Args {
    /// Which scenario to run.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Print the results as JSON on stdout instead of Markdown tables.
    #[arg(long)]
    json: bool,
    /// Fewer samples and shorter durations (e.g. read-latency in well under a minute).
    #[arg(long)]
    quick: bool,
    /// Run the read scenarios against this MCP endpoint instead of a proxy started here.
    #[arg(long, value_name = "URL", requires = "uri")]
    target: Option<String>,
    /// The protocol era of the clients in the read scenarios (`auto` probes 2026-07-28 first).
    #[arg(long, value_enum, default_value_t = ClientEra::Auto)]
    era: ClientEra,
    /// With --target: the resource URI to read there.
    #[arg(long, value_name = "URI", requires = "target")]
    uri: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ClientEra {
    Auto,
    Legacy,
    Modern,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    ReadLatency,
    Throughput,
    Matrix,
    Sparse,
    Catalog,
    Fanout,
    Memory,
    /// Not part of `all`: one principal at ten times its rate limit, another's latency.
    RateLimits,
    /// Not part of `all`: one principal's bridge searches, another's read latency.
    Searches,
    /// Not part of `all`: a cache hit's cost with traces off, always on and at 1 %.
    Traces,
    /// Three replicas sharing one Redis behind haproxy, against one replica alone.
    Cluster,
    All,
}

/// What every scenario is told about the run.
#[derive(Debug, Clone)]
pub struct Options {
    pub quick: bool,
    /// The era of the clients in the read scenarios.
    pub era: clients::Era,
    /// `--target URL` and `--uri URI`: an external endpoint for the read scenarios.
    pub target: Option<External>,
}

/// An MCP endpoint the harness did not start.
#[derive(Debug, Clone)]
pub struct External {
    pub url: String,
    pub uri: String,
}

impl From<ClientEra> for clients::Era {
    fn from(era: ClientEra) -> Self {
        match era {
            ClientEra::Auto => clients::Era::Auto,
            ClientEra::Legacy => clients::Era::Legacy,
            ClientEra::Modern => clients::Era::Modern,
        }
    }
}

fn main() -> ExitCode {
    // reqwest (under rmcp's HTTP client) is built without a crypto provider: ring is the one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let options = Options {
        quick: args.quick,
        era: args.era.into(),
        target: args.target.zip(args.uri).map(|(url, uri)| External { url, uri }),
    };
    let reports = runtime.block_on(run(args.scenario, &options));
    let failed = reports.iter().any(|report| report.failed());
    match args.json {
        true => println!("{}", report::to_json(&reports)),
        false => reports.iter().for_each(|report| println!("{}", report.to_markdown())),
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

async fn run(scenario: Scenario, options: &Options) -> Vec<Report> {
    let chosen: Vec<Scenario> = match (scenario, options.target.is_some()) {
        (Scenario::All, false) => {
            vec![
                Scenario::Matrix,
                Scenario::Sparse,
                Scenario::ReadLatency,
                Scenario::Throughput,
                Scenario::Catalog,
                Scenario::Fanout,
                Scenario::Memory,
            ]
        }
        (Scenario::All, true) => vec![Scenario::ReadLatency, Scenario::Throughput],
        (one, _) => vec![one],
    };
    let mut reports = Vec::new();
    for scenario in chosen {
        let name = scenario.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default();
        eprintln!("== {name}");
        let result = match scenario {
            Scenario::ReadLatency => read_latency::run(options).await,
            Scenario::Throughput => throughput::run(options).await,
            Scenario::Matrix => matrix_on_one_thread(options).await,
            Scenario::Sparse => sparse::run(options).await,
            Scenario::Catalog => catalog::run(options).await,
            Scenario::Fanout => fanout::run(options).await,
            Scenario::Memory => memory::run(options).await,
            Scenario::RateLimits => rate_limits::run(options).await,
            Scenario::Searches => searches::run(options).await,
            Scenario::Traces => traces::run(options).await,
            Scenario::Cluster => cluster::run(options).await,
            Scenario::All => unreachable!("expanded above"),
        };
        reports.push(result.unwrap_or_else(|error| Report::failure(&name, &error)));
    }
    reports
}

/// `matrix` on a current-thread runtime of its own: the raw hosts' I/O is then woken on the
/// thread that drives them (no cross-thread wake-up per request), which lowers the load
/// generator's CPU per request. `PROXY_BENCH_MULTI_THREAD=1` keeps it on the shared
/// multi-thread runtime, to compare.
async fn matrix_on_one_thread(options: &Options) -> anyhow::Result<Report> {
    if std::env::var_os("PROXY_BENCH_MULTI_THREAD").is_some() {
        return matrix::run(options).await;
    }
    let options = options.clone();
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(matrix::run(&options))
    })
    .await?
}
