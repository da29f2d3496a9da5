//! Scenario `memory`: a cache bounded at `max_bytes = 16MiB` read through with a working set ten
//! times that (2,560 distinct 64 KiB items via the fixture's `fx://fx/item/{id}` template). The
//! proxy's RSS is taken before the workload (baseline) and its peak (VmHWM) after each quarter of
//! the working set: with a working bound the peak levels off at baseline + `max_bytes` + a fixed
//! overhead instead of growing with the working set.

use anyhow::bail;
use futures::future::try_join_all;
use rmcp::RoleClient;
use rmcp::service::Peer;

use crate::Options;
use crate::clients::{self, Era, Operation};
use crate::processes::{self, Fixture, ProxyProcess, UPSTREAM_TTL_MS, http_upstream};
use crate::report::{Report, Target, Unit};

const MAX_BYTES_MIB: f64 = 16.0;
const ITEM_BYTES: usize = 64 * 1024;
const WORKING_SET_MIB: usize = 160;
/// Allowed on top of `max_bytes`: buffers in flight, allocator slack, index structures.
const FIXED_OVERHEAD_MIB: f64 = 16.0;
const CLIENTS: usize = 8;
const FIRST_ID: usize = 100_000;

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    if options.target.is_some() {
        bail!("memory starts its own proxy; it does not run against --target");
    }
    let fixture =
        Fixture::spawn(&["--text-bytes", &ITEM_BYTES.to_string(), "--resources", "4", "--ttl-ms", UPSTREAM_TTL_MS])
            .await?;
    let config = format!("{}[cache]\nmax_bytes = \"16MiB\"\n", http_upstream("fx", &fixture.url));
    let proxy = ProxyProcess::start(&config).await?;
    let pid = proxy.pid()?;
    let connected = clients::connect_many(&proxy.url, Era::Auto, CLIENTS, CLIENTS).await?;
    let peers = clients::peers(&connected);
    read_ids(&peers, 0..CLIENTS).await?;
    let baseline = processes::memory_mib(pid, "VmRSS")?;
    let items = WORKING_SET_MIB * 1024 * 1024 / ITEM_BYTES;
    let mut report = Report::new("memory");
    report.add("cache max_bytes", MAX_BYTES_MIB, Unit::MiB);
    report.add("working set (distinct 64 KiB items)", WORKING_SET_MIB as f64, Unit::MiB);
    report.add("baseline RSS (connected, before the workload)", baseline, Unit::MiB);
    let quarter = items / 4;
    let mut peak = baseline;
    for part in 0..4 {
        let start = FIRST_ID + part * quarter;
        read_ids(&peers, start..start + quarter).await?;
        peak = processes::memory_mib(pid, "VmHWM")?;
        report.add(format!("peak RSS after {}% of the working set", (part + 1) * 25), peak, Unit::MiB);
    }
    report.add("RSS at the end", processes::memory_mib(pid, "VmRSS")?, Unit::MiB);
    let over = peak - baseline;
    report.check("peak − baseline", over, Unit::MiB, Target::AtMost(MAX_BYTES_MIB + FIXED_OVERHEAD_MIB));
    report.add("overhead beyond max_bytes (peak − baseline − max_bytes)", over - MAX_BYTES_MIB, Unit::MiB);
    report.note(format!(
        "target: peak − baseline ≤ max_bytes + {FIXED_OVERHEAD_MIB} MiB fixed overhead; {CLIENTS} clients read the working set once, every read a miss"
    ));
    Ok(report)
}

/// Read `fx+fx://fx/item/{id}` for every id, spread over the peers, all peers at once.
async fn read_ids(peers: &[Peer<RoleClient>], ids: std::ops::Range<usize>) -> anyhow::Result<()> {
    let ids: Vec<usize> = ids.collect();
    let per_peer = peers.iter().enumerate().map(|(index, peer)| {
        let mine: Vec<usize> = ids.iter().copied().skip(index).step_by(peers.len()).collect();
        async move {
            for id in mine {
                clients::perform(peer, &Operation::Read(format!("fx+fx://fx/item/{id}"))).await?;
            }
            anyhow::Ok(())
        }
    });
    try_join_all(per_peer).await?;
    Ok(())
}
