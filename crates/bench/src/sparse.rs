//! Scenario `sparse`: `resources/read` as real hosts send it — one read every few milliseconds
//! from one host, never back to back — so each figure is what one read costs a process that is
//! otherwise idle (wake-ups, timers, cold caches), not what a saturated loop amortises. Cells:
//! npm server-everything over HTTP read directly (2025 only: it speaks no other era); through
//! this proxy with the entry cached (`unwatched_ttl`, both eras); through the Rust gateway
//! `mcp-proxy` 0.6.0 with its resource cache on (2025 only: it refuses 2026-07-28 with -32022;
//! skipped with its reason when not installed); through npm `mcp-proxy` (no cache, in front of server-everything over stdio).
//!
//! Per cell: p50/p99 latency and the answering process's CPU per read — utime + stime from
//! `/proc/<pid>/stat` over the cell's phases, divided by its reads — in interleaved rounds.
//!
//! Invariant: reads are paced, not chained: each starts at its own tick of a fixed-period clock
//! (a late one does not make the next come sooner), and every reply is parsed (see `raw`).

use std::time::{Duration, Instant};

use tokio::time::MissedTickBehavior;

use crate::Options;
use crate::clients::Percentiles;
use crate::peers::{self, PeerProcess};
use crate::processes::{self, ProxyProcess, http_upstream};
use crate::raw::{HostEra, RawClient};
use crate::report::{Report, Unit};

/// The time from one read's start to the next's.
pub const GAP: Duration = Duration::from_millis(5);
const URI: &str = "demo://resource/dynamic/text/1";

/// One paced host against one answering process.
struct Cell {
    label: &'static str,
    era: HostEra,
    uri: String,
    pid: u32,
    client: RawClient,
    samples: Vec<Duration>,
    cpu: f64,
}

/// Everything started for the run; dropped (killed) at the end.
struct Setup {
    everything: PeerProcess,
    npm: PeerProcess,
    gateway: Result<PeerProcess, String>,
    ours: ProxyProcess,
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let mut report = Report::new("sparse");
    let setup = start().await?;
    if let Err(reason) = &setup.gateway {
        eprintln!("sparse: mcp-proxy (Rust) cells skipped: {reason}");
        report.note(format!("mcp-proxy (Rust) cells skipped: {reason}"));
    }
    let mut cells = Vec::new();
    for (label, era, url, uri, pid) in specs(&setup)? {
        let mut client = RawClient::connect(&url, era).await?;
        for _ in 0..5 {
            client.read(&uri).await.map_err(|e| e.context(format!("{label} {}", era.label())))?;
        }
        cells.push(Cell { label, era, uri, pid, client, samples: Vec::new(), cpu: 0.0 });
    }
    let (rounds, each) = if options.quick { (2, 100) } else { (3, 300) };
    for round in 0..rounds {
        eprintln!("sparse: round {}/{rounds}", round + 1);
        for cell in &mut cells {
            time_cell(cell, each).await.map_err(|e| e.context(format!("{} {}", cell.label, cell.era.label())))?;
        }
    }
    summarise(&cells, &mut report);
    report.note(format!(
        "{rounds} interleaved rounds; per round and cell {each} reads by one host, one every {} ms (paced by a fixed-period clock); raw HTTP/1.1 keep-alive client; 2025 = initialize + Mcp-Session-Id, 2026 = stateless",
        GAP.as_millis()
    ));
    report.note("ev = npm server-everything over HTTP; ours = this proxy, ev with `[upstreams.cache] unwatched_ttl = \"1h\"` (warm: hits); mcp-proxy (Rust) = crates.io mcp-proxy 0.6.0, `resource_ttl_seconds = 3600` (warm: hits); mcp-proxy (npm) = npm mcp-proxy over server-everything (stdio), no cache");
    report.note("CPU/read = utime + stime of the answering process over the cell's phases / reads: idle wake-ups between reads included");
    drop(setup);
    Ok(report)
}

