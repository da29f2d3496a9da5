//! The proxy against the PyPI `mcp` 2.x SDK (installed by `.ci/install-peers.sh`): its `Client`
//! (`tests/py/client.py`) in `legacy` and `2026-07-28` modes over HTTP and over stdio, and its
//! `MCPServer` (`tests/py/server.py`, both eras) as an upstream over stdio.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::support::PROXY_BIN;
use crate::support::peers::{parse_json_lines, py_client, py_server_stdio_command};
use crate::support::proxy::{ProxyProcess, fixture_upstream, toml_str, write_config};
use serde_json::{Value, json};

/// How long one client.py run may take (a Python start costs about a second).
const CLIENT_DEADLINE: Duration = Duration::from_secs(60);
const MODES: [&str; 2] = ["legacy", "2026-07-28"];

/// One fixture upstream with 7 resources and 3 templates, listed 2 per page downstream.
fn paged_config() -> String {
    format!("[server]\npage_size = 2\n\n{}", fixture_upstream("fx", &["--resources", "5"]))
}

/// list_all, templates_all, a text read, a multi-content read and an unknown URI, through the
/// Python client over streamable HTTP, in both modes.
#[tokio::test]
async fn python_client_over_http_lists_every_page_and_reads_in_both_modes() -> anyhow::Result<()> {
    let proxy = ProxyProcess::start(&paged_config()).await?;
    proxy.wait_up("fx", 1).await?;
    for mode in MODES {
        let lines = run_client(&["--url", &proxy.url, "--mode", mode], &resource_ops()).await?;
        assert_resource_ops(&lines, mode);
    }
    Ok(())
}

/// The same through the Python client spawning `mcp-resource-proxy serve --stdio`.
#[tokio::test]
async fn python_client_over_stdio_lists_every_page_and_reads_in_both_modes() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), &paged_config())?;
    for mode in MODES {
        let lines = run_client(&stdio_args(&config, mode), &resource_ops()).await?;
        assert_resource_ops(&lines, mode);
    }
    Ok(())
}

/// tests/py/server.py (the SDK's `MCPServer`) as two stdio upstreams, one spoken to in each era:
/// both instances' notes are listed and readable through the proxy, by Python clients of both modes.
#[tokio::test]
async fn python_server_upstream_notes_are_listed_and_readable_in_both_eras() -> anyhow::Result<()> {
    let config = format!("{}{}", py_server_upstream("pyold", "2025-11-25"), py_server_upstream("pynew", "2026-07-28"));
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("pyold", 1).await?;
    proxy.wait_up("pynew", 1).await?;
    for mode in MODES {
        let ops = ["list_all", "read:pyold+py://note/1", "read:pynew+py://note/2", "read:pynew+py://note/9"];
        let lines = run_client(&["--url", &proxy.url, "--mode", mode], &ops).await?;
        let mut uris: Vec<&str> = lines[0]["uris"].as_array().unwrap().iter().map(|u| u.as_str().unwrap()).collect();
        uris.sort();
        assert_eq!(
            uris,
            ["pynew+py://note/1", "pynew+py://note/2", "pyold+py://note/1", "pyold+py://note/2"],
            "{mode}"
        );
        let contents = |line: &Value| line["contents"].clone();
        assert_eq!(
            contents(&lines[1]),
            json!([{"uri": "pyold+py://note/1", "mimeType": "text/plain", "text": "note 1 v1"}]),
            "{mode}"
        );
        assert_eq!(
            contents(&lines[2]),
            json!([{"uri": "pynew+py://note/2", "mimeType": "text/plain", "text": "note 2 v1"}]),
            "{mode}"
        );
        assert_eq!(lines[3]["error"]["code"], not_found_code(mode), "{mode}: {}", lines[3]);
    }
    Ok(())
}

fn resource_ops() -> [&'static str; 5] {
    ["list_all", "templates_all", "read:fx+fx://fx/item/1", "read:fx+fx://fx/multi", "read:nope+fx://fx/item/1"]
}

