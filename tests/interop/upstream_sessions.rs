//! Upstream sessions per principal, end to end with the SDK clients people use: alice's and bob's
//! hosts — the Python SDK (`tests/py/tools_client.py`) and the TypeScript SDK
//! (`tests/ts/client.mjs`), each in both eras — on upstreams that keep state per session: the
//! Python SDK server `tests/py/session_server.py` (remembers a value) and the real
//! server-everything (its `toggle-subscriber-updates` switch). Each principal sees only its own
//! session's state, whichever client or era it uses; a shared upstream of the same server shares
//! its one session between them.

use std::process::Stdio;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::support::DEADLINE;
use crate::support::peers::{ensure_installed, everything_upstream, parse_json_lines, py_script, python, repo_root};
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, toml_str};

const ALICE_TOKEN: &str = "alice-tok-sessions-5f0c2b7e";
const BOB_TOKEN: &str = "bob-tok-sessions-8d1a4c93";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];

/// Which SDK client a host is.
#[derive(Debug, Clone, Copy)]
enum Client {
    Python,
    TypeScript,
}

/// Run one host (a client process, one connection) of the principal with `token`: one JSON
/// answer per op.
async fn ops(client: Client, mode: &str, url: &str, token: &str, ops: &[&str]) -> anyhow::Result<Vec<Value>> {
    ensure_installed();
    let mut command = match client {
        Client::Python => {
            let mut command = tokio::process::Command::new(python());
            command.arg(py_script("tools_client.py"));
            command
        }
        Client::TypeScript => {
            let mut command = tokio::process::Command::new("node");
            command.arg(repo_root().join("tests/ts/client.mjs"));
            command
        }
    };
    command.args(["--url", url, "--mode", mode, "--header", &format!("Authorization: Bearer {token}")]);
    command.args(ops).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let output = tokio::time::timeout(DEADLINE * 3, command.output()).await.context("the client timed out")??;
    let lines = parse_json_lines(&output.stdout);
    if lines.len() != ops.len() {
        bail!(
            "{client:?} ({mode}): {} answers for {} ops; stderr:\n{}",
            lines.len(),
            ops.len(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(lines)
}

/// The text of a `call` answer (an error answer fails).
fn text(answer: &Value) -> anyhow::Result<String> {
    let content = answer["result"]["content"].as_array().with_context(|| format!("no result: {answer}"))?;
    Ok(content.iter().filter_map(|block| block["text"].as_str()).collect::<Vec<_>>().join("\n"))
}

/// One call by one host: its text.
async fn call(client: Client, mode: &str, url: &str, token: &str, op: &str) -> anyhow::Result<String> {
    text(&ops(client, mode, url, token, &[op]).await?[0])
}

async fn start(upstreams: &str, names: &[&str]) -> anyhow::Result<(ProxyProcess, tempfile::TempDir)> {
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let config = alice_and_bob_under_policies("", policies.path(), upstreams);
    Ok((ProxyProcess::start_with_offerings(&config, &TOKENS, names).await?, policies))
}

/// The Python session server's value, kept by one principal's hosts of either SDK and era, is
/// never the other principal's.
#[tokio::test]
async fn python_and_typescript_hosts_of_both_eras_see_only_their_principals_session() -> anyhow::Result<()> {
    let program = toml_str(python().to_str().expect("utf-8 path"));
    let script = toml_str(py_script("session_server.py").to_str().expect("utf-8 path"));
    let upstream =
        format!("[[upstreams]]\nname = \"per\"\ncommand = {program}\nargs = [{script}]\nsession = \"per-principal\"\n");
    let (proxy, _policies) = start(&upstream, &["per"]).await?;
    let url = proxy.url.as_str();
    let (py, ts) = (Client::Python, Client::TypeScript);
    let remember = |who: &str| format!("call:per__remember:{{\"value\":\"{who}\"}}");
    assert_eq!(call(py, "legacy", url, ALICE_TOKEN, &remember("alice")).await?, "kept alice");
    assert_eq!(call(ts, "2026-07-28", url, BOB_TOKEN, "call:per__recall:{}").await?, "nothing");
    assert_eq!(call(ts, "legacy", url, BOB_TOKEN, &remember("bob")).await?, "kept bob");
    for (client, mode) in [(py, "legacy"), (py, "2026-07-28"), (ts, "legacy"), (ts, "2026-07-28")] {
        let alice = call(client, mode, url, ALICE_TOKEN, "call:per__recall:{}").await?;
        let bob = call(client, mode, url, BOB_TOKEN, "call:per__recall:{}").await?;
        assert_eq!((alice.as_str(), bob.as_str()), ("alice", "bob"), "{client:?} {mode}");
    }
    assert_eq!(proxy.upstream_status("per").await?["sessions"], 2);
    Ok(())
}

/// server-everything's `toggle-subscriber-updates` is a switch per session: on a per-principal
/// upstream alice's and bob's first toggles both start their own; on a shared one bob's toggle
/// stops what alice's started.
#[tokio::test]
async fn server_everythings_toggle_is_per_principal_on_a_per_principal_upstream_and_shared_otherwise()
-> anyhow::Result<()> {
    let upstreams =
        format!("{}{}", everything_upstream("evp", "session = \"per-principal\""), everything_upstream("evs", ""));
    let (proxy, _policies) = start(&upstreams, &["evp", "evs"]).await?;
    let url = proxy.url.as_str();
    let toggle = |upstream: &str| format!("call:{upstream}__toggle-subscriber-updates:{{}}");
    let (py, ts) = (Client::Python, Client::TypeScript);
    let alice = call(py, "legacy", url, ALICE_TOKEN, &toggle("evp")).await?;
    let bob = call(ts, "legacy", url, BOB_TOKEN, &toggle("evp")).await?;
    assert!(alice.starts_with("Started") && bob.starts_with("Started"), "{alice} / {bob}");
    let alice_again = call(ts, "2026-07-28", url, ALICE_TOKEN, &toggle("evp")).await?;
    assert!(alice_again.starts_with("Stopped"), "alice's own switch: {alice_again}");

    let alice = call(py, "legacy", url, ALICE_TOKEN, &toggle("evs")).await?;
    let bob = call(ts, "legacy", url, BOB_TOKEN, &toggle("evs")).await?;
    assert!(alice.starts_with("Started") && bob.starts_with("Stopped"), "one shared switch: {alice} / {bob}");
    let (evp, evs) = (proxy.upstream_status("evp").await?, proxy.upstream_status("evs").await?);
    assert_eq!((&evp["sessions"], &evs["sessions"]), (&Value::from(2), &Value::from(0)));
    Ok(())
}
