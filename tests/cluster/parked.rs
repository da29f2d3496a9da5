//! A 2026-07-28 host's call parked on one replica resumes from any replica (issue 37, item 4):
//! three replicas behind haproxy (round-robin) in front of one HTTP fixture pinned to the 2025
//! era, whose `ask` prompt asks the calling host for a name by `sampling/createMessage` three
//! times in a row. A 2026-07-28 host takes no server-to-client requests, so each question comes
//! back as `input_required` with the proxy's `requestState`, which names the replica the call is
//! parked on; each retry lands on the next replica, which sends it there over MCP (a `prompts/get`
//! carrying the `requestState` and the host's `inputResponses`, at that replica's session
//! endpoint), where the call resumes. The prompt answers with the three names, in order. A retry
//! whose replica is gone (`kill -9`) fails at once with `-32602` naming that replica and saying
//! the call is over; one whose replica lives but cannot be reached (it tells the others an
//! address where nothing answers) fails the same way within the upstream's request timeout,
//! saying the call is lost; neither runs anywhere.

#![allow(deprecated)] // Sampling is deprecated by SEP-2577 but still in the 2025 era.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, GetPromptRequestParams,
    GetPromptResponse, Implementation, SamplingCapability, SamplingMessage,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientServiceExt, ErrorData, RoleClient};
use serde_json::{Value, json};

use super::replicas::{ALICE_TOKEN, TOKENS};
use crate::support::DEADLINE;
use crate::support::cluster::{Replicas, cluster_when, forwards};
use crate::support::fixture::{Era, HttpFixture, connect_http, error_code, stats};
use crate::support::proxy::{alice_and_bob_policies, alice_and_bob_under_policies, http_upstream};

/// Names the fixture's `ask` prompt asks for, one round each.
const ROUNDS: usize = 3;

/// Three replicas in front of one HTTP fixture spoken to in the 2025 era (it asks the calling
/// host by server-to-client requests), alice and bob allowed everything.
async fn three_replicas() -> anyhow::Result<(Replicas, HttpFixture, tempfile::TempDir)> {
    three_replicas_with("", |_| String::new()).await
}

/// The same, with `upstream_lines` added to the upstream's and `cluster_lines(index)` to
/// replica `index`'s `[cluster]` section.
async fn three_replicas_with(
    upstream_lines: &str,
    cluster_lines: impl Fn(usize) -> String,
) -> anyhow::Result<(Replicas, HttpFixture, tempfile::TempDir)> {
    let fixture = HttpFixture::spawn(&[]).await?;
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let upstream = http_upstream("fx", &fixture.url, &format!("protocol = \"2025-11-25\"\n{upstream_lines}"));
    let config = alice_and_bob_under_policies("", policies.path(), &upstream);
    let cluster = Replicas::start_each(3, &config, &TOKENS, cluster_lines).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("fx").await?;
        // Until a replica has seen the others, a `requestState` naming one of them names a
        // replica it takes for gone.
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 3)).await?;
    }
    Ok((cluster, fixture, policies))
}

/// A 2026-07-28 host that declares sampling and answers each question with the next name,
/// `heron 1`, `heron 2`, …
#[derive(Clone, Default)]
struct NamingHost {
    asked: Arc<AtomicUsize>,
}

impl ClientHandler for NamingHost {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(SamplingCapability::default());
        ClientConfig::new(capabilities, Implementation::new("naming-host", "1.0.0"))
    }

    async fn create_message(
        &self,
        _: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let name = format!("heron {}", self.asked.fetch_add(1, Ordering::SeqCst) + 1);
        Ok(CreateMessageResult::new(SamplingMessage::assistant_text(name), "test-model".into()))
    }
}

/// alice's 2026-07-28 host at `url` (the balancer's or one replica's), answering as `host` does.
async fn naming_host(url: &str, host: NamingHost) -> anyhow::Result<RunningService<RoleClient, NamingHost>> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(ALICE_TOKEN);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    let connecting = host.serve_with_lifecycle(transport, Era::Modern.lifecycle());
    Ok(tokio::time::timeout(DEADLINE, connecting).await.context("connect")??)
}

