//! The audit trail end to end: the real proxy binary with `[audit] file`, a real fixture
//! upstream (one child shared by every principal, so reads are cached), real rmcp clients in both eras (a 2025 session and 2026-07-28 stateless requests,
//! both answered on the fast path for reads), static tokens and a JWT checked against a JWKS
//! served by the test, refused tokens over plain HTTP, a policy reload and a config reload
//! (SIGHUP). The file must hold exactly one event per call, prompt, read, subscription,
//! denial, refused token and reload of the script (counted by kind), no token or part of one,
//! and agree with `/metrics`. A second proxy with the fast path off shows the rmcp handler's
//! reads audited alike. Refusals before a request is served (caps, another principal's session,
//! 2026-07-28 headers that disagree with the body) are one event each.
//!
//! This module holds the tokens and the reading of the audit file the parts share: `trail`
//! (what served requests, denials, refused tokens and reloads write, in both eras, on the fast
//! path and off it), `refusals` (requests turned away before they were served, or past a cap).

mod refusals;
mod trail;

use std::collections::BTreeMap;
use std::path::Path;

use rmcp::model::{CallToolRequestParams, JsonObject};
use serde_json::{Value, json};

use crate::support::fixture::FixtureClient;
use crate::support::{DEADLINE, eventually};

const ALICE_TOKEN: &str = "alice-audit-tok-7c21e9f04b";
const BOB_TOKEN: &str = "bob-audit-tok-1d8a3f6e52";
const UNKNOWN_TOKEN: &str = "nobody-audit-tok-93b7c0d1a4";

/// Every event in the audit file (after those of the file rotated away, `<file>.1`).
fn events(path: &Path) -> anyhow::Result<Vec<Value>> {
    let mut text = std::fs::read_to_string(rotated(path)).unwrap_or_default();
    text += &std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|line| Ok(serde_json::from_str(line)?)).collect()
}

/// Where the test moves the audit file before a SIGHUP (log rotation).
fn rotated(path: &Path) -> std::path::PathBuf {
    path.with_extension("jsonl.1")
}

/// `event` (with its denial kind or refusal reason) → how many.
fn tally(events: &[Value]) -> BTreeMap<String, usize> {
    let mut tally = BTreeMap::new();
    for event in events {
        let detail = event["denied"].as_str().or(event["reason"].as_str());
        let key = match detail {
            Some(detail) => format!("{}:{detail}", event["event"].as_str().unwrap_or("?")),
            None => event["event"].as_str().unwrap_or("?").to_string(),
        };
        *tally.entry(key).or_default() += 1;
    }
    tally
}

/// Wait until the audit file's tally is `expected` (the writer flushes soon after each event).
async fn wait_tally(path: &Path, expected: &BTreeMap<String, usize>) -> anyhow::Result<Vec<Value>> {
    eventually(DEADLINE, "the audit file holds the expected events", || async {
        let found = events(path)?;
        match tally(&found) == *expected {
            true => Ok(found),
            false => Err(anyhow::anyhow!("found {:?}, expected {expected:?}", tally(&found))),
        }
    })
    .await
}

fn expect(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(key, count)| (key.to_string(), *count)).collect()
}

async fn call(client: &FixtureClient, tool: &str) -> bool {
    let params = CallToolRequestParams::new(tool.to_string()).with_arguments(JsonObject::new());
    client.call_tool(params).await.is_ok()
}

/// A POST of `initialize` with `authorization`; its HTTP status.
async fn post_initialize(url: &str, authorization: Option<&str>) -> anyhow::Result<u16> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let mut request =
        reqwest::Client::new().post(url).header("accept", "application/json, text/event-stream").json(&body);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    Ok(request.send().await?.status().as_u16())
}
