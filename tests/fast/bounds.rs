//! Bounds on what one client can make the proxy hold, through the real binary: connection caps
//! under a low file-descriptor limit (folder reads and `/status` keep answering), a slowloris
//! at the cap (fresh clients are served at once), bridge calls counted per principal and a
//! search cut at its scan budget, and subscriptions capped per principal across sessions and
//! listen streams.

use std::time::Duration;

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::eventually;
use crate::support::fixture::{DEADLINE, Era, FixtureClient, call_json, connect_http_with_token};
use crate::support::proxy::{ProxyProcess, fixture_upstream, toml_str};
use crate::support::raw_http;

const ALICE: &str = "alice-token-bounds-7f3a";
const BOB: &str = "bob-token-bounds-2c9e";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)];

/// Bearer principals alice and bob, `server` lines in `[server]`, then `rest` (sections, upstreams).
fn config(server: &str, rest: &str) -> String {
    format!(
        "[server]\n{server}\n\n[auth]\nmode = \"bearer\"\n\n\
         [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n{rest}"
    )
}

/// A folder upstream `docs` holding a.txt and b.txt ("alpha"); the folder is kept by the caller.
fn folder() -> anyhow::Result<(tempfile::TempDir, String)> {
    let files = tempfile::tempdir()?;
    for name in ["a.txt", "b.txt"] {
        std::fs::write(files.path().join(name), "alpha")?;
    }
    let root = files.path().canonicalize()?;
    let upstream = format!("[[upstreams]]\nname = \"docs\"\ndir = {}\n", toml_str(root.to_str().context("utf-8")?));
    Ok((files, upstream))
}

/// A stateless 2026-07-28 `resources/read` of `uri` as `token`: the text read.
async fn modern_read(http: &reqwest::Client, proxy: &ProxyProcess, token: &str, uri: &str) -> anyhow::Result<String> {
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": uri, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bounds", "version": "0"}}}});
    let request = http
        .post(&proxy.url)
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "resources/read")
        .header("Mcp-Name", uri)
        .json(&body);
    let reply = crate::support::raw_http::send(request).await?;
    reply.contents_text().with_context(|| format!("no contents: {reply:?}"))
}

/// Under a file-descriptor limit of 1,024 (soft and hard, so it cannot be raised) and the
/// default `max_connections` (1,024), 1,100 connections that never send a byte do not starve
/// the proxy: it caps `/mcp` below the limit (leaving a reserve), a folder read that must open
/// a file still answers, and so does `/status` on the admin listener.
#[tokio::test]
async fn half_open_connections_under_a_1024_fd_limit_leave_folder_reads_and_status_answering() -> anyhow::Result<()> {
    let (_files, upstream) = folder()?;
    let text = config("header_read_timeout = \"60s\"", &format!("[cache]\nenabled = false\n\n{upstream}"));
    let proxy = ProxyProcess::start_with_fd_limit(&text, &TOKENS, 1024).await?;
    proxy.wait_up("docs", 1).await?;
    let chosen = proxy.wait_log(&["connection caps from the file descriptor limit"]).await?;
    assert!(chosen.contains("\"fd_limit\":\"1024\""), "{chosen}");
    assert!(chosen.contains("\"max_connections\":825"), "a reserve of 144 and the admin's 55 kept: {chosen}");
    let http = reqwest::Client::builder().pool_max_idle_per_host(0).build()?;
    assert_eq!(modern_read(&http, &proxy, ALICE, "docs+file:///a.txt").await?, "alpha");

    let address = proxy.url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    let mut flood = Vec::new();
    for _ in 0..1_100 {
        flood.push(TcpStream::connect(&address).await.context("a half-open connection")?);
    }
    // Past the cap, the proxy makes room by closing the oldest connection that sent nothing.
    proxy.wait_log(&["closed to make room"]).await?;

    assert_eq!(modern_read(&http, &proxy, ALICE, "docs+file:///b.txt").await?, "alpha", "a folder read");
    let status = tokio::time::timeout(DEADLINE, proxy.status()).await.context("/status timed out")??;
    assert!(status.is_object(), "{status}");
    let pid = proxy.pid().context("the proxy's pid")?;
    let open = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count();
    assert!(open <= 1024 - 64, "{open} descriptors open: the reserve is kept");
    assert!(proxy.matching(&["accept failed"]).is_empty(), "no accept failed for want of descriptors");
    drop(flood);
    Ok(())
}

