//! A 2025 host loses nothing when the replica serving its `tools/call` stream dies (`kill -9`):
//! three replicas behind haproxy (round-robin) and a real Redis, server-everything over stdio as
//! a per-principal upstream (the default with two principals), the real Python SDK host
//! (`tests/py/client.py`) calling its long-running operation. The request stream carries event
//! ids from its priming event on; the cut host reconnects (`GET` with `Last-Event-ID`) through
//! the balancer to another replica, which hands it:
//! - the call's result, when the replica running the call (the owner of alice's session) is
//!   another one and survives;
//! - a JSON-RPC error naming the lost replica within 5 s, when the killed replica ran the call.
//!
//! Each test starts one cluster; each run kills a replica, the host's POSTs pinned to it
//! (`X-Replica-Pin`; its reconnection is round-robin), and starts the killed one again (same id,
//! new ports) once the others see it gone.
//!
//! Nor when its stream is cut while the replica serving it lives: a 2025 host (raw HTTP) whose
//! call's connection is dropped at its first progress resumes on another replica
//! (`X-Replica-Route`) and gets the call's result, whether that replica or another ran the
//! call, and whether it resumes while the call runs or after it ended. A request whose answer
//! no replica keeps (a `ping`'s), resumed elsewhere while the replica that served it lives, is
//! told at once that its answer is not kept, never that the replica was lost. A 2026-07-28
//! call's stream carries no event id: cut, it has nothing to resume, as before.

use std::time::{Duration, Instant};

use anyhow::Context;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};

use crate::support::DEADLINE;
use crate::support::cluster::{Replicas, cluster_when};
use crate::support::peers::{everything_upstream, py_client};
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies};
use crate::support::raw_http::{self, LEGACY};

const ALICE_TOKEN: &str = "alice-tok-cluster-resumption-51c2";
const BOB_TOKEN: &str = "bob-tok-cluster-resumption-9e07";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
/// Runs of each outcome.
const RUNS: usize = 10;
/// server-everything's long-running operation, and its arguments: 1.5 s in 3 steps (a progress
/// notification each). A stream is cut at the first (0.5 s): the call still has 1 s to run, and
/// each test checks that the cut landed mid-call (the answer came through the resumption, or the
/// call was lost, or the replica serving the stream had not answered it yet).
const LONG_OPERATION: &str = "ev__trigger-long-running-operation";
const LONG_ARGUMENTS: &str = r#"{"duration":1.5,"steps":3}"#;
/// How soon a host whose call died with its replica must hear so.
const LOST_WITHIN: Duration = Duration::from_secs(5);

/// Three replicas with server-everything as `ev` (no `session` set: per principal); returns once
/// each lists its tools and can reach the others.
async fn three_replicas() -> anyhow::Result<(Replicas, tempfile::TempDir)> {
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let config = alice_and_bob_under_policies("", policies.path(), &everything_upstream("ev", ""));
    let cluster = Replicas::start(3, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("ev").await?;
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 3)).await?;
    }
    Ok((cluster, policies))
}

/// Replica `index`, killed, started again: returns once each replica lists `ev`'s tools and
/// reaches the others.
async fn restart(cluster: &mut Replicas, index: usize) -> anyhow::Result<()> {
    cluster.restart(index).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("ev").await?;
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 3)).await?;
    }
    Ok(())
}

/// How many times each replica logged that it handed a lost stream's kept answer over.
fn handed_over(cluster: &Replicas) -> Vec<usize> {
    cluster.replicas.iter().map(|replica| replica.matching(&["a lost stream's call answered"]).len()).collect()
}

/// The index of the replica holding alice's session of `ev`, once a call of hers opened it.
async fn alices_owner(cluster: &Replicas) -> anyhow::Result<usize> {
    let config = StreamableHttpClientTransportConfig::with_uri(cluster.url()).auth_header(ALICE_TOKEN);
    let host = ().serve(StreamableHttpClientTransport::from_config(config)).await?;
    let echo = json!({ "message": "warm" }).as_object().cloned().unwrap_or_default();
    host.call_tool(CallToolRequestParams::new("ev__echo").with_arguments(echo)).await?;
    host.cancel().await?;
    cluster.the_one_holding_a_session("ev").await
}

/// The Python host's next line, within `within`.
async fn next_line(
    lines: &mut Lines<BufReader<tokio::process::ChildStdout>>,
    within: Duration,
) -> anyhow::Result<Value> {
    let line = tokio::time::timeout(within, lines.next_line()).await.context("no line in time")??;
    Ok(serde_json::from_str(&line.context("the Python host ended early")?)?)
}

