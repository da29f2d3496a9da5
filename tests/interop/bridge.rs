//! Resources as tools (`[bridge]`), end to end: the real server-everything as the upstream, the
//! real proxy binary, and rmcp hosts that use tools only — as a model behind a tools-only host
//! would. They list, search, read text and blobs and expand templates through the bridge; a
//! policy decides both the bridge's tools (`tool://proxy.bridge/<name>`) and the resources
//! they reach (denied answers exactly like missing); with the bridge off its tools are absent.

use std::process::Stdio;

use crate::support::exposition::Exposition;
use crate::support::fixture::{DEADLINE, error_code};
use crate::support::peers::{everything_stdio_command, parse_json_lines, py_script, python};
use crate::support::proxy::{ProxyProcess, toml_str};
use anyhow::{Context, bail};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents};
use rmcp::service::{ClientCacheConfig, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};

const ALICE_TOKEN: &str = "alice-tok-8d3f1a6c2e9b4705";
const BOB_TOKEN: &str = "bob-tok-4a7e2c9f1b6d3058";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
const DOCS: &str = "ev+demo://resource/static/document";

type Host = RunningService<RoleClient, ()>;

/// An rmcp host over HTTP with a bearer token.
async fn host(url: &str, token: &str) -> anyhow::Result<Host> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config);
    let connecting = ().serve_with_lifecycle(transport, ClientLifecycleMode::Initialize);
    let client = tokio::time::timeout(DEADLINE, connecting).await.context("connect timed out")??;
    client.set_response_cache_config(ClientCacheConfig::disabled()).await;
    Ok(client)
}

/// A config: bearer tokens for alice and bob, policies from `policies`, server-everything as
/// `ev`, and `bridge` as the `[bridge]` section's body (`None`: no section).
/// server-everything gives no `ttlMs`: its reads are kept (a repeated read is a hit) only with
/// the operator's opt-in, `[upstreams.cache] unwatched_ttl`; and only on a shared session
/// (`session = "shared"`: one child for both principals, whose reads the cache may share).
fn config(policies: &std::path::Path, bridge: Option<&str>) -> String {
    let (program, args) = everything_stdio_command();
    let args: Vec<String> = args.iter().map(|a| toml_str(a)).collect();
    let bridge = bridge.map(|body| format!("[bridge]\n{body}\n\n")).unwrap_or_default();
    format!(
        "[auth]\nmode = \"bearer\"\n\n\
         [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n\
         [policies]\ndir = {}\n\n{bridge}\
         [[upstreams]]\nname = \"ev\"\ncommand = {}\nargs = [{}]\nsession = \"shared\"\n\
         [upstreams.cache]\nunwatched_ttl = \"10m\"\n",
        toml_str(policies.to_str().expect("utf-8 path")),
        toml_str(&program),
        args.join(", "),
    )
}

/// alice: everything but one document; bob: only the search tool and the documents.
fn policies() -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let alice = format!("principals = [\"alice\"]\nallow = [\"**\"]\ndeny = [\"{DOCS}/architecture.md\"]\n");
    std::fs::write(dir.path().join("alice.toml"), alice)?;
    let bob =
        format!("principals = [\"bob\"]\nallow = [\"tool://proxy.bridge/proxy_resources_search\", \"{DOCS}/**\"]\n");
    std::fs::write(dir.path().join("bob.toml"), bob)?;
    Ok(dir)
}

/// Start the proxy and wait until server-everything is up (its tools are in).
async fn start(config: &str) -> anyhow::Result<ProxyProcess> {
    ProxyProcess::start_with_offerings(config, &TOKENS, &["ev"]).await
}

async fn call(host: &Host, tool: &str, arguments: Value) -> anyhow::Result<CallToolResult> {
    let arguments = arguments.as_object().cloned().context("arguments are an object")?;
    Ok(host.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)).await?)
}

fn text_of(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|block| block.as_text()).map(|t| t.text.as_str()).collect()
}

/// The structured answer of a list or search call.
fn json_of(result: &CallToolResult) -> anyhow::Result<Value> {
    anyhow::ensure!(result.is_error != Some(true), "a tool error: {}", text_of(result));
    let text: Value = serde_json::from_str(&text_of(result))?;
    anyhow::ensure!(result.structured_content.as_ref() == Some(&text), "text and structured content differ");
    Ok(text)
}

