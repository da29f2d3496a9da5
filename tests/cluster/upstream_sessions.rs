//! Per-principal upstream sessions across replicas (issue 29, item 1): such a session lives on
//! one replica (chosen by rendezvous hashing over the replicas alive), and a request for it that
//! lands on another is forwarded there. Three replicas behind haproxy (round-robin), a real
//! Redis, and a real Python SDK server over stdio that remembers one value per session
//! (`tests/py/session_server.py`; one process is one session): alice's and bob's hosts (rmcp)
//! always see their own value whichever replica answers, the cluster holds exactly two sessions,
//! and when alice's owner is killed (`kill -9`) her next calls succeed on a new owner (the old
//! session's state is lost). A per-host session lives on one replica the same way, per host
//! session. A forwarded request with a forged, altered, stale, misdirected or replayed mark is
//! refused and not run.

use anyhow::Context;
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams, ResourceContents};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use mcp_resource_proxy::cluster::ClusterKeys;
use mcp_resource_proxy::cluster::session_pass::{self, Identity, Passes};
use mcp_resource_proxy::crypto::SealingKey;

use crate::sessions::next_listened;
use crate::support::cluster::{Replicas, SECRET, cluster_when, forwards};
use crate::support::peers::{py_script, python};
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, toml_str};
use crate::support::told::{answered, next_heard, told_host, tool_names};
use crate::support::{DEADLINE, eventually};

const ALICE_TOKEN: &str = "alice-tok-cluster-sessions-4e1b";
const BOB_TOKEN: &str = "bob-tok-cluster-sessions-9c27";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
/// Requests each host makes after setting its value: several rounds over the three replicas.
const ROUNDS: usize = 12;

type Host = RunningService<RoleClient, ()>;

/// `count` replicas with alice and bob (allowed everything) and the session server as `per`,
/// with sessions per principal; returns once every replica has its tools and can reach the others.
async fn start(count: usize) -> anyhow::Result<(Replicas, tempfile::TempDir)> {
    start_with(count, "per-principal").await
}

/// As [`start`], with sessions per `mode`.
async fn start_with(count: usize, mode: &str) -> anyhow::Result<(Replicas, tempfile::TempDir)> {
    let (config, policies) = config_with(mode)?;
    let cluster = Replicas::start(count, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("per").await?;
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == count)).await?;
    }
    Ok((cluster, policies))
}

/// The replicas' config (without `[cluster]`) with the session server as `per`, sessions per
/// `mode`, and its policies.
fn config_with(mode: &str) -> anyhow::Result<(String, tempfile::TempDir)> {
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let program = toml_str(python().to_str().context("utf-8 path")?);
    let script = toml_str(py_script("session_server.py").to_str().context("utf-8 path")?);
    let upstream =
        format!("[[upstreams]]\nname = \"per\"\ncommand = {program}\nargs = [{script}]\nsession = \"{mode}\"\n\n");
    Ok((alice_and_bob_under_policies("", policies.path(), &upstream), policies))
}

/// A 2025 host session of the principal whose bearer token is `token`.
async fn host(url: &str, token: &str) -> anyhow::Result<Host> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    Ok(tokio::time::timeout(DEADLINE, ().serve(transport)).await.context("connect")??)
}

/// The text `per__<name>` answers.
async fn call(host: &Host, name: &str, arguments: Value) -> anyhow::Result<String> {
    let params = CallToolRequestParams::new(format!("per__{name}"))
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    let result = tokio::time::timeout(DEADLINE, host.peer().call_tool(params)).await.context("the call hung")??;
    anyhow::ensure!(result.is_error != Some(true), "{name}: {result:?}");
    let text = result.content.first().and_then(|c| c.as_text()).with_context(|| format!("no text in {result:?}"))?;
    Ok(text.text.clone())
}

/// The session's value as a resource.
async fn read(host: &Host) -> anyhow::Result<String> {
    let read = host.peer().read_resource(ReadResourceRequestParams::new("per+session://value"));
    let result = tokio::time::timeout(DEADLINE, read).await.context("the read hung")??;
    match result.contents.first() {
        Some(ResourceContents::TextResourceContents { text, .. }) => Ok(text.clone()),
        other => anyhow::bail!("no text in {other:?}"),
    }
}

/// Per-principal sessions of `per` open on each replica, from `/status`.
async fn sessions(replicas: &[&ProxyProcess]) -> anyhow::Result<Vec<u64>> {
    let mut open = Vec::new();
    for replica in replicas {
        open.push(replica.upstream_status("per").await?["sessions"].as_u64().context("sessions")?);
    }
    Ok(open)
}

/// The parent of process `pid` (from `/proc`).
fn parent_of(pid: &str) -> anyhow::Result<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let (_, rest) = stat.rsplit_once(')').context("a stat line")?;
    Ok(rest.split_whitespace().nth(1).context("ppid")?.parse()?)
}

/// The index of the replica that started process `pid` (its parent, or the parent of the
/// launcher every stdio child starts through).
fn owner_of(cluster: &Replicas, pid: &str) -> anyhow::Result<usize> {
    let mut ancestor = parent_of(pid)?;
    for _ in 0..3 {
        if let Some(index) = cluster.replicas.iter().position(|r| r.pid() == Some(ancestor)) {
            return Ok(index);
        }
        ancestor = parent_of(&ancestor.to_string())?;
    }
    anyhow::bail!("no replica started {pid}")
}

