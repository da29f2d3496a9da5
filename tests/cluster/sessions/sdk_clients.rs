//! The SDKs' own clients hold a 2025 session through the load balancer: the Python SDK's
//! (`tests/py/client.py`) and the TypeScript SDK's (`tests/ts/client.mjs`) page, read and
//! subscribe on whichever replicas haproxy picks, and hear an upstream change.

use std::time::Duration;

use anyhow::Context;
use serde_json::json;

use super::{ITEM, upstream};
use crate::support::cluster::Replicas;
use crate::support::fixture::{self, Era, call_json, list_all_resources};
use crate::support::peers::py_client;

/// The Python SDK's client (`tests/py/client.py`) holds a 2025 session through the load
/// balancer: it pages, reads and subscribes on whichever replicas haproxy picks, and an upstream
/// change made after its subscription was announced reaches it on its GET stream.
#[tokio::test]
async fn the_python_client_keeps_a_2025_session_across_replicas() -> anyhow::Result<()> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let (fixture, config) = upstream().await?;
    let cluster = Replicas::start(3, &config, &[]).await?;
    let (side, _) = fixture::connect_http(&fixture.url, Era::Legacy).await?;
    let (read, subscribe, wait) =
        (format!("read:{ITEM}"), format!("subscribe:{ITEM}"), format!("wait_updated:{ITEM}:30"));
    let ops = ["list_all", &read, &subscribe, &wait, "ready", "sleep_until_stdin", &wait];
    let mut args = vec!["--url", cluster.url(), "--mode", "legacy"];
    args.extend(ops);
    let mut command = tokio::process::Command::from(py_client(&args));
    command.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).kill_on_drop(true);
    let mut client = command.spawn().context("spawn the Python client")?;
    let mut stdin = client.stdin.take().context("stdin")?;
    let mut lines = BufReader::new(client.stdout.take().context("stdout")?).lines();
    let mut next = async || -> anyhow::Result<serde_json::Value> {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await.context("no line")??;
        Ok(serde_json::from_str(&line.context("the client ended early")?)?)
    };
    let listed = next().await?;
    let (upstream_resources, _) = list_all_resources(&side).await?;
    assert_eq!(listed["uris"].as_array().map(Vec::len), Some(upstream_resources.len()), "{listed}");
    let read = next().await?;
    assert_eq!(read["contents"][0]["text"], "item 1 v1", "{read}");
    assert_eq!(next().await?["ok"], true);
    let first = next().await?;
    assert_eq!(first["received"], true, "the subscription announced: {first}");
    assert_eq!(next().await?["op"], "ready");
    call_json(&side, "touch", json!({ "uri": "fx://fx/item/1" })).await?;
    stdin.write_all(b"go\n").await?;
    assert_eq!(next().await?["op"], "sleep_until_stdin");
    let changed = next().await?;
    assert_eq!(changed["received"], true, "the upstream's change reaches the Python host: {changed}");
    assert_eq!(changed["via"], "legacy", "{changed}");
    Ok(())
}

/// The TypeScript SDK's client (`tests/ts/client.mjs`) holds a 2025 session through the load
/// balancer: pages, a read, a subscription announced once held, then an upstream change (made by
/// a tool call through the proxy) reaches it.
#[tokio::test]
async fn the_typescript_client_keeps_a_2025_session_across_replicas() -> anyhow::Result<()> {
    crate::support::peers::ensure_installed();
    let (fixture, config) = upstream().await?;
    let cluster = Replicas::start(3, &config, &[]).await?;
    let (side, _) = fixture::connect_http(&fixture.url, Era::Legacy).await?;
    let mut command = tokio::process::Command::new("node");
    command.arg(crate::support::peers::repo_root().join("tests/ts/client.mjs"));
    command.args(["--url", cluster.url(), "--mode", "legacy", "resources_all", &format!("read:{ITEM}")]);
    command.args([format!("subscribe:{ITEM}"), format!("wait_updated:{ITEM}"), format!("forget_updated:{ITEM}")]);
    command.args(["tools_all", r#"call:fx__touch:{"uri":"fx://fx/item/1"}"#, &format!("wait_updated:{ITEM}")]);
    command.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let output =
        tokio::time::timeout(Duration::from_secs(90), command.output()).await.context("the client timed out")??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "the client failed ({}):\n{stderr}", output.status);
    let lines = crate::support::peers::parse_json_lines(&output.stdout);
    anyhow::ensure!(lines.len() == 8, "the client printed {lines:?}; stderr:\n{stderr}");
    let (upstream_resources, _) = list_all_resources(&side).await?;
    assert_eq!(lines[0]["uris"].as_array().map(Vec::len), Some(upstream_resources.len()), "{}", lines[0]);
    assert_eq!(lines[1]["result"]["contents"][0]["text"], "item 1 v1", "{}", lines[1]);
    assert_eq!(lines[3]["heard"], true, "the subscription announced: {}", lines[3]);
    assert!(lines[6]["result"].is_object() && lines[6]["result"]["isError"] != true, "{}", lines[6]);
    assert_eq!(lines[7]["heard"], true, "the upstream's change reaches the TypeScript host: {}", lines[7]);
    Ok(())
}
