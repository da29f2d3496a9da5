//! Scenario `fanout`: 1,000 legacy sessions that subscribed and 1,000 2026-07-28 `listen`
//! streams, all on one URI through the proxy; the fixture `touch`es it and we time how long until
//! the last host has the `updated` (and the median host), over repeats. Every host lives in this
//! process on a multi-thread runtime; they connect in batches.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::future::try_join_all;
use rmcp::model::{ServerNotification, SubscribeRequestParams, SubscriptionFilter};
use rmcp::service::Subscription;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::Options;
use crate::clients::{self, Client, Era, Percentiles, UpdateRecorder};
use crate::processes::{self, Fixture, ProxyProcess, http_upstream};
use crate::report::{Report, Target, Unit};

const UPSTREAM_URI: &str = "fx://fx/item/1";
const PROXIED_URI: &str = "fx+fx://fx/item/1";
const BATCH: usize = 50;
const DELIVERY_DEADLINE: Duration = Duration::from_secs(60);

type Updates = mpsc::UnboundedSender<(usize, Instant)>;

/// Every host, kept alive until the scenario ends.
struct Hosts {
    legacy: Vec<Client>,
    modern: JoinSet<()>,
    count: usize,
}

/// One repeat: from `touch` until the median and the last host heard it.
struct Delivery {
    median: Duration,
    last: Duration,
    notified_upstream: u64,
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    if options.target.is_some() {
        bail!("fanout starts its own proxy; it does not run against --target");
    }
    let (per_era, repeats) = if options.quick { (200, 3) } else { (1_000, 10) };
    let fixture = Fixture::spawn(&["--resources", "4"]).await?;
    // Every host holds a connection (a legacy session its GET stream, a listen host its
    // stream): past `server.max_connections` (1,024 by default) the rest would wait forever.
    let server = format!("[server]\nmax_connections = {}\n\n", 2 * per_era + 64);
    let proxy = ProxyProcess::start(&format!("{server}{}", http_upstream("fx", &fixture.url))).await?;
    let side = clients::connect_with(&fixture.url, Era::Auto, Default::default()).await?;
    let (updates, mut heard) = mpsc::unbounded_channel();
    let connecting = Instant::now();
    let hosts = connect_hosts(&proxy.url, per_era, &updates).await?;
    let connected = connecting.elapsed();
    wait_subscribed(&side).await?;
    let mut deliveries = Vec::new();
    for _ in 0..repeats {
        deliveries.push(deliver(&side, &mut heard, hosts.count).await?);
    }
    let mut report = Report::new("fanout");
    report.add("hosts (legacy + listen)", hosts.count as f64, Unit::Count);
    report.add("connect + subscribe every host", connected.as_secs_f64(), Unit::Seconds);
    report.add("proxy RSS with every host", processes::memory_mib(proxy.pid()?, "VmRSS")?, Unit::MiB);
    add_delivery_rows(&mut report, &deliveries);
    report.note(format!("{repeats} repeats; each times one `touch` on the fixture until every host has the `updated`"));
    report.note("the hosts run in the benchmark process on the same cores as the proxy");
    drop(hosts);
    Ok(report)
}

async fn connect_hosts(url: &str, per_era: usize, updates: &Updates) -> anyhow::Result<Hosts> {
    let mut hosts = Hosts { legacy: Vec::with_capacity(per_era), modern: JoinSet::new(), count: 0 };
    for start in (0..per_era).step_by(BATCH) {
        let batch = start..(start + BATCH).min(per_era);
        hosts.legacy.extend(try_join_all(batch.map(|host| legacy_host(url, host, updates.clone()))).await?);
    }
    eprintln!("fanout: {} legacy sessions subscribed", hosts.legacy.len());
    for start in (0..per_era).step_by(BATCH) {
        let batch = start..(start + BATCH).min(per_era);
        let ids = batch.clone().map(|host| per_era + host);
        let listening = try_join_all(batch.map(|_| modern_host(url))).await?;
        for (id, (client, subscription)) in ids.zip(listening) {
            hosts.modern.spawn(forward_updates(id, client, subscription, updates.clone()));
        }
    }
    hosts.count = hosts.legacy.len() + hosts.modern.len();
    eprintln!("fanout: {} listen streams open", hosts.modern.len());
    Ok(hosts)
}

