//! Observability end to end: the real proxy binary in front of real upstream processes (the rmcp
//! fixture over HTTP and over stdio), driven by real rmcp clients, watched through its admin
//! listener — `/metrics` parsed series by series, `/readyz`, `/status` — and scraped by a real
//! Prometheus, against which every panel query of the Grafana dashboard is evaluated.
//!
//! Counters are compared as deltas between two scrapes around a scripted workload. What changes
//! on its own time — gauges the proxy samples once a second, an upstream noticed down or up,
//! Prometheus' scrapes — is polled for with a deadline, never slept for.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use common::exposition::Exposition;
use common::fixture::{self, DEADLINE, Era, FixtureClient, FixtureEvent, HttpFixture, call_json, list_all_resources};
use common::proxy::{ProxyProcess, fixture_upstream, http_upstream, toml_str};
use futures::{StreamExt, TryStreamExt};
use rmcp::RoleClient;
use rmcp::model::{ReadResourceRequestParams, ReadResourceResult, ResourceContents, SubscribeRequestParams};
use rmcp::service::Peer;
use serde_json::{Value, json};

/// The one policy file: anyone may read everything but `fx`'s blob.
const POLICY_FILE: &str = "readers.toml";
const POLICY: &str = "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"fx+fx://fx/blob\"]\n";
const DENIED: &str = "fx+fx://fx/blob";
/// A URI the `fx` fixture does not have.
const MISSING: &str = "fx+fx://fx/missing";
/// Supervision quick enough that a restart is noticed and recovered from within a second.
const TUNING: &str = "reconnect_max = \"500ms\"\nhealth_interval = \"200ms\"";
const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/grafana/dashboards/mcp-resource-proxy.json");

