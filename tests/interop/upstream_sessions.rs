//! Upstream sessions per principal, end to end with the SDK clients people use: alice's and bob's
//! hosts — the Python SDK (`tests/py/tools_client.py`) and the TypeScript SDK
//! (`tests/ts/client.mjs`), each in both eras — on upstreams that keep state per session: the
//! Python SDK server `tests/py/session_server.py` (remembers a value) and the real
//! server-everything (its `toggle-subscriber-updates` switch). Each principal sees only its own
//! session's state, whichever client or era it uses; a shared upstream of the same server shares
//! its one session between them. Subscriptions too: server-everything's simulated updates go to
//! the subscribers of the session that toggled them, so alice (Python, 2025) hears hers and bob
//! (TypeScript, a 2026-07-28 listen stream) hears none of them, then his own. And across three
//! replicas behind haproxy: each principal's toggles reach its one session wherever they land.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};

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
    let upstreams = format!(
        "{}{}",
        everything_upstream("evp", "session = \"per-principal\""),
        everything_upstream("evs", "session = \"shared\"")
    );
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

/// alice (Python SDK, 2025 `resources/subscribe`) and bob (TypeScript SDK, a 2026-07-28 listen
/// stream) hold the same document of a per-principal server-everything. alice toggles the
/// simulated updates on her session: she hears `updated`, bob does not — the marker is an
/// update of the shared upstream (toggled by alice on its one session) that bob holds on the
/// same stream: whatever leaked would come before it. Then bob toggles his own session's
/// (started, not stopped: his switch is his) and hears his.
#[tokio::test]
async fn server_everythings_simulated_updates_reach_only_the_principal_whose_session_toggled() -> anyhow::Result<()> {
    let upstreams = format!(
        "{}{}",
        everything_upstream("evp", "session = \"per-principal\""),
        everything_upstream("evs", "session = \"shared\"")
    );
    let (proxy, _policies) = start(&upstreams, &["evp", "evs"]).await?;
    let url = proxy.url.as_str();
    let (per, shared) =
        ("evp+demo://resource/static/document/features.md", "evs+demo://resource/static/document/features.md");

    // bob listens to both on one stream, and waits for the shared upstream's update.
    let mut bob = tokio::process::Command::new("node");
    bob.arg(repo_root().join("tests/ts/client.mjs"));
    bob.args(["--url", url, "--mode", "2026-07-28", "--header", &format!("Authorization: Bearer {BOB_TOKEN}")]);
    let listen = format!("subscribe:{per},{shared}");
    let toggle_per = "call:evp__toggle-subscriber-updates:{}".to_string();
    let (wait_shared, wait_per) = (format!("wait_updated:{shared}"), format!("wait_updated:{per}"));
    bob.args([listen.as_str(), &wait_shared, "heard", &toggle_per, &wait_per, "heard"]);
    bob.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit()).kill_on_drop(true);
    let mut bob = bob.spawn()?;
    let mut bob_says = BufReader::new(bob.stdout.take().expect("piped stdout")).lines();
    let mut next = async || -> anyhow::Result<Value> {
        let line = tokio::time::timeout(DEADLINE * 3, bob_says.next_line()).await.context("bob is silent")??;
        Ok(serde_json::from_str(&line.context("bob ended")?)?)
    };
    let honored = next().await?;
    assert_eq!(honored["honored"].as_array().map(Vec::len), Some(2), "{honored}");
    // The shared connection holds bob's URI upstream (his per-principal session holds the other).
    proxy.wait_log(&["upstream subscriptions applied", "\"upstream\":\"evs\"", "\"watched\":1"]).await?;

    // alice: her session's simulated updates, then the marker on the shared upstream.
    let subscribe = format!("subscribe:{per}");
    let alice_waits = format!("wait_updated:{per}:30");
    let toggle_shared = "call:evs__toggle-subscriber-updates:{}";
    let alice = py_client_ops(url, ALICE_TOKEN, &[&subscribe, &toggle_per, &alice_waits, toggle_shared]).await?;
    assert_eq!(alice[1]["result"]["content"][0]["text"].as_str().map(|t| t.starts_with("Started")), Some(true));
    assert_eq!(alice[2]["received"], true, "alice did not hear her own session: {}", alice[2]);
    assert_eq!(alice[2]["via"], "legacy");

    assert_eq!(next().await?["heard"], true, "bob never heard the shared upstream's update");
    let heard = next().await?;
    assert_eq!(heard["uris"][0], shared, "bob heard alice's session first: {heard}");
    assert!(!heard["uris"].as_array().expect("uris").contains(&Value::from(per)), "bob heard alice's session: {heard}");
    let toggled = next().await?;
    let toggled = toggled["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
    assert!(toggled.starts_with("Started"), "bob's switch is his own: {toggled}");
    assert_eq!(next().await?["heard"], true, "bob did not hear his own session");
    let _ = next().await?;
    let (evp, evs) = (proxy.upstream_status("evp").await?, proxy.upstream_status("evs").await?);
    assert_eq!((&evp["sessions"], &evs["sessions"]), (&Value::from(2), &Value::from(0)));
    Ok(())
}

