//! Scenario `matrix`: `resources/read` for every host era (2025 session with SSE replies;
//! 2026-07-28 stateless) × upstream kind (the rmcp fixture over HTTP; npm server-everything over
//! HTTP; server-everything over stdio, spawned by the proxy) × hit/miss, next to each HTTP
//! upstream read directly, next to npm `mcp-proxy` in front of server-everything (stdio) and next
//! to the Rust gateway `mcp-proxy` 0.6.0, resource cache on, in front of server-everything (HTTP;
//! skipped with its reason when not installed) — all in one run, in interleaved rounds, with the raw clients of `raw`. Hit and miss are also
//! measured through proxies with `server.fast_path = false` ("rmcp path"), so the fast path's
//! effect is a ratio within one run.
//!
//! Per cell: p50/p99 at concurrency 1, p50/p99 and requests per second at concurrency 8, and the
//! CPU the answering process (the proxy; the server itself when direct) used per request, from
//! `/proc/<pid>/stat` (utime + stime) over the timed phases. The load generator's own CPU per
//! request is shown too: it shares the two cores.
//!
//! Invariant: a hit cell's proxy has the entry warm before timing (every client reads first),
//! and every timed reply is parsed (see `raw`).

use std::time::{Duration, Instant};

use futures::future::try_join_all;

use crate::Options;
use crate::peers::{self, PeerProcess, everything_entry};
use crate::processes::{self, Fixture, ProxyProcess, UPSTREAM_TTL_MS, http_upstream, toml_string};
use crate::raw::{HostEra, RawClient};
use crate::report::{Report, Target, Unit};

const CONCURRENCY: usize = 8;
const FIXTURE_URI: &str = "fx://fx/item/1";
const EVERYTHING_URI: &str = "demo://resource/dynamic/text/1";

/// What answers a cell's reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Direct,
    Hit,
    Miss,
    /// The same proxies with `server.fast_path = false`: every request through rmcp.
    HitRmcp,
    MissRmcp,
    /// npm `mcp-proxy`.
    Other,
    /// The Rust gateway `mcp-proxy` 0.6.0, resource cache on (warm: hits).
    Gateway,
}

/// One timed combination.
struct Cell {
    upstream: &'static str,
    via: Via,
    era: HostEra,
    uri: String,
    pid: u32,
    clients: Vec<RawClient>,
    tally: Tally,
}

#[derive(Default)]
struct Tally {
    c1: Vec<Duration>,
    c8: Vec<Duration>,
    c8_elapsed: Duration,
    server_cpu: f64,
    bench_cpu: f64,
    requests: usize,
}

