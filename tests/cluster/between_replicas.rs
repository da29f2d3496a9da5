//! What travels between replicas for a per-principal upstream session held by another one, and
//! how: a request forwarded to an owner whose upstream cannot start is told why, as a local host
//! is; with `peer_tls` the replicas reach each other over TLS only, and one whose certificate
//! the cluster's CA did not issue is refused (the request runs where it landed, as for an
//! unreachable owner); a replica at its hosts' connection cap still serves other replicas, and
//! their connections take no host's place. Two replicas and a real Redis; each host connects
//! to one replica directly, so one of them is always the owner's and the other's requests are
//! forwarded. Certificates are made here (rcgen).

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use mcp_resource_proxy::cluster::ClusterKeys;
use mcp_resource_proxy::cluster::keys::label;
use mcp_resource_proxy::cluster::session_pass::{self, Identity, Passes};

use crate::support::cluster::{Replicas, SECRET, SECRET_ENV, cluster_when, forwards, with_cluster};
use crate::support::proxy::{
    ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, fixture_upstream, metric_value, toml_str,
};
use crate::support::redis_server::Redis;
use crate::support::{DEADLINE, eventually};

const ALICE_TOKEN: &str = "alice-tok-between-replicas-3d58";
const BOB_TOKEN: &str = "bob-tok-between-replicas-81fa";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];

type Host = RunningService<RoleClient, ()>;

/// A 2025 host of the principal whose bearer token is `token`, on `url`.
async fn host(url: &str, token: &str) -> anyhow::Result<Host> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    Ok(tokio::time::timeout(DEADLINE, ().serve(transport)).await.context("connect")??)
}

/// The message and `data.cause` of the error a read of `uri` gets from `host`, once it has a
/// cause (before the first attempt to start the session ended, it has none).
async fn told_why(host: &Host, uri: &str) -> anyhow::Result<(String, String)> {
    eventually(DEADLINE, "the read names why the upstream cannot start", || async {
        let error = match host.peer().read_resource(ReadResourceRequestParams::new(uri)).await {
            Err(rmcp::ServiceError::McpError(error)) => error,
            other => anyhow::bail!("{other:?}"),
        };
        let cause = error.data.as_ref().and_then(|data| data["cause"].as_str()).map(str::to_owned);
        let cause = cause.with_context(|| format!("no cause in {error:?}"))?;
        Ok((error.message.to_string(), cause))
    })
    .await
}

/// A per-principal stdio upstream that exits at once, naming a secret of its entry on stderr:
/// alice's read is answered with the cause on both replicas, her owner's and the other one,
/// which forwards it (counted `failed`: the owner answered with an error). The secret stays
/// masked on the way.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_forwarded_to_an_owner_whose_upstream_cannot_start_is_told_why() -> anyhow::Result<()> {
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let quits = "echo \"no luck with key $API_KEY\" >&2; exit 3";
    let upstream = format!(
        "[[upstreams]]\nname = \"quits\"\ncommand = \"sh\"\nargs = [\"-c\", {}]\n\
         env = {{ API_KEY = \"do-not-show-me\" }}\nsession = \"per-principal\"\nrequired = false\n\n",
        toml_str(quits)
    );
    let config = alice_and_bob_under_policies("", policies.path(), &upstream);
    let cluster = Replicas::start(2, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 2)).await?;
    }
    for replica in &cluster.replicas {
        let alice = host(&replica.url, ALICE_TOKEN).await?;
        let (message, cause) = told_why(&alice, "quits+fx://fx/item/1").await?;
        assert_eq!(cause, "`sh` exited (exit status: 3): no luck with key ***", "{}", replica.url);
        assert!(message.starts_with("upstream `quits` is not connected (`sh` exited"), "{message}");
        assert!(!message.contains("do-not-show-me"), "{message}");
        alice.cancel().await?;
    }
    assert!(forwards(&cluster.replicas, "failed").await? >= 1.0, "one replica forwarded alice's read");
    Ok(())
}

/// Replicas of the test's own configs (one each), sharing a Redis, without a balancer.
struct Cluster {
    replicas: Vec<ProxyProcess>,
    _redis: Redis,
    _policies: tempfile::TempDir,
}

impl Cluster {
    /// Replicas `replica-0`… of the fixture as `fx`, per principal, with `server` as the
    /// `[server]` lines, each with its own lines added to `[cluster]`; returns once each can
    /// reach every other.
    async fn start(server: &str, cluster_lines: &[String]) -> anyhow::Result<Cluster> {
        let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
        let upstream = format!("{}\nsession = \"per-principal\"\n\n", fixture_upstream("fx", &[]).trim_end());
        let config = alice_and_bob_under_policies(server, policies.path(), &upstream);
        let redis = Redis::start().await?;
        let env = [TOKENS[0], TOKENS[1], (SECRET_ENV, SECRET)];
        let mut replicas = Vec::new();
        for (index, lines) in cluster_lines.iter().enumerate() {
            let config = format!("{}{lines}\n", with_cluster(&config, &redis.url(), &format!("replica-{index}")));
            replicas.push(ProxyProcess::start_with(&config, &[], &env).await?);
        }
        let count = replicas.len();
        for replica in &replicas {
            cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == count)).await?;
        }
        Ok(Cluster { replicas, _redis: redis, _policies: policies })
    }
}

