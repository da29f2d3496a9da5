//! Scenario `catalog`: the proxy in front of many stdio upstreams with large lists — 10 × 1,000
//! and 20 × 5,000 resources (fixture `--resources N --page-size 500`). For each: time from spawn
//! until the proxy serves with every catalog loaded (`server.startup_wait` set high), p50 of one
//! list page (`page_size = 100`) at a random valid cursor, time to page through everything,
//! RSS; then how each cost grows with the catalog. A proxy with one empty upstream gives the
//! RSS baseline the per-entry figures are measured from.

use std::time::{Duration, Instant};

use anyhow::bail;
use rand::seq::IndexedRandom;

use crate::Options;
use crate::clients::{self, Client, Era, Operation, Percentiles};
use crate::processes::{self, ProxyProcess};
use crate::report::{Report, Target, Unit};

/// Resources every fixture lists besides its items (`multi`, `blob`).
const FIXED_PER_UPSTREAM: usize = 2;
const PAGE_SIZE: usize = 100;

/// How many upstreams with how many items each.
#[derive(Debug, Clone, Copy)]
struct Scale {
    upstreams: usize,
    items: usize,
}

/// What one scale measured.
#[derive(Debug)]
struct Measured {
    entries: usize,
    ready: Duration,
    page: Percentiles,
    walk: Duration,
    pages: usize,
    rss_mib: f64,
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    if options.target.is_some() {
        bail!("catalog starts its own proxy; it does not run against --target");
    }
    let samples = if options.quick { 50 } else { 300 };
    let mut report = Report::new("catalog");
    let baseline = measure(Scale { upstreams: 1, items: 0 }, samples).await?.rss_mib;
    report.add("baseline RSS (1 upstream, 2 resources)", baseline, Unit::MiB);
    let small = measure(Scale { upstreams: 10, items: 1_000 }, samples).await?;
    add_rows(&mut report, "10×1k", &small, baseline, false);
    let large = measure(Scale { upstreams: 20, items: 5_000 }, samples).await?;
    add_rows(&mut report, "20×5k", &large, baseline, true);
    add_growth(&mut report, &small, &large);
    report.note(format!(
        "page_size = {PAGE_SIZE}; each fixture pages its own list by 500; stdio upstreams, spawned by the proxy"
    ));
    report.note("ready = from spawning the proxy until it logs `serving MCP at` after every upstream is up with its catalog loaded");
    Ok(report)
}

async fn measure(scale: Scale, samples: usize) -> anyhow::Result<Measured> {
    eprintln!("catalog: {} upstreams × {} items", scale.upstreams, scale.items);
    let proxy = ProxyProcess::start(&config(scale)?).await?;
    if !proxy.startup_warnings.is_empty() {
        bail!("the proxy warned while starting: {:?}", proxy.startup_warnings);
    }
    let client = clients::connect_with(&proxy.url, Era::Auto, Default::default()).await?;
    let walk_started = Instant::now();
    let (entries, cursors) = walk(&client).await?;
    let walk = walk_started.elapsed();
    let expected = scale.upstreams * (scale.items + FIXED_PER_UPSTREAM);
    if entries != expected {
        bail!("listed {entries} resources, expected {expected}");
    }
    let page = random_pages(&client, &cursors, samples).await?;
    let rss_mib = processes::memory_mib(proxy.pid()?, "VmRSS")?;
    Ok(Measured { entries, ready: proxy.ready_after, page, walk, pages: cursors.len() + 1, rss_mib })
}

fn config(scale: Scale) -> anyhow::Result<String> {
    let fixture = processes::fixture_command_toml()?;
    let mut text = format!("[server]\npage_size = {PAGE_SIZE}\nstartup_wait = \"600s\"\n\n");
    for index in 0..scale.upstreams {
        text.push_str(&format!(
            "[[upstreams]]\nname = \"u{index:02}\"\ncommand = {fixture}\nargs = [\"--resources\", \"{}\", \"--page-size\", \"500\"]\nrequest_timeout = \"120s\"\n\n",
            scale.items
        ));
    }
    Ok(text)
}

/// Page through the whole list; the number of resources and every cursor handed out.
async fn walk(client: &Client) -> anyhow::Result<(usize, Vec<String>)> {
    let (mut entries, mut cursors, mut cursor) = (0, Vec::new(), None);
    loop {
        let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
        let page = client.list_resources(Some(params)).await?;
        entries += page.resources.len();
        match page.next_cursor {
            Some(next) => {
                cursors.push(next.clone());
                cursor = Some(next);
            }
            None => return Ok((entries, cursors)),
        }
    }
}

/// Latency of one page at a random valid cursor (or the first page), `samples` times in a row.
async fn random_pages(client: &Client, cursors: &[String], samples: usize) -> anyhow::Result<Percentiles> {
    let pages: Vec<Option<String>> = std::iter::once(None).chain(cursors.iter().cloned().map(Some)).collect();
    let chosen: Vec<Option<String>> = {
        let mut rng = rand::rng();
        (0..samples).filter_map(|_| pages.choose(&mut rng).cloned()).collect()
    };
    let peer = client.peer();
    let mut timed = Vec::with_capacity(samples);
    for cursor in chosen {
        let started = Instant::now();
        let items = clients::perform(peer, &Operation::ListPage(cursor)).await?;
        timed.push(started.elapsed());
        if items == 0 {
            bail!("an empty page at a valid cursor");
        }
    }
    Ok(Percentiles::of(timed))
}

fn add_rows(report: &mut Report, label: &str, measured: &Measured, baseline_mib: f64, held: bool) {
    let per_entry = (measured.rss_mib - baseline_mib).max(0.0) * 1_048_576.0 / measured.entries as f64;
    let ready = measured.ready.as_secs_f64();
    let page_ms = measured.page.p50.as_secs_f64() * 1e3;
    report.add(format!("{label} resources listed"), measured.entries as f64, Unit::Count);
    match held {
        true => {
            report.check(format!("{label} ready"), ready, Unit::Seconds, Target::AtMost(5.0));
            report.check(format!("{label} list page p50"), page_ms, Unit::Millis, Target::AtMost(2.0));
        }
        false => {
            report.add(format!("{label} ready"), ready, Unit::Seconds);
            report.add(format!("{label} list page p50"), page_ms, Unit::Millis);
        }
    }
    report.millis(format!("{label} list page p99"), measured.page.p99);
    report.add(
        format!("{label} page through all ({} pages)", measured.pages),
        measured.walk.as_secs_f64(),
        Unit::Seconds,
    );
    report.add(format!("{label} proxy RSS"), measured.rss_mib, Unit::MiB);
    match held {
        true => {
            report.check(format!("{label} RSS per entry over baseline"), per_entry, Unit::Bytes, Target::AtMost(1024.0))
        }
        false => report.add(format!("{label} RSS per entry over baseline"), per_entry, Unit::Bytes),
    }
}

fn add_growth(report: &mut Report, small: &Measured, large: &Measured) {
    let grows = |large: f64, small: f64| large / small.max(1e-9);
    report.add("growth: entries", grows(large.entries as f64, small.entries as f64), Unit::Ratio);
    report.add("growth: ready", grows(large.ready.as_secs_f64(), small.ready.as_secs_f64()), Unit::Ratio);
    report.add("growth: page p50", grows(large.page.p50.as_secs_f64(), small.page.p50.as_secs_f64()), Unit::Ratio);
    report.add("growth: page through all", grows(large.walk.as_secs_f64(), small.walk.as_secs_f64()), Unit::Ratio);
    report.add("growth: RSS", grows(large.rss_mib, small.rss_mib), Unit::Ratio);
}
