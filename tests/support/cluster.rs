//! Several replicas of the proxy behind a load balancer, sharing one Redis ([`Redis`]) — all real
//! processes:
//!
//! - [`Replicas::start`]: N proxy binaries (`mcp-resource-proxy serve`) on one config plus a
//!   `[cluster]` section (the same secret, ids `replica-0`…), and `haproxy` in front of them:
//!   round-robin, no affinity, health-checked on each replica's `/readyz` (with the `Host` header
//!   the admin listener accepts; generous check timeouts, so a loaded machine marks none down); as
//!   the shipped `deploy/haproxy.cfg`, a request whose connection failed (a replica just killed,
//!   not yet marked down) goes to another replica (`retries 3`, `option redispatch 1`); every
//!   answer names its replica in `X-Replica`. A POST carrying `X-Replica-Pin: N` goes to
//!   `replica-N` while it is up (a test that must know which replica serves a host's request
//!   stream), and so does any request carrying `X-Replica-Route: N` (a test resuming a stream on
//!   a replica of its choosing); every other request, a GET resuming that stream included, is
//!   round-robin.
//!   [`Replicas::start_each`] adds lines of its own to each replica's `[cluster]` section (an
//!   `advertise_url` nobody listens on, say).
//!   The replicas start together.
//! - [`Replicas::restart`]: a killed replica started again (same config and id, new ports) and
//!   the balancer anew over the replicas.
//! - [`Replicas::wait_all_see`]: each replica's `/status` shows every replica.
//! - [`Balancer::start_config`]: haproxy on a configuration of the test's own (the shipped
//!   recipe's, its addresses moved to free ports).
//!
//! `redis-server` and `haproxy` come from `.ci/install-cluster.sh` (`bash .ci/run` runs it); a
//! test installs them that way on first use when they are missing. Everything is killed on drop.

use std::process::Stdio;

use anyhow::Context;
use serde_json::Value;
use tokio::process::{Child, Command};

use super::proxy::ProxyProcess;
use super::redis_server::{Redis, ensure_installed, free_port};
use super::{DEADLINE, eventually};

/// The secret every replica of a test cluster shares.
pub const SECRET: &str = "cluster-test-secret-5f1c0e2a9b7d4c3e8a6f";
/// The variable it is passed in (not `MCP_PROXY_…`: those are settings).
pub const SECRET_ENV: &str = "PROXY_CLUSTER_SECRET";
/// Heartbeats in tests: replicas see each other (and Redis's return) within a second or two.
pub const HEARTBEAT: &str = "300ms";

/// N replicas, their Redis and the load balancer in front.
pub struct Replicas {
    pub replicas: Vec<ProxyProcess>,
    pub redis: Redis,
    pub balancer: Balancer,
    /// Each replica's config and the environment they share, to start one again.
    configs: Vec<String>,
    env: Vec<(String, String)>,
}

impl Replicas {
    /// `count` replicas of `config` (which has no `[cluster]` section) with `env`, behind
    /// haproxy; returns once the balancer sees them all up and each sees all the others.
    pub async fn start(count: usize, config: &str, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        Self::start_each(count, config, env, |_| String::new()).await
    }

    /// The same, with `cluster_lines(index)` added to replica `index`'s `[cluster]` section.
    /// The replicas start together; each is ready when it wrote its ready file.
    pub async fn start_each(
        count: usize,
        config: &str,
        env: &[(&str, &str)],
        cluster_lines: impl Fn(usize) -> String,
    ) -> anyhow::Result<Self> {
        let redis = Redis::start().await?;
        let mut env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        env.push((SECRET_ENV.into(), SECRET.into()));
        let configs: Vec<String> = (0..count)
            .map(|index| with_cluster(config, &redis.url(), &format!("replica-{index}")) + &cluster_lines(index))
            .collect();
        let starting = configs.iter().map(|config| start_replica(config, &env));
        let replicas = futures::future::try_join_all(starting).await?;
        let balancer = Balancer::start(&replicas).await?;
        let cluster = Self { replicas, redis, balancer, configs, env };
        cluster.wait_all_see(count).await?;
        Ok(cluster)
    }