/// A CA made here, which issues certificates for 127.0.0.1.
struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> anyhow::Result<Ca> {
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let pem = params.self_signed(&key)?.pem();
        Ok(Ca { issuer: rcgen::Issuer::new(params, key), pem })
    }

    /// A certificate for 127.0.0.1 and its key, written as `<name>.pem` and `<name>.key` in
    /// `dir`, with `cas` (these CAs' certificates, one file) as `ca_file`: the `peer_tls` line.
    fn issue(&self, dir: &Path, name: &str, cas: &[&Ca]) -> anyhow::Result<String> {
        let key = rcgen::KeyPair::generate()?;
        let certificate =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])?.signed_by(&key, &self.issuer)?;
        let (cert_file, key_file, ca_file) =
            (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")), dir.join(format!("{name}-ca.pem")));
        std::fs::write(&cert_file, certificate.pem())?;
        std::fs::write(&key_file, key.serialize_pem())?;
        std::fs::write(&ca_file, cas.iter().map(|ca| ca.pem.as_str()).collect::<String>())?;
        let path = |path: &Path| toml_str(path.to_str().expect("a UTF-8 path"));
        Ok(format!(
            "peer_tls = {{ cert_file = {}, key_file = {}, ca_file = {} }}",
            path(&cert_file),
            path(&key_file),
            path(&ca_file)
        ))
    }
}

/// The text of `fx+fx://fx/item/1` as alice reads it through `replica`.
async fn read_through(replica: &ProxyProcess) -> anyhow::Result<String> {
    read_as(replica, ALICE_TOKEN).await
}

/// The text of `fx+fx://fx/item/1` as the principal whose token is `token` reads it through
/// `replica`.
async fn read_as(replica: &ProxyProcess, token: &str) -> anyhow::Result<String> {
    let alice = host(&replica.url, token).await?;
    let read = alice.peer().read_resource(ReadResourceRequestParams::new("fx+fx://fx/item/1"));
    let result = tokio::time::timeout(DEADLINE, read).await.context("the read hung")??;
    alice.cancel().await?;
    match result.contents.first() {
        Some(ResourceContents::TextResourceContents { text, .. }) => Ok(text.clone()),
        other => anyhow::bail!("no text in {other:?}"),
    }
}

/// A request under a pass another replica makes (the cluster's key, for `replica-0`), posted
/// over plain HTTP to `replica`'s session endpoint: its status and answer.
async fn plain_forward(replica: &ProxyProcess) -> anyhow::Result<(u16, String)> {
    let url = format!("{}{}", replica.url.strip_suffix("/mcp").context("an /mcp URL")?, session_pass::PATH);
    let passes = Passes::new("replica-9", &ClusterKeys::new(SECRET.as_bytes()).derive(label::SESSION_PASS));
    let identity = Identity { principal: "alice".into(), upstream: "fx".into(), host: None };
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "plain", "version": "1" } }
    });
    let response = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header(session_pass::HEADER, passes.make("replica-0", &identity, None, None))
        .body(initialize.to_string())
        .send()
        .await?;
    Ok((response.status().as_u16(), response.text().await?))
}

/// Two replicas with `peer_tls`, certificates of one CA: alice's and bob's reads through each
/// are served, one of each forwarded to its owner over TLS (none fell back); a request marked with the
/// cluster's key but sent over plain HTTP is refused and not run.
#[tokio::test(flavor = "multi_thread")]
async fn replicas_with_peer_tls_forward_to_each_other_over_tls_only() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = Ca::new("cluster CA")?;
    let lines = [ca.issue(dir.path(), "replica-0", &[&ca])?, ca.issue(dir.path(), "replica-1", &[&ca])?];
    let cluster = Cluster::start("", &lines).await?;
    for replica in &cluster.replicas {
        for token in [ALICE_TOKEN, BOB_TOKEN] {
            assert_eq!(read_as(replica, token).await?, "item 1 v1", "{}", replica.url);
        }
    }
    // alice's session is replica-1's and bob's replica-0's: each way once.
    assert_eq!(forwards(&cluster.replicas, "forwarded").await?, 2.0, "one read of each was forwarded");
    assert_eq!(forwards(&cluster.replicas, "served").await?, 2.0, "and served by the owner");
    assert_eq!(forwards(&cluster.replicas, "fallback").await?, 0.0);
    let (status, answer) = plain_forward(&cluster.replicas[0]).await?;
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("not over TLS"), "{answer}");
    assert_eq!(forwards(&cluster.replicas, "served").await?, 2.0, "the plain request was not run");
    Ok(())
}

