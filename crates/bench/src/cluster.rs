//! Scenario `cluster`: the shared read cache of three replicas behind haproxy (round-robin)
//! sharing one `redis-server`, against one replica alone (no `[cluster]`) behind the same
//! haproxy configuration (so the balancer's hop is not counted as the cluster's cost) and
//! reached directly, all in front of one fixture (1 KiB texts, `ttlMs` 1 h). Figures: hit and
//! miss latency at concurrency 1 (a miss is the first read of a URI anywhere), hit throughput
//! from 64 clients, a read of a per-principal stdio upstream from the replica that holds the
//! principal's session against one from a replica that forwards it there, and the upstream reads
//! that 3 replicas × 20 hosts reading the same 100 URIs cost with the shared tier, against the
//! 300 that three unshared replicas would make; then failover: a host reading back to back
//! through the balancer while one replica is killed (`kill -9`), once per era, and the time from
//! the kill to the host's next successful read (with the requests that failed and the slowest one
//! begun in the two seconds after it). Needs Debian's `redis-server` and `haproxy`
//! (`.ci/install-cluster.sh`).

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::future::try_join_all;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::Options;
use crate::clients::{self, Era, Operation, Percentiles};
use crate::processes::{self, Fixture, ProxyProcess, TempDir, UPSTREAM_TTL_MS, http_upstream};
use crate::report::{Report, Unit};

const SECRET_ENV: &str = "PROXY_BENCH_CLUSTER_SECRET";
const SECRET: &str = "proxy-bench-cluster-secret-0123456789abcdef";
const REPLICAS: usize = 3;
const HOT_URI: &str = "fx+fx://fx/item/0";
/// A resource of the per-principal stdio upstream `st` (never cached: each read reaches it).
const STDIO_URI: &str = "st+fx://fx/item/0";

/// Everything started: killed on drop.
struct Setup {
    fixture: Fixture,
    alone: ProxyProcess,
    /// `alone` behind the same haproxy configuration as the replicas.
    alone_balanced: Balancer,
    replicas: Vec<ProxyProcess>,
    balancer: Balancer,
    _redis: Child,
    _dir: TempDir,
}

struct Balancer {
    url: String,
    _child: Child,
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let mut report = Report::new("cluster");
    let mut setup = start().await?;
    let side = clients::connect_with(&setup.fixture.url, Era::Auto, Default::default()).await?;
    let ways = [
        ("alone", &setup.alone.url),
        ("alone via haproxy", &setup.alone_balanced.url),
        ("cluster via haproxy", &setup.balancer.url),
    ];
    let mut hosts = Vec::new();
    for (_, url) in ways {
        hosts.push(clients::connect_many(url, Era::Modern, 1, 1).await?);
    }
    let peers: Vec<_> = hosts.iter().map(|host| clients::peers(host)).collect();

    // Misses: the first read of a URI anywhere (each way reads items of its own, once each).
    let misses = if options.quick { 40 } else { 200 };
    let mut miss = vec![Vec::new(); ways.len()];
    for index in 0..misses {
        for (way, peer) in peers.iter().enumerate() {
            let uri = format!("fx+fx://fx/item/{}", 1000 * (way + 1) + index);
            miss[way].push(timed_read(&peer[0], &uri).await?);
        }
    }
    // Hits: one URI, warm everywhere, interleaved rounds.
    let operation = Operation::Read(HOT_URI.into());
    for peer in &peers {
        clients::repeat(peer, &operation, 20).await?;
    }
    let (rounds, each) = if options.quick { (2, 100) } else { (5, 400) };
    let mut hit = vec![Vec::new(); ways.len()];
    for _ in 0..rounds {
        for (way, peer) in peers.iter().enumerate() {
            hit[way].extend(clients::repeat(peer, &operation, each).await?);
        }
    }
    for (what, samples) in [("miss", miss), ("hit", hit)] {
        for ((label, _), samples) in ways.iter().zip(samples) {
            let percentiles = Percentiles::of(samples);
            report.millis(format!("c=1 {what} p50, {label}"), percentiles.p50);
            report.millis(format!("c=1 {what} p99, {label}"), percentiles.p99);
        }
    }
    owned_elsewhere(&setup, options, &mut report).await?;
    throughput(&setup, options, &mut report).await?;
    reads_saved(&setup, &side, &mut report).await?;
    failover(&mut setup, &mut report).await?;
    report.note("alone = one proxy, no [cluster], reached directly and behind haproxy (the same configuration as the replicas'); cluster = 3 replicas with [cluster] behind haproxy (round-robin), one redis-server; one fixture behind all, 1 KiB texts, ttlMs 1 h");
    report.note("per-principal stdio: the replicas also serve `st`, the fixture over stdio with session = \"per-principal\"; its reads are never cached, so each is a miss on the principal's session: from the replica holding it (owned here) and from another replica, which forwards it there (owned elsewhere)");
    report.note("failover: a host reads the hot URI back to back through the balancer; one replica is killed (SIGKILL) mid-run, replica 0 for the 2025 session, replica 1 for the 2026-07-28 host; haproxy has no health check here and sends a request whose connection is refused to another replica (`retries 3`, `option redispatch 1`, as deploy/haproxy.cfg)");
    report.note("a cluster read asks Redis for the URI's version (one round trip, one Lua script) before serving its local copy; a miss is two: that script also claims the load, then the fill lets go of it");
    Ok(report)
}