/// `kill -9` of `replica`.
async fn kill(replica: &ProxyProcess) -> anyhow::Result<()> {
    let pid = replica.pid().context("the replica runs")?;
    let status = tokio::process::Command::new("kill").args(["-9", &pid.to_string()]).status().await?;
    anyhow::ensure!(status.success(), "kill -9 {pid}");
    Ok(())
}

/// Alice's Python host calls the long-running operation with its POSTs on replica `front`; at the
/// call's first progress `front` is killed. What the host got for its call, and how long after
/// the kill.
async fn call_cut_at(cluster: &Replicas, front: usize) -> anyhow::Result<(Value, Duration)> {
    let (pin, bearer) = (format!("X-Replica-Pin: {front}"), format!("Authorization: Bearer {ALICE_TOKEN}"));
    let args = ["--url", cluster.url(), "--mode", "legacy", "--header", &pin, "--header", &bearer, "--timeout", "60"];
    let mut command = tokio::process::Command::from(py_client(&args));
    command
        .arg(format!("call_progress:{LONG_OPERATION}:{LONG_ARGUMENTS}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut host = command.spawn().context("spawn the Python host")?;
    let mut lines = BufReader::new(host.stdout.take().context("stdout")?).lines();
    let progress = next_line(&mut lines, DEADLINE).await?;
    anyhow::ensure!(progress["op"] == "progress", "the call's first progress: {progress}");
    kill(&cluster.replicas[front]).await?;
    let killed = Instant::now();
    let answer = next_line(&mut lines, Duration::from_secs(60)).await?;
    Ok((answer, killed.elapsed()))
}

/// The text of a `call_progress` line's result.
fn text_of(answer: &Value) -> String {
    let blocks = answer["result"]["content"].as_array().cloned().unwrap_or_default();
    blocks.iter().filter_map(|block| block["text"].as_str()).collect::<Vec<_>>().join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_host_gets_its_calls_result_when_its_streams_replica_dies_and_the_calls_owner_lives() -> anyhow::Result<()>
{
    let (mut cluster, _policies) = three_replicas().await?;
    let mut got = 0;
    for run in 0..RUNS {
        let owner = alices_owner(&cluster).await?;
        let front = (owner + 1) % 3;
        let handed_before = handed_over(&cluster);
        let (answer, after) = call_cut_at(&cluster, front).await?;
        eprintln!("run {run}: front replica-{front} killed, owner replica-{owner}: {answer} after {after:?}");
        let text = text_of(&answer);
        if answer["op"] == "call_progress" && text.contains("Long running operation completed") {
            got += 1;
        }
        let handed = handed_over(&cluster).into_iter().zip(handed_before).filter(|(now, before)| now > before);
        assert_eq!(handed.count(), 1, "run {run}: one replica handed the kept answer over");
        restart(&mut cluster, front).await?;
    }
    assert_eq!(got, RUNS, "results after the stream's replica died");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_host_hears_within_5_s_that_its_call_was_lost_with_the_replica_running_it() -> anyhow::Result<()> {
    let (mut cluster, _policies) = three_replicas().await?;
    let mut told = 0;
    for run in 0..RUNS {
        let owner = alices_owner(&cluster).await?;
        let (answer, after) = call_cut_at(&cluster, owner).await?;
        eprintln!("run {run}: replica-{owner} (front and owner) killed: {answer} after {after:?}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        let names_the_cause = message.contains(&format!("replica serving this request (replica-{owner}) was lost"))
            && message.contains("may or may not have run");
        if names_the_cause && after <= LOST_WITHIN {
            told += 1;
        }
        restart(&mut cluster, owner).await?;
    }
    assert_eq!(told, RUNS, "clear errors within {LOST_WITHIN:?}");
    Ok(())
}

/// server-everything's long-running operation ([`LONG_ARGUMENTS`]) as request 1, with a progress
/// token; `_meta` holds `meta` besides.
fn long_call(mut meta: serde_json::Map<String, Value>) -> Value {
    meta.insert("progressToken".into(), json!("cut"));
    let arguments: Value = serde_json::from_str(LONG_ARGUMENTS).expect("the operation's arguments");
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": LONG_OPERATION, "arguments": arguments, "_meta": meta}})
}

/// A 2025 POST of alice's to `url` (on `session`, once there is one).
fn legacy_post(http: &reqwest::Client, url: &str, session: Option<&str>) -> reqwest::RequestBuilder {
    let request = http
        .post(url)
        .bearer_auth(ALICE_TOKEN)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", LEGACY);
    match session {
        Some(session) => request.header("Mcp-Session-Id", session),
        None => request,
    }
}

/// A 2025 session of alice's opened through the balancer: its `Mcp-Session-Id`.
async fn legacy_session(url: &str) -> anyhow::Result<String> {
    let http = reqwest::Client::new();
    let opened = raw_http::send(legacy_post(&http, url, None).json(&raw_http::initialize("cut-host"))).await?;
    let session = opened.session.clone().with_context(|| format!("no session: {opened:?}"))?;
    let told = raw_http::send(legacy_post(&http, url, Some(&session)).json(&raw_http::initialized())).await?;
    anyhow::ensure!(told.status.is_success(), "initialized: {told:?}");
    Ok(session)
}

/// Read `response`'s SSE lines until `done` says so of one; each `id:` seen is kept.
async fn read_events(
    response: &mut reqwest::Response,
    mut done: impl FnMut(&str) -> bool,
) -> anyhow::Result<(String, Option<String>)> {
    let (mut pending, mut last_id) = (String::new(), None);
    loop {
        let chunk = tokio::time::timeout(DEADLINE, response.chunk()).await.context("the stream stalled")??;
        pending.push_str(&String::from_utf8_lossy(&chunk.context("the stream ended first")?));
        while let Some(end) = pending.find('\n') {
            let line = pending[..end].trim_end_matches('\r').to_string();
            pending.drain(..=end);
            if let Some(id) = line.strip_prefix("id:") {
                last_id = Some(id.trim().to_string());
            }
            if done(&line) {
                return Ok((line, last_id));
            }
        }
    }
}

/// The answering replica's name (`X-Replica`, set by the balancer).
fn replica_of(response: &reqwest::Response) -> String {
    response.headers().get("x-replica").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

/// Alice's long-running call on `session`, its POST on replica `front` over a connection of its
/// own, dropped at the call's first progress: the last event id its host heard.
async fn legacy_call_cut(url: &str, session: &str, front: usize) -> anyhow::Result<String> {
    let http = reqwest::Client::new();
    let call = legacy_post(&http, url, Some(session)).header("X-Replica-Pin", front.to_string());
    let sent = call.json(&long_call(serde_json::Map::new())).send();
    let mut response = tokio::time::timeout(DEADLINE, sent).await.context("no reply")??;
    anyhow::ensure!(replica_of(&response) == format!("replica-{front}"), "served by {}", replica_of(&response));
    let progress = |line: &str| line.starts_with("data:") && line.contains("notifications/progress");
    let (_, last_id) = read_events(&mut response, progress).await?;
    last_id.context("no event id before the first progress")
    // Dropped here, the response and its client: the host's connection is cut mid-stream.
}

/// The stream of `session` resumed after `last_event_id` on replica `on` through the balancer:
/// the answer of request 1 it carries.
async fn resumed_on(url: &str, session: &str, last_event_id: &str, on: usize) -> anyhow::Result<Value> {
    let http = reqwest::Client::new();
    let resume = http
        .get(url)
        .bearer_auth(ALICE_TOKEN)
        .header("Accept", "text/event-stream")
        .header("MCP-Protocol-Version", LEGACY)
        .header("Mcp-Session-Id", session)
        .header("Last-Event-ID", last_event_id)
        .header("X-Replica-Route", on.to_string());
    let mut response = tokio::time::timeout(DEADLINE, resume.send()).await.context("no reply")??;
    anyhow::ensure!(response.status().is_success(), "resumption: {}", response.status());
    anyhow::ensure!(replica_of(&response) == format!("replica-{on}"), "resumed on {}", replica_of(&response));
    let answer = |line: &str| {
        let data = line.strip_prefix("data:").and_then(|data| serde_json::from_str::<Value>(data.trim()).ok());
        data.is_some_and(|message| message["id"] == 1)
    };
    let (line, _) = read_events(&mut response, answer).await?;
    Ok(serde_json::from_str(line.trim_start_matches("data:").trim())?)
}

/// `front`'s count of `tools/call` answered.
async fn calls_answered(replica: &ProxyProcess) -> anyhow::Result<f64> {
    let labels = [("method", "tools/call"), ("outcome", "ok")];
    replica.wait_metric("mcp_proxy_downstream_requests_total", &labels, |_| true).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_host_gets_its_calls_result_on_another_replica_when_its_stream_is_cut_and_its_replica_lives()
-> anyhow::Result<()> {
    let (cluster, _policies) = three_replicas().await?;
    let owner = alices_owner(&cluster).await?;
    let mut got = 0;
    for run in 0..RUNS {
        // The front is the owner (the call runs there) or not (forwarded to it); the host
        // resumes at once (the call runs) or once the front answered it (the call is over).
        let front = (owner + run) % 3;
        let (on, after_the_end) = ((front + 1) % 3, run % 2 == 1);
        let session = legacy_session(cluster.url()).await?;
        let answered = calls_answered(&cluster.replicas[front]).await?;
        let last_event_id = legacy_call_cut(cluster.url(), &session, front).await?;
        // The cut landed mid-call (and a resumption at once starts while the call runs): the
        // front had not answered the call when its host's connection was dropped.
        let at_the_cut = calls_answered(&cluster.replicas[front]).await?;
        anyhow::ensure!(at_the_cut == answered, "run {run}: the call was answered before the cut");
        if after_the_end {
            let labels = [("method", "tools/call"), ("outcome", "ok")];
            let metric = "mcp_proxy_downstream_requests_total";
            cluster.replicas[front].wait_metric(metric, &labels, |now| now > answered).await?;
        }
        let resumed = Instant::now();
        let answer = resumed_on(cluster.url(), &session, &last_event_id, on).await?;
        eprintln!(
            "run {run}: front replica-{front}, owner replica-{owner}, resumed on replica-{on} {}: {answer} in {:?}",
            if after_the_end { "after the call" } else { "while it ran" },
            resumed.elapsed()
        );
        let text = text_of(&json!({ "result": answer["result"] }));
        if text.contains("Long running operation completed") {
            got += 1;
        } else {
            eprintln!("{}", cluster.replicas[front].matching(&["kept"]).join("\n"));
        }
    }
    assert_eq!(got, RUNS, "results on another replica after the stream was cut");
    Ok(())
}

/// A `ping` answered on replica 0, its stream resumed on replica 1: no replica keeps a ping's
/// answer, and replica 0 lives, so the host is told at once that the answer is not kept (the
/// replicas say so on the session news channel), not that replica 0 was lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_resumption_whose_answer_is_kept_nowhere_hears_so_at_once_not_that_its_replica_was_lost() -> anyhow::Result<()>
{
    let (cluster, _policies) = three_replicas().await?;
    let session = legacy_session(cluster.url()).await?;
    let http = reqwest::Client::new();
    let ping = legacy_post(&http, cluster.url(), Some(&session)).header("X-Replica-Pin", "0");
    let sent = ping.json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).send();
    let mut response = tokio::time::timeout(DEADLINE, sent).await.context("no reply")??;
    let answered = |line: &str| line.starts_with("data:") && line.contains("\"result\"");
    let (_, last_event_id) = read_events(&mut response, answered).await?;
    let last_event_id = last_event_id.context("the ping's stream names its events")?;
    let resumed = Instant::now();
    let answer = resumed_on(cluster.url(), &session, &last_event_id, 1).await?;
    let after = resumed.elapsed();
    eprintln!("resumed on replica-1 in {after:?}: {answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(answer["error"]["data"]["cause"], "not_kept", "{answer}");
    assert!(message.contains("replica serving this request (replica-0) keeps no answer"), "{answer}");
    assert!(!message.contains("lost"), "replica-0 lives: {answer}");
    assert!(after < Duration::from_millis(1500), "told at once, not at a deadline: {after:?}");
    Ok(())
}

/// A 2026-07-28 call's stream carries no event id: a host whose stream is cut has nothing to
/// resume and learns of it at the cut (its call fails there), as before.
#[tokio::test(flavor = "multi_thread")]
async fn a_cut_modern_call_has_nothing_to_resume() -> anyhow::Result<()> {
    let (cluster, _policies) = three_replicas().await?;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "cut-host", "version": "0"}});
    let http = reqwest::Client::new();
    let call = http
        .post(cluster.url())
        .bearer_auth(ALICE_TOKEN)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", LONG_OPERATION)
        .header("X-Replica-Pin", "0")
        .json(&long_call(meta.as_object().cloned().unwrap_or_default()));
    let mut response = tokio::time::timeout(DEADLINE, call.send()).await.context("no reply")??;
    let progress = |line: &str| line.starts_with("data:") && line.contains("notifications/progress");
    let (_, last_id) = read_events(&mut response, progress).await?;
    assert_eq!(last_id, None, "a 2026-07-28 call's stream names no event to resume from");
    Ok(())
}
