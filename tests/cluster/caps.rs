//! The caps and limits of one principal hold across the replicas (issue 28): the in-flight call
//! cap (`server.max_calls_per_principal`) counts the calls of every live replica, the
//! subscription cap (`server.max_subscriptions_per_principal`) the subscriptions of every 2025
//! session (each URI counted once, in the form the proxy normalises it to), the rate limits are
//! shared among the live replicas, and a 2025 session's `logging/setLevel` holds on every
//! replica that serves it, the one that answered `initialize` too.

#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.

use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use reqwest::StatusCode;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, JsonRpcMessage, JsonRpcNotification,
    LoggingLevel, ServerNotification, SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{RunningService, RxJsonRpcMessage, ServiceError, TxJsonRpcMessage};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, Transport};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::json;
use tokio::sync::mpsc;

use super::replicas::answered;
use crate::support::cluster::{Replicas, cluster_when};
use crate::support::fixture::{self, Era, HttpFixture};
use crate::support::proxy::{fixture_upstream, http_upstream};
use crate::support::raw_http::Reply;
use crate::support::{DEADLINE, eventually};

/// Three replicas of `server` (a `[server]` or `[rate_limits]` section) in front of one fixture
/// upstream `fx` over HTTP (7 items), each with `fx`'s tools in.
async fn three_replicas(sections: &str) -> anyhow::Result<(HttpFixture, Replicas)> {
    let fixture = HttpFixture::spawn(&["--resources", "7"]).await?;
    let config = format!("{sections}\n\n{}", http_upstream("fx", &fixture.url, ""));
    let cluster = Replicas::start(3, &config, &[]).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("fx").await?;
    }
    Ok((fixture, cluster))
}

/// The error message of a JSON-RPC error answer, if that is what `result` is.
fn refusal<T>(result: &Result<T, ServiceError>) -> Option<String> {
    match result {
        Err(ServiceError::McpError(error)) => Some(error.message.to_string()),
        _ => None,
    }
}

const CALL_CAP: usize = 2;
/// A call's HTTP request gives up after this: beyond the upstream's 30 s request timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(50);
/// How long the refusals may take to be seen on every replica (a loaded machine is slow).
const REFUSALS: Duration = Duration::from_secs(20);

