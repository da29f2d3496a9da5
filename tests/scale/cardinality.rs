//! Series stay bounded however many distinct URIs are read.

use crate::support::exposition::Exposition;
use crate::support::fixture::{self, Era, FixtureClient, HttpFixture};
use crate::support::proxy::{ProxyProcess, http_upstream};
use anyhow::ensure;
use futures::{StreamExt, TryStreamExt};

use crate::support::observe::*;

/// 10,000 distinct URIs read (items, URIs the upstream does not have, URIs of upstreams that do
/// not exist, through a cache small enough to evict): the set of series in `/metrics` is the one
/// after the first 100 reads, and no label value is a URI.
#[tokio::test]
async fn ten_thousand_distinct_uris_do_not_grow_the_number_of_series() -> anyhow::Result<()> {
    const READS: u64 = 10_000;
    const FIRST: u64 = 100;
    let upstream = HttpFixture::spawn(&["--era", "legacy", "--no-subscribe"]).await?;
    // The upstream gives no `ttlMs` and cannot notify: its reads are kept only with the opt-in.
    let cache = "[cache]\nmax_bytes = \"64KiB\"\nunwatched_ttl = \"1h\"\n\n";
    let config = format!("{cache}{}", http_upstream("fx", &upstream.url, ""));
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("fx", 1).await?;
    let mut hosts = Vec::new();
    for era in [Era::Legacy, Era::Modern, Era::Legacy, Era::Modern] {
        hosts.push(fixture::connect_http(&proxy.url, era).await?.0);
    }

    let ok_first = read_distinct(&hosts, 0..FIRST).await?;
    // A gauge sample after these reads, so series the sampler creates exist too.
    scrape_until(&proxy, "cache gauges sampled", |m| m.value("mcp_proxy_cache_entries", &[]).unwrap_or(0.0) > 0.0)
        .await?;
    let first = scrape(&proxy).await?;
    let ok_rest = read_distinct(&hosts, FIRST..READS).await?;
    let last = scrape(&proxy).await?;

    let read_ok = |m: &Exposition| {
        m.sum("mcp_proxy_downstream_requests_total", &[("method", "resources/read"), ("outcome", "ok")])
    };
    assert_eq!(read_ok(&last) - read_ok(&first), ok_rest as f64, "the reads were counted");
    assert!(ok_first > 0 && ok_rest > 0);
    let (first_series, last_series) = (first.series(), last.series());
    let grown: Vec<&String> = last_series.difference(&first_series).collect();
    let gone: Vec<&String> = first_series.difference(&last_series).collect();
    assert!(grown.is_empty() && gone.is_empty(), "new series: {grown:#?}\nseries gone: {gone:#?}");
    assert_eq!(last_series.len(), first_series.len());
    let uri_like: Vec<String> = last
        .samples
        .iter()
        .filter(|s| s.labels.values().any(|v| v.contains("://") || v.contains("item/") || v.contains("nowhere")))
        .map(|s| s.identity())
        .collect();
    assert!(uri_like.is_empty(), "label values that look like URIs: {uri_like:#?}");
    Ok(())
}

/// Read `ids` concurrently, spread over `hosts`: `id % 100 == 7` is a URI the upstream does not
/// have, `id % 10 == 9` a URI of an upstream that does not exist, the rest are items. Returns
/// how many reads succeeded; the others must fail as expected.
async fn read_distinct(hosts: &[FixtureClient], ids: std::ops::Range<u64>) -> anyhow::Result<u64> {
    let outcomes: Vec<(u64, bool)> = futures::stream::iter(ids)
        .map(|id| async move {
            let host = &hosts[(id % hosts.len() as u64) as usize];
            let result = read(host, &distinct_uri(id)).await;
            anyhow::Ok((id, result.is_ok()))
        })
        .buffer_unordered(32)
        .try_collect()
        .await?;
    let wrong: Vec<u64> = outcomes
        .iter()
        .filter(|(id, ok)| *ok != distinct_uri(*id).starts_with("fx+fx://fx/item/"))
        .map(|(id, _)| *id)
        .collect();
    ensure!(wrong.is_empty(), "reads that did not end as expected: {wrong:?}");
    Ok(outcomes.iter().filter(|(_, ok)| *ok).count() as u64)
}

fn distinct_uri(id: u64) -> String {
    match (id % 100, id % 10) {
        (7, _) => format!("fx+fx://fx/none/{id}"),
        (_, 9) => format!("nowhere{id}+fx://fx/item/{id}"),
        _ => item(id),
    }
}
