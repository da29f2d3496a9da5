//! Real third-party servers and the Python SDK host across three replicas behind haproxy
//! (round-robin) and a real Redis:
//! - a 2026-07-28 host's listen stream hears each `updated` of a per-host server-everything
//!   exactly once: the upstream's ticks (every subscribed URI at once, then every 5 s) are
//!   counted per URI and per tick, each tick's window closed by the next tick; the host's
//!   requests go to a replica that does not own its principal's session;
//! - a tools-only server (server-sequential-thinking, no `resources` declared) is one server per
//!   principal in the cluster: its thought history grows by one per call wherever the calls
//!   land, and a `resources/list` through the proxy answers without an error for it.

use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use crate::support::cluster::{Replicas, cluster_when, forwards};
use crate::support::fixture::{Era, connect_http_with_token};
use crate::support::peers::{everything_upstream, parse_json_lines, py_client, thinking_upstream};
use crate::support::proxy::{alice_and_bob_policies, alice_and_bob_under_policies};

const ALICE_TOKEN: &str = "alice-tok-cluster-third-party-3d91";
const BOB_TOKEN: &str = "bob-tok-cluster-third-party-b6e4";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
/// The documents the listen stream holds.
const DOCUMENTS: [&str; 3] = [
    "ev+demo://resource/static/document/architecture.md",
    "ev+demo://resource/static/document/features.md",
    "ev+demo://resource/static/document/instructions.md",
];
/// server-everything's ticks counted (the one the toggle sends at once, and the next, 5 s on);
/// one more closes the last one's window.
const TICKS: usize = 2;
/// A quiet longer than this between two `updated` starts another tick (they are 5 s apart).
const TICK_GAP: f64 = 2.0;
/// Calls of the tools-only server.
const THOUGHTS: usize = 10;

/// Three replicas with `upstream` alone, alice and bob allowed everything; returns once each
/// lists `name`'s tools and can reach the others.
async fn three_replicas(upstream: &str, name: &str) -> anyhow::Result<(Replicas, tempfile::TempDir)> {
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let config = alice_and_bob_under_policies("", policies.path(), upstream);
    let cluster = Replicas::start(3, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings(name).await?;
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 3)).await?;
    }
    Ok((cluster, policies))
}

/// The index of the replica holding alice's session of `ev`, once a 2026-07-28 call of hers
/// opened it (such a call goes on her principal's session, per-host or not).
async fn alices_owner(cluster: &Replicas) -> anyhow::Result<usize> {
    let (host, _) = connect_http_with_token(cluster.url(), Era::Modern, ALICE_TOKEN).await?;
    let echo = json!({ "message": "warm" }).as_object().cloned().unwrap_or_default();
    host.call_tool(rmcp::model::CallToolRequestParams::new("ev__echo").with_arguments(echo)).await?;
    cluster.the_one_holding_a_session("ev").await
}

/// Alice's Python host through the balancer in `mode`, running `ops`; `headers` go on each of
/// its requests. Its lines.
async fn alice_runs(cluster: &Replicas, mode: &str, headers: &[String], ops: &[String]) -> anyhow::Result<Vec<Value>> {
    let bearer = format!("Authorization: Bearer {ALICE_TOKEN}");
    let mut args: Vec<String> =
        ["--url", cluster.url(), "--mode", mode, "--header", &bearer, "--timeout", "30"].map(String::from).to_vec();
    for header in headers {
        args.extend(["--header".to_owned(), header.clone()]);
    }
    args.extend(ops.iter().cloned());
    let mut command = tokio::process::Command::from(py_client(&args));
    command.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(90), command.output()).await.context("hung")??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "the Python host failed: {stderr}");
    let lines = parse_json_lines(&output.stdout);
    anyhow::ensure!(lines.len() == ops.len(), "one line per op: {lines:?}\n{stderr}");
    Ok(lines)
}

/// The `updated` heard from op `from` on, split into ticks (a quiet longer than [`TICK_GAP`]
/// between two starts the next), each a list of URIs in arrival order.
fn ticks(heard: &[Value], from: u64) -> Vec<Vec<String>> {
    let mut ticks: Vec<Vec<String>> = Vec::new();
    let mut last: Option<f64> = None;
    for event in heard.iter().filter(|event| event["during"].as_u64().is_some_and(|op| op >= from)) {
        let at = event["at"].as_f64().unwrap_or_default();
        if last.is_none_or(|last| at - last > TICK_GAP) {
            ticks.push(Vec::new());
        }
        last = Some(at);
        ticks.last_mut().expect("a tick").push(event["uri"].as_str().unwrap_or_default().to_owned());
    }
    ticks
}

