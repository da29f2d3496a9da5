//! What an upstream sends for a routed call — `sampling/createMessage`, `elicitation/create`,
//! `notifications/message` — reaches the host that made the call, and only that host: the real
//! Python SDK server (tests/py/conformance_server.py, PyPI `mcp` 2.3.0) behind the proxy over
//! streamable HTTP in the 2025 era (over stdio, where nothing names the call, only while one
//! principal has called the upstream), rmcp hosts in front.

#![allow(deprecated)] // Sampling and logging are deprecated by SEP-2577 but still in the 2025 era.

use std::sync::Arc;

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, CreateMessageRequestParams,
    CreateMessageResult, ElicitationCapability, FormElicitationCapability, Implementation, JsonRpcMessage,
    JsonRpcNotification, LoggingLevel, SamplingCapability, SamplingMessage, ServerNotification, SetLevelRequestParams,
};
use rmcp::service::{RequestContext, RunningService, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, Transport};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::json;
use tokio::sync::{Barrier, mpsc};

use crate::support::fixture::DEADLINE;
use crate::support::peers::{py_script, python, spawn_py_script_http};
use crate::support::proxy::{ProxyProcess, http_upstream, toml_str};

/// What a host was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Sent {
    /// A sampling request, with the prompt it carried.
    Sampling(String),
    /// A log message's data.
    Log(String),
}

/// A host that records what it is sent; with `sampling`, it declares sampling and elicitation
/// and answers sampling once every host of `together` is being asked (so their calls are in
/// flight at once).
#[derive(Clone)]
pub(super) struct RecordingHost {
    name: &'static str,
    sampling: bool,
    sent: mpsc::UnboundedSender<Sent>,
    together: Arc<Barrier>,
}

impl ClientHandler for RecordingHost {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.sampling {
            capabilities.sampling = Some(SamplingCapability::default());
            let mut elicitation = ElicitationCapability::default();
            elicitation.form = Some(FormElicitationCapability::default());
            capabilities.elicitation = Some(elicitation);
        }
        ClientConfig::new(capabilities, Implementation::new(self.name, "1.0.0"))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let _ = self.sent.send(Sent::Sampling(serde_json::to_string(&params.messages).unwrap_or_default()));
        self.together.wait().await;
        let answer = SamplingMessage::assistant_text(format!("the answer of {}", self.name));
        Ok(CreateMessageResult::new(answer, "test-model".into()).with_stop_reason("endTurn"))
    }
}

/// A host's transport that records each log message as it is read, in the order it arrives
/// (rmcp runs notification callbacks in tasks of their own, which may reorder them).
struct RecordingTransport {
    transport: StreamableHttpClientTransport<reqwest::Client>,
    sent: mpsc::UnboundedSender<Sent>,
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
            let _ = self.sent.send(Sent::Log(log.params.data.as_str().unwrap_or_default().to_string()));
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.transport.close()
    }
}

pub(super) type Host = RunningService<RoleClient, RecordingHost>;

pub(super) async fn host(
    url: &str,
    name: &'static str,
    sampling: bool,
    together: &Arc<Barrier>,
) -> anyhow::Result<(Host, mpsc::UnboundedReceiver<Sent>)> {
    let (sent, heard) = mpsc::unbounded_channel();
    let handler = RecordingHost { name, sampling, sent: sent.clone(), together: together.clone() };
    let transport = StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(url));
    let transport = RecordingTransport { transport, sent };
    let host = tokio::time::timeout(DEADLINE, handler.serve(transport)).await.context("connect timed out")??;
    Ok((host, heard))
}

pub(super) async fn call(host: &Host, tool: &str, arguments: serde_json::Value) -> anyhow::Result<CallToolResult> {
    let mut params = CallToolRequestParams::new(tool.to_string());
    params.arguments = arguments.as_object().cloned();
    Ok(tokio::time::timeout(DEADLINE, host.call_tool(params)).await.context("the call timed out")??)
}

fn text_of(result: &CallToolResult) -> String {
    serde_json::to_string(&result.content).unwrap_or_default()
}

/// Everything sent to a host so far.
fn drained(heard: &mut mpsc::UnboundedReceiver<Sent>) -> Vec<Sent> {
    std::iter::from_fn(|| heard.try_recv().ok()).collect()
}

