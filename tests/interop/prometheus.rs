//! A real Prometheus (Debian's package, `.ci/install-prometheus.sh`) scrapes the proxy through a
//! workload that touches every dashboard panel; every panel query of the Grafana dashboard then
//! returns data. The proxy is a one-replica cluster (a real `redis-server`, `.ci/install-cluster.sh`)
//! so that the cluster row has data too. Its scrapes are polled for with a deadline, never slept for.

use std::process::Stdio;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::support::cluster::{SECRET, SECRET_ENV, with_cluster};
use crate::support::fixture::{self, DEADLINE, Era, FixtureClient, list_all_resources};
use crate::support::proxy::{ProxyProcess, fixture_upstream, http_upstream};
use crate::support::redis_server::Redis;
use anyhow::{Context, ensure};
use rmcp::model::SubscribeRequestParams;
use serde_json::Value;

use crate::support::eventually;
use crate::support::observe::*;

const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/grafana/dashboards/mcp-resource-proxy.json");

/// A real Prometheus scrapes the proxy every second through a workload that touches every
/// dashboard row; then every panel query of the dashboard (variables substituted) evaluated
/// through Prometheus' HTTP API succeeds with at least one sample, and the `upstream` variable's
/// query resolves to the configured upstreams.
#[tokio::test]
async fn prometheus_returns_data_for_every_dashboard_panel_query() -> anyhow::Result<()> {
    let mut fx = RestartableFixture::spawn(&["--era", "legacy", "--bad-uri"]).await?;
    let policies = policies_folder()?;
    // The fixture gives no `ttlMs` and notifies every change: trusted, its reads are kept.
    let trusted = "[upstreams.cache]\ntrust_notifications = true\n\n";
    let config = format!(
        "{}[cache]\nmax_bytes = \"16KiB\"\n\n{}{}{trusted}",
        policies_section(policies.path()),
        http_upstream("fx", &fx.url(), &format!("{TUNING}\n{trusted}")),
        fixture_upstream("st", &["--era", "legacy"])
    );
    let redis = Redis::start().await?;
    let config = with_cluster(&config, &redis.url(), "replica-0");
    let proxy = ProxyProcess::start_with(&config, &[], &[(SECRET_ENV, SECRET)]).await?;
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
            let script = crate::support::peers::repo_root().join(".ci/install-prometheus.sh");
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
        eventually(DEADLINE, "prometheus is ready", || async {
            match reqwest::get(format!("{}/-/ready", self.base)).await {
                Ok(response) if response.status().is_success() => Ok(()),
                other => Err(anyhow::anyhow!("{other:?}\n{}", self.log())),
            }
        })
        .await
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
        eventually(DEADLINE, &format!("`{query}` becomes {value}"), || async {
            let samples = self.query(query).await?;
            match samples.as_slice() {
                [sample] if sample_value(sample) == Some(value) => Ok(()),
                _ => Err(anyhow::anyhow!("{samples:?}")),
            }
        })
        .await
    }

    /// Wait until Prometheus holds a successful scrape of the proxy taken after `unix_seconds`.
    async fn wait_scraped_after(&self, unix_seconds: f64) -> anyhow::Result<()> {
        eventually(DEADLINE, &format!("a scrape after {unix_seconds}"), || async {
            let samples = self.query("timestamp(mcp_proxy_build_info)").await?;
            let latest = samples.first().and_then(sample_value);
            if latest.is_some_and(|at| at > unix_seconds) {
                return Ok(());
            }
            Err(anyhow::anyhow!("latest {latest:?}; targets: {}\n{}", self.targets().await, self.log()))
        })
        .await
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
/// upstreams, `$instance` as "All" (`.*`), the interval variables as fixed windows.
fn substitute(expr: &str, upstreams: &str) -> String {
    let substituted = [
        ("${upstream}", upstreams),
        ("$upstream", upstreams),
        ("${instance}", ".*"),
        ("$instance", ".*"),
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

/// A Prometheus API sample's value (`[time, "value"]`), or its time with `timestamp()`.
fn sample_value(sample: &Value) -> Option<f64> {
    sample["value"][1].as_str()?.parse().ok()
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_secs_f64()
}