/// replica-1's certificate comes from a CA the cluster's (replica-0's) is not: replica-0
/// refuses it both ways (as the server it connects to, and as a client connecting to it), so
/// nothing is forwarded between them. alice's and bob's reads through both are still served,
/// each on a session of the replica it landed on (`fallback`, logged, once each way), and no
/// owner served a request of the other.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_whose_certificate_the_clusters_ca_did_not_issue_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (ca, rogue) = (Ca::new("cluster CA")?, Ca::new("another CA")?);
    // replica-1 trusts both CAs (so it would take replica-0's certificate), its own from the other.
    let lines = [ca.issue(dir.path(), "replica-0", &[&ca])?, rogue.issue(dir.path(), "replica-1", &[&ca, &rogue])?];
    let cluster = Cluster::start("", &lines).await?;
    // alice's session is replica-1's (replica-0 refuses its server certificate), bob's
    // replica-0's (which refuses replica-1's client certificate).
    for replica in &cluster.replicas {
        for token in [ALICE_TOKEN, BOB_TOKEN] {
            let read = read_as(replica, token).await.with_context(|| replica.matching(&["cluster"]).join("\n"))?;
            assert_eq!(read, "item 1 v1", "{}", replica.url);
        }
    }
    assert_eq!(forwards(&cluster.replicas, "served").await?, 0.0, "no replica served the other");
    assert_eq!(forwards(&cluster.replicas, "forwarded").await?, 0.0);
    for replica in &cluster.replicas {
        let fallback = forwards([replica], "fallback").await?;
        assert_eq!(fallback, 1.0, "{}: the read that was not its owner's ran here", replica.url);
        let logged = replica.logs().iter().any(|line| line.contains("unreachable"));
        assert!(logged, "{}: the fallback is logged", replica.url);
    }
    Ok(())
}

/// What a host's connection sends to take a place: a request with a complete head.
const HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/// A connection to `replica`'s MCP listener that has sent a request and heard its answer begin
/// (it holds a host's place while open).
async fn host_connection(replica: &ProxyProcess) -> anyhow::Result<TcpStream> {
    let address = replica.url.strip_prefix("http://").and_then(|rest| rest.strip_suffix("/mcp")).context("address")?;
    let mut stream = TcpStream::connect(address).await?;
    stream.write_all(HEAD).await?;
    let mut answer = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut answer)).await.context("not served")??;
    anyhow::ensure!(answer.starts_with(b"HTTP/1.1 "), "{}", String::from_utf8_lossy(&answer));
    Ok(stream)
}

/// `mcp_proxy_listener_connections{kind}` of `replica`.
async fn connections(replica: &ProxyProcess, kind: &str) -> anyhow::Result<f64> {
    let metrics = replica.admin_get("/metrics").await?;
    metric_value(&metrics, &format!("mcp_proxy_listener_connections{{kind=\"{kind}\"}}")).context("no gauge")
}

/// Two replicas with `server.max_connections = 4`. Each in turn has its hosts' places all taken
/// (4 connections that sent a request and stay open) while alice reads through the other: the
/// read is served, one of the two forwarded to the full owner over a connection it opened then.
/// That replica's connection counts as a peer's: a host still connects to the full owner once
/// one of its 4 leaves, while the other replica's connection stays open.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_at_its_hosts_connection_cap_still_serves_the_others_and_they_take_no_hosts_place()
-> anyhow::Result<()> {
    const CAP: usize = 4;
    let cluster = Cluster::start("max_connections = 4", &[String::new(), String::new()]).await?;
    let mut owner = None;
    for (full, other) in [(0, 1), (1, 0)] {
        let mut hosts = Vec::new();
        for _ in 0..CAP {
            hosts.push(host_connection(&cluster.replicas[full]).await?);
        }
        let before = forwards(&cluster.replicas, "forwarded").await?;
        let read = read_through(&cluster.replicas[other]).await;
        assert_eq!(read?, "item 1 v1", "through replica-{other} while replica-{full} is full");
        if forwards(&cluster.replicas, "forwarded").await? > before {
            owner = Some((full, hosts));
        }
    }
    let (full, mut hosts) = owner.context("one read was forwarded")?;
    let owner = &cluster.replicas[full];
    drop(hosts.pop());
    let fresh = eventually(DEADLINE, "a host connects to the full owner", || host_connection(owner)).await?;
    assert_eq!(connections(owner, "host").await?, CAP as f64);
    assert_eq!(connections(owner, "peer").await?, 1.0, "the peer's connection stayed open beside them");
    drop((fresh, hosts));
    assert_eq!(forwards(&cluster.replicas, "fallback").await?, 0.0);
    Ok(())
}
