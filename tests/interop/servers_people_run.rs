//! The servers people run, with default settings: npm `@modelcontextprotocol/server-filesystem`
//! and `server-sequential-thinking` (they declare only tools and answer `resources/list` with
//! -32601), a prompts-only and a resources-only server (`tests/py/one_kind_server.py`, the
//! Python SDK's low-level server) all come up behind one proxy (`/readyz` 200) and are fully
//! usable by hosts of both eras over HTTP and by a stdio host (`serve --stdio`).
//! server-filesystem is started without directories: it serves the `roots` its config gives it
//! (a temporary folder), which it asks the proxy for with `roots/list`.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams, ResourceContents};
use rmcp::service::{Peer, RoleClient};
use serde_json::{Value, json};

use crate::support::eventually;
use crate::support::fixture::{self, DEADLINE, Era, connect_stdio_proxy, list_all_resources};
use crate::support::peers::{
    app_upstream, everything_upstream, filesystem_upstream, memory_upstream, one_kind_upstream, thinking_upstream,
};
use crate::support::proxy::{ProxyProcess, toml_str, write_config};

const GREETING: &str = "hello from the filesystem";

/// The window after every upstream is up over which the idle proxy must log nothing: longer than
/// the default health interval (10 s), so each upstream is probed in it. A measurement window
/// (what it measures is that nothing happens), not synchronisation.
const IDLE_WINDOW: Duration = Duration::from_secs(12);

#[tokio::test(flavor = "multi_thread")]
async fn tools_prompts_and_resources_only_servers_are_up_and_usable_by_every_kind_of_host() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let folder = data.path().canonicalize()?;
    std::fs::write(folder.join("hello.txt"), GREETING)?;
    std::fs::create_dir(folder.join("inner"))?;
    let root = format!("file://{}", folder.display());
    let config = [
        filesystem_upstream("fs", &format!("roots = [{}]", toml_str(&root))),
        thinking_upstream("think", ""),
        one_kind_upstream("greet", "prompts", ""),
        one_kind_upstream("notes", "resources", ""),
    ]
    .concat();
    let proxy = ProxyProcess::start(&config).await?;
    for name in ["fs", "think", "greet", "notes"] {
        proxy.wait_up(name, 1).await?;
    }
    let ready = eventually(DEADLINE, "/readyz 200", || proxy.admin_get("/readyz")).await?;
    assert_eq!(serde_json::from_str::<Value>(&ready)?, json!({ "ready": true, "missing": [] }));
    for era in [Era::Legacy, Era::Modern] {
        let (host, _) = fixture::connect_http(&proxy.url, era).await?;
        use_every_server(host.peer(), &folder).await.with_context(|| format!("HTTP host, {era:?}"))?;
    }
    let dir = tempfile::tempdir()?;
    let path = write_config(dir.path(), &config)?;
    for era in [Era::Legacy, Era::Modern] {
        let (host, _) = connect_stdio_proxy(&path, era).await?;
        let used = eventually(DEADLINE * 3, "every server usable through serve --stdio", || {
            use_every_server(host.peer(), &folder)
        });
        used.await.with_context(|| format!("stdio host, {era:?}"))?;
    }
    Ok(())
}

/// List a directory and read a file through server-filesystem, think one thought, get the
/// prompt, list and read the resources. Every check is an error, not a panic, so a caller can
/// wait for a stdio proxy whose upstreams are still coming up.
async fn use_every_server(host: &Peer<RoleClient>, folder: &Path) -> anyhow::Result<()> {
    let listing = eventually(DEADLINE, "server-filesystem lists its root", || {
        call_text(host, "fs__list_directory", json!({ "path": folder }))
    })
    .await?;
    ensure!(listing.contains("[FILE] hello.txt") && listing.contains("[DIR] inner"), "{listing}");
    let read = call_text(host, "fs__read_text_file", json!({ "path": folder.join("hello.txt") })).await?;
    ensure!(read == GREETING, "{read}");

    let thought = json!({"thought": "one step", "thoughtNumber": 1, "totalThoughts": 1, "nextThoughtNeeded": false});
    let answer: Value = serde_json::from_str(&call_text(host, "think__sequentialthinking", thought).await?)?;
    ensure!(answer["thoughtNumber"] == json!(1) && answer["nextThoughtNeeded"] == json!(false), "{answer}");

    let mut arguments = serde_json::Map::new();
    arguments.insert("name".into(), json!("Ann"));
    let prompt = host.get_prompt(GetPromptRequestParams::new("greet__greet").with_arguments(arguments)).await?;
    let message = prompt.messages.first().context("a message")?;
    let text = message.content.as_text().map(|t| t.text.as_str());
    ensure!(text == Some("Hello, Ann!"), "{prompt:?}");

    let (resources, _) = list_all_resources(host).await?;
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    ensure!(uris == ["notes+one://note/1", "notes+one://note/2"], "{uris:?}");
    let read = host.read_resource(ReadResourceRequestParams::new("notes+one://note/2")).await?;
    let ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else { bail!("{read:?}") };
    ensure!(text == "note 2", "{text}");
    Ok(())
}

/// The text of a successful tool call; an error for one that failed.
pub(crate) async fn call_text(host: &Peer<RoleClient>, tool: &str, arguments: Value) -> anyhow::Result<String> {
    let Value::Object(arguments) = arguments else { bail!("arguments must be an object") };
    let result = host.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)).await?;
    let text = result.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default();
    match result.is_error {
        Some(true) => bail!("{tool} failed: {text}"),
        _ => Ok(text),
    }
}

