//! Never invent freshness: in front of real servers that state no lifetime (npm
//! server-everything's dynamic text, npm server-memory's graph — both 2025-era, both advertising
//! `subscribe` while notifying only some changes), the default config keeps nothing, so a read
//! through the proxy is as fresh as a read of the upstream itself; a 2026-07-28 host is told
//! `ttlMs: 0` and `cacheScope: private`, so its own client cache (on by default in rmcp and in
//! the PyPI `mcp` client) keeps nothing either. Trusting an upstream's notifications is the
//! operator's explicit word.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context;
use rmcp::model::{CacheScope, ReadResourceResult};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientServiceExt, RoleClient};
use serde_json::{Value, json};

use crate::support::fixture::{self, DEADLINE, Era, EventRecorder, FixtureClient};
use crate::support::peers::{memory_stdio_command, memory_upstream, py_client, spawn_everything_http};
use crate::support::proxy::{ProxyProcess, http_upstream};
use crate::support::reads::{read, text};

/// Pairs of reads compared of each server.
const PAIRS: usize = 16;
/// Distinct seconds the dynamic text's direct reads span at least, so a read kept past its second
/// would show through the proxy.
const SECONDS_SPANNED: usize = 4;
/// One pair of reads this often: a sampling rate, not synchronisation (each pair is sequential).
const PAIR_EVERY: Duration = Duration::from_millis(250);
const GRAPH: &str = "memory://knowledge-graph";
const DYNAMIC_TEXT: &str = "demo://resource/dynamic/text/1";

/// Paired reads, direct and through the proxy, alternating, of both servers at once (16 pairs
/// of each, the dynamic text's over at least 4 distinct seconds, the graph's each after a write): server-everything's dynamic text (the time of the read, to the second) read through
/// the proxy always lies between the direct reads around it; a server-memory graph written by
/// another process (a second server-memory on the same file) always shows, through the proxy,
/// exactly the entities a direct read just showed. Neither upstream states a lifetime, so none
/// may show. The proxy's host is a 2026-07-28 rmcp client with its own response cache on.
#[tokio::test]
async fn paired_reads_never_differ_beyond_the_upstreams_own_lifetime() -> anyhow::Result<()> {
    let everything = spawn_everything_http();
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("memory.jsonl");
    std::fs::write(&file, "")?;
    let config = format!("{}{}", http_upstream("web", &everything.url, ""), memory_upstream("mem", &file, ""));
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("web", 1).await?;
    proxy.wait_up("mem", 1).await?;

    let (text_pairs, graph_pairs) =
        tokio::try_join!(dynamic_text_pairs(&proxy, &everything.url), graph_pairs(&proxy, &file))?;
    // Positive controls: both loops really compared.
    assert!(text_pairs >= PAIRS && graph_pairs >= PAIRS, "only {text_pairs} / {graph_pairs} pairs (want {PAIRS})");
    Ok(())
}

/// A 2026-07-28 Python host with the SDK's default client cache: its own `mem__create_entities`
/// through the proxy shows at once in its next read of the graph — after a read of the graph
/// before the write, which a cache told a lifetime would have kept. Both reads, and the
/// resource list, are told `ttlMs: 0`, `cacheScope: private` (server-memory says neither).
#[tokio::test]
async fn a_python_host_with_its_default_cache_reads_its_own_write_at_once() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("memory.jsonl");
    std::fs::write(&file, "")?;
    let proxy = ProxyProcess::start(&memory_upstream("mem", &file, "")).await?;
    proxy.wait_up("mem", 1).await?;

    let entity = json!({"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote this"]}]});
    let read = format!("read:mem+{GRAPH}");
    let call = format!("call:mem__create_entities:{entity}");
    let args = ["--url", &proxy.url, "--mode", "2026-07-28", "--client-cache", "default"];
    let ops = [read.as_str(), call.as_str(), read.as_str(), "list_all"];
    let all: Vec<&str> = args.iter().copied().chain(ops).collect();
    let mut command = tokio::process::Command::from(py_client(&all));
    command.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output()).await??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "client.py failed ({}):\n{stderr}", output.status);
    let lines = crate::support::peers::parse_json_lines(&output.stdout);
    anyhow::ensure!(lines.len() == ops.len(), "client.py printed {lines:?}; stderr:\n{stderr}");

    let names = |line: &Value| -> anyhow::Result<BTreeSet<String>> {
        let text = line["contents"][0]["text"].as_str().with_context(|| format!("no text: {line}"))?;
        entity_names(text)
    };
    assert!(names(&lines[0])?.is_empty(), "the graph starts empty: {}", lines[0]);
    assert!(lines[1].get("error").is_none() && lines[1]["result"]["isError"] != true, "the write: {}", lines[1]);
    assert_eq!(names(&lines[2])?, BTreeSet::from(["Ada".to_string()]), "the host reads its own write at once");
    for line in [&lines[0], &lines[2], &lines[3]] {
        assert_eq!((&line["ttlMs"], &line["cacheScope"]), (&json!(0), &json!("private")), "told: {line}");
    }
    Ok(())
}

