//! `serve-dir` speaks MCP over stdio, and `serve --stdio` keeps stdout for JSON-RPC alone (with
//! debug logs on, too) and tells its host why it cannot serve.

use std::process::Stdio;
use std::sync::{Arc, Mutex};

use crate::support::PROXY_BIN;
use crate::support::eventually;
use crate::support::fixture::{DEADLINE, Era, EventRecorder, FixtureClient, list_all_resources};
use crate::support::proxy::{fixture_upstream, toml_str, write_config};
use anyhow::Context;
use rmcp::ClientServiceExt;
use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use rmcp::service::ClientCacheConfig;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// `serve-dir DIR` is a stdio MCP server: an rmcp client of either era lists and reads DIR's files.
#[tokio::test]
async fn serve_dir_speaks_mcp_over_stdio() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("hello.txt"), "hello, folder")?;
    let file_uri = "file:///hello.txt".to_string();
    for era in [Era::Legacy, Era::Modern] {
        let mut command = Command::new(PROXY_BIN);
        command.arg("serve-dir").arg(dir.path()).env("RUST_LOG", "debug").kill_on_drop(true);
        let client = connect_child(command, era).await?;
        let (resources, _) = list_all_resources(&client).await?;
        let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
        assert_eq!(uris, [file_uri.as_str()], "{era:?}");
        let read = client.read_resource(ReadResourceRequestParams::new(file_uri.clone())).await?;
        let ResourceContents::TextResourceContents { uri, text, .. } = &read.contents[0] else {
            panic!("{era:?}: expected text, got {:?}", read.contents);
        };
        assert_eq!((uri.as_str(), text.as_str()), (file_uri.as_str(), "hello, folder"), "{era:?}");
        client.cancel().await?;
    }
    Ok(())
}

/// `serve --stdio` with every log on (debug) and an upstream that writes to its stderr: every
/// line on stdout, from the first request until the proxy exits on stdin's end, is JSON-RPC 2.0;
/// the logs (the upstream's stderr among them) are on stderr.
#[tokio::test]
async fn serve_stdio_writes_nothing_but_json_rpc_to_stdout() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), &chatty_upstream_config())?;
    let mut child = Command::new(PROXY_BIN)
        .args(["serve", "--stdio", "--config"])
        .arg(&config)
        .env("RUST_LOG", "debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let logs = collect_stderr(child.stderr.take().context("stderr")?);
    let mut stdin = child.stdin.take().context("stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().context("stdout")?);
    let mut seen = Vec::new();

    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "cli-test", "version": "0"}}});
    send(&mut stdin, &initialize).await?;
    read_until_response(&mut stdout, 1, &mut seen).await?;
    send(&mut stdin, &json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await?;
    send(&mut stdin, &json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list"})).await?;
    let list = read_until_response(&mut stdout, 2, &mut seen).await?;
    assert!(list["result"]["resources"].as_array().is_some_and(|r| !r.is_empty()), "{list}");
    let unknown = json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "nope+x:y"}});
    send(&mut stdin, &unknown).await?;
    let error = read_until_response(&mut stdout, 3, &mut seen).await?;
    assert_eq!(error["error"]["code"], -32002, "{error}");

    drop(stdin);
    let mut rest = String::new();
    tokio::time::timeout(DEADLINE, stdout.read_to_string(&mut rest)).await.context("stdout never closed")??;
    seen.extend(rest.lines().map(str::to_owned));
    tokio::time::timeout(DEADLINE, child.wait()).await.context("no exit after stdin closed")??;
    for line in &seen {
        let value: Value = serde_json::from_str(line).with_context(|| format!("non-JSON on stdout: {line:?}"))?;
        assert_eq!(value["jsonrpc"], "2.0", "not JSON-RPC on stdout: {line}");
    }
    let logs = logs.lock().unwrap().clone();
    assert!(logs.contains("CONTROL http://"), "the upstream's stderr is logged on stderr:\n{logs}");
    Ok(())
}

