//! Scenario `traces`: what traces cost on a cache hit. One fixture upstream over HTTP and one
//! proxy per telemetry setting — off, on at `always_on`, on at a 1 % `traceidratio` — each
//! exporting (when on) over OTLP/HTTP to a sink here that answers every export at once. Hosts
//! are 2026-07-28 raw clients reading one warm URI, plain or sending `_meta.traceparent` and
//! `tracestate` with every request (a traced host: it must stay on the fast path). Per cell: the
//! proxy's CPU per hit and p50 at concurrency 8, in interleaved rounds; the figures are ratios to
//! "off, plain" within the run.

use std::time::{Duration, Instant};

use futures::future::try_join_all;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use crate::Options;
use crate::clients::Percentiles;
use crate::processes::{self, Fixture, ProxyProcess, UPSTREAM_TTL_MS, http_upstream};
use crate::raw::{HostEra, RawClient};
use crate::report::{Report, Target, Unit};

const URI: &str = "fx+fx://fx/item/1";
const CONCURRENCY: usize = 8;

/// One proxy's telemetry setting.
#[derive(Clone, Copy, PartialEq)]
enum Setting {
    Off,
    AlwaysOn,
    OnePercent,
}

impl Setting {
    fn label(self) -> &'static str {
        match self {
            Setting::Off => "off",
            Setting::AlwaysOn => "always_on",
            Setting::OnePercent => "1 % ratio",
        }
    }

    /// The standard variables that say it, exporting to `sink`.
    fn env(self, sink: &str) -> Vec<(&'static str, String)> {
        let on = |sampler: &str, arg: &str| {
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", sink.to_string()),
                ("OTEL_TRACES_SAMPLER", sampler.to_string()),
                ("OTEL_TRACES_SAMPLER_ARG", arg.to_string()),
            ]
        };
        match self {
            Setting::Off => Vec::new(),
            Setting::AlwaysOn => on("always_on", "1"),
            Setting::OnePercent => on("traceidratio", "0.01"),
        }
    }
}

/// One timed combination: a setting, plain or traced hosts.
struct Cell {
    setting: Setting,
    traced: bool,
    pid: u32,
    clients: Vec<RawClient>,
    samples: Vec<Duration>,
    cpu: f64,
    requests: usize,
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let mut report = Report::new("traces");
    let fixture = Fixture::spawn(&["--ttl-ms", UPSTREAM_TTL_MS]).await?;
    let sink = Sink::start().await?;
    let config = http_upstream("fx", &fixture.url);
    let mut proxies = Vec::new();
    for setting in [Setting::Off, Setting::AlwaysOn, Setting::OnePercent] {
        let env = setting.env(&sink.endpoint);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        proxies.push((setting, ProxyProcess::start_with_env(&config, &env).await?));
    }
    let mut cells = Vec::new();
    for (setting, proxy) in &proxies {
        for traced in [false, true] {
            // The ratio sampler is for hosts that send no context (a traced one's decides).
            if *setting == Setting::OnePercent && traced {
                continue;
            }
            let mut clients = Vec::new();
            for _ in 0..CONCURRENCY {
                let mut client = RawClient::connect(&proxy.url, HostEra::Y2026).await?;
                if traced {
                    client = client.with_trace_context();
                }
                client.read(URI).await?;
                clients.push(client);
            }
            cells.push(Cell {
                setting: *setting,
                traced,
                pid: proxy.pid()?,
                clients,
                samples: Vec::new(),
                cpu: 0.0,
                requests: 0,
            });
        }
    }
    let (rounds, per_client) = if options.quick { (3, 100) } else { (8, 250) };
    for _ in 0..rounds {
        for cell in &mut cells {
            cell.time(per_client).await?;
        }
    }
    let base = cells.iter().find(|cell| cell.setting == Setting::Off && !cell.traced).map(Cell::cpu_per_hit);
    let base = base.unwrap_or(f64::NAN);
    let base_p50 = cells[0].p50();
    for cell in &cells {
        let name = format!("{}, {} host", cell.setting.label(), if cell.traced { "traced" } else { "plain" });
        report.add(format!("{name}: proxy CPU per hit"), cell.cpu_per_hit() * 1e6, Unit::Micros);
        report.millis(format!("{name}: p50 at c{CONCURRENCY}"), cell.p50());
        let ratio = cell.cpu_per_hit() / base;
        if cell.setting == Setting::Off && cell.traced {
            report.check(format!("{name}: CPU per hit / off, plain"), ratio, Unit::Ratio, Target::AtMost(1.15));
        } else {
            report.add(format!("{name}: CPU per hit / off, plain"), ratio, Unit::Ratio);
        }
        report.add(
            format!("{name}: p50 / off, plain"),
            cell.p50().as_secs_f64() / base_p50.as_secs_f64().max(1e-9),
            Unit::Ratio,
        );
    }
    report.add("OTLP export requests the sink answered", sink.answered() as f64, Unit::Count);
    report.note(format!(
        "2026-07-28 hosts reading one warm URI; {CONCURRENCY} at once; {rounds} interleaved rounds of \
         {per_client} reads per host per cell; a traced host sends _meta traceparent and tracestate"
    ));
    Ok(report)
}

impl Cell {
    /// `per_client` reads on each client at once; the proxy's CPU over them.
    async fn time(&mut self, per_client: usize) -> anyhow::Result<()> {
        let cpu_before = processes::cpu_seconds(self.pid)?;
        let runs = self.clients.iter_mut().map(|client| async move {
            let mut samples = Vec::with_capacity(per_client);
            for _ in 0..per_client {
                let started = Instant::now();
                client.read(URI).await?;
                samples.push(started.elapsed());
            }
            anyhow::Ok(samples)
        });
        for samples in try_join_all(runs).await? {
            self.samples.extend(samples);
        }
        self.cpu += processes::cpu_seconds(self.pid)? - cpu_before;
        self.requests += per_client * self.clients.len();
        Ok(())
    }

    fn cpu_per_hit(&self) -> f64 {
        self.cpu / self.requests.max(1) as f64
    }

    fn p50(&self) -> Duration {
        Percentiles::of(self.samples.clone()).p50
    }
}

/// An OTLP/HTTP endpoint that answers every export `200` at once, counting them.
struct Sink {
    endpoint: String,
    answered: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Sink {
    async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let answered = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = answered.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let _ = answer_exports(stream, &counter).await;
                });
            }
        });
        Ok(Self { endpoint, answered, task })
    }

    fn answered(&self) -> u64 {
        self.answered.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Each request on one connection: its head, its `content-length` body, then `200`.
async fn answer_exports(stream: tokio::net::TcpStream, answered: &std::sync::atomic::AtomicU64) -> anyhow::Result<()> {
    let mut stream = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if stream.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse()?;
            }
        }
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await?;
        stream.get_mut().write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await?;
        answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}
