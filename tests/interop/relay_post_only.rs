//! A 2025 host that never opens the GET stream (many hosts only POST) hears its calls' log
//! messages: the proxy sends each on the response stream of the call it belongs to, before the
//! call's answer, at the host's `logging/setLevel`. Raw HTTP hosts (reqwest, no MCP client) that
//! only POST and an rmcp host with its GET stream open call the real Python SDK server's
//! `log_tagged` (tests/py/conformance_server.py) through the proxy at the same time: each hears
//! exactly its own calls' messages, once.

#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.

use anyhow::Context;
use rmcp::model::LoggingLevel;
use serde_json::{Value, json};

use super::relay::{Sent, call, host, logs_reach, next, proxy_in_front, tagged_logs};
use crate::support::fixture::DEADLINE;
use crate::support::raw_http::{LEGACY, initialize, initialized};

/// A 2025 host that only POSTs: every message it hears is on a response stream of its own.
struct PostOnlyHost {
    http: reqwest::Client,
    url: String,
    session: String,
    next_id: u64,
}

impl PostOnlyHost {
    /// `initialize`, `notifications/initialized` and, when given, `logging/setLevel`.
    async fn open(url: &str, level: Option<&str>) -> anyhow::Result<Self> {
        let http = reqwest::Client::new();
        let response =
            http.post(url).header("Accept", "application/json, text/event-stream").json(&initialize("post-only"));
        let response = tokio::time::timeout(DEADLINE, response.send()).await.context("no reply")??;
        let session = response.headers().get("mcp-session-id").context("no session")?.to_str()?.to_owned();
        let mut host = PostOnlyHost { http, url: url.to_owned(), session, next_id: 1 };
        host.post(initialized()).await?;
        if let Some(level) = level {
            let (_, answer) = host.request("logging/setLevel", json!({"level": level})).await?;
            anyhow::ensure!(answer.get("result").is_some(), "setLevel: {answer}");
        }
        Ok(host)
    }

    /// A request: the messages on its response stream before the answer, and the answer.
    async fn request(&mut self, method: &str, params: Value) -> anyhow::Result<(Vec<Value>, Value)> {
        let id = self.next_id;
        self.next_id += 1;
        let mut messages = self.post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await?;
        let answer = messages.pop().context("no answer")?;
        anyhow::ensure!(answer["id"] == id, "the stream ends with the answer: {answer}");
        anyhow::ensure!(messages.iter().all(|m| m.get("id").is_none()), "one answer: {messages:?}");
        Ok((messages, answer))
    }

    /// POST `body` in the session: the JSON-RPC messages of the reply, in order.
    async fn post(&self, body: Value) -> anyhow::Result<Vec<Value>> {
        let request = self
            .http
            .post(&self.url)
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", &self.session)
            .header("MCP-Protocol-Version", LEGACY)
            .json(&body);
        let response = tokio::time::timeout(DEADLINE, request.send()).await.context("no reply")??;
        anyhow::ensure!(response.status().is_success(), "{}", response.status());
        let body = tokio::time::timeout(DEADLINE, response.text()).await.context("the stream did not end")??;
        if let Ok(one) = serde_json::from_str::<Value>(&body) {
            return Ok(vec![one]);
        }
        let data = body.lines().filter_map(|line| line.strip_prefix("data:")).map(str::trim);
        Ok(data.filter(|data| !data.is_empty()).map(serde_json::from_str).collect::<Result<_, _>>()?)
    }

    /// `log_tagged` with `tag`: the log messages its stream carried (their data), its result.
    async fn log_tagged(&mut self, tag: &str) -> anyhow::Result<Vec<Sent>> {
        let params = json!({"name": "py__log_tagged", "arguments": {"tag": tag}});
        let (messages, answer) = self.request("tools/call", params).await?;
        let text = answer["result"]["content"][0]["text"].as_str().unwrap_or_default();
        anyhow::ensure!(text == format!("logged {tag}"), "{answer}");
        let logs = messages.iter().map(|message| {
            anyhow::ensure!(message["method"] == "notifications/message", "only log messages: {message}");
            Ok(Sent::Log(message["params"]["data"].as_str().context("data")?.to_owned()))
        });
        logs.collect()
    }
}

/// Two hosts that only POST (one at `info`, one with no level) and an rmcp host with its GET
/// stream open (at `warning`) call `log_tagged` together, five rounds: each POST-only host finds
/// its own call's messages at its level on the call's stream before the result, the rmcp host
/// hears its own once each, and nobody hears another's.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_that_never_opens_the_get_stream_hears_its_calls_log_messages_on_the_calls_stream() -> anyhow::Result<()>
{
    let (_upstream, proxy) = proxy_in_front().await?;
    let together = std::sync::Arc::new(tokio::sync::Barrier::new(1));
    let (carol, mut carol_heard) = host(&proxy.url, "carol", false, &together).await?;
    logs_reach(&carol, &mut carol_heard).await?;
    carol.set_level(rmcp::model::SetLevelRequestParams::new(LoggingLevel::Warning)).await?;
    let mut alice = PostOnlyHost::open(&proxy.url, Some("info")).await?;
    let mut bob = PostOnlyHost::open(&proxy.url, None).await?;
    for round in 0..5 {
        let (alice_tag, bob_tag, carol_tag) =
            (format!("alice-{round}"), format!("bob-{round}"), format!("carol-{round}"));
        let carol_args = json!({"tag": carol_tag});
        let (alice_heard, bob_heard, carol_result) = tokio::join!(
            alice.log_tagged(&alice_tag),
            bob.log_tagged(&bob_tag),
            call(&carol, "py__log_tagged", carol_args)
        );
        assert_eq!(alice_heard?, tagged_logs(&alice_tag, Some(LoggingLevel::Info)), "round {round}");
        assert_eq!(bob_heard?, tagged_logs(&bob_tag, None), "round {round}");
        carol_result?;
        let expected = tagged_logs(&carol_tag, Some(LoggingLevel::Warning));
        assert_eq!(next(&mut carol_heard, expected.len()).await?, expected, "round {round}");
    }
    // Carol's own last call marks the end: anything sent to her before is read by then.
    call(&carol, "py__log_tagged", json!({"tag": "carol-end"})).await?;
    let expected = tagged_logs("carol-end", Some(LoggingLevel::Warning));
    assert_eq!(next(&mut carol_heard, expected.len()).await?, expected, "nothing else, nothing twice");
    carol.cancel().await?;
    Ok(())
}
