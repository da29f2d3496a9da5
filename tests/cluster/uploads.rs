//! Unauthenticated uploads through the balancer cost the replicas no memory: 40 uploads, each
//! announcing 30 MiB, to `/mcp`, to the replicas' session endpoint and to a path no route
//! serves, each sending what the replica takes (up to 30 MiB less its last chunk) and then
//! stalling, raise no replica's resident memory by more than 100 MB while they are held open;
//! each is refused on its head (a `4xx`, or its connection closed: none is waited on).

use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::cluster::Replicas;
use crate::support::peers::thinking_upstream;
use crate::support::proxy::{alice_and_bob_policies, alice_and_bob_under_policies};

const ALICE_TOKEN: &str = "alice-tok-cluster-uploads-6f20";
const BOB_TOKEN: &str = "bob-tok-cluster-uploads-0d7a";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
/// Stalled uploads held open at once.
const UPLOADS: usize = 40;
/// What each announces.
const ANNOUNCED: usize = 30 << 20;
/// The paths they go to, in turn.
const PATHS: [&str; 3] = ["/mcp", "/mcp-proxy/session", "/not-a-route"];
/// How much more a replica may hold while they stall.
const BOUND_KB: u64 = 100 * 1000;

/// A replica's resident memory in kB (`VmRSS` of `/proc/<pid>/status`).
fn resident_kb(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).context("VmRSS")?;
    Ok(line.split_whitespace().nth(1).context("a number")?.parse()?)
}

/// An upload of [`ANNOUNCED`] bytes to `path` at `address` with no credentials, sent while the
/// other side takes it (a write that waits a second: it stalls), its last chunk never sent.
/// The open connection and the bytes sent.
async fn stalled_upload(address: String, path: &'static str) -> anyhow::Result<(TcpStream, usize)> {
    let mut stream = TcpStream::connect(&address).await?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {ANNOUNCED}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    let chunk = vec![b' '; 64 << 10];
    let mut sent = 0;
    while sent + chunk.len() < ANNOUNCED {
        match tokio::time::timeout(Duration::from_secs(1), stream.write_all(&chunk)).await {
            Ok(Ok(())) => sent += chunk.len(),
            Ok(Err(_)) | Err(_) => break,
        }
    }
    Ok((stream, sent))
}

#[tokio::test(flavor = "multi_thread")]
async fn stalled_unauthenticated_uploads_to_any_path_cost_no_replica_100_mb() -> anyhow::Result<()> {
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let cluster = Replicas::start(
        3,
        &alice_and_bob_under_policies("", policies.path(), &thinking_upstream("think", "")),
        &TOKENS,
    )
    .await?;
    let pids: Vec<u32> =
        cluster.replicas.iter().map(|r| r.pid().context("a replica runs")).collect::<Result<_, _>>()?;
    let before: Vec<u64> = pids.iter().map(|&pid| resident_kb(pid)).collect::<Result<_, _>>()?;
    let address = cluster.url().strip_prefix("http://").and_then(|a| a.strip_suffix("/mcp")).context("an address")?;
    let uploads = (0..UPLOADS).map(|n| tokio::spawn(stalled_upload(address.to_owned(), PATHS[n % PATHS.len()])));
    let mut held = Vec::new();
    for upload in uploads {
        held.push(upload.await??);
    }
    let after: Vec<u64> = pids.iter().map(|&pid| resident_kb(pid)).collect::<Result<_, _>>()?;
    let sent: usize = held.iter().map(|(_, sent)| sent).sum();
    eprintln!("{UPLOADS} stalled uploads ({} MiB sent): resident kB {before:?} -> {after:?}", sent >> 20);
    for (index, (before, after)) in before.iter().zip(&after).enumerate() {
        assert!(after.saturating_sub(*before) <= BOUND_KB, "replica-{index}: {before} kB -> {after} kB");
    }
    for ((mut stream, _), path) in held.into_iter().zip(PATHS.iter().cycle()) {
        let mut answer = vec![0u8; 256];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer)).await;
        let read = read.with_context(|| format!("{path}: the stalled upload is still waited on"))?;
        // Closed (a reset once the refusal was sent, or an end) or refused.
        let answer = String::from_utf8_lossy(&answer[..read.unwrap_or(0)]);
        assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 4"), "{path}: refused on its head: {answer}");
    }
    Ok(())
}
