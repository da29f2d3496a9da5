//! A host's answer reaches the replica that asked (issue 28, the sampling relay): a 2025 host
//! through the load balancer calls a tool that asks it for a message (the fixture's `sample`);
//! the request rides the call's stream from one replica, and the host POSTs its answer as a new
//! request, which round-robin takes to another replica — which forwards it to the one that asked.
//! With rmcp, the Python SDK client (`tests/py/answering_client.py`) and the TypeScript SDK client
//! (`tests/ts/answering_client.mjs`) as hosts. An answer forged for that request by another
//! principal's session, or by another session of the same principal, is dropped.

#![allow(deprecated)] // Sampling is deprecated by SEP-2577 but still in the 2025 era.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    Implementation, SamplingCapability, SamplingMessage,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};

use super::replicas::{ALICE_TOKEN, BOB_TOKEN, TOKENS};
use crate::support::cluster::Replicas;
use crate::support::exposition::Exposition;
use crate::support::fixture::HttpFixture;
use crate::support::peers::{ensure_installed, parse_json_lines, py_script, python, repo_root};
use crate::support::proxy::{alice_and_bob_policies, alice_and_bob_under_policies, http_upstream};
use crate::support::raw_http::{self, LEGACY};
use crate::support::{DEADLINE, eventually};

/// Sampling calls each host makes.
const CALLS: usize = 3;
/// How long one SDK client run may take (a Python or Node start costs about a second).
const CLIENT_DEADLINE: Duration = Duration::from_secs(90);
const ANSWERS: &str = "mcp_proxy_cluster_answers_total";

/// Three replicas in front of one HTTP fixture (its `sample` tool asks the calling host), alice
/// and bob allowed everything.
async fn three_replicas() -> anyhow::Result<(Replicas, HttpFixture, tempfile::TempDir)> {
    let fixture = HttpFixture::spawn(&[]).await?;
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let config = alice_and_bob_under_policies("", policies.path(), &http_upstream("fx", &fixture.url, ""));
    let cluster = Replicas::start(3, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("fx").await?;
    }
    Ok((cluster, fixture, policies))
}

/// The sum over every replica of the answers that met `outcome`.
async fn answers(cluster: &Replicas, outcome: &str) -> anyhow::Result<f64> {
    let mut sum = 0.0;
    for replica in &cluster.replicas {
        sum += Exposition::parse(&replica.admin_get("/metrics").await?)?.sum(ANSWERS, &[("outcome", outcome)]);
    }
    Ok(sum)
}

/// Every answer was delivered to the replica that asked, at least one of them through another
/// replica; none was dropped.
async fn every_answer_reached_its_replica(cluster: &Replicas, asked: usize) -> anyhow::Result<()> {
    let (forwarded, delivered) = eventually(DEADLINE, "every forwarded answer delivered", || async {
        let (forwarded, delivered) = (answers(cluster, "forwarded").await?, answers(cluster, "delivered").await?);
        if forwarded == delivered {
            Ok((forwarded, delivered))
        } else {
            anyhow::bail!("{forwarded} forwarded, {delivered} delivered")
        }
    })
    .await?;
    let local = answers(cluster, "local").await?;
    eprintln!("answers: {local} local, {forwarded} forwarded, {delivered} delivered");
    assert!(forwarded >= 1.0, "round-robin took no answer to another replica ({local} local)");
    assert_eq!(local + delivered, asked as f64, "every answer completed its request");
    assert_eq!(answers(cluster, "dropped").await?, 0.0);
    assert_eq!(answers(cluster, "unheard").await?, 0.0);
    Ok(())
}

/// An rmcp host that declares sampling and answers `answered by rmcp: <prompt>`.
#[derive(Clone)]
struct SamplingHost;

impl ClientHandler for SamplingHost {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(SamplingCapability::default());
        ClientConfig::new(capabilities, Implementation::new("answering-rmcp", "1.0.0"))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let prompt = serde_json::to_string(&params.messages).unwrap_or_default();
        let answer = SamplingMessage::assistant_text(format!("answered by rmcp: {}", prompt.len()));
        Ok(CreateMessageResult::new(answer, "test-model".into()).with_stop_reason("endTurn"))
    }
}

#[tokio::test]
async fn an_rmcp_hosts_answer_reaches_the_replica_that_asked() -> anyhow::Result<()> {
    let (cluster, _fixture, _policies) = three_replicas().await?;
    let config = StreamableHttpClientTransportConfig::with_uri(cluster.url()).auth_header(ALICE_TOKEN);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    let host = tokio::time::timeout(DEADLINE, SamplingHost.serve(transport)).await.context("connect timed out")??;
    for call in 0..CALLS {
        let params = CallToolRequestParams::new("fx__sample")
            .with_arguments(json!({ "tag": format!("call {call}") }).as_object().cloned().context("object")?);
        let result = tokio::time::timeout(DEADLINE, host.call_tool(params)).await.context("the call timed out")??;
        let text = serde_json::to_string(&result.content)?;
        assert_ne!(result.is_error, Some(true), "{text}");
        assert!(text.contains("answered by rmcp"), "the host's answer is the call's: {text}");
    }
    every_answer_reached_its_replica(&cluster, CALLS).await?;
    host.cancel().await?;
    Ok(())
}

/// Run an SDK client; its JSON lines, one per call.
async fn run_client(mut command: tokio::process::Command) -> anyhow::Result<Vec<Value>> {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let output = tokio::time::timeout(CLIENT_DEADLINE, command.output()).await.context("the client timed out")??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "the client failed ({}):\n{stderr}", output.status);
    let lines = parse_json_lines(&output.stdout);
    anyhow::ensure!(lines.len() == CALLS, "the client printed {lines:?}; stderr:\n{stderr}");
    Ok(lines)
}

