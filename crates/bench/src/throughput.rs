//! Scenario `throughput`: cache hits from 64 concurrent clients for a fixed duration (10 s, 3 s
//! with `--quick`): requests per second, p99, the proxy's CPU seconds per 1,000 requests, and
//! its peak RSS. The load generator runs on the same cores; its own CPU use is printed too, so
//! the share the proxy could have had is visible.

use std::time::{Duration, Instant};

use crate::clients::{self, Era, Operation, Percentiles};
use crate::processes::{self, Fixture, ProxyProcess, UPSTREAM_TTL_MS, http_upstream};
use crate::report::{Report, Target, Unit};
use crate::{External, Options};

const CLIENTS: usize = 64;
const PROXIED_URI: &str = "fx+fx://fx/item/1";

/// What one timed run produced.
struct Run {
    requests: usize,
    elapsed: Duration,
    percentiles: Percentiles,
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let mut report = Report::new("throughput");
    let duration = if options.quick { Duration::from_secs(3) } else { Duration::from_secs(10) };
    match &options.target {
        Some(external) => run_external(external, options.era, duration, &mut report).await?,
        None => run_local(options.era, duration, &mut report).await?,
    }
    report.note(format!("{CLIENTS} clients, each reading back to back for {} s", duration.as_secs()));
    Ok(report)
}

async fn run_local(era: Era, duration: Duration, report: &mut Report) -> anyhow::Result<()> {
    let fixture = Fixture::spawn(&["--text-bytes", "1024", "--resources", "16", "--ttl-ms", UPSTREAM_TTL_MS]).await?;
    let proxy = ProxyProcess::start(&http_upstream("fx", &fixture.url)).await?;
    let pid = proxy.pid()?;
    let clients = clients::connect_many(&proxy.url, era, CLIENTS, 16).await?;
    let peers = clients::peers(&clients);
    let operation = Operation::Read(PROXIED_URI.into());
    clients::repeat(&peers, &operation, 20).await?;
    let (proxy_cpu, bench_cpu) = (processes::cpu_seconds(pid)?, processes::cpu_seconds(std::process::id())?);
    let run = timed(&peers, &operation, duration).await?;
    let proxy_cpu = processes::cpu_seconds(pid)? - proxy_cpu;
    let bench_cpu = processes::cpu_seconds(std::process::id())? - bench_cpu;
    add_rates(report, &run);
    let per_thousand = proxy_cpu / (run.requests as f64 / 1000.0);
    report.add("proxy CPU per 1k requests", per_thousand, Unit::Seconds);
    report.add("proxy CPU share of the run", proxy_cpu / run.elapsed.as_secs_f64(), Unit::Ratio);
    report.add("load generator CPU share of the run", bench_cpu / run.elapsed.as_secs_f64(), Unit::Ratio);
    report.add("proxy peak RSS (VmHWM)", processes::memory_mib(pid, "VmHWM")?, Unit::MiB);
    report.add("cores", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64, Unit::Count);
    report.note("CPU shares are CPU seconds per wall second (1.00× = one core busy); the clients share the cores with the proxy");
    Ok(())
}

async fn run_external(external: &External, era: Era, duration: Duration, report: &mut Report) -> anyhow::Result<()> {
    let clients = clients::connect_many(&external.url, era, CLIENTS, 16).await?;
    let peers = clients::peers(&clients);
    let operation = Operation::Read(external.uri.clone());
    clients::repeat(&peers, &operation, 20).await?;
    let run = timed(&peers, &operation, duration).await?;
    add_rates(report, &run);
    report.note(format!("target = {} reading {}", external.url, external.uri));
    Ok(())
}

async fn timed(
    peers: &[rmcp::service::Peer<rmcp::RoleClient>],
    operation: &Operation,
    duration: Duration,
) -> anyhow::Result<Run> {
    let started = Instant::now();
    let samples = clients::run_for(peers, operation, duration).await?;
    let elapsed = started.elapsed();
    Ok(Run { requests: samples.len(), elapsed, percentiles: Percentiles::of(samples) })
}

fn add_rates(report: &mut Report, run: &Run) {
    let rate = run.requests as f64 / run.elapsed.as_secs_f64();
    report.check("hit reads per second", rate, Unit::PerSecond, Target::AtLeast(20_000.0));
    report.millis("p50", run.percentiles.p50);
    report.millis("p99", run.percentiles.p99);
    report.add("requests", run.requests as f64, Unit::Count);
}