/// Everything started for the run; dropped (killed) at the end.
struct Setup {
    fixture: Fixture,
    everything: PeerProcess,
    other: PeerProcess,
    /// The Rust gateway, or why it is not measured.
    gateway: Result<PeerProcess, String>,
    hit: ProxyProcess,
    miss: ProxyProcess,
    hit_rmcp: ProxyProcess,
    miss_rmcp: ProxyProcess,
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let mut report = Report::new("matrix");
    let setup = start().await?;
    if let Err(reason) = &setup.gateway {
        eprintln!("matrix: mcp-proxy (Rust) cells skipped: {reason}");
        report.note(format!("mcp-proxy (Rust) cells skipped: {reason}"));
    }
    let mut cells = Vec::new();
    for era in [HostEra::Y2025, HostEra::Y2026] {
        for spec in specs(&setup, era)? {
            cells.push(connect(spec, era).await?);
        }
    }
    let (rounds, each, slice) = match options.quick {
        true => (2, 150, Duration::from_millis(600)),
        false => (4, 400, Duration::from_millis(1500)),
    };
    let mut paired = Paired::default();
    for round in 0..rounds {
        eprintln!("matrix: round {}/{rounds}", round + 1);
        for cell in &mut cells {
            let what = format!("{} {} {}", cell.era.label(), cell.upstream, cell.via.label());
            time_cell(cell, each, slice).await.map_err(|e| e.context(what))?;
        }
        paired.round(&mut cells, each).await?;
    }
    summarise(&cells, &mut report);
    paired.summarise(&mut report);
    report.note(format!(
        "{rounds} interleaved rounds; per round and cell {each} reads at c=1 and {} s at c={CONCURRENCY}; raw HTTP/1.1 keep-alive clients; 2025 = initialize + Mcp-Session-Id, SSE replies parsed; 2026 = stateless with protocol `_meta`",
        slice.as_secs_f64()
    ));
    report.note("upstreams: fx = the rmcp fixture over HTTP (1 KiB text, ttlMs 1 h); ev = npm server-everything over HTTP; evs = server-everything over stdio, spawned by the proxy (both give no ttlMs: kept by the hit proxies through `[upstreams.cache] unwatched_ttl = \"1h\"`, the operator's opt-in); mcp-proxy (npm) = npm mcp-proxy (pinned in .ci/install-bench-peers.sh) in front of server-everything over stdio (no cache: compare with miss); mcp-proxy (Rust) = crates.io mcp-proxy 0.6.0 in front of ev over HTTP, `resource_ttl_seconds = 3600` (warm: compare with hit)");
    report.note("rmcp path = a proxy with `server.fast_path = false` (every request through rmcp's streamable HTTP service, as before the fast path), in the same run");
    report.note(format!("miss / direct, paired: per round, {each} c=1 reads alternating one direct (2025) and one through the miss proxy, so both see the same machine load; the ratio of their p50s per round, median over the rounds (the target row); `ev miss / direct p50, c=1` compares the cells' own phases, which run at different moments of a round"));
    report.note("CPU/req = utime + stime of the answering process (the proxy, or the server when direct) over the timed phases / requests; bench CPU/req = the load generator's");
    drop(setup);
    Ok(report)
}

async fn start() -> anyhow::Result<Setup> {
    let fixture = Fixture::spawn(&["--text-bytes", "1024", "--resources", "16", "--ttl-ms", UPSTREAM_TTL_MS]).await?;
    let everything = PeerProcess::everything_http().await?;
    let other = PeerProcess::mcp_proxy_over_everything().await?;
    let gateway = match peers::rust_gateway_binary() {
        Ok(binary) => Ok(PeerProcess::rust_gateway(binary, "ev", &everything.url).await?),
        Err(reason) => Err(reason),
    };
    // server-everything gives no `ttlMs` and is not trusted to notify: its results are kept
    // only with the operator's opt-in, which the hit cells measure (an hour: no expiry inside a run).
    let opt_in = "[upstreams.cache]\nunwatched_ttl = \"1h\"\n\n";
    let stdio = format!(
        "[[upstreams]]\nname = \"evs\"\ncommand = \"node\"\nargs = [{}, \"stdio\"]\n{opt_in}",
        toml_string(&everything_entry()?)
    );
    let ev = format!("{}\n{opt_in}", http_upstream("ev", &everything.url).trim_end());
    let upstreams = format!("{}{ev}{stdio}", http_upstream("fx", &fixture.url));
    let hit = ProxyProcess::start(&upstreams).await?;
    let miss = ProxyProcess::start(&format!("{upstreams}[cache]\nenabled = false\n")).await?;
    let rmcp = "[server]\nfast_path = false\n";
    let hit_rmcp = ProxyProcess::start(&format!("{rmcp}{upstreams}")).await?;
    let miss_rmcp = ProxyProcess::start(&format!("{rmcp}{upstreams}[cache]\nenabled = false\n")).await?;
    Ok(Setup { fixture, everything, other, gateway, hit, miss, hit_rmcp, miss_rmcp })
}