#[tokio::test]
async fn the_in_flight_call_cap_holds_across_replicas() -> anyhow::Result<()> {
    let (fixture, cluster) = three_replicas(&format!("[server]\nmax_calls_per_principal = {CALL_CAP}")).await?;
    let url = cluster.url().to_owned();
    // The fixture holds the calls that ask for it until told (directly, not through the proxy).
    let (side, _) = fixture::connect_http(&fixture.url, Era::Legacy).await?;
    fixture::call_json(&side, "hold_calls", json!({"on": true})).await?;

    // Two calls held upstream, on whichever replicas the balancer picked.
    let holding: Vec<_> = (0..CALL_CAP)
        .map(|_| {
            let url = url.clone();
            // A probe below may take a place first: a held call refused for that is sent again.
            tokio::spawn(async move {
                loop {
                    match held_call(&url, true).await? {
                        Some(refused) if refused.contains("call limit reached") => continue,
                        answer => return anyhow::Ok(answer),
                    }
                }
            })
        })
        .collect();
    // Once both are in flight, the next call is refused, on every replica (the balancer
    // spreads the calls over all three).
    eventually(REFUSALS, "every replica refuses the next call", || async {
        let message = held_call(&url, false).await?.context("admitted")?;
        anyhow::ensure!(message.contains("call limit reached"), "{message}");
        anyhow::ensure!(message.contains("server.max_calls_per_principal"), "{message}");
        for (i, replica) in cluster.replicas.iter().enumerate() {
            let refused = answered(replica, "tools/call", "over_limit").await?;
            anyhow::ensure!(refused >= 1.0, "replica-{i} refused no call yet");
        }
        anyhow::Ok(())
    })
    .await?;

    // The held calls end: their places come back, on every replica.
    fixture::call_json(&side, "hold_calls", json!({"on": false})).await?;
    for held in holding {
        let answer = held.await??;
        assert_eq!(answer, None, "a held call is answered");
    }
    let mut admitted_before = Vec::new();
    for replica in &cluster.replicas {
        admitted_before.push(answered(replica, "tools/call", "ok").await?);
    }
    eventually(DEADLINE, "every replica admits a call again", || async {
        anyhow::ensure!(held_call(&url, false).await?.is_none(), "refused");
        for (i, replica) in cluster.replicas.iter().enumerate() {
            let admitted = answered(replica, "tools/call", "ok").await?;
            anyhow::ensure!(admitted > admitted_before[i], "replica-{i} admitted no call yet");
        }
        anyhow::Ok(())
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn the_subscription_cap_of_a_principal_holds_across_its_sessions_on_every_replica() -> anyhow::Result<()> {
    let (_fixture, cluster) = three_replicas("[server]\nmax_subscriptions_per_principal = 2").await?;
    let (first, _) = fixture::connect_http(cluster.url(), Era::Legacy).await?;
    let (second, _) = fixture::connect_http(cluster.url(), Era::Legacy).await?;
    let item = |n: u32| format!("fx+fx://fx/item/{n}");

    first.subscribe(SubscribeRequestParams::new(item(1))).await?;
    first.subscribe(SubscribeRequestParams::new(item(2))).await?;
    // The principal holds its two, in a session whose requests landed on other replicas.
    let over = second.subscribe(SubscribeRequestParams::new(item(3))).await;
    let message = refusal(&over).with_context(|| format!("a third subscription of the principal: {over:?}"))?;
    assert!(message.contains("server.max_subscriptions_per_principal"), "{message}");
    assert!(message.contains("this principal"), "{message}");

    // One is given back: the other session may take its place.
    first.unsubscribe(UnsubscribeRequestParams::new(item(1))).await?;
    second.subscribe(SubscribeRequestParams::new(item(3))).await?;
    let over = first.subscribe(SubscribeRequestParams::new(item(1))).await;
    assert!(refusal(&over).is_some_and(|m| m.contains("max_subscriptions_per_principal")), "{over:?}");

    // A session that ends gives its subscriptions back.
    second.cancel().await?;
    eventually(DEADLINE, "the ended session's subscription is given back", || {
        first.subscribe(SubscribeRequestParams::new(item(1)))
    })
    .await?;
    first.cancel().await?;
    Ok(())
}

/// A 2025 session's subscription is its URI as the proxy normalises it, as on one process: two
/// spellings of one URI are one subscription (within `server.max_subscriptions_per_session = 1`),
/// either spelling lets go of it, and an unsubscribe of a URI no upstream serves is not found.
#[tokio::test]
async fn a_subscription_is_one_however_its_uri_is_spelled_and_an_unknown_uri_is_not_found() -> anyhow::Result<()> {
    let (_fixture, cluster) = three_replicas("[server]\nmax_subscriptions_per_session = 1").await?;
    let (host, _) = fixture::connect_http(cluster.url(), Era::Legacy).await?;

    host.subscribe(SubscribeRequestParams::new("FX+FX://fx/item/1")).await?;
    let again = host.subscribe(SubscribeRequestParams::new("fx+fx://fx/item/1")).await;
    assert!(again.is_ok(), "the same URI spelled otherwise is the one subscription: {again:?}");
    host.unsubscribe(UnsubscribeRequestParams::new("fx+fx://FX/item/1")).await?;
    let next = host.subscribe(SubscribeRequestParams::new("fx+fx://fx/item/2")).await;
    assert!(next.is_ok(), "an unsubscribe spelled otherwise gave the session's place back: {next:?}");

    let unknown = host.unsubscribe(UnsubscribeRequestParams::new("nowhere+fx://fx/item/1")).await;
    let message = refusal(&unknown).with_context(|| format!("an unknown URI's unsubscribe: {unknown:?}"))?;
    assert_eq!(message, "resource not found: nowhere+fx://fx/item/1", "as one process answers");
    host.cancel().await?;
    Ok(())
}

/// A stateless 2026-07-28 `tools/call` of `tool` with `arguments` through the balancer.
async fn stateless_call(url: &str, id: u64, tool: &str, arguments: serde_json::Value) -> anyhow::Result<Reply> {
    let mut params = json!({"name": tool, "arguments": arguments});
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "caps", "version": "0"}});
    let request = reqwest::Client::new()
        .post(url)
        .timeout(REQUEST_TIMEOUT)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", tool)
        .json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}));
    let response = request.send().await?;
    let status = response.status();
    Ok(Reply { status, session: None, body: response.text().await? })
}