/// `host` keeps `value` and then sees it on every one of `ROUNDS` calls and reads.
async fn keeps_its_own(host: &Host, value: &str) -> anyhow::Result<()> {
    assert_eq!(call(host, "remember", json!({ "value": value })).await?, format!("kept {value}"));
    for round in 0..ROUNDS {
        assert_eq!(call(host, "recall", json!({})).await?, value, "call {round}");
        if round % 3 == 0 {
            assert_eq!(read(host).await?, value, "read {round}");
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_per_principal_session_lives_on_one_replica_and_its_requests_reach_it_from_every_other() -> anyhow::Result<()>
{
    let (cluster, _policies) = start(3).await?;
    let (alice, bob) = (host(cluster.url(), ALICE_TOKEN).await?, host(cluster.url(), BOB_TOKEN).await?);
    keeps_its_own(&alice, "alice's value").await?;
    keeps_its_own(&bob, "bob's value").await?;

    let all: Vec<&ProxyProcess> = cluster.replicas.iter().collect();
    let open = sessions(&all).await?;
    assert_eq!(open.iter().sum::<u64>(), 2, "one session per principal in the cluster: {open:?}");
    assert!(
        forwards(all.iter().copied(), "forwarded").await? >= 1.0,
        "requests reached the owner from another replica"
    );
    assert!(forwards(all.iter().copied(), "served").await? >= 1.0);
    assert_eq!(forwards(all.iter().copied(), "fallback").await?, 0.0);

    // The replica holding alice's session dies; her next calls succeed on a new owner.
    let alice_pid = call(&alice, "pid", json!({})).await?;
    let bob_pid = call(&bob, "pid", json!({})).await?;
    let owner = owner_of(&cluster, &alice_pid)?;
    let bob_owner = owner_of(&cluster, &bob_pid)?;
    let pid = cluster.replicas[owner].pid().context("the owner runs")?;
    let killed = tokio::process::Command::new("kill").args(["-9", &pid.to_string()]).status().await?;
    anyhow::ensure!(killed.success(), "kill -9 {pid}");
    eventually(DEADLINE, "alice's next call succeeds", || call(&alice, "recall", json!({}))).await?;

    let survivors: Vec<&ProxyProcess> =
        cluster.replicas.iter().enumerate().filter(|(i, _)| *i != owner).map(|(_, r)| r).collect();
    for replica in &survivors {
        let gone = |c: &Value| c["reachable"].as_array().is_some_and(|r| r.len() == 2);
        cluster_when(replica, gone).await?;
    }
    keeps_its_own(&alice, "alice's second value").await?;
    let new_pid = call(&alice, "pid", json!({})).await?;
    assert_ne!(new_pid, alice_pid, "a new session on a new owner");
    assert_ne!(owner_of(&cluster, &new_pid)?, owner);
    if bob_owner != owner {
        assert_eq!(call(&bob, "recall", json!({})).await?, "bob's value", "bob's session did not move");
    }
    Ok(())
}

/// A POST of `body` to the session endpoint at `url`, with `pass` on its head (and the MCP
/// session `session` once there is one): its status, its `Mcp-Session-Id` and its text.
async fn post_sealed(
    url: &str,
    pass: Option<&str>,
    session: Option<&str>,
    body: &Value,
) -> anyhow::Result<(u16, Option<String>, String)> {
    let mut post = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(pass) = pass {
        post = post.header(session_pass::HEADER, pass);
    }
    if let Some(session) = session {
        post = post.header("mcp-session-id", session).header("mcp-protocol-version", "2025-11-25");
    }
    let response = post.send().await?;
    let status = response.status().as_u16();
    let id = response.headers().get("mcp-session-id").and_then(|id| id.to_str().ok()).map(str::to_owned);
    let text = tokio::time::timeout(DEADLINE, response.text()).await.context("the answer hung")??;
    Ok((status, id, text))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_altered_stale_misdirected_or_replayed_forward_is_refused() -> anyhow::Result<()> {
    let (cluster, _policies) = start(1).await?;
    let replica = &cluster.replicas[0];
    let url = format!("{}{}", replica.url.strip_suffix("/mcp").context("an /mcp URL")?, session_pass::PATH);
    let keys = ClusterKeys::new(SECRET.as_bytes());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as u64;
    let alice = Identity { principal: "alice".into(), upstream: "per".into(), host: None };
    let passes = Passes::new("replica-9", &keys.session_pass());
    let pass = || passes.make("replica-0", &alice, None, None);

    // A request made as a replica makes it is run on alice's session.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "replica-9", "version": "1"}}});
    let (status, session, answer) = post_sealed(&url, Some(&pass()), None, &initialize).await?;
    assert_eq!(status, 200, "{answer}");
    let session = session.context("an MCP session")?;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post_sealed(&url, Some(&pass()), Some(&session), &initialized).await?;
    let recall = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall"}});
    let genuine = pass();
    let (status, _, answer) = post_sealed(&url, Some(&genuine), Some(&session), &recall).await?;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("nothing"), "alice's fresh session answered: {answer}");

    let other_keys = ClusterKeys::new(b"another cluster's secret, 32 bytes or more");
    let mut altered = genuine.clone().into_bytes();
    altered[genuine.len() / 2] = if altered[genuine.len() / 2] == b'A' { b'B' } else { b'A' };
    let key = SealingKey::new(&keys.session_pass());
    let refused = [
        ("replayed", Some(genuine.clone())),
        ("no mark", None),
        (
            "another secret",
            Some(Passes::new("replica-9", &other_keys.session_pass()).make("replica-0", &alice, None, None)),
        ),
        ("altered", Some(String::from_utf8(altered)?)),
        ("stale", Some(session_pass::seal_with(&key, "replica-0", (now - 60_000, None), &alice, None))),
        ("for another replica", Some(passes.make("replica-9", &alice, None, None))),
    ];
    for (what, pass) in refused {
        let (status, _, answer) = post_sealed(&url, pass.as_deref(), Some(&session), &recall).await?;
        assert_eq!(status, 403, "{what}: {answer}");
        assert!(!answer.contains("nothing"), "{what} was run: {answer}");
    }
    // Without a right pass on its head, a request is refused before its body is read.
    let passes = [
        ("no pass", None),
        (
            "another secret's pass",
            Some(Passes::new("replica-9", &other_keys.session_pass()).make("replica-0", &alice, None, None)),
        ),
        (
            "a pass for another replica",
            Some(Passes::new("replica-9", &keys.session_pass()).make("replica-8", &alice, None, None)),
        ),
        ("a stale pass", Some(session_pass::seal_with(&key, "replica-0", (now - 60_000, None), &alice, None))),
    ];
    for (what, pass) in passes {
        let (status, _, answer) = post_sealed(&url, pass.as_deref(), None, &initialize).await?;
        assert_eq!(status, 403, "{what}: {answer}");
        assert!(!answer.contains("nothing"), "{what} was run: {answer}");
    }
    let all = [replica];
    assert_eq!(forwards(all.iter().copied(), "refused").await?, 10.0);
    assert_eq!(forwards(all.iter().copied(), "served").await?, 1.0, "only the genuine request ran");
    Ok(())
}

/// An upload to the replicas' route that carries no pass is answered on its head: a client
/// that announces 30 MiB and sends none of it is refused at once, and the replica reads none of
/// it (its connection is closed rather than drained).
#[tokio::test(flavor = "multi_thread")]
async fn an_unmarked_upload_to_the_replicas_route_is_refused_before_its_body() -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (cluster, _policies) = start(1).await?;
    let replica = &cluster.replicas[0];
    let address =
        replica.url.strip_prefix("http://").and_then(|rest| rest.strip_suffix("/mcp")).context("an address")?;
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        session_pass::PATH,
        30 << 20
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(b"{\"to\":").await?;
    let mut answer = vec![0u8; 1024];
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut answer))
        .await
        .context("no answer to the head within 5 s: the body was waited for")??;
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    Ok(())
}