fn uris(answer: &Value, key: &str, field: &str) -> Vec<String> {
    answer[key].as_array().into_iter().flatten().filter_map(|r| r[field].as_str().map(str::to_owned)).collect()
}

async fn tool_names(host: &Host) -> anyhow::Result<Vec<String>> {
    Ok(host.list_all_tools().await?.into_iter().map(|t| t.name.to_string()).collect())
}

/// A tools-only host lists, searches, reads a text resource and a blob, lists templates and
/// expands one; a denied document is absent from lists and searches and reading it answers
/// exactly like a missing URI; reads go through the proxy's cache.
#[tokio::test]
async fn a_tools_only_host_lists_searches_and_reads_resources_through_the_bridge() -> anyhow::Result<()> {
    let policies = policies()?;
    let proxy = start(&config(policies.path(), Some("enabled = true"))).await?;
    let alice = host(&proxy.url, ALICE_TOKEN).await?;

    let names = tool_names(&alice).await?;
    let bridge = ["proxy_resources_list", "proxy_resources_search", "proxy_resources_read"];
    assert_eq!(names[..3], bridge, "the bridge's tools head the list: {names:?}");
    assert!(names.contains(&"proxy_resource_template_expand".to_owned()) && names.contains(&"ev__echo".to_owned()));

    let listed = uris(&json_of(&call(&alice, "proxy_resources_list", json!({})).await?)?, "resources", "uri");
    assert!(listed.contains(&format!("{DOCS}/features.md")), "{listed:?}");
    assert!(!listed.contains(&format!("{DOCS}/architecture.md")), "a denied document is listed: {listed:?}");

    let found = json_of(&call(&alice, "proxy_resources_search", json!({"query": "FEATURES"})).await?)?;
    assert_eq!(uris(&found, "resources", "uri"), [format!("{DOCS}/features.md")]);
    let denied = json_of(&call(&alice, "proxy_resources_search", json!({"query": "architecture"})).await?)?;
    assert_eq!(uris(&denied, "resources", "uri"), Vec::<String>::new());
    let bounded = json_of(&call(&alice, "proxy_resources_search", json!({"query": "document", "limit": 2})).await?)?;
    assert_eq!((uris(&bounded, "resources", "uri").len(), &bounded["truncated"]), (2, &json!(true)));

    let read = call(&alice, "proxy_resources_read", json!({"uri": format!("{DOCS}/features.md")})).await?;
    assert_ne!(read.is_error, Some(true));
    assert!(text_of(&read).contains("# "), "a markdown document: {}", text_of(&read));
    call(&alice, "proxy_resources_read", json!({"uri": format!("{DOCS}/features.md")})).await?;
    let metrics = Exposition::parse(&proxy.admin_get("/metrics").await?)?;
    assert!(metrics.sum("mcp_proxy_cache_hits_total", &[("upstream", "ev")]) >= 1.0, "the second read was a hit");

    let answer = |uri: &str| {
        let alice = &alice;
        let uri = uri.to_owned();
        async move {
            let result = call(alice, "proxy_resources_read", json!({"uri": uri})).await?;
            anyhow::Ok((result.is_error, text_of(&result).replace(&uri, "URI")))
        }
    };
    let denied = answer(&format!("{DOCS}/architecture.md")).await?;
    assert_eq!(denied, answer(&format!("{DOCS}/no-such-document.md")).await?);
    assert_eq!(denied, (Some(true), "resource not found: URI".to_owned()));

    let blob = call(&alice, "proxy_resources_read", json!({"uri": "ev+demo://resource/dynamic/blob/3"})).await?;
    let Some(ContentBlock::Resource(embedded)) = blob.content.first() else { panic!("an embedded blob: {blob:?}") };
    let ResourceContents::BlobResourceContents { uri, .. } = &embedded.resource else { panic!("a blob: {blob:?}") };
    assert_eq!(uri, "ev+demo://resource/dynamic/blob/3");

    let templates = json_of(&call(&alice, "proxy_resource_templates_list", json!({})).await?)?;
    let template = "ev+demo://resource/dynamic/text/{resourceId}";
    assert!(uris(&templates, "resourceTemplates", "uriTemplate").contains(&template.to_owned()), "{templates}");
    let expand = json!({"uriTemplate": template, "arguments": {"resourceId": 7}});
    let expanded = call(&alice, "proxy_resource_template_expand", expand).await?;
    assert!(text_of(&expanded).starts_with("Resource 7: "), "{}", text_of(&expanded));
    Ok(())
}