/// A cell to connect: (upstream, via, url, uri, pid of the answering process).
type Spec = (&'static str, Via, String, String, u32);

/// Every cell for `era`.
fn specs(setup: &Setup, era: HostEra) -> anyhow::Result<Vec<Spec>> {
    let (hit, miss) = (setup.hit.pid()?, setup.miss.pid()?);
    let (hit_rmcp, miss_rmcp) = (setup.hit_rmcp.pid()?, setup.miss_rmcp.pid()?);
    let mut specs = vec![
        ("fx", Via::Hit, setup.hit.url.clone(), format!("fx+{FIXTURE_URI}"), hit),
        ("fx", Via::HitRmcp, setup.hit_rmcp.url.clone(), format!("fx+{FIXTURE_URI}"), hit_rmcp),
        ("fx", Via::Miss, setup.miss.url.clone(), format!("fx+{FIXTURE_URI}"), miss),
        ("ev", Via::Direct, setup.everything.url.clone(), EVERYTHING_URI.to_owned(), setup.everything.pid),
        ("ev", Via::Hit, setup.hit.url.clone(), format!("ev+{EVERYTHING_URI}"), hit),
        ("ev", Via::HitRmcp, setup.hit_rmcp.url.clone(), format!("ev+{EVERYTHING_URI}"), hit_rmcp),
        ("ev", Via::Miss, setup.miss.url.clone(), format!("ev+{EVERYTHING_URI}"), miss),
        ("ev", Via::MissRmcp, setup.miss_rmcp.url.clone(), format!("ev+{EVERYTHING_URI}"), miss_rmcp),
        ("evs", Via::Hit, setup.hit.url.clone(), format!("evs+{EVERYTHING_URI}"), hit),
        ("evs", Via::Miss, setup.miss.url.clone(), format!("evs+{EVERYTHING_URI}"), miss),
        ("evs", Via::Other, setup.other.url.clone(), EVERYTHING_URI.to_owned(), setup.other.pid),
    ];
    if let Ok(gateway) = &setup.gateway {
        specs.push(("ev", Via::Gateway, gateway.url.clone(), format!("ev/{EVERYTHING_URI}"), gateway.pid));
    }
    specs.insert(0, ("fx", Via::Direct, setup.fixture.url.clone(), FIXTURE_URI.to_owned(), setup.fixture.pid()?));
    // The fixture speaks both eras; server-everything and the Rust gateway only the 2025 one.
    if era == HostEra::Y2026 {
        specs.retain(|spec| !(spec.0 == "ev" && matches!(spec.1, Via::Direct | Via::Gateway)));
    }
    Ok(specs)
}

async fn connect((upstream, via, url, uri, pid): Spec, era: HostEra) -> anyhow::Result<Cell> {
    let clients = try_join_all((0..CONCURRENCY).map(|_| RawClient::connect(&url, era))).await?;
    let mut cell = Cell { upstream, via, era, uri, pid, clients, tally: Tally::default() };
    // Warm: fills the hit proxy's cache, node's JIT, and checks the URI reads at all.
    for client in &mut cell.clients {
        for _ in 0..5 {
            client.read(&cell.uri).await.map_err(|e| e.context(format!("{} {:?} {}", upstream, via, era.label())))?;
        }
    }
    Ok(cell)
}

/// One round of one cell: `each` reads at c=1, then `slice` at c=8.
async fn time_cell(cell: &mut Cell, each: usize, slice: Duration) -> anyhow::Result<()> {
    let me = std::process::id();
    let (server_before, bench_before) = (processes::cpu_seconds(cell.pid)?, processes::cpu_seconds(me)?);
    let uri = cell.uri.clone();
    let first = &mut cell.clients[0];
    for _ in 0..each {
        let started = Instant::now();
        first.read(&uri).await?;
        cell.tally.c1.push(started.elapsed());
    }
    let started = Instant::now();
    let until = started + slice;
    let per_client = cell.clients.iter_mut().map(|client| {
        let uri = uri.clone();
        async move {
            let mut samples = Vec::new();
            while Instant::now() < until {
                let started = Instant::now();
                client.read(&uri).await?;
                samples.push(started.elapsed());
            }
            anyhow::Ok(samples)
        }
    });
    let samples: Vec<Duration> = try_join_all(per_client).await?.into_iter().flatten().collect();
    cell.tally.c8_elapsed += started.elapsed();
    cell.tally.requests += each + samples.len();
    cell.tally.c8.extend(samples);
    cell.tally.server_cpu += processes::cpu_seconds(cell.pid)? - server_before;
    cell.tally.bench_cpu += processes::cpu_seconds(me)? - bench_before;
    Ok(())
}

/// The miss target measured robustly: direct and miss reads alternate one by one, and each
/// round gives one ratio of p50s.
#[derive(Default)]
struct Paired {
    ratios: Vec<(HostEra, f64)>,
}

impl Paired {
    async fn round(&mut self, cells: &mut [Cell], each: usize) -> anyhow::Result<()> {
        let index = |cells: &[Cell], via: Via, era: HostEra| {
            cells.iter().position(|c| c.upstream == "ev" && c.via == via && c.era == era)
        };
        let Some(direct) = index(cells, Via::Direct, HostEra::Y2025) else { return Ok(()) };
        for era in [HostEra::Y2025, HostEra::Y2026] {
            let Some(miss) = index(cells, Via::Miss, era) else { continue };
            let (direct, miss) = two(cells, direct, miss);
            let (mut d, mut m) = (Vec::with_capacity(each), Vec::with_capacity(each));
            for _ in 0..each {
                let started = Instant::now();
                direct.clients[0].read(&direct.uri).await?;
                d.push(started.elapsed());
                let started = Instant::now();
                miss.clients[0].read(&miss.uri).await?;
                m.push(started.elapsed());
            }
            self.ratios.push((era, ratio(p50_p99(&m).0, p50_p99(&d).0)));
        }
        Ok(())
    }

    fn summarise(&self, report: &mut Report) {
        for era in [HostEra::Y2025, HostEra::Y2026] {
            let mut ratios: Vec<f64> = self.ratios.iter().filter(|(e, _)| *e == era).map(|(_, r)| *r).collect();
            if ratios.is_empty() {
                continue;
            }
            ratios.sort_by(f64::total_cmp);
            let median = ratios[(ratios.len() - 1) / 2];
            let rounds: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            let name = format!("{}: ev miss / direct p50, c=1, paired (rounds: {})", era.label(), rounds.join(", "));
            report.check(name, median, Unit::Ratio, Target::AtMost(1.25));
        }
    }
}

/// Two distinct cells, both mutable.
fn two(cells: &mut [Cell], a: usize, b: usize) -> (&mut Cell, &mut Cell) {
    assert_ne!(a, b, "two distinct cells");
    if a < b {
        let (left, right) = cells.split_at_mut(b);
        (&mut left[a], &mut right[0])
    } else {
        let (left, right) = cells.split_at_mut(a);
        (&mut right[0], &mut left[b])
    }
}

impl Via {
    fn label(self) -> &'static str {
        match self {
            Via::Direct => "direct",
            Via::Hit => "proxy hit",
            Via::Miss => "proxy miss",
            Via::HitRmcp => "proxy hit, rmcp path",
            Via::MissRmcp => "proxy miss, rmcp path",
            Via::Other => "mcp-proxy (npm)",
            Via::Gateway => "mcp-proxy (Rust), cached",
        }
    }
}