/// The next `count` things sent to a host, each within [`DEADLINE`].
pub(super) async fn next(heard: &mut mpsc::UnboundedReceiver<Sent>, count: usize) -> anyhow::Result<Vec<Sent>> {
    let mut got = Vec::new();
    while got.len() < count {
        let one = tokio::time::timeout(DEADLINE, heard.recv()).await;
        got.push(one.with_context(|| format!("only {got:?} within {DEADLINE:?}"))?.context("the host closed")?);
    }
    Ok(got)
}

/// What a host at `level` (none: every level) hears of a `log_tagged` call with `tag`.
pub(super) fn tagged_logs(tag: &str, level: Option<LoggingLevel>) -> Vec<Sent> {
    let levels = [("debug", LoggingLevel::Debug), ("info", LoggingLevel::Info), ("warning", LoggingLevel::Warning)];
    let wanted = |at: LoggingLevel| level.is_none_or(|least| at as u8 >= least as u8);
    levels.into_iter().filter(|(_, at)| wanted(*at)).map(|(name, _)| Sent::Log(format!("{tag} {name}"))).collect()
}

/// Wait until `host` hears a whole call's log messages (they ride the call's own stream, so the
/// first try hears them; the retries stay for the GET stream, which carries everything else and
/// is open only some time after the handshake). Each try waits for one call's three messages.
pub(super) async fn logs_reach(host: &Host, heard: &mut mpsc::UnboundedReceiver<Sent>) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while tokio::time::Instant::now() < deadline {
        call(host, "py__test_tool_with_logging", json!({})).await?;
        let mut got = 0;
        while let Ok(Some(_)) = tokio::time::timeout(std::time::Duration::from_secs(2), heard.recv()).await {
            got += 1;
            if got == 3 {
                return Ok(());
            }
        }
    }
    anyhow::bail!("no call's log messages reached the host within {DEADLINE:?}")
}

pub(super) async fn proxy_in_front() -> anyhow::Result<(crate::support::peers::PeerHttp, ProxyProcess)> {
    proxy_with("").await
}

async fn proxy_with(extra: &str) -> anyhow::Result<(crate::support::peers::PeerHttp, ProxyProcess)> {
    let upstream = spawn_py_script_http("conformance_server.py", &["--tagged-logging"]);
    let extra = format!("protocol = \"2025-11-25\"\n{extra}");
    let proxy = ProxyProcess::start(&http_upstream("py", &upstream.url, &extra)).await?;
    proxy.wait_up("py", 1).await?;
    Ok((upstream, proxy))
}

/// Two hosts call the sampling tool at the same time on the one shared upstream connection:
/// each is asked only its own call's question, and each call's result carries its own host's
/// answer. A host that did not declare sampling is never asked; its call fails.
#[tokio::test(flavor = "multi_thread")]
async fn sampling_goes_only_to_the_host_whose_call_asked() -> anyhow::Result<()> {
    let (_upstream, proxy) = proxy_in_front().await?;
    let together = Arc::new(Barrier::new(2));
    let (alice, mut alice_heard) = host(&proxy.url, "alice", true, &together).await?;
    let (bob, mut bob_heard) = host(&proxy.url, "bob", true, &together).await?;
    let (alice_result, bob_result) = tokio::join!(
        call(&alice, "py__test_sampling", json!({"prompt": "question of alice"})),
        call(&bob, "py__test_sampling", json!({"prompt": "question of bob"})),
    );
    let (alice_result, bob_result) = (alice_result?, bob_result?);
    assert!(text_of(&alice_result).contains("LLM response: the answer of alice"), "{alice_result:?}");
    assert!(text_of(&bob_result).contains("LLM response: the answer of bob"), "{bob_result:?}");
    let asked = |sent: Vec<Sent>| -> Vec<bool> {
        sent.iter().map(|s| matches!(s, Sent::Sampling(prompt) if prompt.contains("question of"))).collect()
    };
    let (alice_sent, bob_sent) = (drained(&mut alice_heard), drained(&mut bob_heard));
    assert_eq!(asked(alice_sent.clone()), [true], "{alice_sent:?}");
    assert!(matches!(&alice_sent[0], Sent::Sampling(p) if p.contains("question of alice")), "{alice_sent:?}");
    assert!(matches!(&bob_sent[..], [Sent::Sampling(p)] if p.contains("question of bob")), "{bob_sent:?}");

    let (carol, mut carol_heard) = host(&proxy.url, "carol", false, &together).await?;
    let refused = call(&carol, "py__test_sampling", json!({"prompt": "question of carol"})).await;
    let failed = match &refused {
        Ok(result) => result.is_error == Some(true),
        Err(_) => true,
    };
    assert!(failed, "a host without sampling gets no answer from it: {refused:?}");
    assert_eq!(drained(&mut carol_heard), [], "never asked");
    for host in [alice, bob, carol] {
        host.cancel().await?;
    }
    Ok(())
}