/// A bridge tool the policy does not give bob is unlisted and answers like an unknown tool;
/// the one it gives works, within bob's resources.
#[tokio::test]
async fn a_bridge_tool_a_policy_denies_is_invisible_and_answers_like_an_unknown_tool() -> anyhow::Result<()> {
    let policies = policies()?;
    let proxy = start(&config(policies.path(), Some("enabled = true"))).await?;
    let bob = host(&proxy.url, BOB_TOKEN).await?;
    assert_eq!(tool_names(&bob).await?, ["proxy_resources_search"]);
    let found = json_of(&call(&bob, "proxy_resources_search", json!({"query": "architecture"})).await?)?;
    assert_eq!(uris(&found, "resources", "uri"), [format!("{DOCS}/architecture.md")]);
    let refusal = |error: rmcp::ServiceError, name: &str| (error_code(&error), error.to_string().replace(name, "NAME"));
    let read = call(&bob, "proxy_resources_read", json!({"uri": format!("{DOCS}/features.md")})).await;
    let unknown = call(&bob, "no_such_tool", json!({})).await;
    let read = refusal(read.expect_err("denied").downcast()?, "proxy_resources_read");
    assert_eq!(read, refusal(unknown.expect_err("unknown").downcast()?, "no_such_tool"));
    assert_eq!(read.0, Some(-32602));
    Ok(())
}

/// A blob over `bridge.max_blob_bytes` comes back as a summary: its URI, mimeType and size.
#[tokio::test]
async fn a_blob_over_the_limit_is_summarised_not_embedded() -> anyhow::Result<()> {
    let policies = policies()?;
    let proxy = start(&config(policies.path(), Some("enabled = true\nmax_blob_bytes = 16"))).await?;
    let alice = host(&proxy.url, ALICE_TOKEN).await?;
    let blob = call(&alice, "proxy_resources_read", json!({"uri": "ev+demo://resource/dynamic/blob/3"})).await?;
    assert!(matches!(blob.content[..], [ContentBlock::Text(_)]), "{blob:?}");
    let summary = text_of(&blob);
    assert!(summary.contains("ev+demo://resource/dynamic/blob/3") && summary.contains("bytes"), "{summary}");
    assert!(summary.contains("larger than the 16 bytes"), "{summary}");
    Ok(())
}

/// With no `[bridge]` section (off by default) the bridge's tools are neither listed nor
/// callable: a call answers like an unknown tool.
#[tokio::test]
async fn with_the_bridge_off_its_tools_are_absent() -> anyhow::Result<()> {
    let policies = policies()?;
    let proxy = start(&config(policies.path(), None)).await?;
    let alice = host(&proxy.url, ALICE_TOKEN).await?;
    let names = tool_names(&alice).await?;
    assert!(names.contains(&"ev__echo".to_owned()), "{names:?}");
    assert!(!names.iter().any(|name| name.starts_with("proxy_")), "{names:?}");
    let read = call(&alice, "proxy_resources_read", json!({"uri": format!("{DOCS}/features.md")})).await;
    let error: rmcp::ServiceError = read.expect_err("no such tool").downcast()?;
    assert_eq!(error_code(&error), Some(-32602));
    assert!(error.to_string().contains("unknown tool"), "{error}");
    Ok(())
}

