//! A stdio upstream's default session across replicas: three replicas behind haproxy
//! (round-robin) and a real Redis, with the real server-everything over stdio configured with
//! nothing but its command, and alice and bob on static tokens. A stateful stdio server is one
//! server per principal in the cluster, not a child per replica: the consecutive
//! `toggle-subscriber-updates` of alice's 2025 Python SDK host answer Started, Stopped,
//! Started… wherever they land. Its
//! sampling (a request that names no call) is answered for both principals, each by its own
//! host: 2025 hosts on their call's stream, and a 2026-07-28 host through `input_required` and
//! a retry that may land on any replica. A 2026-07-28 Python SDK host (`tests/py/client.py`)
//! answers its sampling and its elicitation, each with an answer of its own, through the same.

#![allow(deprecated)] // Sampling is deprecated by SEP-2577 but still in the 2025 era.

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    Implementation, SamplingCapability, SamplingMessage,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::json;

use crate::support::DEADLINE;
use crate::support::cluster::{Replicas, cluster_when};
use crate::support::peers::{everything_upstream, parse_json_lines, py_client};
use crate::support::proxy::{alice_and_bob_policies, alice_and_bob_under_policies};

const ALICE_TOKEN: &str = "alice-tok-cluster-stdio-default-7a31";
const BOB_TOKEN: &str = "bob-tok-cluster-stdio-default-c08e";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
/// Calls each host makes.
const CALLS: usize = 10;

/// Three replicas with server-everything as `ev` (no `session` set); returns once each lists its
/// tools and can reach the others.
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

/// A host that declares sampling and answers it with "the answer of <name>".
#[derive(Clone)]
struct Sampler {
    name: &'static str,
}

impl ClientHandler for Sampler {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(SamplingCapability::default());
        ClientConfig::new(capabilities, Implementation::new(self.name, "1.0.0"))
    }

    async fn create_message(
        &self,
        _: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let answer = SamplingMessage::assistant_text(format!("the answer of {}", self.name));
        Ok(CreateMessageResult::new(answer, "test-model".into()).with_stop_reason("endTurn"))
    }
}

type Host = RunningService<RoleClient, Sampler>;

/// A host of the principal with `token` through the balancer: a 2025 session, or with `modern` a
/// 2026-07-28 client (its running service answers `input_required` and calls again).
async fn host(url: &str, name: &'static str, token: &str, modern: bool) -> anyhow::Result<Host> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    let connecting = async {
        if modern {
            let lifecycle = crate::support::fixture::Era::Modern.lifecycle();
            rmcp::ClientServiceExt::serve_with_lifecycle(Sampler { name }, transport, lifecycle).await
        } else {
            Sampler { name }.serve(transport).await
        }
    };
    Ok(tokio::time::timeout(DEADLINE, connecting).await.context("connect")??)
}

/// The text of one call of `ev__<tool>` (an error or an error result fails).
async fn call(host: &Host, tool: &str, arguments: serde_json::Value) -> anyhow::Result<String> {
    let params = CallToolRequestParams::new(format!("ev__{tool}"))
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    // The running service's `call_tool` answers `input_required` (a 2026-07-28 host) and calls again.
    let result = tokio::time::timeout(DEADLINE, host.call_tool(params)).await.context("the call hung")??;
    anyhow::ensure!(result.is_error != Some(true), "{tool}: {result:?}");
    Ok(result.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.clone()).collect::<Vec<_>>().join("\n"))
}

/// How many of `CALLS` sampling calls of `host` came back with its own answer (each failure
/// printed).
async fn sampled(host: &Host, name: &str) -> usize {
    let mut own = 0;
    for round in 0..CALLS {
        match call(host, "trigger-sampling-request", json!({ "prompt": format!("question {round} of {name}") })).await {
            Ok(text) if text.contains(&format!("the answer of {name}")) => own += 1,
            Ok(text) => eprintln!("{name}'s call {round} came back with another answer: {text}"),
            Err(error) => eprintln!("{name}'s call {round} failed: {error:#}"),
        }
    }
    own
}

/// The sum over every replica of `mcp_proxy_cluster_forwards_total{outcome="forwarded"}`.
async fn forwarded(cluster: &Replicas) -> anyhow::Result<f64> {
    let needle = "mcp_proxy_cluster_forwards_total{outcome=\"forwarded\"}";
    let mut sum = 0.0;
    for replica in &cluster.replicas {
        let metrics = replica.admin_get("/metrics").await?;
        let counted = metrics.lines().filter(|line| line.starts_with(needle));
        sum += counted.filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok()).sum::<f64>();
    }
    Ok(sum)
}

/// Per-principal sessions of `ev` open in the cluster.
async fn sessions(cluster: &Replicas) -> anyhow::Result<u64> {
    let mut open = 0;
    for replica in &cluster.replicas {
        open += replica.upstream_status("ev").await?["sessions"].as_u64().context("sessions")?;
    }
    Ok(open)
}