/// Metrics after a scripted workload, as deltas from a scrape before it: reads that miss and
/// hit, a not-found read, a denied read and a list hiding a denied resource, a subscription and
/// one `updated`, one upstream restart. Every expected series is checked and every mismatch
/// reported at once.
#[tokio::test]
async fn metrics_count_a_scripted_workload_with_the_right_labels() -> anyhow::Result<()> {
    const ITEMS: u64 = 3;
    const REREADS: u64 = 2;
    let mut fx = RestartableFixture::spawn(&["--era", "legacy"]).await?;
    let policies = policies_folder()?;
    let config = format!("{}{}", policies_section(policies.path()), http_upstream("fx", &fx.url(), TUNING));
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("fx", 1).await?;
    scrape_until(&proxy, "fx up", |m| up(m, "fx") == Some(1.0)).await?;
    let before = scrape(&proxy).await?;

    let (reader, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let (subscriber, mut heard) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let mut served_bytes = 0;
    for _ in 0..=REREADS {
        for id in 0..ITEMS {
            served_bytes += text_bytes(&read(&reader, &item(id)).await?);
        }
    }
    ensure!(read(&reader, MISSING).await.is_err(), "{MISSING} was read");
    ensure!(read(&reader, DENIED).await.is_err(), "{DENIED} was read despite the policy");
    let (listed, pages) = list_all_resources(&reader).await?;
    ensure!(pages == 1 && !listed.iter().any(|r| r.uri == DENIED), "{pages} pages: {listed:?}");

    #[allow(deprecated)]
    subscriber.subscribe(SubscribeRequestParams::new(item(0))).await?;
    // Sampled gauges, set on the same tick: one host holds item 0; upstream, the proxy holds
    // each item it cached (item 0 shared with the host) — and nothing for the missing URI.
    let sampled = scrape_until(&proxy, "the host's subscription", |m| {
        m.value("mcp_proxy_downstream_subscriptions", &[("upstream", "fx")]) == Some(1.0)
    })
    .await?;
    let held_upstream = sampled.value("mcp_proxy_upstream_subscriptions", &[("upstream", "fx")]);
    let side = fx.side().await?;
    touch_once_subscribed(&side, "fx://fx/item/0").await?;
    wait_updated(&mut heard, &item(0)).await?;

    fx.stop().await?;
    scrape_until(&proxy, "fx down", |m| up(m, "fx") == Some(0.0)).await?;
    // A restart takes a while: let one reconnection attempt fail before the upstream is back.
    proxy.wait_log_count(&["upstream down", "\"upstream\":\"fx\""], 2).await?;
    fx.start().await?;
    proxy.wait_up("fx", 2).await?;
    scrape_until(&proxy, "fx up again", |m| up(m, "fx") == Some(1.0)).await?;
    // Updates may have been missed meanwhile: the proxy tells the host item 0 may have changed.
    wait_updated(&mut heard, &item(0)).await?;
    let after = scrape(&proxy).await?;

    let reads = ITEMS * (REREADS + 1);
    let version = env!("CARGO_PKG_VERSION");
    let fx_label = [("upstream", "fx")];
    let expected: Vec<Expected> = vec![
        ("mcp_proxy_cache_misses_total", fx_label.to_vec(), ITEMS as f64),
        ("mcp_proxy_cache_hits_total", fx_label.to_vec(), (ITEMS * REREADS) as f64),
        ("mcp_proxy_cache_inserts_total", fx_label.to_vec(), ITEMS as f64),
        (
            "mcp_proxy_upstream_requests_total",
            vec![("upstream", "fx"), ("method", "resources/read"), ("outcome", "ok")],
            ITEMS as f64,
        ),
        ("mcp_proxy_downstream_requests_total", vec![("method", "resources/read"), ("outcome", "ok")], reads as f64),
        // The missing URI and the denied one answer alike.
        ("mcp_proxy_downstream_requests_total", vec![("method", "resources/read"), ("outcome", "not_found")], 2.0),
        ("mcp_proxy_downstream_request_duration_seconds_count", vec![("method", "resources/read")], (reads + 2) as f64),
        ("mcp_proxy_downstream_requests_total", vec![("method", "resources/list"), ("outcome", "ok")], 1.0),
        ("mcp_proxy_downstream_requests_total", vec![("method", "resources/subscribe"), ("outcome", "ok")], 1.0),
        ("mcp_proxy_served_bytes_total", fx_label.to_vec(), served_bytes as f64),
        ("mcp_proxy_policy_denials_total", vec![("action", "read"), ("policy", POLICY_FILE)], 1.0),
        // The list hid the blob because of a rule in that file, too.
        ("mcp_proxy_policy_denials_total", vec![("action", "list"), ("policy", POLICY_FILE)], 1.0),
        // The upstream sent one `updated`; the proxy's own "may have changed" after the
        // reconnect is no notification from the upstream, and invalidates for the reconnect.
        ("mcp_proxy_notifications_received_total", vec![("upstream", "fx"), ("kind", "updated")], 1.0),
        ("mcp_proxy_cache_invalidations_total", vec![("cause", "updated")], 1.0),
        // The host heard two: the upstream's and the proxy's after the reconnect.
        ("mcp_proxy_notifications_delivered_total", vec![("kind", "updated")], 2.0),
        // Items 1 and 2 were cached when the upstream went away (item 0 was invalidated).
        ("mcp_proxy_cache_invalidations_total", vec![("cause", "reconnect")], (ITEMS - 1) as f64),
        // One restart: the upstream came back once, however many attempts that took.
        ("mcp_proxy_upstream_reconnects_total", fx_label.to_vec(), 1.0),
        ("mcp_proxy_downstream_sessions", vec![("transport", "http"), ("era", "2025")], 2.0),
        ("mcp_proxy_build_info", vec![("version", version)], 0.0),
    ];
    let mut mismatches = moved(&before, &after, &expected);
    if held_upstream != Some(ITEMS as f64) {
        mismatches.push(format!(
            "mcp_proxy_upstream_subscriptions{{upstream=\"fx\"}} is {held_upstream:?}, expected {ITEMS}"
        ));
    }
    if after.value("mcp_proxy_build_info", &[("version", version)]) != Some(1.0) {
        mismatches.push(format!("mcp_proxy_build_info{{version={version:?}}} is not 1"));
    }
    let status: Value = serde_json::from_str(&proxy.admin_get("/status").await?)?;
    let reconnects = after.value("mcp_proxy_upstream_reconnects_total", &fx_label);
    if upstream_status(&status, "fx")?["reconnects"].as_f64() != reconnects {
        mismatches.push(format!("/status fx reconnects differs from the counter {reconnects:?}: {status}"));
    }
    assert!(mismatches.is_empty(), "metrics that did not move as they should:\n{}", mismatches.join("\n"));
    Ok(())
}

/// `/readyz` is 200 while the required upstream is up although an optional one never is, 503
/// naming the required one while it is down, 200 again once it is back; `/status` shows each
/// step (state, `last_error`, `reconnects`).
#[tokio::test]
async fn readyz_flips_when_a_required_upstream_dies_and_recovers_and_status_reflects_it() -> anyhow::Result<()> {
    let mut fx = RestartableFixture::spawn(&["--era", "legacy"]).await?;
    let nowhere = format!("http://{}/mcp", free_address()?);
    let optional = format!("required = false\n{TUNING}");
    let config = format!(
        "[server]\nstartup_wait = \"1s\"\n\n{}{}",
        http_upstream("fx", &fx.url(), TUNING),
        http_upstream("optional", &nowhere, &optional)
    );
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("fx", 1).await?;

    let ready = json!({ "ready": true, "missing": [] });
    assert_eq!(wait_readyz(&proxy, 200).await?, ready);
    let status = admin_json(&proxy, "/status").await?;
    let (fx_status, optional_status) = (upstream_status(&status, "fx")?, upstream_status(&status, "optional")?);
    assert_eq!((&fx_status["state"], &fx_status["required"]), (&json!("up"), &json!(true)), "{status}");
    assert_eq!((&fx_status["last_error"], &fx_status["reconnects"]), (&Value::Null, &json!(0)), "{status}");
    assert_ne!(optional_status["state"], "up", "{status}");
    assert_eq!(optional_status["required"], false, "{status}");
    assert!(optional_status["last_error"].is_string(), "the optional upstream's failure is shown: {status}");

    fx.stop().await?;
    assert_eq!(wait_readyz(&proxy, 503).await?, json!({ "ready": false, "missing": ["fx"] }));
    let status = admin_json(&proxy, "/status").await?;
    let fx_status = upstream_status(&status, "fx")?;
    assert!(["down", "connecting"].contains(&fx_status["state"].as_str().unwrap_or_default()), "{status}");
    assert!(fx_status["last_error"].as_str().is_some_and(|e| !e.is_empty()), "{status}");
    assert_eq!((&status["ready"], &status["missing"]), (&json!(false), &json!(["fx"])), "{status}");

    fx.start().await?;
    assert_eq!(wait_readyz(&proxy, 200).await?, ready);
    let status = admin_json(&proxy, "/status").await?;
    let fx_status = upstream_status(&status, "fx")?;
    assert_eq!((&fx_status["state"], &fx_status["last_error"]), (&json!("up"), &Value::Null), "{status}");
    let reconnects = fx_status["reconnects"].as_f64().context("reconnects")?;
    assert!(reconnects >= 1.0, "{status}");
    let counter = scrape(&proxy).await?.value("mcp_proxy_upstream_reconnects_total", &[("upstream", "fx")]);
    assert_eq!(counter, Some(reconnects), "/status and /metrics agree on reconnects");
    assert_ne!(upstream_status(&status, "optional")?["state"], "up", "{status}");
    Ok(())
}

/// 10,000 distinct URIs read (items, URIs the upstream does not have, URIs of upstreams that do
/// not exist, through a cache small enough to evict): the set of series in `/metrics` is the one
/// after the first 100 reads, and no label value is a URI.
#[tokio::test]
async fn ten_thousand_distinct_uris_do_not_grow_the_number_of_series() -> anyhow::Result<()> {
    const READS: u64 = 10_000;
    const FIRST: u64 = 100;
    let upstream = HttpFixture::spawn(&["--era", "legacy", "--no-subscribe"]).await?;
    let config = format!("[cache]\nmax_bytes = \"64KiB\"\n\n{}", http_upstream("fx", &upstream.url, ""));
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

/// A real Prometheus scrapes the proxy every second through a workload that touches every
/// dashboard row; then every panel query of the dashboard (variables substituted) evaluated
/// through Prometheus' HTTP API succeeds with at least one sample, and the `upstream` variable's
/// query resolves to the configured upstreams.
#[tokio::test]
async fn prometheus_returns_data_for_every_dashboard_panel_query() -> anyhow::Result<()> {
    let mut fx = RestartableFixture::spawn(&["--era", "legacy", "--bad-uri"]).await?;
    let policies = policies_folder()?;
    let config = format!(
        "{}[cache]\nmax_bytes = \"16KiB\"\n\n{}{}",
        policies_section(policies.path()),
        http_upstream("fx", &fx.url(), TUNING),
        fixture_upstream("st", &["--era", "legacy"])
    );
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("fx", 1).await?;
    proxy.wait_up("st", 1).await?;
    let admin = proxy.admin_url().await?;
    let prometheus = Prometheus::start(admin.trim_start_matches("http://")).await?;
    prometheus.wait_scraped_after(unix_now()).await?;

    let hosts = dashboard_workload(&proxy, &prometheus, &mut fx).await?;
    prometheus.wait_scraped_after(unix_now() + 3.0).await?;

    let upstreams = prometheus.label_values("upstream", "mcp_proxy_upstream_up").await?;
    assert_eq!(upstreams, ["fx", "st"], "label_values(mcp_proxy_upstream_up, upstream)");
    let mut empty = Vec::new();
    for (title, expr) in panel_queries()? {
        let query = substitute(&expr, "fx|st");
        let samples = prometheus.query(&query).await.with_context(|| format!("panel {title:?}: {query}"))?;
        eprintln!("{:>3} sample(s)  {title}: {query}", samples.len());
        if samples.is_empty() {
            empty.push(format!("{title}: {query}"));
        }
    }
    assert!(empty.is_empty(), "panel queries that returned no data:\n{}\n{}", empty.join("\n"), prometheus.log());
    drop(hosts);
    Ok(())
}

/// Drive every row of the dashboard: sessions of both eras, lists, reads that miss and hit on
/// both upstreams, reads large enough to be evicted, not-found and denied reads, a subscription
/// and its `updated`, and a restart of `fx` that Prometheus sees down. Returns the hosts, which
/// must stay connected for the session and subscription gauges.
async fn dashboard_workload(
    proxy: &ProxyProcess,
    prometheus: &Prometheus,
    fx: &mut RestartableFixture,
) -> anyhow::Result<Vec<FixtureClient>> {
    let (legacy, mut heard) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let (modern, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    list_all_resources(&legacy).await?;
    list_all_resources(&modern).await?;
    legacy.list_resource_templates(None).await?;
    // The tools row: its lists, from both eras.
    legacy.list_tools(None).await?;
    modern.list_prompts(None).await?;
    for host in [&legacy, &modern] {
        for upstream in ["fx", "st"] {
            for id in 0..3 {
                read(host, &format!("{upstream}+fx://fx/item/{id}")).await?;
            }
        }
    }
    // Six 6000-byte texts through a 16 KiB cache: some must be evicted for size.
    for bytes in 6000..6006 {
        read(&legacy, &format!("fx+fx://fx/sized/{bytes}")).await?;
    }
    wait_evicted(proxy, &legacy).await?;
    ensure!(read(&legacy, MISSING).await.is_err() && read(&modern, DENIED).await.is_err());
    #[allow(deprecated)]
    legacy.subscribe(SubscribeRequestParams::new(item(0))).await?;
    let side = fx.side().await?;
    touch_once_subscribed(&side, "fx://fx/item/0").await?;
    wait_updated(&mut heard, &item(0)).await?;

    fx.stop().await?;
    prometheus.wait_value("mcp_proxy_upstream_up{upstream=\"fx\"}", 0.0).await?;
    fx.start().await?;
    proxy.wait_up("fx", 2).await?;
    prometheus.wait_value("mcp_proxy_upstream_up{upstream=\"fx\"}", 1.0).await?;
    for id in 0..3 {
        read(&modern, &item(id)).await?;
    }
    Ok(vec![legacy, modern])
}

/// Wait until `/metrics` counts an eviction for size. The cache settles evictions as it is used,
/// so keep using it (reads of a cached item) while waiting.
async fn wait_evicted(proxy: &ProxyProcess, host: &Peer<RoleClient>) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let metrics = scrape(proxy).await?;
        if metrics.value("mcp_proxy_cache_evictions_total", &[("cause", "size")]).unwrap_or(0.0) > 0.0 {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no eviction for size counted:\n{}",
            proxy.admin_get("/metrics").await?
        );
        read(host, "st+fx://fx/item/0").await?;
        tokio::time::sleep(Duration::from_millis(50)).await; // poll interval; the loop ends at its deadline
    }
}

/// A fixture over HTTP on a fixed address, so it can be stopped and started again where the
/// proxy expects it.
struct RestartableFixture {
    address: String,
    args: Vec<String>,
    process: HttpFixture,
}

impl RestartableFixture {
    async fn spawn(args: &[&str]) -> anyhow::Result<Self> {
        let address = free_address()?;
        let process = HttpFixture::spawn_at(&address, args).await?;
        Ok(Self { address, args: args.iter().map(|a| a.to_string()).collect(), process })
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.address)
    }

    /// A direct connection, for the control tools.
    async fn side(&self) -> anyhow::Result<FixtureClient> {
        Ok(fixture::connect_http(&self.url(), Era::Legacy).await?.0)
    }

    /// Ask it to exit (the `exit` tool) and wait until it has.
    async fn stop(&mut self) -> anyhow::Result<()> {
        let side = self.side().await?;
        let _ = call_json(&side, "exit", json!({ "code": 0 })).await;
        self.process.wait_exit().await?;
        Ok(())
    }

    async fn start(&mut self) -> anyhow::Result<()> {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.process = HttpFixture::spawn_at(&self.address, &args).await?;
        Ok(())
    }
}

