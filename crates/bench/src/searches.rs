//! Scenario `searches`: principal B's read latency while principal A's hosts run bridge
//! searches (`proxy_resources_search`) back to back. One proxy with `[bridge]` on and two bearer
//! principals in front of the fixture serving 99,000 resources (with its few others the catalog
//! stays under the 100,000-item list bound; the cache on, B's entry warm). B reads one URI back
//! to back, first alone, then while [`SEARCHERS`] hosts of A each search for text no resource
//! has (every search examines `bridge.max_search_scan` resources); the figure is B's p50 under
//! the searches / alone (target: at most 3). Both principals' hosts are raw HTTP clients
//! (`raw`), so the load generator's own CPU stays small.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::Options;
use crate::clients::Percentiles;
use crate::processes::{Fixture, ProxyProcess, UPSTREAM_TTL_MS, http_upstream};
use crate::raw::{HostEra, RawClient};
use crate::report::{Report, Target, Unit};

const URI: &str = "fx+fx://fx/item/1";
const RESOURCES: &str = "99000";
/// A's hosts searching at once.
const SEARCHERS: usize = 8;
const A_TOKEN: &str = "bench-token-a";
const B_TOKEN: &str = "bench-token-b";
/// How long the searches run before B's loaded reads start.
const WARM_UP: Duration = Duration::from_secs(2);

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let mut report = Report::new("searches");
    let fixture =
        Fixture::spawn(&["--resources", RESOURCES, "--page-size", "5000", "--ttl-ms", UPSTREAM_TTL_MS]).await?;
    let config = format!(
        "[auth]\nmode = \"bearer\"\n\n[[auth.tokens]]\nprincipal = \"a\"\ntoken_env = \"BENCH_A_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"b\"\ntoken_env = \"BENCH_B_TOKEN\"\n\n[bridge]\nenabled = true\n\n{}",
        http_upstream("fx", &fixture.url)
    );
    let env = [("BENCH_A_TOKEN", A_TOKEN), ("BENCH_B_TOKEN", B_TOKEN)];
    let proxy = ProxyProcess::start_with_env(&config, &env).await?;
    let mut b = RawClient::connect(&proxy.url, HostEra::Y2026).await?.with_bearer(B_TOKEN);
    let mut a = Vec::new();
    for _ in 0..SEARCHERS {
        a.push(RawClient::connect(&proxy.url, HostEra::Y2026).await?.with_bearer(A_TOKEN));
    }
    let samples = if options.quick { 60 } else { 200 };
    // Warm the cache entry.
    for _ in 0..20 {
        b.read(URI).await?;
    }
    let alone = reads(&mut b, samples).await?;
    let searches = Searches::start(a);
    tokio::time::sleep(WARM_UP).await;
    let loaded = reads(&mut b, samples).await?;
    let (done, cut, elapsed) = searches.stop().await?;
    report.millis("B alone p50", alone.p50);
    report.millis("B alone p99", alone.p99);
    report.millis("B under searches p50", loaded.p50);
    report.millis("B under searches p99", loaded.p99);
    let ratio = loaded.p50.as_secs_f64() / alone.p50.as_secs_f64().max(1e-9);
    report.check("B p50 under searches / alone", ratio, Unit::Ratio, Target::AtMost(3.0));
    report.add("A searches per second", done as f64 / elapsed.as_secs_f64().max(1e-9), Unit::Count);
    report.add("A searches cut (incomplete)", cut as f64, Unit::Count);
    report.note(format!(
        "{RESOURCES} resources; [bridge] on; B reads one cached URI back to back ({samples} samples per phase); \
         A: {SEARCHERS} hosts each searching back to back for text no resource has"
    ));
    Ok(report)
}

/// `count` reads of [`URI`], back to back; their latencies.
async fn reads(client: &mut RawClient, count: usize) -> anyhow::Result<Percentiles> {
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        client.read(URI).await?;
        samples.push(started.elapsed());
    }
    Ok(Percentiles::of(samples))
}

/// A's hosts, each searching back to back until stopped.
struct Searches {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    cut: Arc<AtomicU64>,
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Searches {
    fn start(clients: Vec<RawClient>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (done, cut) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let tasks = clients
            .into_iter()
            .map(|mut client| {
                let (stop, done, cut) = (stop.clone(), done.clone(), cut.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let arguments = json!({ "query": "no-such-text" });
                        let answer = client.call_tool("proxy_resources_search", arguments).await?;
                        let content = &answer["result"]["structuredContent"];
                        anyhow::ensure!(content.is_object(), "a search failed: {answer}");
                        done.fetch_add(1, Ordering::Relaxed);
                        if content["incomplete"] == json!(true) {
                            cut.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        Searches { stop, done, cut, started: Instant::now(), tasks }
    }

    /// Stop; (searches done, of them cut, how long they ran).
    async fn stop(self) -> anyhow::Result<(u64, u64, Duration)> {
        self.stop.store(true, Ordering::Relaxed);
        let elapsed = self.started.elapsed();
        for task in self.tasks {
            task.await??;
        }
        Ok((self.done.load(Ordering::Relaxed), self.cut.load(Ordering::Relaxed), elapsed))
    }
}
