//! A real Redis for the cluster tier: Debian's `redis-server` on a free loopback port, no
//! persistence, plain or speaking only TLS (a certificate for 127.0.0.1 from a CA made for it);
//! [`Redis::stop`] kills it, [`Redis::restart`] brings it back on the same port. Killed on drop.
//! `redis-server` and `haproxy` (the cluster's balancer) come from `.ci/install-cluster.sh`
//! ([`ensure_installed`]).

use std::process::Stdio;

use anyhow::{Context, bail};
use tokio::process::{Child, Command};

use super::{DEADLINE, eventually, repo_root};

/// `redis-server` on a free loopback port; killed on drop.
pub struct Redis {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// Only TLS (`rediss://`), with a certificate for 127.0.0.1 from a CA made for it.
    tls: bool,
}

impl Redis {
    pub async fn start() -> anyhow::Result<Self> {
        mcp_resource_proxy::crypto::install();
        ensure_installed("redis-server", &["--version"])?;
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let mut redis = Self { port, dir, child: None, tls: false };
        redis.spawn().await?;
        Ok(redis)
    }

    /// The same speaking only TLS: its CA (PEM) is [`Redis::ca_file`].
    pub async fn start_tls() -> anyhow::Result<Self> {
        mcp_resource_proxy::crypto::install();
        ensure_installed("redis-server", &["--version"])?;
        let dir = tempfile::tempdir()?;
        write_tls_files(dir.path())?;
        let mut redis = Self { port: free_port()?, dir, child: None, tls: true };
        redis.spawn().await?;
        Ok(redis)
    }

    /// The CA that issued a TLS Redis's certificate (PEM).
    pub fn ca_file(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// `redis://127.0.0.1:PORT/0` (`rediss://` for a TLS one).
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/0", self.port)
    }

    /// Kill it (no goodbye to its clients, as a crash or a partition).
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        Ok(())
    }

    /// Start it again on the same port (empty: no persistence).
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop().await?;
        self.spawn().await
    }

    /// A connection of the test's own (to look at what the replicas wrote).
    pub async fn connection(&self) -> anyhow::Result<redis::aio::MultiplexedConnection> {
        Ok(redis::Client::open(self.url())?.get_multiplexed_async_connection().await?)
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::File::create(self.dir.path().join("redis.log"))?;
        let port = self.port.to_string();
        let ports = match self.tls {
            false => vec!["--port", &port],
            true => vec!["--port", "0", "--tls-port", &port, "--tls-auth-clients", "no"],
        };
        let tls_files =
            ["--tls-cert-file", "server.pem", "--tls-key-file", "server.key", "--tls-ca-cert-file", "ca.pem"];
        let child = Command::new("redis-server")
            .args(ports)
            .args(if self.tls { &tls_files[..] } else { &[] })
            .current_dir(self.dir.path())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("spawn redis-server")?;
        self.child = Some(child);
        if self.tls {
            // The test process does not trust the CA: a replica's `/status` says when TLS works.
            let address = format!("127.0.0.1:{}", self.port);
            return eventually(DEADLINE, "redis-server listens for TLS", || tokio::net::TcpStream::connect(&address))
                .await
                .map(drop)
                .with_context(|| std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default());
        }
        let url = self.url();
        eventually(DEADLINE, "redis-server answers PING", || async {
            let mut connection = redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?;
            let pong: String = redis::cmd("PING").query_async(&mut connection).await?;
            if pong == "PONG" { Ok(()) } else { Err(anyhow::anyhow!("PING answered {pong}")) }
        })
        .await
        .with_context(|| std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default())
    }
}

/// A CA (`ca.pem`) and a certificate it issued for 127.0.0.1 (`server.pem`, `server.key`) in `dir`.
fn write_tls_files(dir: &std::path::Path) -> anyhow::Result<()> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "test Redis CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let server_key = rcgen::KeyPair::generate()?;
    let server = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?.signed_by(&server_key, &issuer)?;
    std::fs::write(dir.join("ca.pem"), ca.pem())?;
    std::fs::write(dir.join("server.pem"), server.pem())?;
    std::fs::write(dir.join("server.key"), server_key.serialize_pem())?;
    Ok(())
}

/// A port no one listens on now, on 127.0.0.1.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `program` runs, installing it the way CI does (Debian's packages; needs root) if not.
pub(super) fn ensure_installed(program: &str, version_args: &[&str]) -> anyhow::Result<()> {
    let runs = || std::process::Command::new(program).args(version_args).output();
    if !runs().is_ok_and(|output| output.status.success()) {
        let script = repo_root().join(".ci/install-cluster.sh");
        let installed = std::process::Command::new("bash").arg(script).status();
        eprintln!("installed redis-server and haproxy: {installed:?}");
    }
    match runs() {
        Ok(output) if output.status.success() => Ok(()),
        other => bail!(
            "`{program}` is not installed or does not run ({other:?}): run `bash .ci/install-cluster.sh` \
             (`bash .ci/run` does) — the cluster tier needs Debian's redis-server and haproxy"
        ),
    }
}
