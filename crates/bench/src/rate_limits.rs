//! Scenario `rate-limits`: principal B's read latency while principal A sends ten times its
//! rate limit. One proxy with `[rate_limits] reads_per_second` and two bearer principals in
//! front of the fixture (cache on, entry warm). B reads at a steady pace well under its own
//! limit, first alone, then while A's clients together attempt ten times A's limit (almost all
//! refused with 429 before any work); the figure is B's p99 loaded / unloaded (target: within
//! 20 %). A's admitted and refused counts show that A was held to its limit. Both principals'
//! hosts are raw HTTP clients (`raw`), so the load generator's own CPU stays small.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::Options;
use crate::clients::Percentiles;
use crate::processes::{Fixture, ProxyProcess, UPSTREAM_TTL_MS, http_upstream};
use crate::raw::{HostEra, RawClient};
use crate::report::{Report, Target, Unit};

const URI: &str = "fx+fx://fx/item/1";
/// A's and B's limit: reads per second (burst the same).
const LIMIT: u64 = 100;
/// B's pace: half its limit.
const B_EVERY: Duration = Duration::from_millis(20);
/// A's clients; together they attempt `10 × LIMIT` reads a second.
const A_CLIENTS: u64 = 4;
const A_TOKEN: &str = "bench-token-a";
const B_TOKEN: &str = "bench-token-b";

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let mut report = Report::new("rate-limits");
    let fixture = Fixture::spawn(&["--text-bytes", "1024", "--resources", "16", "--ttl-ms", UPSTREAM_TTL_MS]).await?;
    let config = format!(
        "[auth]\nmode = \"bearer\"\n\n[[auth.tokens]]\nprincipal = \"a\"\ntoken_env = \"BENCH_A_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"b\"\ntoken_env = \"BENCH_B_TOKEN\"\n\n\
         [rate_limits]\nreads_per_second = {LIMIT}\n\n{}",
        http_upstream("fx", &fixture.url)
    );
    let env = [("BENCH_A_TOKEN", A_TOKEN), ("BENCH_B_TOKEN", B_TOKEN)];
    let proxy = ProxyProcess::start_with_env(&config, &env).await?;
    let mut b = RawClient::connect(&proxy.url, HostEra::Y2026).await?.with_bearer(B_TOKEN);
    let mut a = Vec::new();
    for _ in 0..A_CLIENTS {
        a.push(RawClient::connect(&proxy.url, HostEra::Y2026).await?.with_bearer(A_TOKEN));
    }
    let samples = if options.quick { 150 } else { 500 };
    // Warm the cache entry.
    b.read(URI).await?;
    let unloaded = paced_reads(&mut b, samples).await?;
    let flood = Flood::start(a);
    let loaded = paced_reads(&mut b, samples).await?;
    let (admitted, refused, elapsed) = flood.stop().await;
    report.millis("B alone p50", unloaded.p50);
    report.millis("B alone p99", unloaded.p99);
    report.millis("B while A floods p50", loaded.p50);
    report.millis("B while A floods p99", loaded.p99);
    let ratio = loaded.p99.as_secs_f64() / unloaded.p99.as_secs_f64().max(1e-9);
    report.check("B p99 while A floods / alone", ratio, Unit::Ratio, Target::AtMost(1.2));
    let seconds = elapsed.as_secs_f64().max(1e-9);
    report.add("A attempts per second", (admitted + refused) as f64 / seconds, Unit::Count);
    report.add("A admitted per second", admitted as f64 / seconds, Unit::Count);
    report.add("A refused (429)", refused as f64, Unit::Count);
    report.note(format!(
        "[rate_limits] reads_per_second = {LIMIT} for both; B reads one every {B_EVERY:?} ({samples} samples per \
         phase, cache hits); A: {A_CLIENTS} clients pacing {} attempts per second in all (10× its limit)",
        10 * LIMIT
    ));
    Ok(report)
}

/// `count` reads of [`URI`], one every [`B_EVERY`]; their latencies.
async fn paced_reads(client: &mut RawClient, count: usize) -> anyhow::Result<Percentiles> {
    let mut tick = tokio::time::interval(B_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        tick.tick().await;
        let started = Instant::now();
        client.read(URI).await?;
        samples.push(started.elapsed());
    }
    Ok(Percentiles::of(samples))
}

/// A's clients, each pacing its share of `10 × LIMIT` attempts a second until stopped.
struct Flood {
    stop: Arc<AtomicBool>,
    admitted: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Flood {
    fn start(clients: Vec<RawClient>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (admitted, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let every = Duration::from_secs_f64(A_CLIENTS as f64 / (10 * LIMIT) as f64);
        let tasks = clients
            .into_iter()
            .map(|mut client| {
                let (stop, admitted, refused) = (stop.clone(), admitted.clone(), refused.clone());
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(every);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                    while !stop.load(Ordering::Relaxed) {
                        tick.tick().await;
                        match client.read(URI).await {
                            Ok(_) => admitted.fetch_add(1, Ordering::Relaxed),
                            Err(_) => refused.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                })
            })
            .collect();
        Flood { stop, admitted, refused, started: Instant::now(), tasks }
    }

    /// Stop; (admitted, refused, how long it ran).
    async fn stop(self) -> (u64, u64, Duration) {
        self.stop.store(true, Ordering::Relaxed);
        let elapsed = self.started.elapsed();
        for task in self.tasks {
            let _ = task.await;
        }
        (self.admitted.load(Ordering::Relaxed), self.refused.load(Ordering::Relaxed), elapsed)
    }
}
