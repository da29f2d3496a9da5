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
//! Each run is a fresh cluster, the host's POSTs pinned to the replica to kill
//! (`X-Replica-Pin`); its reconnection is round-robin.

use std::time::{Duration, Instant};

use anyhow::Context;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};

use crate::support::cluster::{Replicas, cluster_when};
use crate::support::peers::{everything_upstream, py_client};
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies};
use crate::support::{DEADLINE, eventually};

const ALICE_TOKEN: &str = "alice-tok-cluster-resumption-51c2";
const BOB_TOKEN: &str = "bob-tok-cluster-resumption-9e07";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
/// Runs of each outcome.
const RUNS: usize = 10;
/// server-everything's long-running operation: 3 s in 3 steps (a progress notification each).
const LONG_CALL: &str = r#"call_progress:ev__trigger-long-running-operation:{"duration":3,"steps":3}"#;
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

/// The index of the replica holding alice's session of `ev`, once a call of hers opened it.
async fn alices_owner(cluster: &Replicas) -> anyhow::Result<usize> {
    let config = StreamableHttpClientTransportConfig::with_uri(cluster.url()).auth_header(ALICE_TOKEN);
    let host = ().serve(StreamableHttpClientTransport::from_config(config)).await?;
    let echo = json!({ "message": "warm" }).as_object().cloned().unwrap_or_default();
    host.call_tool(CallToolRequestParams::new("ev__echo").with_arguments(echo)).await?;
    host.cancel().await?;
    eventually(DEADLINE, "one replica holds alice's session", || async {
        let mut holding = Vec::new();
        for (index, replica) in cluster.replicas.iter().enumerate() {
            if replica.upstream_status("ev").await?["sessions"].as_u64() == Some(1) {
                holding.push(index);
            }
        }
        match holding.as_slice() {
            [one] => Ok(*one),
            other => Err(anyhow::anyhow!("replicas holding a session: {other:?}")),
        }
    })
    .await
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
    command.arg(LONG_CALL).stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped()).kill_on_drop(true);
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
    let mut got = 0;
    for run in 0..RUNS {
        let (cluster, _policies) = three_replicas().await?;
        let owner = alices_owner(&cluster).await?;
        let front = (owner + 1) % 3;
        let (answer, after) = call_cut_at(&cluster, front).await?;
        eprintln!("run {run}: front replica-{front} killed, owner replica-{owner}: {answer} after {after:?}");
        let text = text_of(&answer);
        if answer["op"] == "call_progress" && text.contains("Long running operation completed") {
            got += 1;
        }
        let handed = cluster.replicas.iter().filter(|r| !r.matching(&["a lost stream's call answered"]).is_empty());
        assert_eq!(handed.count(), 1, "run {run}: one replica handed the kept answer over");
    }
    assert_eq!(got, RUNS, "results after the stream's replica died");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_host_hears_within_5_s_that_its_call_was_lost_with_the_replica_running_it() -> anyhow::Result<()> {
    let mut told = 0;
    for run in 0..RUNS {
        let (cluster, _policies) = three_replicas().await?;
        let owner = alices_owner(&cluster).await?;
        let (answer, after) = call_cut_at(&cluster, owner).await?;
        eprintln!("run {run}: replica-{owner} (front and owner) killed: {answer} after {after:?}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        let names_the_cause = message.contains(&format!("replica serving this request (replica-{owner}) was lost"))
            && message.contains("may or may not have run");
        if names_the_cause && after <= LOST_WITHIN {
            told += 1;
        }
    }
    assert_eq!(told, RUNS, "clear errors within {LOST_WITHIN:?}");
    Ok(())
}