async fn legacy_host(url: &str, host: usize, updates: Updates) -> anyhow::Result<Client> {
    let client = clients::connect_with(url, Era::Legacy, UpdateRecorder::reporting(host, updates)).await?;
    #[allow(deprecated)]
    client.subscribe(SubscribeRequestParams::new(PROXIED_URI)).await?;
    Ok(client)
}

async fn modern_host(url: &str) -> anyhow::Result<(Client, Subscription)> {
    let client = clients::connect_with(url, Era::Modern, UpdateRecorder::default()).await?;
    let filter = SubscriptionFilter::builder().resource_subscriptions([PROXIED_URI]).build();
    let subscription = client.listen(filter).await?;
    Ok((client, subscription))
}

/// A listen host's task: report every `updated` on its stream until the stream ends.
async fn forward_updates(id: usize, client: Client, mut subscription: Subscription, updates: Updates) {
    let _connection = client;
    loop {
        match subscription.next().await {
            Ok(Some(ServerNotification::ResourceUpdatedNotification(_))) => {
                let _ = updates.send((id, Instant::now()));
            }
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => return,
        }
    }
}

/// Wait until the proxy holds its upstream subscription on the URI.
async fn wait_subscribed(side: &Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = clients::fixture_stats(side).await?;
        let watched = ["subscribed", "listen_uris"]
            .iter()
            .filter_map(|key| stats[*key].as_array())
            .flatten()
            .any(|uri| uri.as_str() == Some(UPSTREAM_URI));
        if watched {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the proxy never subscribed upstream; fixture stats: {stats}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Touch the URI on the fixture and wait until every host heard it once.
async fn deliver(
    side: &Client,
    heard: &mut mpsc::UnboundedReceiver<(usize, Instant)>,
    hosts: usize,
) -> anyhow::Result<Delivery> {
    while heard.try_recv().is_ok() {}
    let touched = Instant::now();
    let reply = clients::call_json(side, "touch", json!({ "uri": UPSTREAM_URI })).await?;
    let notified_upstream = reply["notified"].as_u64().context("touch: notified")?;
    let (mut seen, mut delays) = (HashSet::with_capacity(hosts), Vec::with_capacity(hosts));
    let deadline = tokio::time::Instant::now() + DELIVERY_DEADLINE;
    while seen.len() < hosts {
        match tokio::time::timeout_at(deadline, heard.recv()).await {
            Ok(Some((host, when))) => {
                if seen.insert(host) {
                    delays.push(when.saturating_duration_since(touched));
                }
            }
            _ => bail!(
                "only {} of {hosts} hosts heard the update within {DELIVERY_DEADLINE:?}; missing: {}",
                seen.len(),
                missing(&seen, hosts)
            ),
        }
    }
    let percentiles = Percentiles::of(delays.clone());
    let last = delays.into_iter().max().unwrap_or_default();
    Ok(Delivery { median: percentiles.p50, last, notified_upstream })
}

/// The hosts that did not hear an update, by era: legacy hosts are numbered first, then listen hosts.
fn missing(seen: &HashSet<usize>, hosts: usize) -> String {
    let per_era = hosts / 2;
    let names: Vec<String> = (0..hosts)
        .filter(|host| !seen.contains(host))
        .map(|host| if host < per_era { format!("legacy #{host}") } else { format!("listen #{}", host - per_era) })
        .collect();
    names.join(", ")
}

fn add_delivery_rows(report: &mut Report, deliveries: &[Delivery]) {
    let last = Percentiles::of(deliveries.iter().map(|d| d.last).collect());
    let median = Percentiles::of(deliveries.iter().map(|d| d.median).collect());
    report.millis("last host: p50 over repeats", last.p50);
    report.check("last host: p99 over repeats", last.p99.as_secs_f64() * 1e3, Unit::Millis, Target::AtMost(100.0));
    report.millis("median host: p50 over repeats", median.p50);
    let upstream = deliveries.iter().map(|d| d.notified_upstream).max().unwrap_or_default();
    report.check("upstream subscribers notified per touch", upstream as f64, Unit::Count, Target::AtMost(1.0));
}
