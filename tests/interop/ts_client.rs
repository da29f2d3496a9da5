//! The TypeScript SDK v2 client (npm `@modelcontextprotocol/client`, pinned in
//! `.ci/install-peers.sh`) as a real host of the proxy, in both eras it speaks: the 2025
//! `initialize` handshake (`legacy`) and 2026-07-28 (pinned, no fallback). The host is
//! `tests/ts/client.mjs`, driven with ops on its command line, one JSON line back per op.
//! Upstreams: the real server-everything and server-memory, and `tests/py/linking_server.py`
//! (PyPI `mcp`) for a tool whose `structuredContent` names its own resources.

use std::collections::BTreeSet;
use std::process::Stdio;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::support::DEADLINE;
use crate::support::peers::{
    ensure_installed, error_but_name, everything_upstream, memory_upstream, parse_json_lines, py_script, python,
    repo_root,
};
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, toml_str};

/// The eras the TypeScript SDK v2 client speaks, as `client.mjs --mode` values.
const MODES: [&str; 2] = ["legacy", "2026-07-28"];

const ALICE_TOKEN: &str = "alice-tok-7d3b1f9e5a2c4086";
const BOB_TOKEN: &str = "bob-tok-4e8a2d6c0f1b3957";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];

/// Run tests/ts/client.mjs against `url` in `mode`; one JSON value per op.
async fn ts_ops(url: &str, mode: &str, headers: &[&str], ops: &[&str]) -> anyhow::Result<Vec<Value>> {
    ensure_installed();
    let mut command = tokio::process::Command::new("node");
    command.arg(repo_root().join("tests/ts/client.mjs")).args(["--url", url, "--mode", mode]);
    for header in headers {
        command.args(["--header", header]);
    }
    command.args(ops).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let output = tokio::time::timeout(DEADLINE * 3, command.output()).await.context("client.mjs timed out")??;
    let lines = parse_json_lines(&output.stdout);
    if !output.status.success() || lines.len() != ops.len() {
        bail!(
            "client.mjs ({mode}) exited {}: {} answers for {} ops; stdout:\n{}\nstderr:\n{}",
            output.status,
            lines.len(),
            ops.len(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(lines)
}

fn names(answer: &Value, key: &str) -> anyhow::Result<Vec<String>> {
    let list = answer[key].as_array().with_context(|| format!("{key} in {answer}"))?;
    Ok(list.iter().filter_map(Value::as_str).map(str::to_owned).collect())
}

fn texts(result: &Value) -> String {
    let content = result["content"].as_array().cloned().unwrap_or_default();
    content.iter().filter_map(|block| block["text"].as_str()).collect::<Vec<_>>().join("\n")
}

/// Tools, prompts and completion of server-everything and server-memory through the proxy,
/// from the TypeScript client in both eras: namespaced names paged across both upstreams,
/// calls (including a structured-output tool the client validates against its
/// `outputSchema`), a prompt with arguments, completion for a prompt argument and for a
/// resource template, and an unknown tool answered as such.
#[tokio::test]
async fn ts_client_lists_calls_gets_and_completes_across_two_upstreams_in_both_eras() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = format!(
        "[server]\npage_size = 5\n\n{}{}",
        memory_upstream("mem", &dir.path().join("memory.jsonl"), ""),
        everything_upstream("ev", "")
    );
    let proxy = ProxyProcess::start_with_offerings(&config, &[], &["ev", "mem"]).await?;
    for mode in MODES {
        let ops = [
            "era",
            "tools_all",
            "prompts_all",
            "call:ev__echo:{\"message\": \"through the proxy\"}",
            "call:ev__get-sum:{\"a\": 40, \"b\": 2}",
            "call:ev__get-structured-content:{\"location\": \"Chicago\"}",
            "prompt:ev__args-prompt:{\"city\": \"Lisbon\", \"state\": \"Lisboa\"}",
            "complete:ev__completable-prompt:department:E",
            "complete_template:ev+demo://resource/dynamic/text/{resourceId}:resourceId:1",
            "call:ev__no-such-tool:{}",
            "call:mem__read_graph:{}",
        ];
        let answers = ts_ops(&proxy.url, mode, &[], &ops).await?;
        let expected_era = if mode == "legacy" { "legacy" } else { "modern" };
        assert_eq!(answers[0]["era"], expected_era, "{mode}: {}", answers[0]);
        let tools = names(&answers[1], "names")?;
        let unique: BTreeSet<&String> = tools.iter().collect();
        assert_eq!(unique.len(), tools.len(), "{mode}: no tool twice: {tools:?}");
        let split = tools.iter().position(|n| n.starts_with("mem__")).context("mem's tools")?;
        assert!(split > 0 && tools[..split].iter().all(|n| n.starts_with("ev__")), "{mode}: {tools:?}");
        assert!(tools[split..].iter().all(|n| n.starts_with("mem__")), "{mode}: {tools:?}");
        for expected in ["ev__echo", "ev__get-sum", "ev__toggle-subscriber-updates", "mem__create_entities"] {
            assert!(tools.iter().any(|t| t == expected), "{mode}: {expected} missing from {tools:?}");
        }
        assert_eq!(answers[1]["pages"].as_u64(), Some(tools.len().div_ceil(5) as u64), "{mode}: pages of 5");
        assert!(names(&answers[2], "names")?.contains(&"ev__args-prompt".to_string()), "{mode}");
        assert!(texts(&answers[3]["result"]).contains("through the proxy"), "{mode}: {}", answers[3]);
        assert!(texts(&answers[4]["result"]).contains("42"), "{mode}: {}", answers[4]);
        // No URIs in it: passed exactly as sent, and the client validated it.
        let weather = json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82});
        assert_eq!(answers[5]["result"]["structuredContent"], weather, "{mode}: {}", answers[5]);
        let prompt = answers[6]["result"].to_string();
        assert!(prompt.contains("Lisbon"), "{mode}: {prompt}");
        let values = names(&answers[7], "values")?;
        assert!(!values.is_empty() && values.iter().all(|v| v.starts_with('E')), "{mode}: {values:?}");
        assert!(names(&answers[8], "values")?.contains(&"1".to_string()), "{mode}: {}", answers[8]);
        assert_eq!(answers[9]["error"]["code"], -32602, "{mode}: {}", answers[9]);
        assert_ne!(answers[10]["result"]["isError"], true, "{mode}: {}", answers[10]);
    }
    Ok(())
}