/// `fx__progress`, statelessly, answering at once or (`held`) once the fixture's calls are not
/// held: the error message if refused.
async fn held_call(url: &str, held: bool) -> anyhow::Result<Option<String>> {
    let reply = stateless_call(url, 7, "fx__progress", json!({"count": 0, "held": held})).await?;
    anyhow::ensure!(reply.status == StatusCode::OK, "{reply:?}");
    let message = reply.message().with_context(|| format!("{reply:?}"))?;
    if message.get("result").is_some() {
        return Ok(None);
    }
    Ok(Some(message["error"]["message"].as_str().with_context(|| format!("{message}"))?.to_owned()))
}

/// `count` calls, one after the other: how many were admitted (any other answer is a 429).
async fn admitted_of(url: &str, count: u64) -> anyhow::Result<usize> {
    let mut admitted = 0;
    for id in 0..count {
        match stateless_call(url, id, "fx__stats", json!({})).await?.status {
            StatusCode::OK => admitted += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => anyhow::bail!("call {id}: {other}"),
        }
    }
    Ok(admitted)
}

#[tokio::test]
async fn the_rate_limits_are_shared_among_the_live_replicas() -> anyhow::Result<()> {
    // 6 calls a minute (a burst of 6), one token back every 10 s: none comes back in the test.
    let (_fixture, cluster) = three_replicas("[rate_limits]\ncalls_per_minute = 6").await?;
    // Three replicas: 2 each; 9 calls round-robin, 3 on each, 6 admitted.
    assert_eq!(admitted_of(cluster.url(), 9).await?, 6, "the cluster admits the configured burst");

    // One replica dies: the two left share the rate again (3 each), their buckets made anew.
    let mut cluster = cluster;
    let gone = cluster.replicas.remove(2);
    let pid = gone.pid().context("the replica runs")?;
    let killed = tokio::process::Command::new("kill").args(["-9", &pid.to_string()]).status().await?;
    anyhow::ensure!(killed.success(), "kill -9 {pid}");
    for replica in &cluster.replicas {
        cluster_when(replica, |c| c["replicas"].as_array().is_some_and(|r| r.len() == 2)).await?;
    }
    cluster.balancer.wait_servers(1, "DOWN").await?;
    assert_eq!(admitted_of(cluster.url(), 8).await?, 6, "two replicas, 3 each");
    Ok(())
}

/// A host that records the data of each log message as its transport reads it (in order, before
/// the answer of the call that caused it).
struct LoggedHost;

impl ClientHandler for LoggedHost {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("caps", "1.0.0"))
    }
}

struct RecordingTransport {
    transport: StreamableHttpClientTransport<reqwest::Client>,
    heard: mpsc::UnboundedSender<String>,
}

impl Transport<RoleClient> for RecordingTransport {
    type Error = <StreamableHttpClientTransport<reqwest::Client> as Transport<RoleClient>>::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.transport.receive().await?;
        if let JsonRpcMessage::Notification(JsonRpcNotification {
            notification: ServerNotification::LoggingMessageNotification(log),
            ..
        }) = &message
        {
            let _ = self.heard.send(log.params.data.as_str().unwrap_or_default().to_string());
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.transport.close()
    }
}

