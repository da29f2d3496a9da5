//! The SDK hosts people use, through the load balancer in 2026-07-28 mode: the Python SDK's
//! client (`tests/py/client.py`) and the TypeScript SDK's (`tests/ts/client.mjs`) page through
//! every resource with each page on another replica, read, and call a tool.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

use super::replicas::{ALICE_TOKEN, answered, three_replicas};
use crate::support::cluster::Replicas;
use crate::support::peers::{ensure_installed, parse_json_lines, py_client, repo_root};

/// How long one client run may take (a Python or Node start costs about a second).
const CLIENT_DEADLINE: Duration = Duration::from_secs(60);

const OPS_URI: &str = "fx+fx://fx/item/1";

async fn run(mut command: tokio::process::Command, ops: usize) -> anyhow::Result<Vec<Value>> {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let output = tokio::time::timeout(CLIENT_DEADLINE, command.output()).await.context("the client timed out")??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "the client failed ({}):\n{stderr}", output.status);
    let lines = parse_json_lines(&output.stdout);
    anyhow::ensure!(lines.len() == ops, "the client printed {lines:?}; stderr:\n{stderr}");
    Ok(lines)
}

/// Every replica answered at least one page, and none refused a cursor.
async fn pages_spread(cluster: &Replicas) -> anyhow::Result<()> {
    for replica in &cluster.replicas {
        assert!(answered(replica, "resources/list", "ok").await? >= 1.0, "every replica served a page");
        assert_eq!(answered(replica, "resources/list", "invalid_cursor").await?, 0.0, "no cursor refused");
    }
    Ok(())
}

#[tokio::test]
async fn the_python_client_pages_reads_and_calls_across_replicas() -> anyhow::Result<()> {
    let (cluster, _policies) = three_replicas().await?;
    let header = format!("Authorization: Bearer {ALICE_TOKEN}");
    let read = format!("read:{OPS_URI}");
    let args =
        ["--url", cluster.url(), "--mode", "2026-07-28", "--header", &header, "list_all", &read, "call:fx__stats:{}"];
    let lines = run(tokio::process::Command::from(py_client(&args)), 3).await?;
    assert_eq!(lines[0]["uris"].as_array().map(Vec::len), Some(7), "{}", lines[0]);
    assert_eq!(lines[0]["pages"], 4, "{}", lines[0]);
    assert_eq!(lines[1]["contents"][0]["text"], "item 1 v1", "{}", lines[1]);
    assert!(lines[2]["result"].is_object() && lines[2]["result"]["isError"] != true, "{}", lines[2]);
    pages_spread(&cluster).await
}

#[tokio::test]
async fn the_typescript_client_pages_reads_and_calls_across_replicas() -> anyhow::Result<()> {
    ensure_installed();
    let (cluster, _policies) = three_replicas().await?;
    let mut command = tokio::process::Command::new("node");
    command.arg(repo_root().join("tests/ts/client.mjs")).args(["--url", cluster.url(), "--mode", "2026-07-28"]);
    command.args(["--header", &format!("Authorization: Bearer {ALICE_TOKEN}")]);
    command.args(["resources_all", &format!("read:{OPS_URI}"), "call:fx__stats:{}"]);
    let lines = run(command, 3).await?;
    assert_eq!(lines[0]["uris"].as_array().map(Vec::len), Some(7), "{}", lines[0]);
    assert_eq!(lines[0]["pages"], 4, "{}", lines[0]);
    assert_eq!(lines[1]["result"]["contents"][0]["text"], "item 1 v1", "{}", lines[1]);
    assert!(lines[2]["result"].is_object() && lines[2]["result"]["isError"] != true, "{}", lines[2]);
    pages_spread(&cluster).await
}