/// Resources through the TypeScript client in each era (a fresh proxy per era, as
/// server-everything's `toggle-subscriber-updates` flips per upstream session): listed, read and
/// subscribed (2025: `resources/subscribe`; 2026-07-28: `subscriptions/listen`, acknowledged).
/// `toggle-subscriber-updates` called through the proxy makes server-everything notify the
/// proxy's session, and `updated` reaches the host; server-memory's `create_entities` makes
/// `updated` for its knowledge graph reach it too.
#[tokio::test]
async fn ts_client_reads_subscribes_and_hears_updated_after_tool_calls_in_both_eras() -> anyhow::Result<()> {
    let doc = "ev+demo://resource/static/document/architecture.md";
    let graph = "mem+memory://knowledge-graph";
    let entities = json!({"entities": [{"name": "proxy", "entityType": "service", "observations": ["forwards"]}]});
    let create = format!("call:mem__create_entities:{entities}");
    for mode in MODES {
        let dir = tempfile::tempdir()?;
        let config = format!(
            "{}{}",
            everything_upstream("ev", ""),
            memory_upstream("mem", &dir.path().join("memory.jsonl"), "")
        );
        let proxy = ProxyProcess::start_with_offerings(&config, &[], &["ev", "mem"]).await?;
        let (subscribe_doc, subscribe_graph) = (format!("subscribe:{doc}"), format!("subscribe:{graph}"));
        let (wait_doc, wait_graph) = (format!("wait_updated:{doc}"), format!("wait_updated:{graph}"));
        let (read_doc, read_graph) = (format!("read:{doc}"), format!("read:{graph}"));
        let ops = [
            "resources_all",
            "templates_all",
            &read_doc,
            &subscribe_doc,
            &subscribe_graph,
            // Read after subscribing: the proxy's upstream subscription is in place by then.
            &read_graph,
            "call:ev__toggle-subscriber-updates:{}",
            &wait_doc,
            &create,
            &wait_graph,
            &read_graph,
        ];
        let answers = ts_ops(&proxy.url, mode, &[], &ops).await?;
        let uris = names(&answers[0], "uris")?;
        assert!(uris.iter().any(|u| u == doc) && uris.iter().any(|u| u == graph), "{mode}: {uris:?}");
        let templates = names(&answers[1], "uriTemplates")?;
        assert!(templates.contains(&"ev+demo://resource/dynamic/text/{resourceId}".to_string()), "{mode}");
        assert_eq!(answers[2]["result"]["contents"][0]["uri"], doc, "{mode}: {}", answers[2]);
        if mode != "legacy" {
            assert_eq!(answers[3]["honored"], json!([doc]), "{mode}: {}", answers[3]);
            assert_eq!(answers[4]["honored"], json!([graph]), "{mode}: {}", answers[4]);
        }
        assert_eq!(answers[7]["heard"], true, "{mode}: server-everything's update reaches the host");
        assert_ne!(answers[8]["result"]["isError"], true, "{mode}: {}", answers[8]);
        assert_eq!(answers[9]["heard"], true, "{mode}: server-memory's update reaches the host");
        assert!(answers[10].to_string().contains("forwards"), "{mode}: {}", answers[10]);
    }
    Ok(())
}