/// server-filesystem follows its roots: a config write that moves its `roots` to another folder
/// keeps its connection (no reconnect) and tells it `notifications/roots/list_changed`, after
/// which it serves the new folder and refuses the old one.
#[tokio::test(flavor = "multi_thread")]
async fn server_filesystem_follows_a_change_of_its_roots_without_a_reconnect() -> anyhow::Result<()> {
    let (first, second) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let (first, second) = (first.path().canonicalize()?, second.path().canonicalize()?);
    std::fs::write(first.join("first.txt"), "one")?;
    std::fs::write(second.join("second.txt"), "two")?;
    let config = |folder: &Path| {
        filesystem_upstream("fs", &format!("roots = [{}]", toml_str(&format!("file://{}", folder.display()))))
    };
    let proxy = ProxyProcess::start(&config(&first)).await?;
    proxy.wait_up("fs", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let read =
        |folder: &Path, file: &str| call_text(host.peer(), "fs__read_text_file", json!({ "path": folder.join(file) }));
    let one = eventually(DEADLINE, "the first root served", || read(&first, "first.txt")).await?;
    assert_eq!(one, "one");

    write_config(proxy.dir.path(), &config(&second))?;
    let two = eventually(DEADLINE, "the second root served", || read(&second, "second.txt")).await?;
    assert_eq!(two, "two");
    assert!(read(&first, "first.txt").await.is_err(), "the old root is no longer served");
    let reload = proxy.status().await?["config_reload"].clone();
    assert_eq!((&reload["roots_changed"], &reload["changed"]), (&json!(["fs"]), &Value::Null), "{reload}");
    Ok(())
}

/// docs/command-line.md's promise, "A healthy idle proxy logs nothing after startup", at the
/// default log level with the servers a new user's Claude Desktop setup runs, as `import` leaves
/// them (no `[auth]`), and a policy (without one, startup warns that everything is allowed):
/// server-filesystem, server-sequential-thinking, server-memory, server-everything, the MCP App
/// server-basic-vanillajs and two Python SDK servers (prompts only, resources only). Startup logs its listeners, each `upstream up` and, for the resources-only
/// server, which offers no subscriptions, that URIs held there are never notified; then nothing
/// while every server is probed at least once.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_proxy_in_front_of_the_servers_people_run_logs_nothing() -> anyhow::Result<()> {
    let (data, memory, policies) = (tempfile::tempdir()?, tempfile::tempdir()?, tempfile::tempdir()?);
    std::fs::write(policies.path().join("all.toml"), "principals = [\"*\"]\nallow = [\"**\"]\n")?;
    let root = format!("file://{}", data.path().canonicalize()?.display());
    let config = [
        format!("[policies]\ndir = {}\n\n", toml_str(policies.path().to_str().context("a UTF-8 path")?)),
        filesystem_upstream("fs", &format!("roots = [{}]", toml_str(&root))),
        thinking_upstream("think", ""),
        memory_upstream("memory", &memory.path().join("graph.jsonl"), ""),
        everything_upstream("everything", ""),
        one_kind_upstream("greet", "prompts", ""),
        one_kind_upstream("notes", "resources", ""),
        app_upstream("app", ""),
    ]
    .concat();
    let proxy = ProxyProcess::start_with(&config, &[], &[("RUST_LOG", "")]).await?;
    for name in ["fs", "think", "memory", "everything", "greet", "notes", "app"] {
        proxy.wait_up(name, 1).await?;
    }
    let after_startup = proxy.logs();
    tokio::time::sleep(IDLE_WINDOW).await;
    let new: Vec<String> = proxy.logs().into_iter().skip(after_startup.len()).collect();
    let startup_lines =
        ["serving MCP at", "admin listening at", "\"upstream up\"", "URIs held there are never notified"];
    let noise: Vec<&String> =
        after_startup.iter().filter(|line| !startup_lines.iter().any(|mark| line.contains(mark))).collect();
    assert!(new.is_empty(), "logged while idle: {new:#?}");
    assert!(noise.is_empty(), "logged more than startup: {noise:#?}");
    Ok(())
}

/// An MCP App as people run it: npm server-basic-vanillajs names its UI resource under the nested
/// `_meta.ui.resourceUri` and the flat `_meta["ui/resourceUri"]` (the ext-apps SDK still sends
/// the flat key). Through the proxy both name the namespaced URI, and a host that follows the
/// flat key reads the app's HTML.
#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_app_s_flat_ui_key_reads_through_the_proxy() -> anyhow::Result<()> {
    let proxy = ProxyProcess::start(&app_upstream("app", "")).await?;
    proxy.wait_up("app", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let tools = host.peer().list_all_tools().await?;
    let tool = tools.iter().find(|tool| tool.name == "app__get-time").context("app__get-time listed")?;
    let meta = serde_json::to_value(tool.meta.as_ref().context("the tool's _meta")?)?;
    let flat = meta["ui/resourceUri"].as_str().context("the flat key")?;
    assert_eq!(flat, "app+ui://get-time/mcp-app.html", "{meta}");
    assert_eq!(meta["ui"]["resourceUri"].as_str(), Some(flat), "{meta}");
    let read = host.peer().read_resource(ReadResourceRequestParams::new(flat)).await?;
    let Some(ResourceContents::TextResourceContents { uri, mime_type, text, .. }) = read.contents.first() else {
        bail!("no text contents: {read:?}");
    };
    assert_eq!(uri, flat);
    assert_eq!(mime_type.as_deref(), Some("text/html;profile=mcp-app"));
    assert!(text.to_ascii_lowercase().contains("<html"), "the app's HTML: {text:.200}");
    Ok(())
}