/// Three rmcp hosts on one upstream call a tool that logs at three levels, at the same time, ten
/// times over, while a Python SDK host calls it too: each hears exactly its own call's messages
/// (they name the call), in order, at its own level (`debug`, `warning`, none set: all), and
/// nothing of the others' calls. The message
/// the upstream sends last, just before the call's result, is the one that was lost now and
/// then under load when the relay ran in rmcp's notification callback.
#[tokio::test(flavor = "multi_thread")]
async fn log_messages_go_only_to_the_host_whose_call_sent_them_at_its_level() -> anyhow::Result<()> {
    let (_upstream, proxy) = proxy_in_front().await?;
    let together = Arc::new(Barrier::new(1));
    let levels = [("alice", Some(LoggingLevel::Debug)), ("bob", Some(LoggingLevel::Warning)), ("carol", None)];
    let mut hosts = Vec::new();
    for (name, level) in levels {
        let (host, mut heard) = host(&proxy.url, name, true, &together).await?;
        logs_reach(&host, &mut heard).await?;
        if let Some(level) = level {
            host.set_level(SetLevelRequestParams::new(level)).await?;
        }
        hosts.push((name, level, host, heard));
    }
    let mut python = PythonHost::start(&proxy.url).await?;
    let rounds = async {
        for round in 0..10 {
            let calls = hosts
                .iter()
                .map(|(name, _, host, _)| call(host, "py__log_tagged", json!({"tag": format!("{name}-{round}")})));
            for result in futures::future::join_all(calls).await {
                assert!(text_of(&result?).contains("logged"));
            }
            for (name, level, _, heard) in &mut hosts {
                let expected = tagged_logs(&format!("{name}-{round}"), *level);
                assert_eq!(next(heard, expected.len()).await?, expected, "round {round}");
            }
        }
        anyhow::Ok(())
    };
    let (rounds, python_heard) = tokio::join!(rounds, python.calls());
    rounds?;
    let python_expected: Vec<Vec<Sent>> = PythonHost::TAGS.iter().map(|tag| tagged_logs(tag, None)).collect();
    assert_eq!(python_heard?, python_expected, "the Python SDK host");
    // Each host's own last call marks the end: anything sent to it before is read by then.
    for (name, level, host, heard) in &mut hosts {
        call(host, "py__log_tagged", json!({"tag": format!("{name}-end")})).await?;
        let expected = tagged_logs(&format!("{name}-end"), *level);
        assert_eq!(next(heard, expected.len()).await?, expected, "nothing else");
    }
    for (_, _, host, _) in hosts {
        host.cancel().await?;
    }
    Ok(())
}

/// A PyPI `mcp` 2.3.0 host (tests/py/tools_client.py), with no log level set, whose GET stream
/// is open once it is started; it then calls `log_tagged` with each of [`PythonHost::TAGS`],
/// one after the other, while the rmcp hosts call theirs.
struct PythonHost {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl PythonHost {
    const TAGS: [&str; 11] = ["py-0", "py-1", "py-2", "py-3", "py-4", "py-5", "py-6", "py-7", "py-8", "py-9", "py-end"];

