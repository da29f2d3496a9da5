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
//!
//! This module holds the cluster, the hosts and the steps the parts share: `placement` (where a
//! per-principal or per-host session lives, and its new owner), `passes` (forwarded requests'
//! marks), `subscriptions` (holds on the owner's session, bounded, following it), `elicitation`
//! (what the upstream asks a forwarded call's host, and its parked calls), `tool_lists` (a
//! session's own tool list on every replica), `owner_calls` (a forwarded call cancelled by its
//! host, and a refusal at the owner, on the fixture).

mod elicitation;
mod owner_calls;
mod passes;
mod placement;
mod subscriptions;
mod tool_lists;

use anyhow::Context;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::support::DEADLINE;
use crate::support::cluster::{Replicas, cluster_when};
use crate::support::peers::{py_script, python};
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, toml_str};

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

/// The replica holding the session of the principal whose token is `token`.
async fn owner(cluster: &Replicas, token: &str) -> anyhow::Result<usize> {
    let host = host(cluster.url(), token).await?;
    let pid = call(&host, "pid", json!({})).await?;
    owner_of(cluster, &pid)
}