impl Tally {
    fn rate(&self) -> f64 {
        self.c8.len() as f64 / self.c8_elapsed.as_secs_f64().max(1e-9)
    }

    fn per_request_us(&self, cpu: f64) -> f64 {
        cpu / self.requests.max(1) as f64 * 1e6
    }
}

fn ms(value: Duration) -> String {
    format!("{:.3}", value.as_secs_f64() * 1e3)
}

fn ratio(numerator: Duration, denominator: Duration) -> f64 {
    numerator.as_secs_f64() / denominator.as_secs_f64().max(1e-9)
}

/// The grid, and the targets as checked rows.
fn summarise(cells: &[Cell], report: &mut Report) {
    let mut table = String::from(
        "| host era | upstream | via | c=1 p50 ms | c=1 p99 ms | c=8 p50 ms | c=8 p99 ms | c=8 req/s | CPU/req µs | bench CPU/req µs |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for cell in cells {
        let (c1, c8) = (p50_p99(&cell.tally.c1), p50_p99(&cell.tally.c8));
        table.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} |\n",
            cell.era.label(),
            cell.upstream,
            cell.via.label(),
            ms(c1.0),
            ms(c1.1),
            ms(c8.0),
            ms(c8.1),
            cell.tally.rate(),
            cell.tally.per_request_us(cell.tally.server_cpu),
            cell.tally.per_request_us(cell.tally.bench_cpu),
        ));
    }
    report.table = Some(table);
    let find = |upstream: &str, via: Via, era: HostEra| {
        cells.iter().find(|c| c.upstream == upstream && c.via == via && c.era == era).map(|c| &c.tally)
    };
    let Some(direct) = find("ev", Via::Direct, HostEra::Y2025) else { return };
    let (d1, d8) = (p50_p99(&direct.c1).0, p50_p99(&direct.c8).0);
    for era in [HostEra::Y2025, HostEra::Y2026] {
        let name = era.label();
        if let Some(hit) = find("ev", Via::Hit, era) {
            let (h1, h8) = (p50_p99(&hit.c1).0, p50_p99(&hit.c8).0);
            report.check(format!("{name}: ev hit / direct p50, c=1"), ratio(h1, d1), Unit::Ratio, Target::AtMost(0.5));
            report.check(format!("{name}: ev hit / direct p50, c=8"), ratio(h8, d8), Unit::Ratio, Target::AtMost(0.5));
            let rate = hit.rate() / direct.rate().max(1e-9);
            report.check(format!("{name}: ev hit / direct req/s, c=8"), rate, Unit::Ratio, Target::AtLeast(2.0));
            let cpu = hit.per_request_us(hit.server_cpu);
            report.check(format!("{name}: proxy CPU per ev hit"), cpu, Unit::Micros, Target::AtMost(50.0));
            if let Some(gateway) = find("ev", Via::Gateway, era) {
                compare_gateway(report, name, hit, gateway);
            }
        }
        if let Some(miss) = find("ev", Via::Miss, era) {
            let m1 = p50_p99(&miss.c1).0;
            report.add(format!("{name}: ev miss / direct p50, c=1 (cells)"), ratio(m1, d1), Unit::Ratio);
        }
        if let Some(hit) = find("fx", Via::Hit, era) {
            report.check(
                format!("{name}: fx hits per second, c=8"),
                hit.rate(),
                Unit::PerSecond,
                Target::AtLeast(20_000.0),
            );
        }
    }
}

/// Our hit against the Rust gateway's cached hit: below 1 is ours ahead.
fn compare_gateway(report: &mut Report, era: &str, hit: &Tally, gateway: &Tally) {
    let (h, g) = (p50_p99(&hit.c1).0, p50_p99(&gateway.c1).0);
    report.add(format!("{era}: ev hit p50, c=1, ours / mcp-proxy (Rust)"), ratio(h, g), Unit::Ratio);
    let rate = hit.rate() / gateway.rate().max(1e-9);
    report.add(format!("{era}: ev hit req/s, c=8, ours / mcp-proxy (Rust)"), rate, Unit::Ratio);
    let cpu = hit.per_request_us(hit.server_cpu) / gateway.per_request_us(gateway.server_cpu).max(1e-9);
    report.add(format!("{era}: ev CPU per hit, ours / mcp-proxy (Rust)"), cpu, Unit::Ratio);
}

/// (p50, p99), nearest rank.
fn p50_p99(samples: &[Duration]) -> (Duration, Duration) {
    let p = crate::clients::Percentiles::of(samples.to_vec());
    (p.p50, p.p99)
}