/// Trusting notifications is the operator's word: server-everything configured with
/// `trust_notifications` (it acknowledges the subscription but will not notify this change)
/// keeps its dynamic text until an `updated` — and still tells the host `ttlMs: 0` (for the
/// read and for the resource and tool lists), since the host would hear none of the proxy's
/// invalidations.
#[tokio::test]
async fn a_trusted_upstream_is_kept_by_the_proxy_but_never_by_the_host() -> anyhow::Result<()> {
    let everything = spawn_everything_http();
    let trusted = "[upstreams.cache]\ntrust_notifications = true";
    let proxy = ProxyProcess::start(&http_upstream("trusted", &everything.url, trusted)).await?;
    proxy.wait_up("trusted", 1).await?;
    let host = host_with_its_own_cache(&proxy.url).await?;
    let uri = format!("trusted+{DYNAMIC_TEXT}");
    let first = read(&host, &uri).await?;
    assert_eq!((first.ttl_ms, first.cache_scope), (Some(0), Some(CacheScope::Private)), "told no lifetime");
    let (resources, tools) = (host.list_resources(None).await?, host.list_tools(None).await?);
    let lists = [(resources.ttl_ms, resources.cache_scope), (tools.ttl_ms, tools.cache_scope)];
    assert_eq!(lists, [(Some(0), Some(CacheScope::Private)); 2], "lists: told no lifetime either");

    let (direct, _) = fixture::connect_http(&everything.url, Era::Legacy).await?;
    crate::support::eventually(DEADLINE, "server-everything's own answer moves on", || async {
        let now = read(&direct, DYNAMIC_TEXT).await?;
        if text(&now) != text(&first) { Ok(()) } else { Err(anyhow::anyhow!("still {:?}", text(&first))) }
    })
    .await?;
    assert_eq!(text(&read(&host, &uri).await?), text(&first), "trusted and acknowledged: kept by the proxy");
    Ok(())
}

/// Alternate direct and proxied reads of server-everything's dynamic text, [`PAIRS`] of them
/// and over [`SECONDS_SPANNED`] distinct seconds at least; returns how many proxied reads were
/// compared.
async fn dynamic_text_pairs(proxy: &ProxyProcess, direct_url: &str) -> anyhow::Result<usize> {
    let (direct, _) = fixture::connect_http(direct_url, Era::Legacy).await?;
    let host = host_with_its_own_cache(&proxy.url).await?;
    let proxied_uri = format!("web+{DYNAMIC_TEXT}");
    let (mut pairs, mut seconds) = (0, BTreeSet::new());
    let mut every = tokio::time::interval(PAIR_EVERY);
    let mut before = time_of_read(&read(&direct, DYNAMIC_TEXT).await?)?;
    while pairs < PAIRS || seconds.len() < SECONDS_SPANNED {
        every.tick().await;
        let proxied = read(&host, &proxied_uri).await?;
        let after = time_of_read(&read(&direct, DYNAMIC_TEXT).await?)?;
        let through = time_of_read(&proxied)?;
        // Seconds of the day, so a pair across midnight still compares.
        let from_before = |t: u32| (t + 86_400 - before) % 86_400;
        assert!(
            from_before(through) <= from_before(after),
            "pair {pairs}: through the proxy {:?}, but the direct reads around it said {before} s and {after} s",
            text(&proxied)
        );
        assert_eq!((proxied.ttl_ms, proxied.cache_scope), (Some(0), Some(CacheScope::Private)), "pair {pairs}");
        seconds.insert(after);
        (before, pairs) = (after, pairs + 1);
    }
    Ok(pairs)
}