/// Each call's result carries the answer `by` gave.
fn each_call_got_its_answer(lines: &[Value], by: &str) {
    for line in lines {
        let text = line["result"].to_string();
        assert!(line["result"]["isError"] != true && text.contains(&format!("answered by {by}")), "{line}");
    }
}

fn client_args(cluster: &Replicas) -> Vec<String> {
    let mut args = vec!["--url".to_owned(), cluster.url().to_owned()];
    args.extend(["--header".to_owned(), format!("Authorization: Bearer {ALICE_TOKEN}")]);
    args.extend((0..CALLS).map(|call| format!("call {call}")));
    args
}

#[tokio::test]
async fn a_python_sdk_hosts_answer_reaches_the_replica_that_asked() -> anyhow::Result<()> {
    let (cluster, _fixture, _policies) = three_replicas().await?;
    let mut command = tokio::process::Command::new(python());
    command.arg(py_script("answering_client.py")).args(client_args(&cluster)).current_dir(repo_root());
    let lines = run_client(command).await?;
    each_call_got_its_answer(&lines, "python");
    every_answer_reached_its_replica(&cluster, CALLS).await
}

#[tokio::test]
async fn a_typescript_sdk_hosts_answer_reaches_the_replica_that_asked() -> anyhow::Result<()> {
    ensure_installed();
    let (cluster, _fixture, _policies) = three_replicas().await?;
    let mut command = tokio::process::Command::new("node");
    command.arg(repo_root().join("tests/ts/answering_client.mjs")).args(client_args(&cluster));
    let lines = run_client(command).await?;
    each_call_got_its_answer(&lines, "typescript");
    every_answer_reached_its_replica(&cluster, CALLS).await
}

/// A raw 2025 session at `url` as `token`, declaring sampling; its id.
async fn open_session(url: &str, token: &str) -> anyhow::Result<String> {
    let mut initialize = raw_http::initialize("raw-answering");
    initialize["params"]["capabilities"] = json!({ "sampling": {} });
    let reply = raw_http::send(post(url, token, None).json(&initialize)).await?;
    let session = reply.session.context("a session id")?;
    raw_http::send(post(url, token, Some(&session)).json(&raw_http::initialized())).await?;
    Ok(session)
}

/// A POST at `url` as `token`, on `session` if given.
fn post(url: &str, token: &str, session: Option<&str>) -> reqwest::RequestBuilder {
    let mut request = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", LEGACY);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    request
}

/// A sampling answer to request `id` saying `text`.
fn sampling_answer(id: &Value, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": {
        "role": "assistant", "content": {"type": "text", "text": text}, "model": "test-model", "stopReason": "endTurn"}})
}

/// The JSON-RPC messages of the SSE `events` read so far.
fn messages(events: &str) -> Vec<Value> {
    events.lines().filter_map(|l| l.strip_prefix("data:")).filter_map(|d| serde_json::from_str(d.trim()).ok()).collect()
}

/// Read `response`'s SSE body until a message satisfying `done` arrives; it.
async fn read_until(
    response: &mut reqwest::Response,
    body: &mut String,
    done: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(message) = messages(body).into_iter().find(|m| done(m)) {
            return Ok(message);
        }
        let chunk = tokio::time::timeout_at(deadline, response.chunk()).await.context("the call's stream hung")??;
        body.push_str(&String::from_utf8_lossy(&chunk.context("the call's stream ended")?));
    }
}

#[tokio::test]
async fn an_answer_forged_by_another_session_or_principal_is_dropped() -> anyhow::Result<()> {
    let (cluster, _fixture, _policies) = three_replicas().await?;
    let url = cluster.url();
    let alice = open_session(url, ALICE_TOKEN).await?;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "fx__sample", "arguments": {"tag": "the question"}}});
    let mut stream = post(url, ALICE_TOKEN, Some(&alice)).json(&call).send().await?;
    anyhow::ensure!(stream.status().is_success(), "the call: {}", stream.status());
    let mut body = String::new();
    let asked = read_until(&mut stream, &mut body, |m| m["method"] == "sampling/createMessage").await?;
    let id = asked["id"].clone();
    assert!(id.as_str().is_some_and(|id| id.starts_with("replica-")), "the request names its replica: {id}");

    // bob, on his own session, and alice, on another session of hers, answer it first.
    let bob = open_session(url, BOB_TOKEN).await?;
    let alice_elsewhere = open_session(url, ALICE_TOKEN).await?;
    for (token, session, text) in
        [(BOB_TOKEN, &bob, "forged by bob"), (ALICE_TOKEN, &alice_elsewhere, "forged by alice")]
    {
        let reply = raw_http::send(post(url, token, Some(session)).json(&sampling_answer(&id, text))).await?;
        assert!(reply.status.is_success(), "{reply:?}");
    }
    // Both reached the replica that asked, which dropped them (wherever they landed).
    eventually(DEADLINE, "both forged answers dropped", || async {
        let dropped = answers(&cluster, "dropped").await?;
        if dropped == 2.0 { Ok(()) } else { anyhow::bail!("{dropped} dropped") }
    })
    .await?;
    let reply =
        raw_http::send(post(url, ALICE_TOKEN, Some(&alice)).json(&sampling_answer(&id, "the real answer"))).await?;
    assert!(reply.status.is_success(), "{reply:?}");
    let result = read_until(&mut stream, &mut body, |m| m["id"] == 7).await?;
    let text = result["result"].to_string();
    assert!(text.contains("the real answer"), "the call took the session's own answer: {result}");
    assert!(!text.contains("forged"), "{result}");
    assert_eq!(answers(&cluster, "local").await? + answers(&cluster, "delivered").await?, 1.0);
    Ok(())
}