    async fn start(url: &str) -> anyhow::Result<Self> {
        use tokio::io::AsyncBufReadExt;
        let mut command = tokio::process::Command::new(python());
        command.arg(py_script("tools_client.py")).args(["--url", url, "logs_reach:py__test_tool_with_logging"]);
        for tag in Self::TAGS {
            command.arg(format!("call_logs:py__log_tagged:3:{}", json!({"tag": tag})));
        }
        command.stdout(std::process::Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn()?;
        let stdout = child.stdout.take().context("piped")?;
        let mut host = PythonHost { child, lines: tokio::io::BufReader::new(stdout).lines() };
        let ready = host.answer().await?;
        anyhow::ensure!(ready["ready"] == true, "the Python host's log messages never arrived: {ready}");
        Ok(host)
    }

    /// The next op's answer.
    async fn answer(&mut self) -> anyhow::Result<serde_json::Value> {
        let line = tokio::time::timeout(DEADLINE * 2, self.lines.next_line()).await.context("tools_client.py")??;
        Ok(serde_json::from_str(&line.context("tools_client.py ended early")?)?)
    }

    /// The log messages each call heard, in order.
    async fn calls(&mut self) -> anyhow::Result<Vec<Vec<Sent>>> {
        let mut heard = Vec::new();
        for _ in Self::TAGS {
            let answer = self.answer().await?;
            let logs = answer["logs"].as_array().with_context(|| format!("{answer}"))?;
            heard.push(logs.iter().map(|log| Sent::Log(log.as_str().unwrap_or_default().to_string())).collect());
        }
        anyhow::ensure!(self.child.wait().await?.success(), "tools_client.py failed");
        Ok(heard)
    }
}

/// A host that never answers a relayed sampling request holds nothing up: its call fails at the
/// upstream's `request_timeout`, and the next call on the same upstream is served.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_that_never_answers_sampling_fails_only_its_own_call_at_the_timeout() -> anyhow::Result<()> {
    let (_upstream, proxy) = proxy_with("request_timeout = \"2s\"").await?;
    // A barrier for two that only one ever reaches: this host never answers.
    let never = Arc::new(Barrier::new(2));
    let (silent, mut silent_heard) = host(&proxy.url, "silent", true, &never).await?;
    let started = std::time::Instant::now();
    let answer = call(&silent, "py__test_sampling", json!({"prompt": "question of silent"})).await;
    let elapsed = started.elapsed();
    assert!(answer.is_err(), "the call fails at the timeout: {answer:?}");
    assert!(elapsed < std::time::Duration::from_secs(10), "within the call's timeout: {elapsed:?}");
    assert!(matches!(&drained(&mut silent_heard)[..], [Sent::Sampling(_)]), "it was asked");
    let after = call(&silent, "py__test_simple_text", json!({})).await?;
    assert!(text_of(&after).contains("simple text response"), "{after:?}");
    silent.cancel().await?;
    Ok(())
}

/// The Python SDK over stdio: a sampling request names no call (SEP-2260 defines no field; it
/// names no progress token). While every call the upstream was sent came from one principal, it
/// is asked of that principal's lone call in flight (a late one cannot be anyone else's). With
/// two principals it goes nowhere: `tests/fast/late_relay.rs`.
#[tokio::test(flavor = "multi_thread")]
async fn over_stdio_sampling_that_names_no_call_is_asked_while_one_principal_ever_called() -> anyhow::Result<()> {
    let proxy = stdio_sampling_proxy().await?;
    let alone = Arc::new(Barrier::new(1));
    let (alice, mut alice_heard) = host(&proxy.url, "alice", true, &alone).await?;
    let answer = call(&alice, "py__test_sampling", json!({"prompt": "question of alice"})).await?;
    assert!(text_of(&answer).contains("the answer of alice"), "{answer:?}");
    assert!(matches!(&drained(&mut alice_heard)[..], [Sent::Sampling(prompt)] if prompt.contains("question of alice")));
    alice.cancel().await?;
    Ok(())
}

/// The proxy binary with the Python SDK's conformance server as a 2025 stdio upstream `py`.
async fn stdio_sampling_proxy() -> anyhow::Result<ProxyProcess> {
    let script = py_script("conformance_server.py");
    let config = format!(
        "[[upstreams]]\nname = \"py\"\ncommand = {}\nargs = [{}, \"--stdio\"]\nprotocol = \"2025-11-25\"\n",
        toml_str(python().to_str().context("a UTF-8 path")?),
        toml_str(script.to_str().context("a UTF-8 path")?),
    );
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("py", 1).await?;
    Ok(proxy)
}