/// tests/py/client.py (the Python SDK host) in the 2025 era: its answers, one per op.
async fn py_client_ops(url: &str, token: &str, ops: &[&str]) -> anyhow::Result<Vec<Value>> {
    let mut command = tokio::process::Command::new(python());
    command.arg(py_script("client.py"));
    command.args(["--url", url, "--mode", "legacy", "--header", &format!("Authorization: Bearer {token}")]);
    command.args(ops).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let output = tokio::time::timeout(DEADLINE * 3, command.output()).await.context("the client timed out")??;
    let lines = parse_json_lines(&output.stdout);
    if lines.len() != ops.len() {
        bail!(
            "client.py: {} answers for {} ops; stderr:\n{}",
            lines.len(),
            ops.len(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(lines)
}

/// Across replicas: three replicas behind haproxy (round-robin, so each client process lands
/// where it lands) share a per-principal server-everything. alice's and bob's hosts — Python and
/// TypeScript, both eras — each toggle their own principal's one session: alice's second toggle,
/// from another SDK and era, stops what her first started, and bob's first starts his own. The
/// cluster holds one session per principal.
#[tokio::test]
async fn server_everythings_toggle_follows_each_principal_across_replicas() -> anyhow::Result<()> {
    use crate::support::cluster::{Replicas, cluster_when};
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let config =
        alice_and_bob_under_policies("", policies.path(), &everything_upstream("evp", "session = \"per-principal\""));
    let cluster = Replicas::start(3, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("evp").await?;
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 3)).await?;
    }
    let url = cluster.url();
    let toggle = "call:evp__toggle-subscriber-updates:{}";
    let (py, ts) = (Client::Python, Client::TypeScript);
    let alice = call(py, "legacy", url, ALICE_TOKEN, toggle).await?;
    let bob = call(ts, "legacy", url, BOB_TOKEN, toggle).await?;
    assert!(alice.starts_with("Started") && bob.starts_with("Started"), "{alice} / {bob}");
    let alice_again = call(ts, "2026-07-28", url, ALICE_TOKEN, toggle).await?;
    assert!(alice_again.starts_with("Stopped"), "alice's own switch, wherever she landed: {alice_again}");
    let bob_again = call(py, "2026-07-28", url, BOB_TOKEN, toggle).await?;
    assert!(bob_again.starts_with("Stopped"), "bob's own switch, wherever he landed: {bob_again}");
    let (mut open, mut forwarded) = (0, 0.0);
    let needle = "mcp_proxy_cluster_forwards_total{outcome=\"forwarded\"}";
    for replica in &cluster.replicas {
        open += replica.upstream_status("evp").await?["sessions"].as_u64().context("sessions")?;
        let metrics = replica.admin_get("/metrics").await?;
        let counted = metrics.lines().filter(|line| line.starts_with(needle));
        forwarded += counted.filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok()).sum::<f64>();
    }
    assert_eq!(open, 2, "one session per principal in the cluster");
    assert!(forwarded >= 1.0, "calls reached an owner from another replica");
    Ok(())
}