/// `prometheus` from `PATH` on a free loopback port, scraping one target every second, with
/// its storage and log in a temporary folder; killed on drop.
struct Prometheus {
    base: String,
    dir: tempfile::TempDir,
    _child: tokio::process::Child,
}

impl Prometheus {
    async fn start(target: &str) -> anyhow::Result<Self> {
        let runs = || std::process::Command::new("prometheus").arg("--version").output();
        if !runs().is_ok_and(|output| output.status.success()) {
            // Install it the way CI does (Debian's package; needs root).
            let script = common::peers::repo_root().join(".ci/install-prometheus.sh");
            let installed = std::process::Command::new("bash").arg(script).status();
            eprintln!("installed prometheus: {installed:?}");
        }
        match runs() {
            Ok(output) if output.status.success() => {}
            other => panic!(
                "`prometheus` is not installed or does not run ({other:?}): run `bash .ci/install-prometheus.sh` \
                 (`bash .ci/run` does) — this test needs Debian's prometheus package"
            ),
        }
        let dir = tempfile::tempdir()?;
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: mcp-resource-proxy\n    static_configs:\n      - targets: [\"{target}\"]\n"
        );
        std::fs::write(dir.path().join("prometheus.yml"), config)?;
        let address = free_address()?;
        let log = std::fs::File::create(dir.path().join("prometheus.log"))?;
        let child = tokio::process::Command::new("prometheus")
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={address}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("spawn prometheus")?;
        let prometheus = Self { base: format!("http://{address}"), dir, _child: child };
        prometheus.wait_ready().await?;
        Ok(prometheus)
    }