    /// Replica `index` again, after it was killed: once the others see it gone, the same config
    /// and id on new ports, and a new balancer over the replicas (its URL changes); returns once
    /// the balancer sees them all up and each sees all the others.
    pub async fn restart(&mut self, index: usize) -> anyhow::Result<()> {
        let count = self.replicas.len();
        for (other, replica) in self.replicas.iter().enumerate().filter(|(other, _)| *other != index) {
            let gone = |cluster: &Value| cluster["replicas"].as_array().is_some_and(|r| r.len() == count - 1);
            cluster_when(replica, gone).await.with_context(|| format!("replica-{other} sees replica-{index} gone"))?;
        }
        self.replicas[index] = start_replica(&self.configs[index], &self.env).await?;
        self.balancer = Balancer::start(&self.replicas).await?;
        self.wait_all_see(count).await.map(drop)
    }

    /// The MCP endpoint through the load balancer.
    pub fn url(&self) -> &str {
        &self.balancer.url
    }

    /// Wait until every replica's `/status` lists `count` replicas and Redis up; their reports.
    pub async fn wait_all_see(&self, count: usize) -> anyhow::Result<Vec<Value>> {
        let mut reports = Vec::new();
        for replica in &self.replicas {
            reports.push(
                cluster_when(replica, |cluster| {
                    cluster["redis"]["state"] == "up"
                        && cluster["replicas"].as_array().is_some_and(|r| r.len() == count)
                })
                .await?,
            );
        }
        Ok(reports)
    }

    /// The index of the one replica holding a session of `upstream`, once one alone does.
    pub async fn the_one_holding_a_session(&self, upstream: &str) -> anyhow::Result<usize> {
        eventually(DEADLINE, "one replica holds the session", || async {
            let mut holding = Vec::new();
            for (index, replica) in self.replicas.iter().enumerate() {
                if replica.upstream_status(upstream).await?["sessions"].as_u64() == Some(1) {
                    holding.push(index);
                }
            }
            match holding.as_slice() {
                [one] => Ok(*one),
                other => Err(anyhow::anyhow!("replicas holding a session of {upstream}: {other:?}")),
            }
        })
        .await
    }
}

/// One replica of `config` with `env`, ready.
async fn start_replica(config: &str, env: &[(String, String)]) -> anyhow::Result<ProxyProcess> {
    let env: Vec<(&str, &str)> = env.iter().map(|(name, value)| (name.as_str(), value.as_str())).collect();
    ProxyProcess::start_with(config, &[], &env).await
}

/// `replica`'s `cluster` in `/status`, once `done` holds for it.
pub async fn cluster_when(replica: &ProxyProcess, done: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
    eventually(DEADLINE, "the cluster gets there in /status", || async {
        let status = replica.status().await?;
        let cluster = status["cluster"].clone();
        if done(&cluster) { Ok(cluster) } else { Err(anyhow::anyhow!("{status}")) }
    })
    .await
}

/// The sum of `mcp_proxy_cluster_forwards_total{outcome}` over `replicas`.
pub async fn forwards<'a>(replicas: impl IntoIterator<Item = &'a ProxyProcess>, outcome: &str) -> anyhow::Result<f64> {
    let needle = format!("mcp_proxy_cluster_forwards_total{{outcome=\"{outcome}\"}}");
    let mut sum = 0.0;
    for replica in replicas {
        let metrics = replica.admin_get("/metrics").await?;
        let lines = metrics.lines().filter(|line| line.starts_with(&needle));
        sum += lines.filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok()).sum::<f64>();
    }
    Ok(sum)
}

/// `config` with a `[cluster]` section for replica `id` of the test cluster at `redis_url`.
pub fn with_cluster(config: &str, redis_url: &str, id: &str) -> String {
    format!(
        "{config}\n[cluster]\nredis_url = \"{redis_url}\"\nsecret_env = \"{SECRET_ENV}\"\nreplica_id = \"{id}\"\nheartbeat = \"{HEARTBEAT}\"\n"
    )
}

/// `haproxy` in front of the replicas: round-robin, no affinity; killed on drop.
pub struct Balancer {
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    stats: String,
    dir: tempfile::TempDir,
    _child: Child,
}