/// A slowloris holding every place with heads it never finishes does not keep a fresh client
/// waiting until the header timeout: the oldest unfinished connection is closed for it. A
/// connection that has sent a request is never closed for room.
#[tokio::test]
async fn a_slowloris_at_the_cap_does_not_keep_fresh_clients_waiting() -> anyhow::Result<()> {
    let (_files, upstream) = folder()?;
    let text = config("max_connections = 3\nheader_read_timeout = \"60s\"", &upstream);
    let proxy = ProxyProcess::start_with(&text, &[], &TOKENS).await?;
    let address = proxy.url.trim_start_matches("http://").trim_end_matches("/mcp").to_owned();
    let mut proven = TcpStream::connect(&address).await?;
    raw_http::healthz(&mut proven).await.context("a first request")?;
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(&address).await?;
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n").await?;
        slow.push(stream);
    }
    let started = tokio::time::Instant::now();
    let mut fresh = TcpStream::connect(&address).await?;
    raw_http::healthz(&mut fresh).await.context("a fresh client is served while the slowloris goes on")?;
    assert!(started.elapsed() < Duration::from_secs(30), "served well before the 60 s header timeout");
    raw_http::healthz(&mut proven).await.context("the connection that sent a request stays")?;
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(DEADLINE, slow[0].read(&mut byte)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "the oldest slow connection was closed: {closed:?}");
    Ok(())
}

/// The proxy with the bridge on and a fixture upstream `fx` (`fixture_args`; one child shared
/// by alice and bob), for alice and bob.
async fn bridged(server: &str, bridge: &str, fixture_args: &[&str]) -> anyhow::Result<ProxyProcess> {
    let rest = format!(
        "[bridge]\nenabled = true\n{bridge}\n\n[cache]\nenabled = false\n\n{}session = \"shared\"\n",
        fixture_upstream("fx", fixture_args)
    );
    let proxy = ProxyProcess::start_with(&config(server, &rest), &[], &TOKENS).await?;
    proxy.wait_up("fx", 1).await?;
    Ok(proxy)
}

fn bridge_call(name: &str, arguments: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned()).with_arguments(arguments.as_object().cloned().unwrap_or_default())
}

fn structured(result: &CallToolResult) -> anyhow::Result<Value> {
    anyhow::ensure!(result.is_error != Some(true), "a tool error: {result:?}");
    result.structured_content.clone().context("structured content")
}

/// Bridge calls count against `server.max_calls_per_principal` like routed calls: with two of
/// bob's bridge reads in flight the third bridge call is refused with the error naming the
/// limit, alice is served meanwhile, and bob's calls go through again once the reads answer.
#[tokio::test]
async fn bridge_calls_count_against_the_per_principal_call_limit() -> anyhow::Result<()> {
    let proxy = bridged("max_calls_per_principal = 2", "", &["--resources", "5"]).await?;
    let (alice, _) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE).await?;
    let (bob, _) = connect_http_with_token(&proxy.url, Era::Legacy, BOB).await?;
    call_json(&alice, "fx__hold_reads", json!({"on": true})).await?;
    let reads: Vec<_> = (0..2)
        .map(|i| {
            let bob = bob.peer().clone();
            let uri = format!("fx+fx://fx/item/{i}");
            tokio::spawn(async move { bob.call_tool(bridge_call("proxy_resources_read", json!({"uri": uri}))).await })
        })
        .collect();
    eventually(DEADLINE, "both of bob's bridge reads held upstream", || async {
        let stats = call_json(&alice, "fx__stats", json!({})).await.map_err(|e| e.to_string())?;
        if stats["reads_in_flight"] == 2 { Ok(()) } else { Err(format!("{stats}")) }
    })
    .await?;
    let search = || bridge_call("proxy_resources_search", json!({"query": "item"}));
    let refused = bob.call_tool(search()).await.expect_err("a third call of bob's is over the limit");
    assert!(refused.to_string().contains("server.max_calls_per_principal"), "{refused}");
    structured(&alice.call_tool(search()).await?).context("alice is served")?;
    call_json(&alice, "fx__hold_reads", json!({"on": false})).await?;
    for read in reads {
        let result = tokio::time::timeout(DEADLINE, read).await???;
        anyhow::ensure!(result.is_error != Some(true), "{result:?}");
    }
    structured(&bob.call_tool(search()).await?).context("bob's permits came back")?;
    Ok(())
}