async fn start() -> anyhow::Result<Setup> {
    let everything = PeerProcess::everything_http().await?;
    let npm = PeerProcess::mcp_proxy_over_everything().await?;
    let gateway = match peers::rust_gateway_binary() {
        Ok(binary) => Ok(PeerProcess::rust_gateway(binary, "ev", &everything.url).await?),
        Err(reason) => Err(reason),
    };
    let upstream = http_upstream("ev", &everything.url);
    let ours =
        ProxyProcess::start(&format!("{}\n[upstreams.cache]\nunwatched_ttl = \"1h\"\n", upstream.trim_end())).await?;
    Ok(Setup { everything, npm, gateway, ours })
}

/// A cell to connect: (label, era, url, uri, pid of the answering process).
type Spec = (&'static str, HostEra, String, String, u32);

fn specs(setup: &Setup) -> anyhow::Result<Vec<Spec>> {
    let ours = setup.ours.pid()?;
    let mut specs = vec![
        ("direct", HostEra::Y2025, setup.everything.url.clone(), URI.to_owned(), setup.everything.pid),
        ("mcp-proxy (npm)", HostEra::Y2025, setup.npm.url.clone(), URI.to_owned(), setup.npm.pid),
    ];
    for era in [HostEra::Y2025, HostEra::Y2026] {
        specs.push(("ours, hit", era, setup.ours.url.clone(), format!("ev+{URI}"), ours));
        // The Rust gateway 0.6.0 serves 2025 versions only (a 2026-07-28 request: -32022).
        if let (Ok(gateway), HostEra::Y2025) = (&setup.gateway, era) {
            specs.push(("mcp-proxy (Rust), hit", era, gateway.url.clone(), format!("ev/{URI}"), gateway.pid));
        }
    }
    Ok(specs)
}

/// One round of one cell: `each` reads, one per tick of `GAP`.
async fn time_cell(cell: &mut Cell, each: usize) -> anyhow::Result<()> {
    let mut clock = tokio::time::interval(GAP);
    clock.set_missed_tick_behavior(MissedTickBehavior::Delay);
    clock.tick().await;
    let before = processes::cpu_seconds(cell.pid)?;
    for _ in 0..each {
        clock.tick().await;
        let started = Instant::now();
        cell.client.read(&cell.uri).await?;
        cell.samples.push(started.elapsed());
    }
    cell.cpu += processes::cpu_seconds(cell.pid)? - before;
    Ok(())
}

impl Cell {
    fn cpu_per_read_us(&self) -> f64 {
        self.cpu / self.samples.len().max(1) as f64 * 1e6
    }

    fn p50_p99(&self) -> (Duration, Duration) {
        let p = Percentiles::of(self.samples.clone());
        (p.p50, p.p99)
    }
}

fn summarise(cells: &[Cell], report: &mut Report) {
    let mut table = String::from("| host era | via | p50 ms | p99 ms | CPU/read µs |\n|---|---|---:|---:|---:|\n");
    for cell in cells {
        let (p50, p99) = cell.p50_p99();
        table.push_str(&format!(
            "| {} | {} | {:.3} | {:.3} | {:.1} |\n",
            cell.era.label(),
            cell.label,
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            cell.cpu_per_read_us()
        ));
    }
    report.table = Some(table);
    let find = |label: &str, era: HostEra| cells.iter().find(|c| c.label == label && c.era == era);
    for era in [HostEra::Y2025, HostEra::Y2026] {
        let name = era.label();
        let Some(ours) = find("ours, hit", era) else { continue };
        let cpu = ours.cpu_per_read_us();
        report.add(format!("{name}: sparse, proxy CPU per hit"), cpu, Unit::Micros);
        if let Some(direct) = find("direct", HostEra::Y2025) {
            let ratio = ours.p50_p99().0.as_secs_f64() / direct.p50_p99().0.as_secs_f64().max(1e-9);
            report.add(format!("{name}: sparse, hit / direct (2025) p50"), ratio, Unit::Ratio);
        }
        if let Some(gateway) = find("mcp-proxy (Rust), hit", era) {
            let ratio = ours.p50_p99().0.as_secs_f64() / gateway.p50_p99().0.as_secs_f64().max(1e-9);
            report.add(format!("{name}: sparse, hit p50, ours / mcp-proxy (Rust)"), ratio, Unit::Ratio);
            let ratio = cpu / gateway.cpu_per_read_us().max(1e-9);
            report.add(format!("{name}: sparse, CPU per hit, ours / mcp-proxy (Rust)"), ratio, Unit::Ratio);
        }
    }
}