/// Under policies the TypeScript client cannot tell a denied tool or prompt from a missing one:
/// not listed, and a call or get answers exactly like an unknown name, in both eras.
#[tokio::test]
async fn ts_client_sees_a_denied_tool_or_prompt_exactly_like_an_unknown_one() -> anyhow::Result<()> {
    let alice = "allow = [\"**\"]\n\
                 deny = [\"tool://ev/get-env\", \"prompt://ev/args-prompt\"]\n";
    let policies = alice_and_bob_policies(alice, "allow = [\"tool://ev/echo\"]\n")?;
    let proxy = ProxyProcess::start_with_offerings(
        &alice_and_bob_under_policies("", policies.path(), &everything_upstream("ev", "")),
        &TOKENS,
        &["ev"],
    )
    .await?;
    let unknown = error_but_name;
    for mode in MODES {
        let bearer = format!("Authorization: Bearer {ALICE_TOKEN}");
        let ops = [
            "tools_all",
            "prompts_all",
            "call:ev__get-env:{}",
            "call:ev__no-such-tool:{}",
            "prompt:ev__args-prompt:{\"city\": \"Porto\"}",
            "prompt:ev__no-such-prompt:{}",
            "complete:ev__args-prompt:city:P",
            "call:ev__echo:{\"message\": \"allowed\"}",
        ];
        let answers = ts_ops(&proxy.url, mode, &[&bearer], &ops).await?;
        let tools = names(&answers[0], "names")?;
        assert!(!tools.contains(&"ev__get-env".into()) && tools.contains(&"ev__echo".into()), "{mode}: {tools:?}");
        assert!(!names(&answers[1], "names")?.contains(&"ev__args-prompt".into()), "{mode}");
        assert_eq!(answers[2]["error"]["code"], -32602, "{mode}: {}", answers[2]);
        assert_eq!(unknown(&answers[2], "ev__get-env"), unknown(&answers[3], "ev__no-such-tool"), "{mode}");
        assert!(answers[4]["error"].is_object(), "{mode}: {}", answers[4]);
        assert_eq!(unknown(&answers[4], "ev__args-prompt"), unknown(&answers[5], "ev__no-such-prompt"), "{mode}");
        assert_eq!(unknown(&answers[6], "ev__args-prompt"), unknown(&answers[5], "ev__no-such-prompt"), "{mode}");
        assert!(texts(&answers[7]["result"]).contains("allowed"), "{mode}: {}", answers[7]);

        let bearer = format!("Authorization: Bearer {BOB_TOKEN}");
        let answers = ts_ops(&proxy.url, mode, &[&bearer], &["tools_all", "prompts_all"]).await?;
        assert_eq!(answers[0]["names"], json!(["ev__echo"]), "{mode}");
        assert_eq!(answers[1]["names"], json!([]), "{mode}");
    }
    Ok(())
}