async fn timed_read(peer: &rmcp::service::Peer<rmcp::RoleClient>, uri: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    clients::perform(peer, &Operation::Read(uri.into())).await?;
    Ok(started.elapsed())
}

/// Reads of the per-principal stdio upstream `st` straight from each replica: the one holding
/// the (one, anonymous) principal's session, found as the replica with one child more than the
/// others, against another one, which forwards each read there. Interleaved, one at a time.
async fn owned_elsewhere(setup: &Setup, options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let first = clients::connect_with(&setup.replicas[0].url, Era::Modern, Default::default()).await?;
    clients::perform(first.peer(), &Operation::Read(STDIO_URI.into())).await?;
    // Every replica runs `st`'s shared child (for its lists); the owner also runs the session's.
    let mut children = Vec::new();
    for replica in &setup.replicas {
        children.push(processes::children(replica.pid()?)?.len());
    }
    let most = children.iter().copied().max().unwrap_or_default();
    let owners: Vec<usize> = (0..REPLICAS).filter(|&index| children[index] == most).collect();
    let [owner] = owners[..] else { anyhow::bail!("children per replica {children:?}: no one owner") };
    let other = (owner + 1) % REPLICAS;
    let here = clients::connect_with(&setup.replicas[owner].url, Era::Modern, Default::default()).await?;
    let there = clients::connect_with(&setup.replicas[other].url, Era::Modern, Default::default()).await?;
    let reads = if options.quick { 100 } else { 400 };
    let (mut owned_here, mut owned_there) = (Vec::new(), Vec::new());
    let served_before = served(&setup.replicas[owner]).await?;
    for _ in 0..reads {
        owned_here.push(timed_read(here.peer(), STDIO_URI).await?);
        owned_there.push(timed_read(there.peer(), STDIO_URI).await?);
    }
    // Each read from the other replica crossed to the owner (its session endpoint ran it).
    let crossed = served(&setup.replicas[owner]).await? - served_before;
    anyhow::ensure!(
        crossed >= reads as f64,
        "{crossed} of {reads} reads from replica {other} were served by the owner"
    );
    report.add("per-principal stdio reads from another replica that the owner served", crossed, Unit::Count);
    for (label, samples) in [("owned here", owned_here), ("owned elsewhere", owned_there)] {
        let percentiles = Percentiles::of(samples);
        report.millis(format!("c=1 per-principal stdio read p50, {label}"), percentiles.p50);
        report.millis(format!("c=1 per-principal stdio read p99, {label}"), percentiles.p99);
    }
    Ok(())
}