impl Balancer {
    async fn start(replicas: &[ProxyProcess]) -> anyhow::Result<Self> {
        ensure_installed("haproxy", &["-v"])?;
        let dir = tempfile::tempdir()?;
        let (port, stats) = (free_port()?, free_port()?);
        let (mut servers, mut pins) = (String::new(), String::new());
        for (index, replica) in replicas.iter().enumerate() {
            let mcp = address_of(&replica.url)?;
            let admin = address_of(&replica.admin_url().await?)?;
            let admin_port = admin.rsplit_once(':').context("admin port")?.1;
            servers.push_str(&format!("  server replica-{index} {mcp} check port {admin_port}\n"));
            pins.push_str(&format!(
                "  use-server replica-{index} if {{ req.hdr(x-replica-pin) -m str {index} }} METH_POST\n\
                 \x20 use-server replica-{index} if {{ req.hdr(x-replica-route) -m str {index} }}\n"
            ));
        }
        let config = format!(
            "global\n  maxconn 512\n\
             defaults\n  mode http\n  timeout connect 2s\n  timeout client 120s\n  timeout server 120s\n  timeout check 5s\n\
             frontend mcp\n  bind 127.0.0.1:{port}\n  default_backend replicas\n\
             backend replicas\n  balance roundrobin\n  retries 3\n  option redispatch 1\n  option httpchk\n\
             \x20 http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host 127.0.0.1\n\
             \x20 http-response set-header X-Replica %s\n\
             \x20 default-server inter 500ms fall 3 rise 1\n{pins}{servers}\
             listen stats\n  bind 127.0.0.1:{stats}\n  stats enable\n  stats uri /stats\n"
        );
        Self::start_config(dir, &config, port, stats, replicas.len()).await
    }

    /// `haproxy` on `config` (written into `dir`), whose frontend binds 127.0.0.1:`port` and whose
    /// statistics (CSV) are at 127.0.0.1:`stats`/stats, with `count` servers `replica-…` in the
    /// backend `replicas`; returns once haproxy sees them all up.
    pub async fn start_config(
        dir: tempfile::TempDir,
        config: &str,
        port: u16,
        stats: u16,
        count: usize,
    ) -> anyhow::Result<Self> {
        ensure_installed("haproxy", &["-v"])?;
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, config)?;
        let log = std::fs::File::create(dir.path().join("haproxy.log"))?;
        let child = Command::new("haproxy")
            .arg("-f")
            .arg(&path)
            .arg("-db")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("spawn haproxy")?;
        let balancer = Self {
            url: format!("http://127.0.0.1:{port}/mcp"),
            stats: format!("http://127.0.0.1:{stats}/stats;csv"),
            dir,
            _child: child,
        };
        balancer.wait_servers(count, "UP").await?;
        Ok(balancer)
    }

    /// Wait until `count` servers have `state` (`UP`, `DOWN`) in haproxy's statistics.
    pub async fn wait_servers(&self, count: usize, state: &str) -> anyhow::Result<()> {
        eventually(DEADLINE, &format!("haproxy sees {count} replicas {state}"), || async {
            let csv = reqwest::get(&self.stats).await?.text().await?;
            let rows = servers(&csv);
            let matching = rows.iter().filter(|(_, status)| status.starts_with(state)).count();
            if matching == count { Ok(()) } else { Err(anyhow::anyhow!("{rows:?}\n{}", self.log())) }
        })
        .await
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("haproxy.log")).unwrap_or_default()
    }
}

/// `(server, status)` of every replica row in haproxy's CSV statistics.
fn servers(csv: &str) -> Vec<(String, String)> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().trim_start_matches("# ").split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name);
    let (Some(pxname), Some(svname), Some(status)) = (column("pxname"), column("svname"), column("status")) else {
        return Vec::new();
    };
    lines
        .map(|line| line.split(',').collect::<Vec<_>>())
        .filter(|row| {
            row.get(pxname) == Some(&"replicas") && row.get(svname).is_some_and(|s| s.starts_with("replica-"))
        })
        .map(|row| (row[svname].to_string(), row.get(status).copied().unwrap_or_default().to_string()))
        .collect()
}

/// `host:port` of an `http://host:port/...` URL.
fn address_of(url: &str) -> anyhow::Result<String> {
    let rest = url.strip_prefix("http://").context("an http:// URL")?;
    Ok(rest.split('/').next().unwrap_or_default().to_string())
}