    async fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            if let Ok(response) = reqwest::get(format!("{}/-/ready", self.base)).await
                && response.status().is_success()
            {
                return Ok(());
            }
            ensure!(tokio::time::Instant::now() < deadline, "prometheus not ready:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(100)).await; // poll interval; the loop ends at its deadline
        }
    }

    /// An instant query; its samples (`data.result`), or an error unless `status` is success.
    async fn query(&self, query: &str) -> anyhow::Result<Vec<Value>> {
        let url = reqwest::Url::parse_with_params(&format!("{}/api/v1/query", self.base), &[("query", query)])?;
        let body: Value = tokio::time::timeout(DEADLINE, async { reqwest::get(url).await?.json().await })
            .await
            .context("prometheus query timed out")??;
        ensure!(body["status"] == "success", "prometheus answered {body}");
        Ok(body["data"]["result"].as_array().context("data.result")?.clone())
    }

    /// The values of `label` on series of `metric`: what Grafana's `label_values()` asks.
    async fn label_values(&self, label: &str, metric: &str) -> anyhow::Result<Vec<String>> {
        let base = format!("{}/api/v1/label/{label}/values", self.base);
        let url = reqwest::Url::parse_with_params(&base, &[("match[]", metric)])?;
        let body: Value = reqwest::get(url).await?.json().await?;
        ensure!(body["status"] == "success", "prometheus answered {body}");
        let values = body["data"].as_array().context("data")?;
        Ok(values.iter().filter_map(|v| v.as_str().map(String::from)).collect())
    }

    /// Wait until an instant `query` has one sample and it is `value`.
    async fn wait_value(&self, query: &str, value: f64) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let samples = self.query(query).await?;
            if let [sample] = samples.as_slice()
                && sample_value(sample) == Some(value)
            {
                return Ok(());
            }
            ensure!(tokio::time::Instant::now() < deadline, "`{query}` never became {value}: {samples:?}");
            tokio::time::sleep(Duration::from_millis(200)).await; // poll interval; the loop ends at its deadline
        }
    }

    /// Wait until Prometheus holds a successful scrape of the proxy taken after `unix_seconds`.
    async fn wait_scraped_after(&self, unix_seconds: f64) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let samples = self.query("timestamp(mcp_proxy_build_info)").await?;
            let latest = samples.first().and_then(sample_value);
            if latest.is_some_and(|at| at > unix_seconds) {
                return Ok(());
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "no scrape after {unix_seconds} (latest {latest:?}); targets: {}\n{}",
                self.targets().await,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await; // poll interval; the loop ends at its deadline
        }
    }

    async fn targets(&self) -> String {
        match reqwest::get(format!("{}/api/v1/targets", self.base)).await {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(error) => error.to_string(),
        }
    }

    /// The end of Prometheus' own log, for failure messages.
    fn log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        format!("prometheus log (last lines):\n{}", lines[lines.len().saturating_sub(15)..].join("\n"))
    }
}