/// Subscriptions follow the session: a host whose stream is served by a replica that does not
/// hold its principal's session has its subscription made on the owner's session, and hears
/// that session's changes. alice (a 2025 host: `resources/subscribe`, GET stream) and bob (a
/// 2026-07-28 listen stream) each talk to a replica other than their owner; each hears of the
/// change their own call made, and the cluster still holds exactly one session per principal.
/// The listen stream is announced once the owner's session acknowledged the subscription.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_made_on_another_replica_is_held_on_the_principals_one_session() -> anyhow::Result<()> {
    use crate::support::fixture::{Era, FixtureEvent, connect_http_with_token};
    let per = "per+session://value";
    let (cluster, _policies) = start(3).await?;
    let (alice_owner, bob_owner) = (owner(&cluster, ALICE_TOKEN).await?, owner(&cluster, BOB_TOKEN).await?);
    let elsewhere = |owner: usize| &cluster.replicas[(owner + 1) % cluster.replicas.len()];

    let (alice, mut alice_heard) =
        connect_http_with_token(&elsewhere(alice_owner).url, Era::Legacy, ALICE_TOKEN).await?;
    #[allow(deprecated)]
    alice.subscribe(rmcp::model::SubscribeRequestParams::new(per)).await?;
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(per.into()), "the subscription announced");
    let remembered = CallToolRequestParams::new("per__remember")
        .with_arguments(json!({ "value": "a1" }).as_object().cloned().unwrap_or_default());
    tokio::time::timeout(DEADLINE, alice.peer().call_tool(remembered)).await.context("the call hung")??;
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(per.into()), "alice hears her session's change");

    let bob_replica = elsewhere(bob_owner);
    let (bob, _) = connect_http_with_token(&bob_replica.url, Era::Modern, BOB_TOKEN).await?;
    let filter = rmcp::model::SubscriptionFilter::builder().resource_subscriptions([per.to_owned()]).build();
    let mut bob_heard = bob.listen(filter).await?;
    assert_eq!(next_listened(&mut bob_heard).await?.as_deref(), Some(per), "the stream announces what it holds");
    // The replica's log line is read from its stderr apart from the stream: wait for it.
    let logged = bob_replica.wait_log(&["listen stream announced"]).await?;
    let announced = ["listen stream announced", "\"acknowledged\":1"];
    assert_eq!(
        bob_replica.matching(&announced).len(),
        1,
        "announced once the owner's session acknowledged it: {logged}"
    );
    let remembered = CallToolRequestParams::new("per__remember")
        .with_arguments(json!({ "value": "b1" }).as_object().cloned().unwrap_or_default());
    tokio::time::timeout(DEADLINE, bob.peer().call_tool(remembered)).await.context("the call hung")??;
    assert_eq!(next_listened(&mut bob_heard).await?.as_deref(), Some(per), "bob hears his session's change");

    let all: Vec<&ProxyProcess> = cluster.replicas.iter().collect();
    let open = sessions(&all).await?;
    assert_eq!(open.iter().sum::<u64>(), 2, "one session per principal in the cluster: {open:?}");
    Ok(())
}