/// Call `fx__late` (one `info` message, `<tag> during`, before its answer): whether the host
/// heard that message by the time the answer came.
async fn heard_its_log(
    host: &LoggedService,
    heard: &Mutex<mpsc::UnboundedReceiver<String>>,
    tag: &str,
) -> anyhow::Result<bool> {
    let arguments = json!({"tag": tag, "tagged": true});
    let params =
        CallToolRequestParams::new("fx__late").with_arguments(arguments.as_object().cloned().unwrap_or_default());
    host.call_tool(params).await?;
    let mut messages = Vec::new();
    let mut heard = heard.lock().expect("heard lock");
    while let Ok(message) = heard.try_recv() {
        messages.push(message);
    }
    Ok(messages.contains(&format!("{tag} during")))
}

/// A 2025 host on three replicas behind the balancer, each with the fixture over stdio (a child
/// per replica: a message that names its call by the progress token the proxy gave it,
/// `tagged`, reaches that call's host), and what it hears of the calls' log messages.
async fn logged_host() -> anyhow::Result<(Replicas, Mutex<mpsc::UnboundedReceiver<String>>, LoggedService)> {
    let cluster = Replicas::start(3, &fixture_upstream("fx", &[]), &[]).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("fx").await?;
    }
    let (sender, heard) = mpsc::unbounded_channel();
    let transport =
        StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(cluster.url()));
    let transport = RecordingTransport { transport, heard: sender };
    let host = tokio::time::timeout(DEADLINE, LoggedHost.serve(transport)).await.context("connect")??;
    Ok((cluster, Mutex::new(heard), host))
}

type LoggedService = RunningService<RoleClient, LoggedHost>;

/// Waits until three calls in a row (one on each replica behind the round-robin balancer) have
/// their messages each `heard`, or none; tagged `tag`.
async fn three_calls_in_a_row(
    host: &LoggedService,
    heard: &Mutex<mpsc::UnboundedReceiver<String>>,
    tag: &str,
    expected: bool,
) -> anyhow::Result<()> {
    let mut round = 0;
    let what = format!("three calls in a row, {}", if expected { "each heard" } else { "none heard" });
    eventually(DEADLINE, &what, || {
        round += 1;
        async move {
            for call in 0..3 {
                let tag = format!("{tag}-{round}-{call}");
                let was = heard_its_log(host, heard, &tag).await?;
                anyhow::ensure!(was == expected, "{tag}: heard {was}");
            }
            anyhow::Ok(())
        }
    })
    .await
}

#[tokio::test]
async fn a_sessions_log_level_holds_on_every_replica_that_serves_it() -> anyhow::Result<()> {
    let (cluster, heard, host) = logged_host().await?;
    // No level: every call's message is heard, on whichever replica the call landed (each of
    // them serves the session from now on).
    for round in 0..6 {
        assert!(heard_its_log(&host, &heard, &format!("open-{round}")).await?, "round {round}");
    }
    for (i, replica) in cluster.replicas.iter().enumerate() {
        assert!(answered(replica, "tools/call", "ok").await? >= 1.0, "replica-{i} served no call");
    }
    // `warning` set on one replica: the `info` message of a call on any of them is not heard.
    host.set_level(SetLevelRequestParams::new(LoggingLevel::Warning)).await?;
    three_calls_in_a_row(&host, &heard, "quiet", false).await?;
    // `debug` set (on another replica, likely): every message is heard again everywhere.
    host.set_level(SetLevelRequestParams::new(LoggingLevel::Debug)).await?;
    three_calls_in_a_row(&host, &heard, "loud", true).await?;
    host.cancel().await?;
    Ok(())
}

/// `logging/setLevel` sent before any call (after `initialize` and `notifications/initialized`,
/// which the balancer sends to other replicas) holds on the replica that answered `initialize`
/// too, whose handler served no request of the session yet.
#[tokio::test]
async fn a_log_level_set_before_any_call_holds_on_the_replica_that_answered_initialize() -> anyhow::Result<()> {
    let (cluster, heard, host) = logged_host().await?;
    host.set_level(SetLevelRequestParams::new(LoggingLevel::Warning)).await?;
    three_calls_in_a_row(&host, &heard, "quiet", false).await?;
    for (i, replica) in cluster.replicas.iter().enumerate() {
        assert!(answered(replica, "tools/call", "ok").await? >= 1.0, "replica-{i} served no call");
    }
    host.cancel().await?;
    Ok(())
}