/// Run tests/py/tools_client.py (PyPI `mcp`) against `url` in `mode` as `token`; one JSON value per op.
async fn python_ops(url: &str, mode: &str, token: &str, ops: &[&str]) -> anyhow::Result<Vec<Value>> {
    let mut command = tokio::process::Command::new(python());
    command.arg(py_script("tools_client.py")).args(["--url", url, "--mode", mode]);
    command.args(["--header", &format!("Authorization: Bearer {token}")]);
    command.args(ops).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let output = tokio::time::timeout(DEADLINE * 2, command.output()).await.context("tools_client.py timed out")??;
    let lines = parse_json_lines(&output.stdout);
    if lines.len() != ops.len() {
        bail!("{} answers for {} ops; stderr:\n{}", lines.len(), ops.len(), String::from_utf8_lossy(&output.stderr));
    }
    Ok(lines)
}

/// The Python SDK as a tools-only host, in both eras: it finds the bridge's tools, searches,
/// reads a document and is told a denied one is not found, exactly as for a missing one.
#[tokio::test]
async fn the_python_sdk_uses_the_bridge_in_both_eras() -> anyhow::Result<()> {
    let policies = policies()?;
    let proxy = start(&config(policies.path(), Some("enabled = true"))).await?;
    let search = "call:proxy_resources_search:{\"query\": \"features\"}";
    let read = format!("call:proxy_resources_read:{{\"uri\": \"{DOCS}/features.md\"}}");
    let denied = format!("call:proxy_resources_read:{{\"uri\": \"{DOCS}/architecture.md\"}}");
    let missing = format!("call:proxy_resources_read:{{\"uri\": \"{DOCS}/missing.md\"}}");
    for mode in ["legacy", "2026-07-28"] {
        let answers =
            python_ops(&proxy.url, mode, ALICE_TOKEN, &["tools_all", search, &read, &denied, &missing]).await?;
        let names = answers[0]["names"].as_array().context("names")?;
        assert!(names.contains(&json!("proxy_resources_read")), "{mode}: {names:?}");
        let found = &answers[1]["result"]["structuredContent"]["resources"];
        assert_eq!(found[0]["uri"], json!(format!("{DOCS}/features.md")), "{mode}: {}", answers[1]);
        let text = answers[2]["result"]["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("# "), "{mode}: {}", answers[2]);
        let refusal = |answer: &Value, name: &str| {
            let result = &answer["result"];
            (result["isError"].clone(), result["content"][0]["text"].as_str().unwrap_or_default().replace(name, "URI"))
        };
        let denied = refusal(&answers[3], &format!("{DOCS}/architecture.md"));
        assert_eq!(denied, refusal(&answers[4], &format!("{DOCS}/missing.md")), "{mode}");
        assert_eq!(denied, (json!(true), "resource not found: URI".to_owned()), "{mode}");
    }
    Ok(())
}

/// Counts the `tools/list_changed` a 2025 session hears.
#[derive(Clone)]
struct ToolsChanged(tokio::sync::mpsc::UnboundedSender<()>);

impl rmcp::ClientHandler for ToolsChanged {
    async fn on_tool_list_changed(&self, _: rmcp::service::NotificationContext<RoleClient>) {
        let _ = self.0.send(());
    }
}

/// A host of either era that listens for `tools/list_changed`.
enum Listener {
    Legacy { _host: RunningService<RoleClient, ToolsChanged>, heard: tokio::sync::mpsc::UnboundedReceiver<()> },
    Modern { _host: Host, stream: Box<rmcp::service::Subscription> },
}

impl Listener {
    async fn legacy(url: &str, token: &str) -> anyhow::Result<Listener> {
        let (tx, heard) = tokio::sync::mpsc::unbounded_channel();
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url).auth_header(token),
        );
        let connecting = ToolsChanged(tx).serve_with_lifecycle(transport, ClientLifecycleMode::Initialize);
        let host = tokio::time::timeout(DEADLINE, connecting).await.context("connect timed out")??;
        Ok(Listener::Legacy { _host: host, heard })
    }

    async fn modern(url: &str, token: &str) -> anyhow::Result<Listener> {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url).auth_header(token),
        );
        let lifecycle =
            ClientLifecycleMode::Discover { preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28] };
        let host = tokio::time::timeout(DEADLINE, ().serve_with_lifecycle(transport, lifecycle)).await??;
        let stream = host.listen(rmcp::model::SubscriptionFilter::builder().tools_list_changed().build()).await?;
        Ok(Listener::Modern { _host: host, stream: Box::new(stream) })
    }

    /// Wait (at most [`DEADLINE`]) for one `tools/list_changed`.
    async fn heard(&mut self) -> anyhow::Result<()> {
        let heard = async {
            match self {
                Listener::Legacy { heard, .. } => heard.recv().await.context("the host closed"),
                Listener::Modern { stream, .. } => loop {
                    match stream.next().await? {
                        Some(rmcp::model::ServerNotification::ToolListChangedNotification(_)) => return Ok(()),
                        Some(_) => continue,
                        None => bail!("the listen stream ended"),
                    }
                },
            }
        };
        tokio::time::timeout(DEADLINE, heard).await.context("no tools/list_changed")?
    }
}

