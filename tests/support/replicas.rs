//! Replicas of the proxy behind a load balancer, sharing a Redis: a real `redis-server` and a real
//! `haproxy` (round-robin, no affinity, health-checked on `/readyz`) on free loopback ports, and
//! the real proxy binary as each replica with a `[cluster]` section. Debian's packages, installed
//! by `.ci/install-cluster.sh`.
//!
//! - [`Redis::start`]: a throwaway `redis-server` (no persistence).
//! - [`Replicas::start`]: `n` replicas of one config behind haproxy; [`Replicas::url`] is the
//!   balancer's `/mcp`. [`Replicas::kill`] sends one `SIGKILL`.

use std::process::Stdio;

use anyhow::Context;
use tokio::process::{Child, Command};

use super::proxy::{ProxyProcess, toml_str};
use super::{DEADLINE, eventually};

/// The cluster secret of the replicas the tests start (from this variable).
pub const SECRET_ENV: &str = "PROXY_CLUSTER_SECRET";
pub const SECRET: &str = "the replicas' shared secret, 32 bytes at least";

/// A throwaway `redis-server`; killed on drop.
pub struct Redis {
    pub url: String,
    _child: Child,
    _dir: tempfile::TempDir,
}

impl Redis {
    pub async fn start() -> anyhow::Result<Self> {
        let port = free_port()?;
        let dir = tempfile::tempdir()?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("spawn redis-server (installed by .ci/install-cluster.sh)")?;
        let address = format!("127.0.0.1:{port}");
        eventually(DEADLINE, "redis-server accepts connections", || tokio::net::TcpStream::connect(&address)).await?;
        Ok(Self { url: format!("redis://{address}/0"), _child: child, _dir: dir })
    }
}

/// Replicas behind haproxy; everything killed on drop.
pub struct Replicas {
    /// The load balancer's MCP endpoint.
    pub url: String,
    pub replicas: Vec<ProxyProcess>,
    _haproxy: Child,
    _dir: tempfile::TempDir,
}

impl Replicas {
    /// `n` replicas (`r0`, `r1`, …) of `config` (without its `[cluster]` section) on `redis`,
    /// each with `env` too, behind haproxy; ready once haproxy sees every replica up.
    pub async fn start(redis: &Redis, n: usize, config: &str, env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let mut replicas = Vec::new();
        for i in 0..n {
            replicas.push(replica(redis, &format!("r{i}"), SECRET, config, env).await?);
        }
        let port = free_port()?;
        let dir = tempfile::tempdir()?;
        let cfg = dir.path().join("haproxy.cfg");
        let mut backends = Vec::new();
        for replica in &replicas {
            let mcp = replica.url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
            let admin = replica.admin_url().await?;
            let admin_port = admin.rsplit(':').next().context("admin port")?.to_owned();
            backends.push((mcp, admin_port));
        }
        std::fs::write(&cfg, haproxy_config(port, &backends))?;
        let haproxy = Command::new("haproxy")
            .arg("-f")
            .arg(&cfg)
            .arg("-db")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("spawn haproxy (installed by .ci/install-cluster.sh)")?;
        let stats = format!("http://127.0.0.1:{port}/haproxy-up");
        let client = reqwest::Client::new();
        eventually(DEADLINE, "haproxy sees every replica up", || {
            let request = client.get(&stats).send();
            async move {
                let status = request.await?.status();
                anyhow::ensure!(status.is_success(), "haproxy answers {status}");
                Ok::<_, anyhow::Error>(())
            }
        })
        .await?;
        Ok(Self { url: format!("http://127.0.0.1:{port}/mcp"), replicas, _haproxy: haproxy, _dir: dir })
    }

    /// `kill -9` replica `i`.
    pub async fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        let pid = self.replicas[i].pid().context("the replica runs")?;
        let status = Command::new("kill").args(["-9", &pid.to_string()]).status().await?;
        anyhow::ensure!(status.success(), "kill -9 {pid}");
        Ok(())
    }
}

/// One replica of `config` in a cluster of `secret` on `redis`.
pub async fn replica(
    redis: &Redis,
    id: &str,
    secret: &str,
    config: &str,
    env: &[(&str, &str)],
) -> anyhow::Result<ProxyProcess> {
    let cluster = format!(
        "[cluster]\nredis_url = {}\nsecret_env = \"{SECRET_ENV}\"\nreplica_id = \"{id}\"\nheartbeat = \"500ms\"\n\n",
        toml_str(&redis.url)
    );
    let mut env = env.to_vec();
    env.push((SECRET_ENV, secret));
    ProxyProcess::start_with(&format!("{cluster}{config}"), &[], &env).await
}

/// Round-robin, no affinity; a replica leaves the pool when its `/readyz` fails or it stops
/// accepting connections, and a request refused by a dead one is sent to the next.
fn haproxy_config(port: u16, replicas: &[(String, String)]) -> String {
    let mut servers = String::new();
    for (i, (mcp, admin_port)) in replicas.iter().enumerate() {
        servers.push_str(&format!("    server r{i} {mcp} check port {admin_port} inter 300ms fall 1 rise 1\n"));
    }
    format!(
        "global\n    maxconn 2000\n\n\
         defaults\n    mode http\n    timeout connect 2s\n    timeout client 1h\n    timeout server 1h\n    \
         timeout tunnel 1h\n    retries 3\n    option redispatch 1\n\n\
         frontend mcp\n    bind 127.0.0.1:{port}\n    monitor-uri /haproxy-up\n    \
         monitor fail if {{ nbsrv(replicas) lt {n} }}\n    default_backend replicas\n\n\
         backend replicas\n    balance roundrobin\n    option httpchk\n    \
         http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host 127.0.0.1\n{servers}",
        n = replicas.len()
    )
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