#[tokio::test(flavor = "multi_thread")]
async fn server_everythings_toggle_alternates_across_replicas_under_default_settings() -> anyhow::Result<()> {
    let (cluster, _policies) = three_replicas().await?;
    let toggles = vec!["call:ev__toggle-subscriber-updates:{}".to_string(); 6];
    let lines = python_host(&cluster, "legacy", toggles).await?;
    let said: Vec<String> =
        lines.iter().map(|line| text_of(line).split_whitespace().next().unwrap_or_default().to_string()).collect();
    let expected: Vec<&str> = (0..6).map(|n| if n % 2 == 0 { "Started" } else { "Stopped" }).collect();
    assert_eq!(said, expected, "one switch for alice in the cluster");
    assert_eq!(sessions(&cluster).await?, 1, "alice's one session");
    assert!(forwarded(&cluster).await? >= 1.0, "toggles landed on replicas other than the owner");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_principals_get_server_everythings_sampling_answered_through_the_balancer() -> anyhow::Result<()> {
    let (cluster, _policies) = three_replicas().await?;
    let alice = host(cluster.url(), "alice", ALICE_TOKEN, false).await?;
    let bob = host(cluster.url(), "bob", BOB_TOKEN, false).await?;
    let (alices, bobs) = tokio::join!(sampled(&alice, "alice"), sampled(&bob, "bob"));
    assert_eq!((alices, bobs), (CALLS, CALLS), "answered by each principal's own host");
    assert_eq!(sessions(&cluster).await?, 2, "one session per principal in the cluster");
    for host in [alice, bob] {
        host.cancel().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_modern_hosts_sampling_of_server_everything_is_answered_through_the_balancer() -> anyhow::Result<()> {
    let (cluster, _policies) = three_replicas().await?;
    let alice = host(cluster.url(), "alice", ALICE_TOKEN, true).await?;
    assert_eq!(sampled(&alice, "alice").await, CALLS, "every call and its retry, wherever they land");
    assert!(forwarded(&cluster).await? >= 1.0, "calls or retries reached the owner from another replica");
    alice.cancel().await?;
    Ok(())
}

/// The result lines of alice's Python SDK host (`tests/py/client.py`, protocol `mode`) running
/// `ops` through the balancer, one line per op.
async fn python_host(cluster: &Replicas, mode: &str, ops: Vec<String>) -> anyhow::Result<Vec<serde_json::Value>> {
    let bearer = format!("Authorization: Bearer {ALICE_TOKEN}");
    let mut args = vec!["--url", cluster.url(), "--mode", mode, "--header", &bearer, "--timeout", "30"]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    let count = ops.len();
    args.extend(ops);
    let mut command = tokio::process::Command::from(py_client(&args));
    command.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(std::time::Duration::from_secs(90), command.output()).await.context("hung")??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "the Python host failed: {stderr}");
    let lines = parse_json_lines(&output.stdout);
    anyhow::ensure!(lines.len() == count, "one line per op: {lines:?}\n{stderr}");
    Ok(lines)
}

/// What the Python host answers round `round`'s sampling with, and accepts its elicitation with.
fn python_answers(round: usize) -> (String, String) {
    (format!("the answer of alice {round}"), format!("alice-{round}"))
}

/// The text of a client.py call line's result.
fn text_of(line: &serde_json::Value) -> String {
    let blocks = line["result"]["content"].as_array().cloned().unwrap_or_default();
    blocks.iter().filter_map(|block| block["text"].as_str()).collect::<Vec<_>>().join("\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_modern_python_hosts_sampling_and_elicitation_of_server_everything_are_answered_through_the_balancer()
-> anyhow::Result<()> {
    let (cluster, _policies) = three_replicas().await?;
    let mut ops = Vec::new();
    for round in 0..CALLS {
        let (reply, name) = python_answers(round);
        let prompt = json!({ "prompt": format!("question {round}") });
        ops.push(format!("call_sampled:{reply}:ev__trigger-sampling-request:{prompt}"));
        ops.push(format!("call_elicited:{name}:ev__trigger-elicitation-request:{{}}"));
    }
    let lines = python_host(&cluster, "2026-07-28", ops).await?;
    let (mut sampled, mut elicited) = (0, 0);
    for (round, pair) in lines.chunks(2).enumerate() {
        let (reply, name) = python_answers(round);
        let (sampling, elicitation) = (&pair[0], &pair[1]);
        match sampling["sampled"] == 1 && text_of(sampling).contains(&format!("\"text\": \"{reply}\"")) {
            true => sampled += 1,
            false => eprintln!("round {round}'s sampling: {sampling}"),
        }
        match elicitation["elicited"] == 1 && text_of(elicitation).contains(&format!("- Name: {name}\n")) {
            true => elicited += 1,
            false => eprintln!("round {round}'s elicitation: {elicitation}"),
        }
    }
    assert_eq!((sampled, elicited), (CALLS, CALLS), "each call carried the host's own answer for it");
    assert!(forwarded(&cluster).await? >= 1.0, "calls or retries reached the owner from another replica");
    assert_eq!(sessions(&cluster).await?, 1, "alice's one session of server-everything");
    Ok(())
}