/// `fx__ask` asking `rounds` names by sampling.
fn ask(rounds: usize) -> GetPromptRequestParams {
    let arguments = json!({"rounds": rounds.to_string(), "by": "sampling"});
    GetPromptRequestParams::new("fx__ask").with_arguments(arguments.as_object().cloned().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_modern_hosts_answers_to_a_2025_upstreams_sampling_resume_its_call_over_mcp_from_any_replica()
-> anyhow::Result<()> {
    let (cluster, _fixture, _policies) = three_replicas().await?;
    let host = NamingHost::default();
    let alice = naming_host(cluster.url(), host.clone()).await?;

    // The running service drives the rounds: it answers each `input_required` and asks again.
    let result = tokio::time::timeout(DEADLINE, alice.get_prompt(ask(ROUNDS))).await.context("the prompt hung")??;
    let [message] = &result.messages[..] else { anyhow::bail!("expected one message: {result:?}") };
    let text = message.content.as_text().with_context(|| format!("no text in {message:?}"))?;
    let names: Value = serde_json::from_str(&text.text).with_context(|| format!("not JSON: {}", text.text))?;
    assert_eq!(names, json!({"names": ["heron 1", "heron 2", "heron 3"]}), "every round's answer reached the call");
    assert_eq!(host.asked.load(Ordering::SeqCst), ROUNDS, "the host was asked once per round");

    // Round-robin takes each retry to the next replica: the ones that landed elsewhere than the
    // call's replica crossed as MCP, resuming it at that replica's session endpoint.
    let all: Vec<_> = cluster.replicas.iter().collect();
    let resumed = forwards(all.iter().copied(), "resumed").await?;
    let sent = forwards(all.iter().copied(), "forwarded").await?;
    eprintln!("retries resumed over MCP: {resumed} (requests sent to another replica: {sent})");
    assert!(resumed >= 1.0, "no retry crossed to the replica its call waits on as MCP");
    assert!(sent >= resumed, "each retry that crossed was sent by a replica's connection to another");
    Ok(())
}

/// alice's `fx__ask` of two rounds through `host`, whose replica is `replica` (where the call
/// parks, asking its first name), and her retry answering that name with the proxy's
/// `requestState`.
async fn parked_on(
    host: &RunningService<RoleClient, NamingHost>,
    replica: &str,
) -> anyhow::Result<GetPromptRequestParams> {
    let mut retry = ask(2);
    let first = tokio::time::timeout(DEADLINE, host.peer().get_prompt_once(retry.clone())).await??;
    let GetPromptResponse::InputRequired(needs) = first else { anyhow::bail!("expected input_required: {first:?}") };
    let state = needs.request_state.context("a requestState")?;
    anyhow::ensure!(state.ends_with(&format!("@{replica}")), "the state names the replica the call waits on: {state}");
    let answer = CreateMessageResult::new(SamplingMessage::assistant_text("heron"), "test-model".into());
    retry.input_responses = Some([("upstream-request".to_owned(), serde_json::to_value(answer)?)].into());
    retry.request_state = Some(state);
    Ok(retry)
}

/// The upstream's request timeout in the test below: the bound a retry waits for the replica
/// its call is parked on.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// alice's call is parked on replica-0, which stays alive and heartbeating but tells the others
/// an address where nothing answers (a port bound and never accepted from: its session endpoint
/// cannot be reached): her retry through replica-1 fails with `-32602` saying the call is lost
/// (not over, not that the replica is gone) within the upstream's request timeout, the same
/// again, and runs nowhere (the fixture was asked for the prompt once, by replica-0).
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_whose_replica_cannot_be_reached_fails_within_the_request_timeout_saying_the_call_is_lost()
-> anyhow::Result<()> {
    let silent = std::net::TcpListener::bind("127.0.0.1:0")?;
    let nowhere = format!("advertise_url = \"http://{}\"\n", silent.local_addr()?);
    let timeout = format!("request_timeout = \"{}s\"", REQUEST_TIMEOUT.as_secs());
    let unreachable_0 = |index: usize| if index == 0 { nowhere.clone() } else { String::new() };
    let (cluster, fixture, _policies) = three_replicas_with(&timeout, unreachable_0).await?;
    let on_0 = naming_host(&cluster.replicas[0].url, NamingHost::default()).await?;
    let on_1 = naming_host(&cluster.replicas[1].url, NamingHost::default()).await?;
    let retry = parked_on(&on_0, "replica-0").await?;
    let (side, _) = connect_http(&fixture.url, Era::Legacy).await?;
    assert_eq!(stats(&side).await?["prompt_gets"], 1, "replica-0 asked the fixture for the prompt");

    for attempt in ["first", "again"] {
        let started = Instant::now();
        let retried = tokio::time::timeout(DEADLINE, on_1.peer().get_prompt_once(retry.clone()));
        let error = retried.await.context("the retry hung")?.expect_err(attempt);
        let took = started.elapsed();
        eprintln!("{attempt} retry answered in {took:?}: {error}");
        assert_eq!(error_code(&error), Some(-32602), "{attempt}: {error}");
        let text = error.to_string();
        assert!(
            text.contains(
                "replica `replica-0`, which cannot be reached: that call is lost; call again without requestState"
            ),
            "{attempt}: {text}"
        );
        assert!(!text.contains("gone") && !text.contains("over"), "{attempt}: {text}");
        assert!(took < REQUEST_TIMEOUT + Duration::from_secs(1), "{attempt}: answered in {took:?}");
    }
    let status = cluster.replicas[1].status().await?;
    assert!(status["cluster"]["replicas"].as_array().is_some_and(|r| r.len() == 3), "replica-0 is still listed");
    assert_eq!(stats(&side).await?["prompt_gets"], 1, "no replica asked the fixture again");
    assert_eq!(forwards(&cluster.replicas, "resumed").await?, 0.0, "no retry ran on another replica");
    drop(silent);
    Ok(())
}

/// alice's call is parked on replica-0, which is then killed (`kill -9`): once the heartbeats
/// drop it, her retry through replica-1 fails at once with `-32602` naming replica-0 and saying
/// the call is over, and runs nowhere (replica-1 and replica-2 resume nothing); the same retry
/// again says the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_whose_replica_died_fails_at_once_saying_the_call_is_over() -> anyhow::Result<()> {
    let (cluster, _fixture, _policies) = three_replicas().await?;
    let on_0 = naming_host(&cluster.replicas[0].url, NamingHost::default()).await?;
    let on_1 = naming_host(&cluster.replicas[1].url, NamingHost::default()).await?;
    let retry = parked_on(&on_0, "replica-0").await?;
    let pid = cluster.replicas[0].pid().context("replica-0 runs")?;
    let killed = tokio::process::Command::new("kill").args(["-9", &pid.to_string()]).status().await?;
    anyhow::ensure!(killed.success(), "kill -9 {pid}");
    cluster_when(&cluster.replicas[1], |c| c["replicas"].as_array().is_some_and(|r| r.len() == 2)).await?;

    for attempt in ["first", "again"] {
        let started = std::time::Instant::now();
        let retried = tokio::time::timeout(DEADLINE, on_1.peer().get_prompt_once(retry.clone()));
        let error = retried.await.context("the retry hung")?.expect_err(attempt);
        let took = started.elapsed();
        assert_eq!(error_code(&error), Some(-32602), "{attempt}: {error}");
        let text = error.to_string();
        assert!(text.contains("replica `replica-0`, which is gone: that call is over"), "{attempt}: {text}");
        assert!(took < std::time::Duration::from_secs(5), "{attempt}: answered in {took:?}");
    }
    let survivors = [&cluster.replicas[1], &cluster.replicas[2]];
    assert_eq!(forwards(survivors, "resumed").await?, 0.0, "no retry ran on another replica");
    Ok(())
}