/// One principal's subscriptions cannot take the owner's connections from every other host:
/// each subscription held at another replica is a stream of the one HTTP/2 connection that
/// replica keeps to the owner, and a replica keeps at most 64 of one principal open at one
/// owner. Three replicas behind the balancer: alice makes 1,100 subscriptions (two host
/// sessions, under the per-session cap) through it, each request sent (`X-Replica-Route`) to a
/// replica that does not own her session: 64 are held at the owner (each announced to her host
/// once the owner's session acknowledged it), the replica has at most 2 connections open to the
/// owner meanwhile (its sockets, counted in the kernel's tables), any subscription refused says
/// which bound (a 2025 session's past the bound is kept in its record, unheld), and a fresh
/// host of bob's is connected and served its tools by the owner within a second.
#[tokio::test(flavor = "multi_thread")]
async fn one_principals_subscriptions_held_at_another_replica_are_bounded() -> anyhow::Result<()> {
    use crate::support::fixture::{Era, FixtureEvent, connect_http_config, connect_http_with_token};
    use mcp_resource_proxy::upstream::MAX_SUBSCRIPTIONS_PER_OWNER;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let (cluster, _policies) = start(3).await?;
    let alice_owner = owner(&cluster, ALICE_TOKEN).await?;
    let owner_port: u16 = cluster.replicas[alice_owner]
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.strip_suffix("/mcp"))
        .context("a port")?
        .parse()?;
    let elsewhere = (alice_owner + 1) % cluster.replicas.len();
    let front = cluster.replicas[elsewhere].pid().context("the replica runs")?;
    // Through the balancer, every request of alice's hosts sent to that one replica.
    let routed = std::collections::HashMap::from([(
        http::HeaderName::from_static("x-replica-route"),
        http::HeaderValue::from_str(&elsewhere.to_string())?,
    )]);
    let (mut accepted, mut hosts) = (Vec::new(), Vec::new());
    for session in 0..2 {
        let config = StreamableHttpClientTransportConfig::with_uri(cluster.url())
            .auth_header(ALICE_TOKEN)
            .custom_headers(routed.clone());
        let (alice, heard) = connect_http_config(config, Era::Legacy).await?;
        let mut held = Vec::new();
        for n in 0..550 {
            let uri = format!("per+session://value/{session}/{n}");
            #[allow(deprecated)]
            let subscribed = alice.subscribe(rmcp::model::SubscribeRequestParams::new(uri.clone())).await;
            match subscribed {
                Ok(()) => held.push(uri),
                Err(error) => {
                    let text = error.to_string();
                    assert!(text.contains("held at another replica"), "a refusal names the bound: {text}");
                }
            }
        }
        accepted.push(held);
        hosts.push((alice, heard)); // open while the rest is counted: its holds stay
    }
    let total: usize = accepted.iter().map(Vec::len).sum();
    assert!(total >= MAX_SUBSCRIPTIONS_PER_OWNER, "{total} accepted");
    // Each hold acknowledged at the owner is announced to its host: wait for the bound's worth,
    // the first host's first.
    let mut announced = std::collections::HashSet::new();
    for ((_, heard), held) in hosts.iter_mut().zip(&accepted) {
        let wanted = (announced.len() + held.len()).min(MAX_SUBSCRIPTIONS_PER_OWNER);
        while announced.len() < wanted {
            if let FixtureEvent::Updated(uri) = heard.next().await? {
                announced.insert(uri);
            }
        }
    }
    let open = connections_to(front, owner_port)?;
    assert!((1..=2).contains(&open), "{open} connections at the owner for one principal's {total} subscriptions");
    let within = std::time::Duration::from_secs(1);
    let started = std::time::Instant::now();
    let (bob, _) = connect_http_with_token(&cluster.replicas[alice_owner].url, Era::Modern, BOB_TOKEN).await?;
    let connected = started.elapsed();
    let tools = tokio::time::timeout(within.saturating_sub(connected), bob.peer().list_all_tools())
        .await
        .with_context(|| format!("the owner did not answer a fresh host within 1 s (connected in {connected:?})"))??;
    let (listed, answered) = (started.elapsed() - connected, started.elapsed());
    eprintln!("a fresh host on the owner: connected in {connected:?}, listed in {listed:?} ({open} held connections)");
    assert!(answered <= within, "a fresh host answered in {answered:?} (connected in {connected:?})");
    assert!(tools.iter().any(|tool| tool.name == "per__recall"), "{tools:?}");
    Ok(())
}

/// Connections process `pid` has established to `port` (its sockets, found in the kernel's
/// tables, IPv4 and IPv6).
fn connections_to(pid: u32, port: u16) -> anyhow::Result<usize> {
    let mut sockets = std::collections::HashSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(link) = std::fs::read_link(fd?.path()) else { continue };
        let link = link.to_string_lossy().into_owned();
        if let Some(inode) = link.strip_prefix("socket:[").and_then(|rest| rest.strip_suffix(']')) {
            sockets.insert(inode.to_owned());
        }
    }
    let mut count = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let remote_port =
                fields.get(2).and_then(|a| a.rsplit(':').next()).and_then(|p| u16::from_str_radix(p, 16).ok());
            let established = fields.get(3) == Some(&"01");
            if remote_port == Some(port) && established && fields.get(9).is_some_and(|inode| sockets.contains(*inode)) {
                count += 1;
            }
        }
    }
    Ok(count)
}