/// Alternate writes by another process, direct reads and proxied reads of a server-memory graph,
/// [`PAIRS`] of them; returns how many proxied reads were compared.
async fn graph_pairs(proxy: &ProxyProcess, file: &std::path::Path) -> anyhow::Result<usize> {
    let (program, args) = memory_stdio_command();
    let mut command = tokio::process::Command::new(program);
    command.args(args).env("MEMORY_FILE_PATH", file).kill_on_drop(true);
    let (recorder, _) = EventRecorder::new();
    let other = recorder.serve_with_lifecycle(TokioChildProcess::new(command)?, Era::Legacy.lifecycle());
    let other: FixtureClient = tokio::time::timeout(DEADLINE, other).await??;
    other.set_response_cache_config(rmcp::service::ClientCacheConfig::disabled()).await;
    let host = host_with_its_own_cache(&proxy.url).await?;
    let proxied_uri = format!("mem+{GRAPH}");
    let mut pairs = 0;
    let mut every = tokio::time::interval(PAIR_EVERY);
    while pairs < PAIRS {
        every.tick().await;
        let entity = json!({"name": format!("e{pairs}"), "entityType": "thing", "observations": []});
        call_text(&other, "create_entities", json!({"entities": [entity]})).await?;
        let direct = entity_names(text(&read(&other, GRAPH).await?))?;
        let proxied = read(&host, &proxied_uri).await?;
        assert!(direct.contains(&format!("e{pairs}")), "pair {pairs}: the other process's write: {direct:?}");
        assert_eq!(entity_names(text(&proxied))?, direct, "pair {pairs}: through the proxy vs directly");
        assert_eq!((proxied.ttl_ms, proxied.cache_scope), (Some(0), Some(CacheScope::Private)), "pair {pairs}");
        pairs += 1;
    }
    Ok(pairs)
}

/// A 2026-07-28 rmcp host as it comes out of the box: its response cache honours what it is told.
async fn host_with_its_own_cache(url: &str) -> anyhow::Result<FixtureClient> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).reinit_on_expired_session(false);
    let (recorder, _) = EventRecorder::new();
    let connecting =
        recorder.serve_with_lifecycle(StreamableHttpClientTransport::from_config(config), Era::Modern.lifecycle());
    Ok(tokio::time::timeout(DEADLINE, connecting).await??)
}

/// Call a server-memory tool; its reply must not be an error.
async fn call_text(peer: &rmcp::service::Peer<RoleClient>, tool: &str, arguments: Value) -> anyhow::Result<()> {
    let Value::Object(arguments) = arguments else { anyhow::bail!("arguments must be an object") };
    let params = rmcp::model::CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    let result = peer.call_tool(params).await?;
    anyhow::ensure!(result.is_error != Some(true), "{tool} failed: {result:?}");
    Ok(())
}

/// The entity names of a server-memory graph as its resource renders it.
fn entity_names(graph: &str) -> anyhow::Result<BTreeSet<String>> {
    let graph: Value = serde_json::from_str(graph).with_context(|| format!("not a graph: {graph}"))?;
    let entities = graph["entities"].as_array().with_context(|| format!("no entities: {graph}"))?;
    Ok(entities.iter().filter_map(|e| e["name"].as_str().map(String::from)).collect())
}

/// The time of day (seconds) server-everything wrote into its dynamic text
/// (`Resource 1: … created at 6:45:12 AM`, or a 24-hour `06:45:12`).
fn time_of_read(result: &ReadResourceResult) -> anyhow::Result<u32> {
    let text = text(result);
    let at = text.rsplit_once(" at ").with_context(|| format!("no time in {text:?}"))?.1.trim();
    // Node puts a space, or a narrow no-break space, before AM/PM.
    let (clock, meridiem) = at.split_once(char::is_whitespace).map_or((at, ""), |(clock, rest)| (clock, rest.trim()));
    let parts: Vec<u32> = clock.split(':').map(str::parse).collect::<Result<_, _>>().with_context(|| at.to_string())?;
    let [hours, minutes, seconds] = parts[..] else { anyhow::bail!("not a time: {at:?}") };
    let hours = match meridiem {
        "" => hours,
        "AM" => hours % 12,
        "PM" => hours % 12 + 12,
        other => anyhow::bail!("not AM/PM: {other:?} in {at:?}"),
    };
    Ok(hours * 3600 + minutes * 60 + seconds)
}
