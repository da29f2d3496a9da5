//! The Python SDK client (PyPI `mcp`) reads through the proxy with a JWT access token.

use std::time::Duration;

use crate::support::peers::{parse_json_lines, py_client};

use crate::support::jwt::*;

/// The Python SDK client, with the JWT as a custom header, reads through the proxy.
#[tokio::test]
async fn python_client_reads_with_a_jwt() -> anyhow::Result<()> {
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, _policies) = start_proxy(&jwks.url, "jwks_min_refresh = \"30s\"").await?;
    let token = rsa_a().sign(&claims("alice", &["eng"]));
    let header = format!("Authorization: Bearer {token}");
    let args = [
        "--url",
        &proxy.url,
        "--mode",
        "legacy",
        "--header",
        &header,
        "read:fx+fx://fx/blob",
        "read:fx+fx://fx/item/1",
    ];
    let mut command = tokio::process::Command::from(py_client(&args));
    command.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output()).await??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "client.py failed:\n{stderr}");
    let lines = parse_json_lines(&output.stdout);
    assert_eq!(lines.len(), 2, "{lines:?}\n{stderr}");
    assert_eq!(lines[0]["contents"][0]["uri"], "fx+fx://fx/blob", "{}", lines[0]);
    assert!(lines[1]["error"].is_object(), "item 1 is denied to group eng: {}", lines[1]);
    Ok(())
}