/// A 2026-07-28 host answers a shared 2025 upstream's elicitation through the balancer: the
/// call is parked on the replica that started it (each runs its own child of the server), and
/// a retry that lands on another replica is sent to that one over MCP (its session endpoint),
/// where the call resumes. Every round completes with the host's answer (before, a retry
/// elsewhere answered "requestState is unknown or expired").
#[tokio::test(flavor = "multi_thread")]
async fn a_modern_hosts_call_on_a_shared_upstream_resumes_on_the_replica_it_waits_on() -> anyhow::Result<()> {
    let (cluster, _policies) = start_with(3, "shared").await?;
    elicited_through_the_balancer(&cluster, 10).await?;
    let all: Vec<&ProxyProcess> = cluster.replicas.iter().collect();
    assert!(
        forwards(all.iter().copied(), "forwarded").await? >= 1.0,
        "some retries went to the replica their call waits on"
    );
    assert!(forwards(all.iter().copied(), "resumed").await? >= 1.0, "and resumed it there, over MCP");
    Ok(())
}

/// A subscription follows the session when its owner dies: alice's hold, made on a replica
/// other than her owner, moves with her session once the owner is killed (`kill -9`). She is
/// told once that the URI may have changed (a change could have come while it moved), then
/// hears her new session's changes; the survivors hold one session for her.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_follows_its_session_to_a_new_owner() -> anyhow::Result<()> {
    use crate::support::fixture::{Era, FixtureEvent, connect_http_with_token};
    let per = "per+session://value";
    let (cluster, _policies) = start(3).await?;
    let alice_owner = owner(&cluster, ALICE_TOKEN).await?;
    let serving = (alice_owner + 1) % cluster.replicas.len();
    let (alice, mut alice_heard) =
        connect_http_with_token(&cluster.replicas[serving].url, Era::Legacy, ALICE_TOKEN).await?;
    #[allow(deprecated)]
    alice.subscribe(rmcp::model::SubscribeRequestParams::new(per)).await?;
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(per.into()), "the subscription announced");

    let pid = cluster.replicas[alice_owner].pid().context("the owner runs")?;
    let killed = tokio::process::Command::new("kill").args(["-9", &pid.to_string()]).status().await?;
    anyhow::ensure!(killed.success(), "kill -9 {pid}");
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(per.into()), "told once when the hold moved");
    let remembered = CallToolRequestParams::new("per__remember")
        .with_arguments(json!({ "value": "a2" }).as_object().cloned().unwrap_or_default());
    tokio::time::timeout(DEADLINE, alice.peer().call_tool(remembered)).await.context("the call hung")??;
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(per.into()), "alice hears her new session");
    let survivors: Vec<&ProxyProcess> =
        cluster.replicas.iter().enumerate().filter(|(i, _)| *i != alice_owner).map(|(_, r)| r).collect();
    let open = sessions(&survivors).await?;
    assert_eq!(open.iter().sum::<u64>(), 1, "one session for alice among the survivors: {open:?}");
    Ok(())
}

/// A subscription waiting since its session was reclaimed from a full pool follows the session
/// to a new owner too. One replica, `max_sessions = 1`: bob subscribes (his session holds it),
/// alice's call once bob's session is idle reclaims it (his hold waits for his next session)
/// and alice subscribes (the pool stays full). A second replica joins, which owns bob's session
/// from then on (rendezvous over `replica-0` and `replica-1`) while alice's stays: bob is told
/// once that the URI may have changed, and hears the change his next call makes on his session
/// at the newcomer. (Before, the waiting hold stayed where it was, waiting for a place in the
/// full pool, and bob heard nothing more.)
#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_waiting_in_a_full_pool_follows_its_session_to_a_new_owner() -> anyhow::Result<()> {
    use crate::support::cluster::{SECRET_ENV, with_cluster};
    use crate::support::fixture::{Era, FixtureEvent, connect_http_with_token};
    let per = "per+session://value";
    let (config, _policies) = config_with("per-principal")?;
    let config = config.replacen(
        "session = \"per-principal\"\n",
        "session = \"per-principal\"\nmax_sessions = 1\nsession_idle = \"1s\"\n",
        1,
    );
    let cluster = Replicas::start(1, &config, &TOKENS).await?;
    let first = &cluster.replicas[0];
    first.wait_offerings("per").await?;
    let (bob, mut bob_heard) = connect_http_with_token(&first.url, Era::Legacy, BOB_TOKEN).await?;
    #[allow(deprecated)]
    bob.subscribe(rmcp::model::SubscribeRequestParams::new(per)).await?;
    let announced = bob_heard.next().await.context("the subscription announced")?;
    assert_eq!(announced, FixtureEvent::Updated(per.into()));
    let (alice, _alice_heard) = connect_http_with_token(&first.url, Era::Legacy, ALICE_TOKEN).await?;
    let pid = || alice.peer().call_tool(CallToolRequestParams::new("per__pid"));
    eventually(DEADLINE, "alice's call reclaims bob's idle session", pid).await?;
    #[allow(deprecated)]
    alice.subscribe(rmcp::model::SubscribeRequestParams::new(per)).await?;
    assert_eq!(sessions(&[first]).await?, [1], "one place, alice's");

    let mut env: Vec<(&str, &str)> = TOKENS.to_vec();
    env.push((SECRET_ENV, SECRET));
    let late = ProxyProcess::start_with(&with_cluster(&config, &cluster.redis.url(), "replica-1"), &[], &env).await?;
    late.wait_offerings("per").await?;
    cluster_when(first, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 2)).await?;
    let told = bob_heard.next().await.context("bob told once when his waiting hold moved")?;
    assert_eq!(told, FixtureEvent::Updated(per.into()));
    let remembered = CallToolRequestParams::new("per__remember")
        .with_arguments(json!({ "value": "b2" }).as_object().cloned().unwrap_or_default());
    tokio::time::timeout(DEADLINE, bob.peer().call_tool(remembered)).await.context("the call hung")??;
    let heard = bob_heard.next().await.context("bob hears his session at the newcomer")?;
    assert_eq!(heard, FixtureEvent::Updated(per.into()));
    assert_eq!(sessions(&[first, &late]).await?, [1, 1], "alice's session stays, bob's is the newcomer's");
    Ok(())
}