/// 64 clients reading the hot URI back to back: alone, then through the balancer.
async fn throughput(setup: &Setup, options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let duration = if options.quick { Duration::from_secs(3) } else { Duration::from_secs(8) };
    let operation = Operation::Read(HOT_URI.into());
    let ways = [
        ("alone", &setup.alone.url),
        ("alone via haproxy", &setup.alone_balanced.url),
        ("cluster via haproxy", &setup.balancer.url),
    ];
    for (label, url) in ways {
        let clients = clients::connect_many(url, Era::Modern, 64, 16).await?;
        let peers = clients::peers(&clients);
        clients::repeat(&peers, &operation, 5).await?;
        let started = Instant::now();
        let samples = clients::run_for(&peers, &operation, duration).await?;
        let rate = samples.len() as f64 / started.elapsed().as_secs_f64();
        report.add(format!("c=64 {label} hit reads per second"), rate, Unit::PerSecond);
        report.millis(format!("c=64 {label} hit p99"), Percentiles::of(samples).p99);
    }
    Ok(())
}

/// 20 hosts through the balancer read items 100..199, all at once: the upstream reads it cost.
async fn reads_saved(setup: &Setup, side: &clients::Client, report: &mut Report) -> anyhow::Result<()> {
    let before = upstream_reads(side).await?;
    let hosts = clients::connect_many(&setup.balancer.url, Era::Modern, 20, 20).await?;
    let peers = clients::peers(&hosts);
    try_join_all(peers.iter().map(|peer| async move {
        for id in 100..200 {
            clients::perform(peer, &Operation::Read(format!("fx+fx://fx/item/{id}"))).await?;
        }
        anyhow::Ok(())
    }))
    .await?;
    let upstream = upstream_reads(side).await? - before;
    report.add("20 hosts x 100 URIs: upstream reads", upstream as f64, Unit::Count);
    report.add("upstream reads saved vs 3 unshared replicas (300)", 1.0 - upstream as f64 / 300.0, Unit::Ratio);
    Ok(())
}

