//! Scenario `read-latency`: `resources/read` of a 1 KiB text resource at concurrency 1 and 32,
//! direct to the fixture, through a proxy with the cache off (the miss path), and through a
//! proxy with the cache on (a hit), next to the proxy's cheapest requests (`templates/list`
//! answered from its catalog, and a read of a URI no upstream has). The paths are measured in
//! interleaved rounds so that noise on the shared machine falls on all of them alike.

use std::collections::BTreeMap;
use std::time::Duration;

use rmcp::{RoleClient, service::Peer};

use crate::clients::{self, Client, Era, Operation, Percentiles};
use crate::processes::{Fixture, ProxyProcess, UPSTREAM_TTL_MS, http_upstream};
use crate::report::{Report, Target, Unit};
use crate::{External, Options};

const CONCURRENCIES: [usize; 2] = [1, 32];
const DIRECT_URI: &str = "fx://fx/item/1";
const PROXIED_URI: &str = "fx+fx://fx/item/1";
/// A URI in a namespace no upstream has: the proxy answers it without asking an upstream.
const UNKNOWN_URI: &str = "nowhere+fx://fx/item/1";

/// One way of reaching a resource, timed in every round.
struct Path {
    label: &'static str,
    peers: Vec<Peer<RoleClient>>,
    operation: Operation,
}

/// Everything started for a local run.
struct Setup {
    fixture: Fixture,
    miss: ProxyProcess,
    hit: ProxyProcess,
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let mut report = Report::new("read-latency");
    match &options.target {
        Some(external) => run_external(external, options, &mut report).await?,
        None => run_local(options, &mut report).await?,
    }
    Ok(report)
}

async fn run_local(options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let setup = start().await?;
    let side = clients::connect_with(&setup.fixture.url, Era::Auto, Default::default()).await?;
    for concurrency in CONCURRENCIES {
        let direct = clients::connect_many(&setup.fixture.url, options.era, concurrency, 32).await?;
        let miss = clients::connect_many(&setup.miss.url, options.era, concurrency, 32).await?;
        let hit = clients::connect_many(&setup.hit.url, options.era, concurrency, 32).await?;
        let paths = [
            path("direct", &direct, Operation::Read(DIRECT_URI.into())),
            path("miss", &miss, Operation::Read(PROXIED_URI.into())),
            path("hit", &hit, Operation::Read(PROXIED_URI.into())),
            path("no-op templates/list", &hit, Operation::ListTemplates),
            path("no-op unknown URI", &hit, Operation::ReadUnknown(UNKNOWN_URI.into())),
        ];
        warm_up(&paths).await?;
        let reads_before = upstream_reads(&side).await?;
        let samples = measure(&paths, options.quick, concurrency).await?;
        let upstream_during = upstream_reads(&side).await?.saturating_sub(reads_before);
        let through_fixture = (samples["direct"].count + samples["miss"].count) as u64;
        add_local_rows(report, concurrency, &samples);
        report.check(
            format!("c={concurrency} upstream reads while timing hits"),
            upstream_during.saturating_sub(through_fixture) as f64,
            Unit::Count,
            Target::AtMost(0.0),
        );
    }
    report.note("direct = the fixture over streamable HTTP; miss = a proxy with `[cache] enabled = false`; hit = a proxy with the cache on, entry warm; all in front of one fixture, 1 KiB text, `ttlMs` 1 h");
    report.note("cheapest = the lower p50 of the proxy's `resources/templates/list` (answered from its catalog) and a read of a URI in a namespace no upstream has");
    drop(setup);
    Ok(())
}

