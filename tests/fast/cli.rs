//! The command-line contract of the real `mcp-resource-proxy` binary: `--version`, `--help` on
//! each subcommand, `check` (exit 0 / 78, every problem with where it is), `serve` refusing a bad
//! config before it starts anything, `serve-dir` speaking MCP over stdio, and `serve --stdio`
//! keeping stdout for JSON-RPC alone.

use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};

use crate::support::fixture::{DEADLINE, Era, EventRecorder, FixtureClient, list_all_resources};
use crate::support::peers::repo_root;
use crate::support::proxy::{PROXY_BIN, fixture_upstream, toml_str, write_config};
use anyhow::Context;
use rmcp::ClientServiceExt;
use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use rmcp::service::ClientCacheConfig;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// EX_CONFIG from sysexits.h.
const EXIT_CONFIG: i32 = 78;

#[tokio::test]
async fn version_prints_name_and_version() -> anyhow::Result<()> {
    let output = run(&["--version"], None).await?;
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(stdout(&output).trim(), format!("mcp-resource-proxy {}", env!("CARGO_PKG_VERSION")));
    Ok(())
}

/// `--help` and `<sub> --help` exit 0 and name every subcommand and flag of the contract.
#[tokio::test]
async fn help_of_each_command_exits_0_and_mentions_its_flags() -> anyhow::Result<()> {
    let cases: [(&[&str], &[&str]); 4] = [
        (&["--help"], &["serve", "check", "serve-dir", "--version", "--help", "--log-format"]),
        (&["serve", "--help"], &["--config", "--stdio", "--listen", "--admin-listen", "config.toml"]),
        (&["check", "--help"], &["--config", "config.toml", "78"]),
        (&["serve-dir", "--help"], &["<DIR>", "stdio"]),
    ];
    for (args, needles) in cases {
        let output = run(args, None).await?;
        assert_eq!(output.status.code(), Some(0), "{args:?}");
        let text = stdout(&output);
        for needle in needles {
            assert!(text.contains(needle), "{args:?} mentions {needle}:\n{text}");
        }
    }
    Ok(())
}

/// The shipped `config.toml` is valid, named explicitly and as the default path.
#[tokio::test]
async fn check_accepts_the_shipped_config() -> anyhow::Result<()> {
    let shipped = repo_root().join("config.toml");
    for args in [vec!["check", "--config", shipped.to_str().unwrap()], vec!["check"]] {
        let output = run(&args, Some(&repo_root())).await?;
        assert_eq!(output.status.code(), Some(0), "{args:?}: {}{}", stdout(&output), stderr(&output));
        assert!(stdout(&output).contains("valid"), "{args:?}: {}", stdout(&output));
    }
    Ok(())
}

/// Every config example in `examples/` is valid, and has no warning.
#[tokio::test]
async fn check_accepts_every_config_example() -> anyhow::Result<()> {
    let mut examples: Vec<_> = std::fs::read_dir(repo_root().join("examples"))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    examples.retain(|path| path.extension().is_some_and(|e| e == "toml"));
    assert!(examples.len() >= 3, "{examples:?}");
    for example in examples {
        let output = run(&["check", "--config", example.to_str().unwrap()], None).await?;
        assert_eq!(output.status.code(), Some(0), "{}: {}", example.display(), stdout(&output));
        assert!(!stdout(&output).contains("warning"), "{}: {}", example.display(), stdout(&output));
    }
    Ok(())
}

/// Every semantic problem of a config is printed in one run, each with where it is; exit 78.
#[tokio::test]
async fn check_prints_every_problem_with_its_place_and_exits_78() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), SEVERAL_PROBLEMS)?;
    let output = run(&["check", "--config", config.to_str().unwrap()], None).await?;
    assert_eq!(output.status.code(), Some(EXIT_CONFIG), "{}", stdout(&output));
    let text = stdout(&output);
    for (place, what) in SEVERAL_PROBLEMS_REPORTED {
        assert!(text.lines().any(|l| l.contains(place) && l.contains(what)), "`{place}`: {what} in:\n{text}");
    }
    assert!(text.contains(&format!("{} configuration problems", SEVERAL_PROBLEMS_REPORTED.len())), "{text}");
    Ok(())
}

/// A value of the wrong type is reported together with the config's other problems, not alone.
#[tokio::test]
async fn check_reports_a_type_error_together_with_the_other_problems() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let text = "[server]\npage_size = \"many\"\n\n[[upstreams]]\nname = \"Bad_Name\"\ndir = \"x\"\n";
    let config = write_config(dir.path(), text)?;
    let output = run(&["check", "--config", config.to_str().unwrap()], None).await?;
    assert_eq!(output.status.code(), Some(EXIT_CONFIG));
    let text = stdout(&output);
    assert!(text.contains("server.page_size"), "{text}");
    assert!(text.contains("upstreams[0] (Bad_Name).name"), "both problems at once:\n{text}");
    Ok(())
}

/// A folder upstream whose `dir` does not exist is a problem `check` reports (exit 78).
#[tokio::test]
async fn check_reports_a_folder_that_does_not_exist() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), "[[upstreams]]\nname = \"docs\"\ndir = \"nowhere\"\n")?;
    let output = run(&["check", "--config", config.to_str().unwrap()], None).await?;
    assert_eq!(output.status.code(), Some(EXIT_CONFIG), "{}", stdout(&output));
    let text = stdout(&output);
    assert!(text.lines().any(|l| l.contains("upstreams[0] (docs).dir") && l.contains("nowhere")), "{text}");
    Ok(())
}