/// Every panel's target expressions, with the panel title: rows' nested panels included.
fn panel_queries() -> anyhow::Result<Vec<(String, String)>> {
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(DASHBOARD)?)?;
    let mut panels = Vec::new();
    for panel in dashboard["panels"].as_array().context("panels")? {
        if panel["type"] == "row" {
            panels.extend(panel["panels"].as_array().into_iter().flatten());
        } else {
            panels.push(panel);
        }
    }
    let mut queries = Vec::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or("?").to_string();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().with_context(|| format!("{title}: a target without expr"))?;
            queries.push((title.clone(), expr.to_string()));
        }
    }
    ensure!(queries.len() > 20, "only {} panel queries", queries.len());
    Ok(queries)
}

/// A dashboard query as Grafana would send it: `$upstream` as the regex of the selected
/// upstreams, the interval variables as fixed windows.
fn substitute(expr: &str, upstreams: &str) -> String {
    let substituted = [
        ("${upstream}", upstreams),
        ("$upstream", upstreams),
        ("${__rate_interval}", "30s"),
        ("$__rate_interval", "30s"),
        ("${__interval}", "30s"),
        ("$__interval", "30s"),
        ("${__range}", "5m"),
        ("$__range", "5m"),
    ]
    .iter()
    .fold(expr.to_string(), |text, (variable, value)| text.replace(variable, value));
    assert!(!substituted.contains('$'), "a variable left in `{substituted}` (from `{expr}`)");
    substituted
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

/// Each expected `(family, labels, delta)` against two scrapes; one line per mismatch. A series
/// missing before counts as 0; missing after is a mismatch (wrong or missing labels).
/// (metric, labels, by how much it must move).
type Expected<'a> = (&'a str, Vec<(&'a str, &'a str)>, f64);