/// How long the host behind the balancer goes without an answer when a replica dies.
async fn failover(setup: &mut Setup, report: &mut Report) -> anyhow::Result<()> {
    const AFTER: Duration = Duration::from_secs(2);
    for (victim, era, label) in [(0, Era::Legacy, "2025"), (1, Era::Modern, "2026-07-28")] {
        let host = clients::connect_with(&setup.balancer.url, era, Default::default()).await?;
        let peer = host.peer().clone();
        let operation = Operation::Read(HOT_URI.into());
        clients::perform(&peer, &operation).await?;
        let killed = tokio::sync::watch::channel(None::<Instant>);
        let (tell, heard) = killed;
        let reader = tokio::spawn(async move {
            // (began, ended, answered) for every read begun until AFTER past the kill.
            let mut reads = Vec::new();
            loop {
                let kill = *heard.borrow();
                let began = Instant::now();
                if kill.is_some_and(|at| began > at + AFTER) {
                    return reads;
                }
                let answered = clients::perform(&peer, &operation).await.is_ok();
                reads.push((began, Instant::now(), answered));
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let at = Instant::now();
        setup.replicas[victim].kill()?;
        tell.send_replace(Some(at));
        let reads = reader.await?;
        let next = reads.iter().find(|(_, ended, answered)| *answered && *ended > at).map(|(_, ended, _)| *ended - at);
        let failed = reads.iter().filter(|(_, _, answered)| !answered).count();
        let slowest = reads.iter().filter(|(began, ..)| *began >= at).map(|(began, ended, _)| *ended - *began).max();
        let next = next.context("no read succeeded after the kill")?;
        report.millis(format!("failover {label}: kill to the next successful read"), next);
        report.add(format!("failover {label}: failed reads in the 2 s after the kill"), failed as f64, Unit::Count);
        report.millis(
            format!("failover {label}: slowest read begun in the 2 s after the kill"),
            slowest.unwrap_or_default(),
        );
    }
    Ok(())
}

async fn upstream_reads(side: &clients::Client) -> anyhow::Result<u64> {
    let stats = clients::fixture_stats(side.peer()).await?;
    let by_uri = stats["reads_by_uri"].as_object().cloned().unwrap_or_default();
    Ok(by_uri.values().filter_map(|n| n.as_u64()).sum())
}

async fn start() -> anyhow::Result<Setup> {
    let dir = TempDir::new()?;
    let fixture = Fixture::spawn(&["--text-bytes", "1024", "--resources", "3000", "--ttl-ms", UPSTREAM_TTL_MS]).await?;
    let upstream = http_upstream("fx", &fixture.url);
    let alone = ProxyProcess::start(&upstream).await?;
    let stdio = format!(
        "[[upstreams]]\nname = \"st\"\ncommand = {}\nargs = [\"--text-bytes\", \"1024\"]\nsession = \"per-principal\"\n\n",
        processes::fixture_command_toml()?
    );
    let redis_port = free_port()?;
    let redis = Command::new("redis-server")
        .args(["--port", &redis_port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("redis-server (install it with .ci/install-cluster.sh)")?;
    wait_redis(redis_port).await?;
    let mut replicas = Vec::new();
    for index in 0..REPLICAS {
        let config = format!(
            "{upstream}{stdio}[cluster]\nredis_url = \"redis://127.0.0.1:{redis_port}/0\"\nsecret_env = \"{SECRET_ENV}\"\nreplica_id = \"bench-{index}\"\n"
        );
        replicas.push(ProxyProcess::start_with_admin(&config, &[(SECRET_ENV, SECRET)]).await?);
    }
    wait_all_see(&replicas).await?;
    let alone_balanced = balancer(&dir, "alone", std::slice::from_ref(&alone)).await?;
    let balancer = balancer(&dir, "replicas", &replicas).await?;
    Ok(Setup { fixture, alone, alone_balanced, replicas, balancer, _redis: redis, _dir: dir })
}

/// Until each replica's `/status` lists every replica: before then a replica may take itself
/// for the owner of a session another one owns.
async fn wait_all_see(replicas: &[ProxyProcess]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    for replica in replicas {
        loop {
            let status: serde_json::Value = serde_json::from_str(&replica.admin_get("/status").await?)?;
            if status["cluster"]["replicas"].as_array().is_some_and(|seen| seen.len() == replicas.len()) {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "the replicas did not see each other in time: {status}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

/// `mcp_proxy_cluster_forwards_total{outcome="served"}` of `replica`: requests of other
/// replicas it ran on a session it owns.
async fn served(replica: &ProxyProcess) -> anyhow::Result<f64> {
    let metrics = replica.admin_get("/metrics").await?;
    let needle = "mcp_proxy_cluster_forwards_total{outcome=\"served\"} ";
    Ok(metrics.lines().find_map(|line| line.strip_prefix(needle)).map_or(Ok(0.0), str::parse)?)
}

/// haproxy, round-robin, no health checks (as in a bench nothing is taken out of service); a
/// request whose connection is refused goes to another replica.
async fn balancer(dir: &TempDir, name: &str, replicas: &[ProxyProcess]) -> anyhow::Result<Balancer> {
    let port = free_port()?;
    let mut servers = String::new();
    for (index, replica) in replicas.iter().enumerate() {
        let address = replica.url.trim_start_matches("http://").trim_end_matches("/mcp");
        servers.push_str(&format!("  server replica-{index} {address}\n"));
    }
    let config = format!(
        "global\n  maxconn 4096\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 120s\n  timeout server 120s\n\
         frontend mcp\n  bind 127.0.0.1:{port}\n  default_backend replicas\n\
         backend replicas\n  balance roundrobin\n  retries 3\n  option redispatch 1\n{servers}"
    );
    let path = dir.path.join(format!("haproxy-{name}.cfg"));
    std::fs::write(&path, config)?;
    let child = Command::new("haproxy")
        .arg("-f")
        .arg(&path)
        .arg("-db")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("haproxy (install it with .ci/install-cluster.sh)")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        anyhow::ensure!(Instant::now() < deadline, "haproxy did not listen in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Balancer { url: format!("http://127.0.0.1:{port}/mcp"), _child: child })
}

async fn wait_redis(port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            let mut answer = [0u8; 7];
            if stream.write_all(b"PING\r\n").await.is_ok() && stream.read_exact(&mut answer).await.is_ok() {
                return Ok(());
            }
        }
        anyhow::ensure!(Instant::now() < deadline, "redis-server did not answer in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