/// The same setup (debug logs, a chatty upstream) does not disturb an rmcp client of either era.
#[tokio::test]
async fn serve_stdio_with_debug_logs_serves_an_rmcp_client() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), &chatty_upstream_config())?;
    for era in [Era::Legacy, Era::Modern] {
        let mut command = Command::new(PROXY_BIN);
        command.args(["serve", "--stdio", "--config"]).arg(&config).env("RUST_LOG", "debug").kill_on_drop(true);
        let client = connect_child(command, era).await?;
        let read = client.read_resource(ReadResourceRequestParams::new("fx+fx://fx/item/1")).await?;
        let ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else { panic!("text") };
        assert_eq!(text, "item 1 v1", "{era:?}");
        client.cancel().await?;
    }
    Ok(())
}

/// A stdio host is told why an upstream of its proxy cannot serve: a read of a URI of an
/// upstream whose command does not exist names the missing command, one of an upstream that
/// exits at once names its exit status and last stderr line (the value of a variable its entry
/// names masked), while the good upstream serves. The read path is the one tested: an upstream
/// that never connected never listed its tools or prompts, so its namespaced tool is an unknown
/// tool, as for any name the host could not have been shown.
#[tokio::test]
async fn a_stdio_host_is_told_why_an_upstream_cannot_start() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let quits = "echo \"no luck with key $API_KEY\" >&2; exit 3";
    let config = format!(
        "{}[[upstreams]]\nname = \"missing\"\ncommand = \"/nonexistent/server\"\n\n\
         [[upstreams]]\nname = \"quits\"\ncommand = \"sh\"\nargs = [\"-c\", {}]\n\
         env = {{ API_KEY = \"do-not-show-me\" }}\n",
        fixture_upstream("fx", &[]),
        toml_str(quits)
    );
    let config = write_config(dir.path(), &config)?;
    for era in [Era::Legacy, Era::Modern] {
        let mut command = Command::new(PROXY_BIN);
        command.args(["serve", "--stdio", "--config"]).arg(&config).env("RUST_LOG", "warn").kill_on_drop(true);
        let client = connect_child(command, era).await?;
        let (message, cause) = told_why(&client, "missing", era).await?;
        assert!(message.starts_with("upstream `missing` is not connected (cannot start"), "{era:?}: {message}");
        assert!(cause.contains("cannot start `/nonexistent/server`"), "{era:?}: {cause}");
        let (message, cause) = told_why(&client, "quits", era).await?;
        assert_eq!(cause, "`sh` exited (exit status: 3): no luck with key ***", "{era:?}");
        assert!(!message.contains("do-not-show-me"), "{era:?}: {message}");
        let read = client.read_resource(ReadResourceRequestParams::new("fx+fx://fx/item/1")).await?;
        let ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else { panic!("text") };
        assert_eq!(text, "item 1 v1", "{era:?}: the good upstream serves");
        client.cancel().await?;
    }
    Ok(())
}

/// The message and `cause` of the error a read of a URI of `upstream` gets, once it has a cause
/// (before the first attempt to start the upstream ended, it has none).
async fn told_why(client: &FixtureClient, upstream: &str, era: Era) -> anyhow::Result<(String, String)> {
    let what = format!("{era:?}: the read of a `{upstream}` URI names the cause");
    let uri = format!("{upstream}+fx://fx/item/1");
    eventually(DEADLINE, &what, || async {
        let error = match client.read_resource(ReadResourceRequestParams::new(uri.clone())).await {
            Err(rmcp::ServiceError::McpError(error)) => error,
            other => return Err(format!("{other:?}")),
        };
        let cause = error.data.as_ref().and_then(|data| data["cause"].as_str()).map(str::to_owned);
        cause.map(|cause| (error.message.to_string(), cause)).ok_or(error.message.to_string())
    })
    .await
}

/// A fixture upstream that prints `CONTROL <url>` on its stderr at start.
fn chatty_upstream_config() -> String {
    fixture_upstream("fx", &["--control", "127.0.0.1:0"])
}