/// Per-host sessions across replicas: a host session's own upstream session lives on one
/// replica (rendezvous over the upstream, the principal and the host session's key, which every
/// replica derives alike from its `Mcp-Session-Id`). Two hosts of alice's behind haproxy
/// (round-robin) each keep their own value whichever replica answers, the cluster holds exactly
/// two sessions, a subscription made wherever the GET stream landed is held on the host's own
/// session (it hears its own change), and when a host ends its session (`DELETE`, on whichever
/// replica) the owner closes that host's upstream session.
#[tokio::test(flavor = "multi_thread")]
async fn a_per_host_session_lives_on_one_replica_and_follows_its_host_across_replicas() -> anyhow::Result<()> {
    use crate::support::fixture::{Era, FixtureEvent, connect_http_with_token};
    let (cluster, _policies) = start_with(3, "per-host").await?;
    let (first, second) = (host(cluster.url(), ALICE_TOKEN).await?, host(cluster.url(), ALICE_TOKEN).await?);
    assert_eq!(call(&first, "remember", json!({ "value": "first" })).await?, "kept first");
    assert_eq!(call(&second, "remember", json!({ "value": "second" })).await?, "kept second");
    for round in 0..ROUNDS {
        assert_eq!(call(&first, "recall", json!({})).await?, "first", "the first host, call {round}");
        assert_eq!(call(&second, "recall", json!({})).await?, "second", "the second host, call {round}");
    }
    let all: Vec<&ProxyProcess> = cluster.replicas.iter().collect();
    let open = sessions(&all).await?;
    assert_eq!(open.iter().sum::<u64>(), 2, "one session per host session in the cluster: {open:?}");
    assert!(
        forwards(all.iter().copied(), "forwarded").await? >= 1.0,
        "requests reached the owner from another replica"
    );
    assert_eq!(forwards(all.iter().copied(), "fallback").await?, 0.0);

    let per = "per+session://value";
    let (third, mut heard) = connect_http_with_token(cluster.url(), Era::Legacy, ALICE_TOKEN).await?;
    #[allow(deprecated)]
    third.subscribe(rmcp::model::SubscribeRequestParams::new(per)).await?;
    assert_eq!(heard.next().await?, FixtureEvent::Updated(per.into()), "the subscription announced");
    let remembered = CallToolRequestParams::new("per__remember")
        .with_arguments(json!({ "value": "third" }).as_object().cloned().unwrap_or_default());
    tokio::time::timeout(DEADLINE, third.peer().call_tool(remembered)).await.context("the call hung")??;
    assert_eq!(heard.next().await?, FixtureEvent::Updated(per.into()), "the host hears its own session's change");
    let open = sessions(&all).await?;
    assert_eq!(open.iter().sum::<u64>(), 3, "the subscription is on the third host's one session: {open:?}");

    first.cancel().await?;
    let closed = || async {
        let open = sessions(&all).await?;
        anyhow::ensure!(open.iter().sum::<u64>() == 2, "open: {open:?}");
        anyhow::Ok(())
    };
    eventually(DEADLINE, "the ended host's upstream session is closed", closed).await?;
    assert_eq!(call(&second, "recall", json!({})).await?, "second", "the other host keeps its session");
    Ok(())
}

/// The replica holding the session of the principal whose token is `token`.
async fn owner(cluster: &Replicas, token: &str) -> anyhow::Result<usize> {
    let host = host(cluster.url(), token).await?;
    let pid = call(&host, "pid", json!({})).await?;
    owner_of(cluster, &pid)
}

/// A 2025 host that answers each elicitation with `word`, and keeps the log messages it hears.
#[derive(Clone)]
struct Answering {
    logged: tokio::sync::mpsc::UnboundedSender<String>,
}

impl rmcp::ClientHandler for Answering {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities = rmcp::model::ClientCapabilities::builder().enable_elicitation().build();
        rmcp::model::ClientConfig::new(capabilities, rmcp::model::Implementation::new("answering", "1.0.0"))
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let accepted = rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept);
        Ok(accepted.with_content(json!({ "word": "pelican" })))
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.logged.send(params.data.as_str().unwrap_or_default().to_string());
    }
}

/// What the upstream sends a forwarded call's host reaches it: alice (a 2025 host declaring
/// elicitation) calls, on a replica other than her owner, a tool that logs and then elicits a
/// word. The owner's session runs it (the log names the owner's child process); the log message
/// and the elicitation reach alice through the replica she asked, and her answer reaches the
/// upstream.
#[tokio::test(flavor = "multi_thread")]
async fn a_forwarded_calls_log_message_and_elicitation_reach_its_host() -> anyhow::Result<()> {
    let (cluster, _policies) = start(3).await?;
    let alice_owner = owner(&cluster, ALICE_TOKEN).await?;
    let asked = &cluster.replicas[(alice_owner + 1) % cluster.replicas.len()];
    let (logged_in, mut logged) = tokio::sync::mpsc::unbounded_channel();
    let config = StreamableHttpClientTransportConfig::with_uri(asked.url.as_str()).auth_header(ALICE_TOKEN);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    let alice =
        tokio::time::timeout(DEADLINE, Answering { logged: logged_in }.serve(transport)).await.context("connect")??;
    let result = tokio::time::timeout(DEADLINE, alice.peer().call_tool(CallToolRequestParams::new("per__ask")))
        .await
        .context("the call hung")??;
    let text = result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone());
    assert_eq!(text.as_deref(), Some("heard pelican"), "{result:?}");
    let message = tokio::time::timeout(DEADLINE, logged.recv()).await.context("no log message")?.context("closed")?;
    let pid = message.strip_prefix("asking ").with_context(|| format!("logged {message}"))?;
    assert_eq!(owner_of(&cluster, pid)?, alice_owner, "the owner's session ran the call");
    assert!(forwards([asked], "forwarded").await? >= 1.0);
    Ok(())
}