/// An admin listener off loopback serves `/status` to anyone: `check` and `serve` warn.
#[tokio::test]
async fn an_admin_listener_off_loopback_is_warned_about_by_check_and_serve() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), "[server]\nadmin_listen = \"0.0.0.0:0\"\n")?;
    let output = run(&["check", "--config", config.to_str().unwrap()], None).await?;
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    let warned =
        |text: &str| text.lines().any(|l| l.contains("warning") || l.contains("WARN")) && text.contains("0.0.0.0:0");
    assert!(warned(&stdout(&output)), "check warns: {}", stdout(&output));
    let mut serve = Command::new(PROXY_BIN);
    serve
        .args(["serve", "--listen", "127.0.0.1:0", "--config", config.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = serve.spawn()?;
    let mut lines = BufReader::new(child.stderr.take().context("stderr")?).lines();
    let warning = tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await? {
            if line.contains("WARN") && line.contains("0.0.0.0:0") && line.contains("authentication") {
                return Ok(line);
            }
        }
        anyhow::bail!("serve exited without the warning")
    })
    .await
    .context("no warning from serve")??;
    assert!(warning.contains("admin_listen"), "{warning}");
    Ok(())
}

/// `policy explain` needs the policies only: token variables that are unset do not stop it.
#[tokio::test]
async fn policy_explain_runs_without_the_token_variables() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let text =
        "[auth]\nmode = \"bearer\"\n\n[[auth.tokens]]\nprincipal = \"ci-bot\"\ntoken_env = \"OPS_UNSET_TOKEN\"\n";
    let config = write_config(dir.path(), text)?;
    let mut command = Command::new(PROXY_BIN);
    command
        .args(["policy", "explain", "--principal", "ci-bot", "--config", config.to_str().unwrap(), "docs+file:///a.md"])
        .env_remove("OPS_UNSET_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(DEADLINE, command.output()).await??;
    assert_eq!(output.status.code(), Some(0), "{}{}", stdout(&output), stderr(&output));
    assert!(stdout(&output).contains("allowed"), "{}", stdout(&output));
    let serve = run(&["check", "--config", config.to_str().unwrap()], None).await?;
    assert_eq!(serve.status.code(), Some(EXIT_CONFIG), "check still needs them: {}", stdout(&serve));
    Ok(())
}

/// `serve` on a bad config prints the problems to stderr and exits 78 without starting any
/// upstream (the valid one's command would leave a marker file) or writing to stdout.
#[tokio::test]
async fn serve_on_a_bad_config_exits_78_before_starting_anything() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let marker = dir.path().join("upstream-started");
    let config = format!(
        "[server]\npage_size = 0\n\n[[upstreams]]\nname = \"would-start\"\ncommand = \"sh\"\nargs = [\"-c\", {}]\n",
        toml_str(&format!("touch '{}'; sleep 30", marker.display()))
    );
    let config = write_config(dir.path(), &config)?;
    for extra in [&[][..], &["--stdio"][..]] {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--config", config.to_str().unwrap()];
        args.extend_from_slice(extra);
        let output = run(&args, None).await?;
        assert_eq!(output.status.code(), Some(EXIT_CONFIG), "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).contains("server.page_size"), "{args:?}: {}", stderr(&output));
        assert!(output.stdout.is_empty(), "{args:?}: nothing on stdout: {}", stdout(&output));
        assert!(!marker.exists(), "{args:?}: no upstream was started");
    }
    Ok(())
}

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

const SEVERAL_PROBLEMS: &str = r#"
bogus = 1

[server]
listen = "nowhere"
page_size = 0

[[upstreams]]
name = "Bad_Name"
dir = "x"

[[upstreams]]
name = "dup"
dir = "x"

[[upstreams]]
name = "dup"
dir = "y"

[[upstreams]]
name = "both"
dir = "x"
url = "http://127.0.0.1:1/mcp"

[[upstreams]]
name = "remote"
url = "http://127.0.0.1:1/mcp"
headers = { Authorization = "Bearer ${MCP_PROXY_CLI_TEST_SURELY_UNSET}" }
protocol = "1999-01-01"
request_timeout = "soon"
colour = "blue"
"#;

/// (where, what) of every problem in [`SEVERAL_PROBLEMS`].
const SEVERAL_PROBLEMS_REPORTED: [(&str, &str); 10] = [
    ("bogus", "unknown key"),
    ("server.listen", "nowhere"),
    ("server.page_size", "0"),
    ("upstreams[0] (Bad_Name).name", "Bad_Name"),
    ("upstreams[2] (dup).name", "used by another upstream"),
    ("upstreams[3] (both)", "exactly one of"),
    ("upstreams[4] (remote).colour", "unknown key"),
    ("upstreams[4] (remote).headers.Authorization", "MCP_PROXY_CLI_TEST_SURELY_UNSET"),
    ("upstreams[4] (remote).protocol", "1999-01-01"),
    ("upstreams[4] (remote).request_timeout", "soon"),
];

/// A fixture upstream that prints `CONTROL <url>` on its stderr at start.
fn chatty_upstream_config() -> String {
    fixture_upstream("fx", &["--control", "127.0.0.1:0"])
}

/// Run the binary to completion (at most [`DEADLINE`]) with stdin closed.
async fn run(args: &[&str], cwd: Option<&Path>) -> anyhow::Result<Output> {
    let mut command = Command::new(PROXY_BIN);
    command.args(args).stdin(Stdio::null()).kill_on_drop(true);
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    tokio::time::timeout(DEADLINE, command.output())
        .await
        .with_context(|| format!("{args:?} did not exit"))?
        .map_err(Into::into)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
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