/// Replace a policy file in one step (a rename), so the watcher never loads half of it.
fn replace_policy(dir: &std::path::Path, name: &str, text: &str) -> anyhow::Result<()> {
    let staged = dir.with_extension(name);
    std::fs::write(&staged, text)?;
    Ok(std::fs::rename(staged, dir.join(name))?)
}

/// A policy reload that changes which bridge tools a principal may use tells that principal's
/// hosts `tools/list_changed` — a 2025 session and a 2026-07-28 listen stream — and only them
/// (the reload's log counts the hosts told); the list then has the change.
#[tokio::test]
async fn a_policy_reload_that_changes_the_bridge_tools_a_principal_sees_tells_only_its_hosts() -> anyhow::Result<()> {
    let policies = policies()?;
    let proxy = start(&config(policies.path(), Some("enabled = true"))).await?;
    let mut alice =
        [Listener::legacy(&proxy.url, ALICE_TOKEN).await?, Listener::modern(&proxy.url, ALICE_TOKEN).await?];
    let mut bob = [Listener::legacy(&proxy.url, BOB_TOKEN).await?, Listener::modern(&proxy.url, BOB_TOKEN).await?];

    // bob may now read too: bob's two hosts are told, alice's are not.
    let read = "tool://proxy.bridge/proxy_resources_read";
    let bob_policy = format!(
        "principals = [\"bob\"]\nallow = [\"tool://proxy.bridge/proxy_resources_search\", \"{read}\", \"{DOCS}/**\"]\n"
    );
    replace_policy(policies.path(), "bob.toml", &bob_policy)?;
    let reload = proxy.wait_policy_reloads(1).await?;
    assert_eq!((reload["outcome"].as_str(), reload["tools_told"].as_u64()), (Some("applied"), Some(2)), "{reload}");
    for host in &mut bob {
        host.heard().await?;
    }
    let bob_host = host(&proxy.url, BOB_TOKEN).await?;
    assert_eq!(tool_names(&bob_host).await?, ["proxy_resources_search", "proxy_resources_read"]);

    // alice may no longer list: alice's two hosts are told (the first they hear).
    let alice_policy = format!(
        "principals = [\"alice\"]\nallow = [\"**\"]\ndeny = [\"{DOCS}/architecture.md\", \"tool://proxy.bridge/proxy_resources_list\"]\n"
    );
    replace_policy(policies.path(), "alice.toml", &alice_policy)?;
    let reload = proxy.wait_policy_reloads(2).await?;
    assert_eq!((reload["outcome"].as_str(), reload["tools_told"].as_u64()), (Some("applied"), Some(2)), "{reload}");
    for host in &mut alice {
        host.heard().await?;
    }
    let names = tool_names(&host(&proxy.url, ALICE_TOKEN).await?).await?;
    assert!(!names.contains(&"proxy_resources_list".to_owned()) && names.contains(&"ev__echo".to_owned()));

    // A reload that changes no one's tools tells no one.
    let quiet = bob_policy.replace(&format!("\"{DOCS}/**\""), &format!("\"{DOCS}/features.md\""));
    replace_policy(policies.path(), "bob.toml", &quiet)?;
    let reload = proxy.wait_policy_reloads(3).await?;
    assert_eq!((reload["outcome"].as_str(), reload["tools_told"].as_u64()), (Some("applied"), Some(0)), "{reload}");
    Ok(())
}