/// A 2026-07-28 host, which takes no server-to-client requests, gets the elicitation of a call
/// on a session another replica owns as `input_required`, and its retry resumes the call
/// wherever it lands: the call is parked on the replica the host asked, which its
/// `requestState` names. Through the balancer, each call and its retry land on two replicas in
/// turn (the owner among them or not); every call completes with the host's answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_modern_hosts_call_on_a_session_owned_elsewhere_is_parked_where_asked_and_resumed_from_any_replica()
-> anyhow::Result<()> {
    let (cluster, _policies) = start(3).await?;
    elicited_through_the_balancer(&cluster, 4).await?;
    let all: Vec<&ProxyProcess> = cluster.replicas.iter().collect();
    assert!(forwards(all.iter().copied(), "forwarded").await? >= 1.0, "some rounds went to the owner from elsewhere");
    assert!(forwards(all.iter().copied(), "resumed").await? >= 1.0, "some retries resumed their call over MCP");
    Ok(())
}

/// A 2026-07-28 host of alice's, through the balancer, calls `per__ask` `rounds` times; its
/// client answers each `input_required` (the upstream's elicitation) and calls again, and every
/// call completes with its answer.
async fn elicited_through_the_balancer(cluster: &Replicas, rounds: usize) -> anyhow::Result<()> {
    let (logged, _) = tokio::sync::mpsc::unbounded_channel();
    let config = StreamableHttpClientTransportConfig::with_uri(cluster.url()).auth_header(ALICE_TOKEN);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    let lifecycle = crate::support::fixture::Era::Modern.lifecycle();
    let connecting = rmcp::ClientServiceExt::serve_with_lifecycle(Answering { logged }, transport, lifecycle);
    let alice = tokio::time::timeout(DEADLINE, connecting).await.context("connect")??;
    for round in 0..rounds {
        // The running service drives the rounds: it answers `input_required` and calls again.
        let call = alice.call_tool(CallToolRequestParams::new("per__ask"));
        let result = tokio::time::timeout(DEADLINE, call).await.context("the call hung")??;
        let text = result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone());
        assert_eq!(text.as_deref(), Some("heard pelican"), "round {round}: {result:?}");
    }
    Ok(())
}

/// A session's own tool list reaches its hosts on every replica: alice's session (on its owner)
/// unlocks `secret` for a call made through another replica; her hosts on both other replicas
/// hear `tools/list_changed`, list `per__secret` and call it (forwarded to the owner), while
/// bob, on the same replica as one of them, lists nothing of it and calling it is an unknown
/// tool.
#[tokio::test(flavor = "multi_thread")]
async fn a_sessions_own_tool_list_reaches_its_hosts_on_every_replica() -> anyhow::Result<()> {
    let (cluster, _policies) = start(3).await?;
    let alice_owner = owner(&cluster, ALICE_TOKEN).await?;
    let (x, y) = (&cluster.replicas[(alice_owner + 1) % 3], &cluster.replicas[(alice_owner + 2) % 3]);
    let (alice_x, mut alice_x_heard) = told_host(&x.url, ALICE_TOKEN).await?;
    let (alice_y, mut alice_y_heard) = told_host(&y.url, ALICE_TOKEN).await?;
    let (bob_x, _bob_heard) = told_host(&x.url, BOB_TOKEN).await?;
    for host in [alice_x.peer(), alice_y.peer(), bob_x.peer()] {
        let names = tool_names(host).await?;
        assert!(names.contains(&"per__unlock".to_string()) && !names.contains(&"per__secret".to_string()), "{names:?}");
    }

    assert_eq!(answered(alice_x.peer(), "per__unlock").await?, Ok("unlocked".into()));
    for heard in [&mut alice_x_heard, &mut alice_y_heard] {
        assert_eq!(next_heard(heard).await?, "tools/list_changed");
    }
    for host in [alice_x.peer(), alice_y.peer()] {
        assert!(tool_names(host).await?.contains(&"per__secret".to_string()), "her session's own tool listed");
        let secret = answered(host, "per__secret").await?.map_err(|e| anyhow::anyhow!("per__secret: {e}"))?;
        assert!(secret.starts_with("the secret of "), "{secret}");
    }
    assert!(!tool_names(bob_x.peer()).await?.contains(&"per__secret".to_string()), "bob lists alice's session");
    let refused = answered(bob_x.peer(), "per__secret").await?.expect_err("bob called alice's session's tool");
    assert!(refused.contains("per__secret"), "{refused}");
    Ok(())
}