/// Connect an rmcp client in `era` to a stdio server `command` (its stderr drained, not shown).
async fn connect_child(command: Command, era: Era) -> anyhow::Result<FixtureClient> {
    let (transport, stderr) = TokioChildProcess::builder(command).stderr(Stdio::piped()).spawn()?;
    if let Some(stderr) = stderr {
        collect_stderr(stderr);
    }
    let (recorder, _events) = EventRecorder::new();
    let client = tokio::time::timeout(DEADLINE, recorder.serve_with_lifecycle(transport, era.lifecycle()))
        .await
        .context("connect timed out")??;
    client.set_response_cache_config(ClientCacheConfig::disabled()).await;
    Ok(client)
}

/// Read `stderr` to its end in a task; the text so far is in the returned handle.
fn collect_stderr(stderr: tokio::process::ChildStderr) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut text = sink.lock().unwrap();
            text.push_str(&line);
            text.push('\n');
        }
    });
    text
}

async fn send(stdin: &mut tokio::process::ChildStdin, message: &Value) -> anyhow::Result<()> {
    stdin.write_all(format!("{message}\n").as_bytes()).await?;
    stdin.flush().await?;
    Ok(())
}

/// Read stdout lines (each kept in `seen`) until the JSON-RPC response with `id`.
async fn read_until_response(
    stdout: &mut BufReader<tokio::process::ChildStdout>,
    id: u64,
    seen: &mut Vec<String>,
) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let mut line = String::new();
        let read = tokio::time::timeout_at(deadline, stdout.read_line(&mut line))
            .await
            .with_context(|| format!("no response {id} within {DEADLINE:?}; stdout so far: {seen:?}"))??;
        anyhow::ensure!(read > 0, "stdout closed before response {id}; stdout so far: {seen:?}");
        let line = line.trim_end().to_owned();
        seen.push(line.clone());
        let value: Value = serde_json::from_str(&line).with_context(|| format!("non-JSON on stdout: {line:?}"))?;
        if value["id"] == id {
            return Ok(value);
        }
    }
}

/// A stdio host whose proxy cannot serve — its config names a variable that is not set — is
/// told why: a real rmcp client's `initialize` (2025) and `server/discover` (2026-07-28) fail
/// with an MCP error naming the upstream, the key and the variable, not "connection closed"; the
/// problem is on stderr as before.
#[tokio::test]
async fn a_stdio_host_is_told_why_its_proxy_cannot_serve() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = "[[upstreams]]\nname = \"github\"\ncommand = \"github-mcp-server\"\n\
                  env = { GITHUB_TOKEN = \"${GITHUB_TOKEN_NOT_SET_HERE}\" }\n";
    let config = write_config(dir.path(), config)?;
    for era in [Era::Legacy, Era::Modern] {
        let mut command = Command::new(PROXY_BIN);
        command.args(["serve", "--stdio", "--config"]).arg(&config).env("RUST_LOG", "warn").kill_on_drop(true);
        let (transport, stderr) = TokioChildProcess::builder(command).stderr(Stdio::piped()).spawn()?;
        let (recorder, _) = EventRecorder::new();
        let connected = tokio::time::timeout(DEADLINE, recorder.serve_with_lifecycle(transport, era.lifecycle()))
            .await
            .context("the client is answered")?;
        let Err(error) = connected else { panic!("{era:?}: a proxy with a configuration problem served") };
        let said = error.to_string();
        assert!(said.contains("JSON-RPC error"), "{era:?}: an MCP error, not a closed pipe: {said}");
        for named in ["upstreams[0] (github).env.GITHUB_TOKEN", "`GITHUB_TOKEN_NOT_SET_HERE` is not set"] {
            assert!(said.contains(named), "{era:?}: {named} in {said}");
        }
        // The client dropped its end: stdin closed, the proxy exits 78 with the problem on stderr.
        let mut stderr = stderr.context("stderr")?;
        let mut logs = String::new();
        tokio::time::timeout(DEADLINE, stderr.read_to_string(&mut logs)).await??;
        assert!(logs.contains("GITHUB_TOKEN_NOT_SET_HERE"), "{logs}");
    }
    Ok(())
}