/// `uris` sorted.
fn sorted(mut uris: Vec<String>) -> Vec<String> {
    uris.sort();
    uris
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listen_stream_hears_each_updated_of_a_per_host_server_everything_exactly_once() -> anyhow::Result<()> {
    let (cluster, _policies) = three_replicas(&everything_upstream("ev", "session = \"per-host\""), "ev").await?;
    let elsewhere = (alices_owner(&cluster).await? + 1) % cluster.replicas.len();
    let routed = [format!("X-Replica-Route: {elsewhere}")];
    let documents: Vec<String> = DOCUMENTS.map(String::from).to_vec();
    let mut ops = vec![format!("listen:{}", documents.join(","))];
    // The stream announces what it holds, once acknowledged upstream.
    ops.extend(documents.iter().map(|uri| format!("wait_updated:{uri}:20")));
    let toggled = ops.len() as u64;
    ops.push("call:ev__toggle-subscriber-updates:{}".to_owned());
    let heard = DOCUMENTS.len() * (1 + TICKS + 1);
    ops.push(format!("updates:{heard}:30"));
    ops.push("call:ev__toggle-subscriber-updates:{}".to_owned());
    let lines = alice_runs(&cluster, "2026-07-28", &routed, &ops).await?;

    for (uri, line) in documents.iter().zip(&lines[1..]) {
        assert_eq!(line["received"], true, "the stream announces {uri}: {line}");
    }
    let said = |line: &Value| line["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
    let (started, stopped) = (said(&lines[toggled as usize]), said(&lines[toggled as usize + 2]));
    assert!(started.starts_with("Started") && stopped.starts_with("Stopped"), "{started} / {stopped}");
    let events = lines[toggled as usize + 1]["heard"].as_array().cloned().unwrap_or_default();
    let before = events.iter().filter(|event| event["during"].as_u64().is_some_and(|op| op < toggled));
    let announced: Vec<String> = before.map(|event| event["uri"].as_str().unwrap_or_default().to_owned()).collect();
    assert_eq!(sorted(announced), documents, "each held URI announced once: {events:?}");
    let ticks = ticks(&events, toggled);
    eprintln!("announced, then heard per tick: {events:?}");
    // The last tick closes the window of the one before; it may not be whole yet.
    assert!(ticks.len() > TICKS, "{TICKS} ticks and the next one heard: {ticks:?}");
    for (tick, uris) in ticks[..TICKS].iter().enumerate() {
        assert_eq!(sorted(uris.clone()), documents, "tick {tick}: each URI heard exactly once ({events:?})");
    }
    assert!(events.iter().all(|event| event["via"] == "listen"), "all on the listen stream: {events:?}");
    let serving = &cluster.replicas[elsewhere];
    serving.wait_log(&["listen stream announced"]).await?;
    let served = serving.matching(&["listen stream announced"]);
    assert_eq!(served.len(), 1, "replica-{elsewhere}, not the owner, served the listen stream");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tools_only_server_per_principal_answers_from_every_replica_and_lists_no_error() -> anyhow::Result<()> {
    let upstream = thinking_upstream("think", "session = \"per-principal\"");
    let (cluster, _policies) = three_replicas(&upstream, "think").await?;
    let mut ops: Vec<String> = (1..=THOUGHTS)
        .map(|n| {
            let thought = json!({ "thought": format!("thought {n}"), "thoughtNumber": n, "totalThoughts": THOUGHTS,
                "nextThoughtNeeded": n < THOUGHTS });
            format!("call:think__sequentialthinking:{thought}")
        })
        .collect();
    ops.push("list_all".to_owned());
    let lines = alice_runs(&cluster, "legacy", &[], &ops).await?;

    for (n, line) in (1..=THOUGHTS).zip(&lines) {
        let result = &line["result"];
        assert_eq!(result["isError"], false, "thought {n}: {line}");
        assert_eq!(result["structuredContent"]["thoughtHistoryLength"], n, "one server for alice: {line}");
    }
    let listed = &lines[THOUGHTS];
    assert!(listed.get("error").is_none(), "a capability not declared is absent, not an error: {listed}");
    assert_eq!(listed["uris"], json!([]), "{listed}");
    let mut sessions = 0;
    for replica in &cluster.replicas {
        sessions += replica.upstream_status("think").await?["sessions"].as_u64().context("sessions")?;
    }
    assert_eq!(sessions, 1, "alice's one session in the cluster");
    assert!(forwards(&cluster.replicas, "forwarded").await? >= 1.0, "calls landed on replicas not owning it");
    Ok(())
}