/// What [`resource_ops`] must print in `mode`.
fn assert_resource_ops(lines: &[Value], mode: &str) {
    assert_eq!(lines.len(), 5, "{mode}: {lines:?}");
    let mut expected: Vec<String> = (0..5).map(|i| format!("fx+fx://fx/item/{i}")).collect();
    expected.extend(["fx+fx://fx/multi".to_string(), "fx+fx://fx/blob".to_string()]);
    expected.sort();
    let mut listed: Vec<String> = serde_json::from_value(lines[0]["uris"].clone()).unwrap();
    listed.sort();
    assert_eq!(listed, expected, "{mode}");
    assert_eq!(lines[0]["pages"], 4, "{mode}: 7 resources in pages of 2");
    if mode == "2026-07-28" {
        assert!(lines[0]["ttlMs"].is_u64() && lines[0]["cacheScope"].is_string(), "{mode}: {}", lines[0]);
    }

    let templates = &lines[1]["uriTemplates"];
    for template in ["fx+fx://fx/item/{id}", "fx+fx://fx/echo/{text}"] {
        assert!(templates.as_array().unwrap().contains(&json!(template)), "{mode}: {template} in {templates}");
    }
    assert!(lines[1]["pages"].as_u64().unwrap() >= 2, "{mode}: templates are paged too: {}", lines[1]);

    assert_eq!(
        lines[2]["contents"],
        json!([{"uri": "fx+fx://fx/item/1", "mimeType": "text/plain", "text": "item 1 v1"}]),
        "{mode}"
    );
    let multi = lines[3]["contents"].as_array().unwrap();
    let uris: Vec<&str> = multi.iter().map(|c| c["uri"].as_str().unwrap()).collect();
    assert_eq!(uris, ["fx+fx://fx/multi/a", "fx+fx://fx/multi/b", "fx+fx://fx/multi/c"], "{mode}");
    assert_eq!(multi[0]["text"], "multi a v1", "{mode}");
    assert!(multi[2]["blob"].is_string(), "{mode}: the third content is a blob: {}", multi[2]);

    assert_eq!(lines[4]["error"]["code"], not_found_code(mode), "{mode}: {}", lines[4]);
}

/// The not-found error code of a client in `mode`.
fn not_found_code(mode: &str) -> i64 {
    if mode == "legacy" { -32002 } else { -32602 }
}

/// client.py arguments that spawn the proxy binary over stdio on `config`.
fn stdio_args(config: &Path, mode: &str) -> Vec<String> {
    let config = config.to_str().expect("UTF-8 path").to_string();
    ["--stdio", PROXY_BIN, "serve", "--stdio", "--config", &config, "--", "--mode", mode].map(String::from).to_vec()
}

/// A `[[upstreams]]` entry running tests/py/server.py over stdio with its era pinned.
fn py_server_upstream(name: &str, protocol: &str) -> String {
    let (program, args) = py_server_stdio_command(&[]);
    let args: Vec<String> = args.iter().map(|a| toml_str(a)).collect();
    format!(
        "[[upstreams]]\nname = \"{name}\"\ncommand = {}\nargs = [{}]\nprotocol = \"{protocol}\"\n\n",
        toml_str(&program),
        args.join(", ")
    )
}

/// Run client.py with `args` then `ops`; it must exit 0 within [`CLIENT_DEADLINE`] and print one
/// JSON line per op.
async fn run_client<A: AsRef<str>>(args: &[A], ops: &[&str]) -> anyhow::Result<Vec<Value>> {
    let all: Vec<&str> = args.iter().map(AsRef::as_ref).chain(ops.iter().copied()).collect();
    let mut command = tokio::process::Command::from(py_client(&all));
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let output = tokio::time::timeout(CLIENT_DEADLINE, command.output()).await??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "client.py {all:?} failed ({}):\n{stderr}", output.status);
    let lines = parse_json_lines(&output.stdout);
    anyhow::ensure!(lines.len() == ops.len(), "client.py {all:?} printed {lines:?}; stderr:\n{stderr}");
    Ok(lines)
}
