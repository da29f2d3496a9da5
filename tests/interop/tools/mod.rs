//! Tools, prompts and completion through the proxy, end to end: the real server-everything and
//! server-memory as upstreams, the real proxy binary, the Python SDK client (tests/py/tools_client.py)
//! and rmcp clients of both eras. Names are `<upstream>__<name>`; policies decide them over
//! `tool://<upstream>/<name>` and `prompt://<upstream>/<name>`.

use std::collections::BTreeSet;
use std::process::Stdio;

use crate::support::PROXY_BIN;
use crate::support::fixture::{DEADLINE, Era, error_code};
use crate::support::peers::{everything_upstream, memory_upstream, parse_json_lines, py_script, python};
use crate::support::proxy::ProxyProcess;
use anyhow::{Context, bail};
use rmcp::model::{
    ArgumentInfo, CallToolRequest, CallToolRequestParams, ClientRequest, CompleteRequestParams, NumberOrString,
    PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, Reference, ResourceUpdatedNotificationParam,
    SubscribeRequestParams,
};
use rmcp::service::{ClientCacheConfig, NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};
use tokio::sync::mpsc;

mod access;

const ALICE_TOKEN: &str = "alice-tok-5b1e9c3a7d2f4e60";
const BOB_TOKEN: &str = "bob-tok-2c8f6a0e4b1d9f73";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];

/// What a host heard.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Heard {
    Updated(String),
    ToolsListChanged,
    PromptsListChanged,
    /// A progress notification: its token and progress.
    Progress(String, u64),
}

#[derive(Clone)]
struct Recorder(mpsc::UnboundedSender<Heard>);

impl ClientHandler for Recorder {
    async fn on_resource_updated(&self, params: ResourceUpdatedNotificationParam, _: NotificationContext<RoleClient>) {
        let _ = self.0.send(Heard::Updated(params.uri));
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _: NotificationContext<RoleClient>) {
        let token = match params.progress_token.0 {
            NumberOrString::String(token) => token.to_string(),
            NumberOrString::Number(n) => n.to_string(),
        };
        let _ = self.0.send(Heard::Progress(token, params.progress as u64));
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.0.send(Heard::ToolsListChanged);
    }

    async fn on_prompt_list_changed(&self, _: NotificationContext<RoleClient>) {
        let _ = self.0.send(Heard::PromptsListChanged);
    }
}

type Host = RunningService<RoleClient, Recorder>;

/// An rmcp host over HTTP in `era` (`token`: bearer), with what it hears.
async fn host(url: &str, era: Era, token: Option<&str>) -> anyhow::Result<(Host, mpsc::UnboundedReceiver<Heard>)> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url).reinit_on_expired_session(false);
    if let Some(token) = token {
        config = config.auth_header(token);
    }
    let (tx, heard) = mpsc::unbounded_channel();
    let lifecycle = match era {
        Era::Modern => ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
        _ => ClientLifecycleMode::Initialize,
    };
    let connecting = Recorder(tx).serve_with_lifecycle(StreamableHttpClientTransport::from_config(config), lifecycle);
    let client = tokio::time::timeout(DEADLINE, connecting).await.context("connect timed out")??;
    client.set_response_cache_config(ClientCacheConfig::disabled()).await;
    Ok((client, heard))
}

/// Wait (at most [`DEADLINE`]) until the host hears `wanted`.
async fn wait_heard(heard: &mut mpsc::UnboundedReceiver<Heard>, wanted: &Heard) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match tokio::time::timeout_at(deadline, heard.recv()).await {
            Ok(Some(event)) if &event == wanted => return Ok(()),
            Ok(Some(_)) => continue,
            Ok(None) => bail!("the host closed"),
            Err(_) => bail!("{wanted:?} not heard within {DEADLINE:?}"),
        }
    }
}

/// Start the proxy and wait until every named upstream's tools are in (`/status`).
async fn start_proxy(config: &str, env: &[(&str, &str)], upstreams: &[&str]) -> anyhow::Result<ProxyProcess> {
    ProxyProcess::start_with_offerings(config, env, upstreams).await
}

