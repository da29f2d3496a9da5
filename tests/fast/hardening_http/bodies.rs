//! Stalled request bodies: each is cut at the body deadline, what they hold stays within the
//! principal's body budget, and another principal is served meanwhile.

use std::time::Duration;

use anyhow::Context;
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{ALICE, BOB, DEADLINE, MODERN, Served};
use crate::support::exposition::Exposition;

/// A token subscriber who stalls request bodies holds neither memory nor connections for long: 20
/// connections with alice's token each announce 4 MiB and send 3 MiB of it, then stall. What
/// the proxy holds for them stays within alice's body budget (its resident memory grows by less
/// than 40 MB), each is answered or closed within the body deadline (plus a margin), each cut is
/// counted, and bob is served meanwhile.
#[tokio::test]
async fn stalled_request_bodies_are_cut_at_the_deadline_and_bounded_per_principal() -> anyhow::Result<()> {
    const STALLED: usize = 20;
    let served = Served::start("body_read_timeout = \"3s\"\nmax_body_bytes_per_principal = 8388608\n").await?;
    let pid = served.proxy.pid().context("the proxy runs")?;
    let before = resident_bytes(pid)?;
    let started = tokio::time::Instant::now();
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        let mut stream = TcpStream::connect(served.mcp_address()).await?;
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ALICE}\r\n\
             Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
             MCP-Protocol-Version: {MODERN}\r\nMcp-Method: resources/list\r\nContent-Length: {}\r\n\r\n",
            4 << 20
        );
        stream.write_all(head.as_bytes()).await?;
        // A refused body is not read: the write may fail once the proxy closed the connection.
        let _ = tokio::time::timeout(DEADLINE, stream.write_all(&vec![b' '; 3 << 20])).await;
        stalled.push(stream);
    }
    let during = resident_bytes(pid)?;
    let grown = during.saturating_sub(before);
    eprintln!("resident memory: {before} B before, {during} B with {STALLED} stalled bodies (+{grown} B)");
    assert!(grown < 40 << 20, "the stalled bodies hold {grown} B");
    let bob = served.send(served.modern_list(BOB)).await?;
    assert_eq!(bob.status, StatusCode::OK, "bob is served meanwhile: {bob:?}");
    for (n, stream) in stalled.iter_mut().enumerate() {
        let mut answer = Vec::new();
        let ended = tokio::time::timeout_at(started + Duration::from_secs(15), stream.read_to_end(&mut answer)).await;
        assert!(ended.is_ok(), "stalled body {n} still open 15 s after it began");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 4"), "stalled body {n}: {answer}");
    }
    let exposition = Exposition::parse(&served.proxy.admin_get("/metrics").await?)?;
    let cut = |reason| exposition.value("mcp_proxy_request_bodies_cut_total", &[("reason", reason)]).unwrap_or(0.0);
    assert_eq!(cut("body_timeout") + cut("body_budget"), STALLED as f64, "each stalled body cut once");
    assert!(cut("body_budget") >= 1.0, "past alice's budget a body is refused at once");
    Ok(())
}

/// The resident memory of process `pid`, in bytes.
fn resident_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).context("no VmRSS")?;
    let kib: u64 = line.split_whitespace().nth(1).context("VmRSS value")?.parse()?;
    Ok(kib * 1024)
}