/// A real upstream (the Python SDK) whose tool returns `structuredContent` naming its own
/// resources: through the proxy those strings come back namespaced (and read through it),
/// other strings untouched, the mirroring text block rewritten alike, and the TypeScript client
/// validates the result against the tool's `outputSchema`. A hit naming a resource the caller
/// may not read is removed: the answer is the one given when that resource does not exist.
#[tokio::test]
async fn structured_content_uris_are_namespaced_and_still_validate_at_the_ts_client() -> anyhow::Result<()> {
    let alice = "allow = [\"**\"]\ndeny = [\"docs+py://doc/secret/**\"]\n";
    let policies = alice_and_bob_policies(alice, "allow = [\"**\"]\n")?;
    let upstream = format!(
        "[[upstreams]]\nname = \"docs\"\ncommand = {}\nargs = [{}]\nprotocol = \"2025-11-25\"\n\n",
        toml_str(&python().display().to_string()),
        toml_str(&py_script("linking_server.py").display().to_string())
    );
    let proxy = ProxyProcess::start_with_offerings(
        &alice_and_bob_under_policies("", policies.path(), &upstream),
        &TOKENS,
        &["docs"],
    )
    .await?;
    let alice = format!("Authorization: Bearer {ALICE_TOKEN}");
    let bob = format!("Authorization: Bearer {BOB_TOKEN}");
    let ops = ["tools_all", "call:docs__find_docs:{}", "call:docs__find_docs:{\"include_secret\": true}"];
    for mode in MODES {
        let answers = ts_ops(&proxy.url, mode, &[&alice], &ops).await?;
        assert!(answers[0]["tools"][0]["outputSchema"].is_object(), "{mode}: {}", answers[0]);
        let result = &answers[1]["result"];
        let structured = &result["structuredContent"];
        assert_eq!(structured["best"], "docs+py://doc/public/1", "{mode}: {result}");
        let uris: Vec<&Value> =
            structured["matches"].as_array().context("matches")?.iter().map(|m| &m["uri"]).collect();
        assert_eq!(uris, [&json!("docs+py://doc/public/1"), &json!("docs+py://doc/public/2")], "{mode}");
        assert_eq!(structured["homepage"], "https://example.com/docs", "{mode}: not a resource of the upstream");
        assert_eq!(structured["summary"], "py://doc/public/1 is the best match", "{mode}: prose stays");
        let mirror: Value = serde_json::from_str(&texts(result)).context("the text block is JSON")?;
        assert_eq!(&mirror, structured, "{mode}: the text block mirrors the rewritten value");
        // A secret among the matches: alice gets the answer she gets when it does not exist.
        assert_eq!(answers[2]["result"], *result, "{mode}: the secret's hit is gone, nothing else");
        // bob may read it: namespaced like the others.
        let answers = ts_ops(&proxy.url, mode, &[&bob], &[ops[0], ops[2], "read:docs+py://doc/secret/1"]).await?;
        assert_eq!(answers[1]["result"]["structuredContent"]["matches"][2]["uri"], "docs+py://doc/secret/1");
        assert_eq!(answers[2]["result"]["contents"][0]["text"], "Secret 1 text", "{mode}: {}", answers[2]);
    }
    Ok(())
}
