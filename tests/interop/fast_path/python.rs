//! The Python SDK's client (legacy mode) gets the same answers from the fast path as from rmcp.

use std::time::Duration;

use serde_json::Value;

use super::{ALICE, ORIGIN, Served};
use crate::support::peers::{parse_json_lines, py_client};

/// The Python SDK (legacy mode) gets the same lines from the fast path as from rmcp.
#[tokio::test]
async fn python_sdk_legacy_client_gets_the_same_answers_on_the_fast_path() -> anyhow::Result<()> {
    let served = Served::start("").await?;
    let ops =
        ["list_all", "templates_all", "read:fx+fx://fx/item/3", "read:fx+fx://fx/item/3", "read:fx+fx://fx/item/0"];
    let auth = format!("Authorization: Bearer {ALICE}");
    let origin = format!("Origin: {ORIGIN}");
    let before = served.fast_answers();
    let fast = run_python(&served, &[&auth], &ops).await?;
    let answered_fast = served.fast_answers() - before;
    let rmcp = run_python(&served, &[&auth, &origin], &ops).await?;
    assert_eq!(served.fast_answers() - before, answered_fast, "with an Origin, rmcp answers");
    // The SDK may send its first request before the session's handshake reached the fast path.
    assert!(answered_fast >= 1, "the Python client's requests took the fast path");
    assert_eq!(fast, rmcp);
    assert_eq!(fast[2]["contents"][0]["uri"], "fx+fx://fx/item/3", "{fast:?}");
    assert_eq!(fast[4]["error"]["code"], -32002, "{fast:?}");
    Ok(())
}

async fn run_python(served: &Served, headers: &[&str], ops: &[&str]) -> anyhow::Result<Vec<Value>> {
    let mut args = vec!["--url", served.proxy.url.as_str(), "--mode", "legacy"];
    for header in headers {
        args.extend(["--header", header]);
    }
    args.extend(ops);
    let mut command = tokio::process::Command::from(py_client(&args));
    command.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output()).await??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "client.py failed ({}):\n{stderr}", output.status);
    let lines = parse_json_lines(&output.stdout);
    anyhow::ensure!(lines.len() == ops.len(), "client.py printed {lines:?}; stderr:\n{stderr}");
    Ok(lines)
}