/// A search examines at most `bridge.max_search_scan` listed resources per call; past that it
/// says so (`incomplete`, a `nextCursor`, a note naming the setting), and calls with the cursor
/// find the rest, each match once.
#[tokio::test]
async fn a_bridge_search_is_cut_at_its_scan_budget_and_says_so() -> anyhow::Result<()> {
    let proxy = bridged("page_size = 4", "max_search_scan = 10", &["--resources", "30", "--page-size", "7"]).await?;
    let (alice, _) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE).await?;
    let mut found = Vec::new();
    let mut cursor: Option<String> = None;
    let mut calls = 0;
    loop {
        let mut arguments = json!({"query": "/ITEM/", "limit": 1000});
        if let Some(cursor) = &cursor {
            arguments["cursor"] = json!(cursor);
        }
        let answer = structured(&alice.call_tool(bridge_call("proxy_resources_search", arguments)).await?)?;
        calls += 1;
        let matches = answer["resources"].as_array().context("resources")?;
        assert!(matches.len() <= 12, "at most three pages of four examined: {answer}");
        found.extend(matches.iter().filter_map(|r| r["uri"].as_str().map(str::to_owned)));
        if calls == 1 {
            assert_eq!(answer["incomplete"], true, "{answer}");
            assert!(answer["note"].as_str().is_some_and(|n| n.contains("bridge.max_search_scan")), "{answer}");
        }
        match answer["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
        anyhow::ensure!(calls < 20, "the search never ends");
    }
    let mut expected: Vec<String> = (0..30).map(|i| format!("fx+fx://fx/item/{i}")).collect();
    expected.sort();
    found.sort();
    assert_eq!(found, expected, "every item once, over {calls} calls");
    Ok(())
}

/// `server.max_subscriptions_per_principal` caps one principal's subscriptions across its
/// sessions and listen streams: past it a subscribe gets an error naming the setting, a listen
/// acknowledgement leaves out what does not fit, other principals are not affected, and an
/// unsubscribe frees a place.
#[tokio::test]
async fn subscriptions_are_capped_per_principal_across_sessions_and_listen_streams() -> anyhow::Result<()> {
    let server = "max_subscriptions_per_session = 3\nmax_subscriptions_per_principal = 4";
    let proxy =
        ProxyProcess::start_with(&config(server, &fixture_upstream("fx", &["--resources", "10"])), &[], &TOKENS)
            .await?;
    proxy.wait_up("fx", 1).await?;
    let item = |i: usize| format!("fx+fx://fx/item/{i}");
    let (first, _) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE).await?;
    let (second, _) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE).await?;
    for i in 0..3 {
        subscribe(&first, &item, i).await?;
    }
    let refused = subscribe(&first, &item, 3).await.expect_err("over the session's cap");
    assert!(refused.to_string().contains("server.max_subscriptions_per_session"), "{refused}");
    subscribe(&second, &item, 3).await?;
    let refused = subscribe(&second, &item, 4).await.expect_err("over the principal's cap");
    assert!(refused.to_string().contains("server.max_subscriptions_per_principal"), "{refused}");
    subscribe(&second, &item, 3).await.context("holding a held URI again is not a new subscription")?;

    let (bob, _) = connect_http_with_token(&proxy.url, Era::Legacy, BOB).await?;
    subscribe(&bob, &item, 4).await.context("another principal is not affected")?;

    let (modern, _) = connect_http_with_token(&proxy.url, Era::Modern, ALICE).await?;
    let filter =
        || SubscriptionFilter::builder().resources_list_changed().resource_subscriptions((5..8).map(item)).build();
    let full = modern.listen(filter()).await?;
    let acknowledged = full.acknowledged().resource_subscriptions.clone().unwrap_or_default();
    assert!(acknowledged.is_empty(), "no room left for alice: {acknowledged:?}");
    drop(full);

    unsubscribe(&first, &item(0)).await?;
    let (other, _) = connect_http_with_token(&proxy.url, Era::Modern, ALICE).await?;
    let listen = eventually(DEADLINE, "a listen stream with the freed place", || async {
        let stream = other.listen(filter()).await.map_err(|e| e.to_string())?;
        let held = stream.acknowledged().resource_subscriptions.clone().unwrap_or_default();
        if held.len() == 1 { Ok(stream) } else { Err(format!("acknowledged {held:?}")) }
    })
    .await?;
    let refused = subscribe(&second, &item, 9).await.expect_err("the listen stream took the freed place");
    assert!(refused.to_string().contains("server.max_subscriptions_per_principal"), "{refused}");
    drop(listen);
    Ok(())
}

/// A 2025 session's `resources/subscribe` of item `i`.
#[allow(deprecated)] // legacy-only by design: these are 2025 sessions
async fn subscribe(client: &FixtureClient, item: &dyn Fn(usize) -> String, i: usize) -> Result<(), rmcp::ServiceError> {
    client.subscribe(SubscribeRequestParams::new(item(i))).await
}

#[allow(deprecated)] // legacy-only by design: a 2025 session
async fn unsubscribe(client: &FixtureClient, uri: &str) -> Result<(), rmcp::ServiceError> {
    client.unsubscribe(UnsubscribeRequestParams::new(uri.to_owned())).await
}