fn moved(before: &Exposition, after: &Exposition, expected: &[Expected]) -> Vec<String> {
    let mut mismatches = Vec::new();
    for (family, labels, delta) in expected {
        let shown = format!("{family}{labels:?}");
        match after.value(family, labels) {
            None => {
                let present: Vec<String> = after.matching(family, &[]).map(|s| s.identity()).collect();
                mismatches.push(format!("{shown}: no such series; {family} has {present:?}"));
            }
            Some(now) => {
                let was = before.value(family, labels).unwrap_or(0.0);
                if now - was != *delta {
                    mismatches.push(format!("{shown}: moved by {} (from {was} to {now}), expected {delta}", now - was));
                }
            }
        }
    }
    mismatches
}

async fn scrape(proxy: &ProxyProcess) -> anyhow::Result<Exposition> {
    Exposition::parse(&proxy.admin_get("/metrics").await?)
}

/// Scrape until `ready` holds (at most [`DEADLINE`]); returns that scrape.
async fn scrape_until(
    proxy: &ProxyProcess,
    what: &str,
    ready: impl Fn(&Exposition) -> bool,
) -> anyhow::Result<Exposition> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let metrics = scrape(proxy).await?;
        if ready(&metrics) {
            return Ok(metrics);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("/metrics never showed {what} within {DEADLINE:?}:\n{}", proxy.admin_get("/metrics").await?);
        }
        tokio::time::sleep(Duration::from_millis(50)).await; // poll interval; the loop ends at its deadline
    }
}