/// A replica that was not told a session's own lists asks the owner: alice's session unlocks
/// `secret` (her host through the balancer hears it) before a third replica joins. A host of
/// hers on the newcomer that lists or calls there makes it ask the owner; she is told
/// `tools/list_changed` when the answer comes, then lists `per__secret` and calls it.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_that_was_not_told_a_sessions_own_lists_asks_its_owner() -> anyhow::Result<()> {
    use crate::support::cluster::{SECRET, SECRET_ENV, with_cluster};
    let (config, _policies) = config_with("per-principal")?;
    let cluster = Replicas::start(2, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("per").await?;
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 2)).await?;
    }
    let (alice, mut alice_heard) = told_host(cluster.url(), ALICE_TOKEN).await?;
    assert_eq!(answered(alice.peer(), "per__unlock").await?, Ok("unlocked".into()));
    assert_eq!(next_heard(&mut alice_heard).await?, "tools/list_changed", "her session's own lists are known");
    let owner_pid = answered(alice.peer(), "per__pid").await?.map_err(|e| anyhow::anyhow!("pid: {e}"))?;

    let mut env: Vec<(&str, &str)> = TOKENS.to_vec();
    env.push((SECRET_ENV, SECRET));
    let late = ProxyProcess::start_with(&with_cluster(&config, &cluster.redis.url(), "replica-2"), &[], &env).await?;
    late.wait_offerings("per").await?;
    for replica in cluster.replicas.iter().chain([&late]) {
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 3)).await?;
    }
    let (alice_late, mut alice_late_heard) = told_host(&late.url, ALICE_TOKEN).await?;
    let pid = answered(alice_late.peer(), "per__pid").await?.map_err(|e| anyhow::anyhow!("pid: {e}"))?;
    anyhow::ensure!(pid == owner_pid, "the newcomer took alice's session over (pid {pid}, was {owner_pid})");
    assert_eq!(next_heard(&mut alice_late_heard).await?, "tools/list_changed", "told once the owner answered");
    assert!(tool_names(alice_late.peer()).await?.contains(&"per__secret".to_string()));
    let secret = answered(alice_late.peer(), "per__secret").await?.map_err(|e| anyhow::anyhow!("per__secret: {e}"))?;
    assert!(secret.starts_with("the secret of "), "{secret}");
    Ok(())
}

/// On a per-host upstream, a host session's own tool list follows it across replicas: two
/// hosts of alice's behind haproxy (round-robin: each request, and each GET stream, lands where
/// it lands); the first unlocks `secret` on its own session. It hears `tools/list_changed` on
/// its GET stream wherever that is, lists `per__secret` and calls it from any replica; her other
/// host lists nothing of it, and calling it is an unknown tool.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_sessions_own_tool_list_follows_it_across_replicas() -> anyhow::Result<()> {
    let (cluster, _policies) = start_with(3, "per-host").await?;
    let (first, mut first_heard) = told_host(cluster.url(), ALICE_TOKEN).await?;
    let (second, _second_heard) = told_host(cluster.url(), ALICE_TOKEN).await?;
    assert_eq!(answered(first.peer(), "per__unlock").await?, Ok("unlocked".into()));
    assert_eq!(next_heard(&mut first_heard).await?, "tools/list_changed");
    for round in 0..3 {
        assert!(tool_names(first.peer()).await?.contains(&"per__secret".to_string()), "listed, round {round}");
        let secret = answered(first.peer(), "per__secret").await?.map_err(|e| anyhow::anyhow!("per__secret: {e}"))?;
        assert!(secret.starts_with("the secret of "), "{secret}");
        assert!(!tool_names(second.peer()).await?.contains(&"per__secret".to_string()), "round {round}");
        let refused = answered(second.peer(), "per__secret").await?.expect_err("another host session called it");
        assert!(refused.contains("per__secret"), "{refused}");
    }
    Ok(())
}

/// A host session's GET stream hears its per-host session's own list change on a replica that
/// served none of its requests: the replica that answered its `initialize` (and nothing since),
/// and one that restored the session for the stream alone. Each session's POSTs go to the other
/// replicas (raw HTTP, so that nothing else lands there); its `unlock` reaches its own upstream
/// session wherever that lives, and `tools/list_changed` reaches the stream.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_sessions_stream_hears_its_own_list_change_on_a_replica_that_served_no_request() -> anyhow::Result<()> {
    use crate::support::raw_http::{self, LEGACY};
    let (cluster, _policies) = start_with(3, "per-host").await?;
    let url = |index: usize| cluster.replicas[index].url.as_str();
    let request = |url: &str, method: reqwest::Method| {
        reqwest::Client::new()
            .request(method, url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .bearer_auth(ALICE_TOKEN)
    };
    // (replica answering initialize, replica serving the stream, replica taking the rest)
    for (opener, streamer, rest) in [(0, 0, 1), (1, 0, 2)] {
        let opened =
            raw_http::send(request(url(opener), reqwest::Method::POST).json(&raw_http::initialize("raw"))).await?;
        let session = opened.session.context("a session id")?;
        let on_session = |url: &str, method: reqwest::Method| {
            request(url, method).header("mcp-protocol-version", LEGACY).header("mcp-session-id", &session)
        };
        let initialized =
            raw_http::send(on_session(url(rest), reqwest::Method::POST).json(&raw_http::initialized())).await?;
        assert_eq!(initialized.status, 202, "{}", initialized.body);
        let mut stream =
            tokio::time::timeout(DEADLINE, on_session(url(streamer), reqwest::Method::GET).send()).await??;
        assert_eq!(stream.status(), 200);
        let unlock = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "per__unlock", "arguments": {}}});
        let unlocked = raw_http::send(on_session(url(rest), reqwest::Method::POST).json(&unlock)).await?;
        assert!(unlocked.body.contains("unlocked"), "unlock: {}", unlocked.body);
        let mut heard = String::new();
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while !heard.contains("notifications/tools/list_changed") {
            let chunk = tokio::time::timeout_at(deadline, stream.chunk()).await.with_context(|| {
                format!("no list change on replica {streamer}'s stream (opened on {opener}): {heard}")
            })??;
            heard.push_str(&String::from_utf8_lossy(&chunk.context("the stream ended")?));
        }
    }
    Ok(())
}