async fn run_external(external: &External, options: &Options, report: &mut Report) -> anyhow::Result<()> {
    for concurrency in CONCURRENCIES {
        let target = clients::connect_many(&external.url, options.era, concurrency, 32).await?;
        let paths = [
            path("target read", &target, Operation::Read(external.uri.clone())),
            path("target templates/list", &target, Operation::ListTemplates),
        ];
        warm_up(&paths).await?;
        let samples = measure(&paths, options.quick, concurrency).await?;
        for (label, percentiles) in &samples {
            report.millis(format!("c={concurrency} {label} p50"), percentiles.p50);
            report.millis(format!("c={concurrency} {label} p99"), percentiles.p99);
        }
        let ratio = ratio(samples["target read"].p50, samples["target templates/list"].p50);
        report.add(format!("c={concurrency} read / templates/list p50"), ratio, Unit::Ratio);
    }
    report.note(format!("target = {} reading {}", external.url, external.uri));
    Ok(())
}

async fn start() -> anyhow::Result<Setup> {
    let fixture = Fixture::spawn(&["--text-bytes", "1024", "--resources", "16", "--ttl-ms", UPSTREAM_TTL_MS]).await?;
    let upstream = http_upstream("fx", &fixture.url);
    let miss = ProxyProcess::start(&format!("{upstream}[cache]\nenabled = false\n")).await?;
    let hit = ProxyProcess::start(&upstream).await?;
    Ok(Setup { fixture, miss, hit })
}

fn path(label: &'static str, clients: &[Client], operation: Operation) -> Path {
    Path { label, peers: clients::peers(clients), operation }
}

async fn warm_up(paths: &[Path]) -> anyhow::Result<()> {
    for path in paths {
        clients::repeat(&path.peers, &path.operation, 10).await?;
    }
    Ok(())
}

/// Time every path in interleaved rounds.
async fn measure(
    paths: &[Path],
    quick: bool,
    concurrency: usize,
) -> anyhow::Result<BTreeMap<&'static str, Percentiles>> {
    let (rounds, each) = match (quick, concurrency) {
        (false, 1) => (5, 200),
        (true, 1) => (2, 60),
        (false, _) => (5, 25),
        (true, _) => (2, 8),
    };
    let mut samples: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    for _ in 0..rounds {
        for path in paths {
            let timed = clients::repeat(&path.peers, &path.operation, each).await?;
            samples.entry(path.label).or_default().extend(timed);
        }
    }
    Ok(samples.into_iter().map(|(label, timed)| (label, Percentiles::of(timed))).collect())
}

fn add_local_rows(report: &mut Report, concurrency: usize, samples: &BTreeMap<&'static str, Percentiles>) {
    let c = concurrency;
    for label in ["direct", "miss", "hit", "no-op templates/list", "no-op unknown URI"] {
        report.millis(format!("c={c} {label} p50"), samples[label].p50);
        report.millis(format!("c={c} {label} p99"), samples[label].p99);
    }
    let (direct, miss, hit) = (samples["direct"], samples["miss"], samples["hit"]);
    let cheapest = samples["no-op templates/list"].p50.min(samples["no-op unknown URI"].p50);
    report.check(format!("c={c} miss / direct p50"), ratio(miss.p50, direct.p50), Unit::Ratio, Target::AtMost(1.10));
    report.add(format!("c={c} miss / direct p99"), ratio(miss.p99, direct.p99), Unit::Ratio);
    report.check(format!("c={c} hit / direct p50"), ratio(hit.p50, direct.p50), Unit::Ratio, Target::AtMost(0.5));
    report.add(format!("c={c} hit / direct p99"), ratio(hit.p99, direct.p99), Unit::Ratio);
    report.check(format!("c={c} hit / cheapest p50"), ratio(hit.p50, cheapest), Unit::Ratio, Target::AtMost(1.5));
}

fn ratio(numerator: Duration, denominator: Duration) -> f64 {
    numerator.as_secs_f64() / denominator.as_secs_f64().max(1e-9)
}

/// How many reads of the timed URI the fixture has answered.
async fn upstream_reads(side: &Client) -> anyhow::Result<u64> {
    let stats = clients::fixture_stats(side).await?;
    Ok(stats["reads_by_uri"][DIRECT_URI].as_u64().unwrap_or(0))
}