/// The proxy subscribes upstream asynchronously: once the fixture holds a subscription for
/// `uri`, touch it and check exactly one `updated` went out.
async fn touch_once_subscribed(side: &FixtureClient, uri: &str) -> anyhow::Result<()> {
    fixture::wait_for_stats(side, |s| s["subscribed"].as_array().is_some_and(|held| held.iter().any(|u| u == uri)))
        .await?;
    let touched = call_json(side, "touch", json!({ "uri": uri })).await?;
    ensure!(touched["notified"] == 1, "the upstream sent one `updated`: {touched}");
    Ok(())
}

fn up(metrics: &Exposition, upstream: &str) -> Option<f64> {
    metrics.value("mcp_proxy_upstream_up", &[("upstream", upstream)])
}

/// `GET /readyz` until it answers `code` (at most [`DEADLINE`]); its JSON body.
async fn wait_readyz(proxy: &ProxyProcess, code: u16) -> anyhow::Result<Value> {
    let url = format!("{}/readyz", proxy.admin_url().await?);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let response = reqwest::get(&url).await?;
        let status = response.status().as_u16();
        let body = response.text().await?;
        if status == code {
            return serde_json::from_str(&body).with_context(|| format!("/readyz body {body:?}"));
        }
        ensure!(tokio::time::Instant::now() < deadline, "/readyz stayed {status} ({body}), expected {code}");
        tokio::time::sleep(Duration::from_millis(50)).await; // poll interval; the loop ends at its deadline
    }
}

async fn admin_json(proxy: &ProxyProcess, path: &str) -> anyhow::Result<Value> {
    Ok(serde_json::from_str(&proxy.admin_get(path).await?)?)
}

/// One upstream's entry in a `/status` body.
fn upstream_status<'a>(status: &'a Value, name: &str) -> anyhow::Result<&'a Value> {
    let upstreams = status["upstreams"].as_array().context("/status has upstreams")?;
    upstreams.iter().find(|u| u["name"] == name).with_context(|| format!("no {name} in /status: {status}"))
}

/// A policies folder holding [`POLICY`] as [`POLICY_FILE`].
fn policies_folder() -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join(POLICY_FILE), POLICY)?;
    Ok(dir)
}

fn policies_section(dir: &Path) -> String {
    format!("[policies]\ndir = {}\n\n", toml_str(dir.to_str().expect("utf-8 path")))
}

/// Wait until the host hears `updated` for `uri`.
async fn wait_updated(events: &mut fixture::Events, uri: &str) -> anyhow::Result<()> {
    loop {
        match events.next().await? {
            FixtureEvent::Updated(heard) if heard == uri => return Ok(()),
            FixtureEvent::Updated(_) | FixtureEvent::ListChanged => continue,
        }
    }
}

fn item(id: u64) -> String {
    format!("fx+fx://fx/item/{id}")
}

async fn read(host: &Peer<RoleClient>, uri: &str) -> anyhow::Result<ReadResourceResult> {
    Ok(host.read_resource(ReadResourceRequestParams::new(uri)).await?)
}

/// The bytes of the text contents of a result (what `served_bytes` counts for text).
fn text_bytes(result: &ReadResourceResult) -> u64 {
    let text = |content: &ResourceContents| match content {
        ResourceContents::TextResourceContents { text, .. } => text.len() as u64,
        _ => 0,
    };
    result.contents.iter().map(text).sum()
}

/// A Prometheus API sample's value (`[time, "value"]`), or its time with `timestamp()`.
fn sample_value(sample: &Value) -> Option<f64> {
    sample["value"][1].as_str()?.parse().ok()
}

fn free_address() -> anyhow::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.to_string())
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs_f64()
}