/// Run tests/py/tools_client.py against `url` in `mode`; one JSON value per op.
async fn python_ops(url: &str, mode: &str, headers: &[&str], ops: &[&str]) -> anyhow::Result<Vec<Value>> {
    let mut command = tokio::process::Command::new(python());
    command.arg(py_script("tools_client.py")).args(["--url", url, "--mode", mode]);
    for header in headers {
        command.args(["--header", header]);
    }
    command.args(ops).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let output = tokio::time::timeout(DEADLINE * 2, command.output()).await.context("tools_client.py timed out")??;
    let lines = parse_json_lines(&output.stdout);
    if lines.len() != ops.len() {
        bail!(
            "tools_client.py: {} answers for {} ops; stderr:\n{}",
            lines.len(),
            ops.len(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(lines)
}

fn texts(result: &Value) -> Vec<String> {
    let content = result["content"].as_array().cloned().unwrap_or_default();
    content.iter().filter_map(|block| block["text"].as_str().map(str::to_owned)).collect()
}

/// server-everything's tools and prompts, listed, called, got and completed through the proxy
/// by the Python SDK, in both eras; the resource links one of its tools returns come back
/// namespaced and readable through the proxy.
#[tokio::test]
async fn everything_tools_and_prompts_work_from_the_python_client_in_both_eras() -> anyhow::Result<()> {
    let proxy = start_proxy(&everything_upstream("everything", ""), &[], &["everything"]).await?;
    for mode in ["legacy", "2026-07-28"] {
        let ops = [
            "tools_all",
            "prompts_all",
            "call:everything__get-sum:{\"a\": 2, \"b\": 3}",
            "call:everything__echo:{\"message\": \"through the proxy\"}",
            "call:everything__get-resource-links:{\"count\": 2}",
            "prompt:everything__args-prompt:{\"city\": \"Lisbon\"}",
            "complete:everything__completable-prompt:department:E",
            "call:everything__no-such-tool:{}",
        ];
        let answers = python_ops(&proxy.url, mode, &[], &ops).await?;
        let tools: BTreeSet<&str> =
            answers[0]["names"].as_array().context("names")?.iter().filter_map(Value::as_str).collect();
        for expected in ["everything__echo", "everything__get-sum", "everything__toggle-subscriber-updates"] {
            assert!(tools.contains(expected), "{mode}: {expected} missing from {tools:?}");
        }
        assert!(tools.iter().all(|name| name.starts_with("everything__")), "{mode}: {tools:?}");
        let prompts = answers[1]["names"].as_array().context("prompt names")?;
        assert!(prompts.contains(&json!("everything__simple-prompt")), "{mode}: {prompts:?}");
        assert!(texts(&answers[2]["result"]).iter().any(|t| t.contains('5')), "{mode}: {}", answers[2]);
        assert!(texts(&answers[3]["result"]).iter().any(|t| t.contains("through the proxy")), "{mode}: {}", answers[3]);
        let links: Vec<&str> = answers[4]["result"]["content"]
            .as_array()
            .context("content")?
            .iter()
            .filter(|block| block["type"] == "resource_link")
            .filter_map(|block| block["uri"].as_str())
            .collect();
        assert_eq!(links.len(), 2, "{mode}: {}", answers[4]);
        assert!(links.iter().all(|uri| uri.starts_with("everything+demo://")), "{mode}: {links:?}");
        let prompt = answers[5]["result"].to_string();
        assert!(prompt.contains("Lisbon"), "{mode}: {prompt}");
        let values = answers[6]["values"].as_array().context("completion values")?;
        assert!(values.iter().any(|v| v.as_str().is_some_and(|v| v.starts_with('E'))), "{mode}: {values:?}");
        assert_eq!(answers[7]["error"]["code"], -32602, "{mode}: {}", answers[7]);
    }
    // A link is a resource of the proxy's: it reads through it.
    let answers =
        python_ops(&proxy.url, "legacy", &[], &["call:everything__get-resource-links:{\"count\": 1}"]).await?;
    let uri = answers[0]["result"]["content"]
        .as_array()
        .and_then(|c| c.iter().find_map(|b| b["uri"].as_str()))
        .context("a link")?
        .to_string();
    let (client, _) = host(&proxy.url, Era::Legacy, None).await?;
    let read = client.read_resource(rmcp::model::ReadResourceRequestParams::new(uri.clone())).await?;
    assert!(!read.contents.is_empty(), "{uri} reads through the proxy");
    Ok(())
}

/// rmcp hosts of both eras list and call tools through the proxy; the upstream's `isError`
/// result passes through as a result, not a protocol error.
#[tokio::test]
async fn rmcp_hosts_of_both_eras_list_and_call_tools() -> anyhow::Result<()> {
    let proxy = start_proxy(&everything_upstream("ev", ""), &[], &["ev"]).await?;
    for era in [Era::Legacy, Era::Modern] {
        let (client, _) = host(&proxy.url, era, None).await?;
        let tools = client.list_tools(Some(PaginatedRequestParams::default())).await?;
        assert!(tools.tools.iter().any(|t| t.name == "ev__get-sum"), "{era:?}");
        let args = json!({"a": 40, "b": 2}).as_object().cloned().expect("object");
        let sum = client.call_tool(CallToolRequestParams::new("ev__get-sum").with_arguments(args)).await?;
        let text: String = sum.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect();
        assert!(text.contains("42"), "{era:?}: {text}");
        // Arguments the tool's schema refuses: server-everything answers with `isError`.
        let bad = json!({"a": "not a number"}).as_object().cloned().expect("object");
        match client.call_tool(CallToolRequestParams::new("ev__get-sum").with_arguments(bad)).await {
            Ok(result) => assert_eq!(result.is_error, Some(true), "{era:?}: {result:?}"),
            Err(error) => assert_eq!(error_code(&error), Some(-32602), "{era:?}: {error}"),
        }
        let prompts = client.list_prompts(Some(PaginatedRequestParams::default())).await?;
        assert!(prompts.prompts.iter().any(|p| p.name == "ev__simple-prompt"), "{era:?}");
    }
    Ok(())
}

/// The host subscribes to a resource, calls `toggle-subscriber-updates` through the proxy: the
/// upstream now notifies the proxy's session, and the `updated` reaches the host.
#[tokio::test]
async fn toggle_subscriber_updates_through_the_proxy_makes_updates_reach_a_subscribed_host() -> anyhow::Result<()> {
    let proxy = start_proxy(&everything_upstream("ev", ""), &[], &["ev"]).await?;
    let (client, mut heard) = host(&proxy.url, Era::Legacy, None).await?;
    let uri = "ev+demo://resource/static/document/architecture.md";
    #[allow(deprecated)]
    client.subscribe(SubscribeRequestParams::new(uri)).await?;
    client.call_tool(CallToolRequestParams::new("ev__toggle-subscriber-updates")).await?;
    wait_heard(&mut heard, &Heard::Updated(uri.into())).await
}

/// server-memory's `create_entities`, called through the proxy, changes its knowledge graph:
/// a host subscribed to `mem+memory://knowledge-graph` hears `updated`.
#[tokio::test]
async fn server_memory_create_entities_through_the_proxy_notifies_a_subscribed_host() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let proxy = start_proxy(&memory_upstream("mem", &dir.path().join("memory.jsonl"), ""), &[], &["mem"]).await?;
    let (client, mut heard) = host(&proxy.url, Era::Legacy, None).await?;
    let uri = "mem+memory://knowledge-graph";
    #[allow(deprecated)]
    client.subscribe(SubscribeRequestParams::new(uri)).await?;
    // A read through the proxy waits until the upstream acknowledged the subscription for
    // the URI, so the change below cannot slip in before it.
    client.read_resource(rmcp::model::ReadResourceRequestParams::new(uri)).await?;
    let entities =
        json!({"entities": [{"name": "proxy", "entityType": "service", "observations": ["forwards tools"]}]});
    let call = CallToolRequestParams::new("mem__create_entities")
        .with_arguments(entities.as_object().cloned().expect("object"));
    let result = client.call_tool(call).await?;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    wait_heard(&mut heard, &Heard::Updated(uri.into())).await?;
    let graph = client.read_resource(rmcp::model::ReadResourceRequestParams::new(uri)).await?;
    assert!(format!("{graph:?}").contains("forwards tools"));
    Ok(())
}
