//! Tools and prompts under policies, pagination, an upstream leaving, a 2026-07-28 upstream,
//! progress and completion: the same real peers and hosts as the parent module.

use super::*;
use crate::support::peers::error_but_name;
use crate::support::proxy::{alice_and_bob_policies, alice_and_bob_under_policies};

/// The `[server]`, `[auth]` (alice and bob) and `[policies]` sections.
fn access_config(policies: &std::path::Path, page_size: usize, upstreams: &str) -> String {
    alice_and_bob_under_policies(&format!("page_size = {page_size}"), policies, upstreams)
}

/// alice may use everything but `get-env`, `args-prompt` and the blob resources; bob only
/// `echo`. A denied tool is not listed and its call answers exactly like an unknown tool;
/// a resource link a policy denies is dropped from a tool's result; `policy explain` says why.
#[tokio::test]
async fn a_denied_tool_is_invisible_and_its_call_answers_like_an_unknown_tool() -> anyhow::Result<()> {
    let alice = "allow = [\"**\"]\n\
                 deny = [\"tool://ev/get-env\", \"prompt://ev/args-prompt\", \"ev+demo://resource/dynamic/blob/**\"]\n";
    let policies = alice_and_bob_policies(alice, "allow = [\"tool://ev/echo\"]\n")?;
    let config = access_config(policies.path(), 100, &everything_upstream("ev", ""));
    let proxy = start_proxy(&config, &TOKENS, &["ev"]).await?;

    let bearer = format!("Authorization: Bearer {ALICE_TOKEN}");
    let ops = [
        "tools_all",
        "prompts_all",
        "call:ev__get-env:{}",
        "call:ev__no-such-tool:{}",
        "prompt:ev__args-prompt:{\"city\": \"Porto\"}",
        "prompt:ev__no-such-prompt:{}",
        "call:ev__get-resource-links:{\"count\": 4}",
    ];
    let answers = python_ops(&proxy.url, "legacy", &[&bearer], &ops).await?;
    let tools = answers[0]["names"].as_array().context("names")?;
    assert!(!tools.contains(&json!("ev__get-env")) && tools.contains(&json!("ev__echo")), "{tools:?}");
    assert!(!answers[1]["names"].as_array().context("prompts")?.contains(&json!("ev__args-prompt")));
    let unknown = error_but_name;
    assert_eq!(unknown(&answers[2], "ev__get-env"), unknown(&answers[3], "ev__no-such-tool"));
    assert_eq!(unknown(&answers[4], "ev__args-prompt"), unknown(&answers[5], "ev__no-such-prompt"));
    assert_eq!(answers[2]["error"]["code"], -32602);
    // server-everything's links alternate text and blob resources: the blob ones are denied.
    let links: Vec<String> = answers[6]["result"]["content"]
        .as_array()
        .context("content")?
        .iter()
        .filter_map(|b| b["uri"].as_str().map(str::to_owned))
        .collect();
    assert!(!links.is_empty(), "{}", answers[6]);
    assert_eq!(links, ["ev+demo://resource/dynamic/text/2", "ev+demo://resource/dynamic/text/4"]);

    let bearer = format!("Authorization: Bearer {BOB_TOKEN}");
    let answers = python_ops(&proxy.url, "2026-07-28", &[&bearer], &["tools_all", "prompts_all"]).await?;
    assert_eq!(answers[0]["names"], json!(["ev__echo"]));
    assert_eq!(answers[1]["names"], json!([]));

    let explained = std::process::Command::new(PROXY_BIN)
        .args(["policy", "explain", "--config"])
        .arg(proxy.dir.path().join("config.toml"))
        .args(["--principal", "alice", "tool://ev/get-env", "tool://ev/echo"])
        .output()?;
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(text.contains("denied by alice.toml: tool://ev/get-env"), "{text}");
    assert!(text.contains("allowed by alice.toml: **"), "{text}");
    Ok(())
}

/// Two upstreams, pages of 5: the Python client follows the proxy's cursors across both and
/// gets every tool once, in upstream name order.
#[tokio::test]
async fn tools_and_prompts_page_across_two_upstreams() -> anyhow::Result<()> {
    let config =
        format!("[server]\npage_size = 5\n\n{}{}", everything_upstream("ev-b", ""), everything_upstream("ev-a", ""));
    let proxy = start_proxy(&config, &[], &["ev-a", "ev-b"]).await?;
    for mode in ["legacy", "2026-07-28"] {
        let answers = python_ops(&proxy.url, mode, &[], &["tools_all", "prompts_all"]).await?;
        let names: Vec<&str> =
            answers[0]["names"].as_array().context("names")?.iter().filter_map(Value::as_str).collect();
        let unique: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), names.len(), "{mode}: no tool twice");
        let split = names.iter().position(|n| n.starts_with("ev-b__")).context("ev-b's tools")?;
        assert!(split > 0 && names[..split].iter().all(|n| n.starts_with("ev-a__")), "{mode}: {names:?}");
        assert!(names[split..].iter().all(|n| n.starts_with("ev-b__")), "{mode}: {names:?}");
        assert_eq!(split * 2, names.len(), "{mode}: as many of each");
        let pages = answers[0]["pages"].as_u64().context("pages")? as usize;
        assert_eq!(pages, names.len().div_ceil(5), "{mode}");
        let prompts = answers[1]["names"].as_array().context("prompts")?;
        assert!(prompts.contains(&json!("ev-a__simple-prompt")) && prompts.contains(&json!("ev-b__simple-prompt")));
    }
    Ok(())
}

/// An upstream that leaves takes its tools and prompts along: a host hears
/// `tools/list_changed` and `prompts/list_changed`, after which the list no longer has them.
#[tokio::test]
async fn an_upstream_leaving_tells_hosts_tools_and_prompts_changed_after_the_list_has_it() -> anyhow::Result<()> {
    let everything = crate::support::peers::spawn_everything_http();
    let config = format!(
        "{}{}",
        everything_upstream("stays", ""),
        crate::support::proxy::http_upstream("leaves", &everything.url, "reconnect_max = \"60s\"")
    );
    let proxy = start_proxy(&config, &[], &["stays", "leaves"]).await?;
    let (client, mut heard) = host(&proxy.url, Era::Legacy, None).await?;
    let before = client.list_all_tools().await?;
    assert!(before.iter().any(|t| t.name.starts_with("leaves__")));
    drop(everything);
    wait_heard(&mut heard, &Heard::ToolsListChanged).await?;
    let after = client.list_all_tools().await?;
    assert!(
        after.iter().all(|t| !t.name.starts_with("leaves__")),
        "{:?}",
        after.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    assert!(after.iter().any(|t| t.name.starts_with("stays__")));
    wait_heard(&mut heard, &Heard::PromptsListChanged).await?;
    Ok(())
}

/// A 2026-07-28-only upstream (the rmcp fixture): its tools list and answer through the proxy
/// for hosts of both eras, and a tool that changes a resource makes `updated` reach a host
/// subscribed through the proxy.
#[tokio::test]
async fn a_2026_07_28_upstreams_tools_serve_hosts_of_both_eras() -> anyhow::Result<()> {
    let config = crate::support::proxy::fixture_upstream("fx", &["--era", "modern"]);
    let proxy = start_proxy(&config, &[], &["fx"]).await?;
    let (modern, _) = host(&proxy.url, Era::Modern, None).await?;
    let tools = modern.list_all_tools().await?;
    assert!(tools.iter().any(|t| t.name == "fx__touch") && tools.iter().any(|t| t.name == "fx__stats"));
    let stats = modern.call_tool(CallToolRequestParams::new("fx__stats")).await?;
    assert_ne!(stats.is_error, Some(true), "{stats:?}");

    let (legacy, mut heard) = host(&proxy.url, Era::Legacy, None).await?;
    let uri = "fx+fx://fx/item/1";
    #[allow(deprecated)]
    legacy.subscribe(SubscribeRequestParams::new(uri)).await?;
    // Returns once the upstream acknowledged the subscription (see the memory test).
    legacy.read_resource(rmcp::model::ReadResourceRequestParams::new(uri)).await?;
    let touch = json!({"uri": "fx://fx/item/1"}).as_object().cloned().expect("object");
    legacy.call_tool(CallToolRequestParams::new("fx__touch").with_arguments(touch)).await?;
    wait_heard(&mut heard, &Heard::Updated(uri.into())).await
}

/// A host that asks for progress on server-everything's long-running tool reads every step
/// before the result, with its own token (rmcp gives the proxy's upstream request a token of its
/// own; the proxy maps it back): rmcp hosts of both eras (what they read logged in wire order),
/// and the Python SDK's `progress_callback` in both modes. The tool sends its last step right
/// before its result, so the two race on every call.
#[tokio::test]
async fn progress_of_a_long_running_tool_reaches_the_host_before_its_result() -> anyhow::Result<()> {
    let proxy = start_proxy(&everything_upstream("ev", ""), &[], &["ev"]).await?;
    let steps = json!([1.0, 2.0, 3.0]);
    for era in [Era::Legacy, Era::Modern] {
        let (client, log) = crate::support::wire::connect(&proxy.url, era, None).await?;
        for call in 0..3 {
            let args = json!({"duration": 0.15, "steps": 3}).as_object().cloned().expect("object");
            let params = CallToolRequestParams::new("ev__trigger-long-running-operation").with_arguments(args);
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
            let handle = client.send_request_with_option(request, PeerRequestOptions::no_options()).await?;
            let (id, token) = (handle.id.clone(), handle.progress_token.clone());
            tokio::time::timeout(DEADLINE, handle.await_response()).await??;
            let seen = log.progress_before_answer(&token, &id).context("the answer was not read")?;
            assert_eq!(json!(seen), steps, "{era:?} host, call {call}");
        }
    }
    let op = "call_progress:ev__trigger-long-running-operation:{\"duration\": 0.15, \"steps\": 3}";
    for mode in ["legacy", "2026-07-28"] {
        let answers = python_ops(&proxy.url, mode, &[], &[op, op, op]).await?;
        for answer in answers {
            assert_eq!(answer["progress"], steps, "{mode}: {answer}");
        }
    }
    Ok(())
}

/// `completion/complete` for a namespaced resource template goes to its upstream (which
/// completes positive integers only); a template the caller may not see answers like a
/// template that does not exist, and a prompt it may not use like a prompt that does not.
#[tokio::test]
async fn completion_for_a_namespaced_template_is_routed_and_policy_checked() -> anyhow::Result<()> {
    let alice = "allow = [\"**\"]\ndeny = [\"ev+demo://resource/dynamic/blob/**\"]\n";
    let policies = alice_and_bob_policies(alice, "allow = [\"tool://ev/echo\"]\n")?;
    let config = access_config(policies.path(), 100, &everything_upstream("ev", ""));
    let proxy = start_proxy(&config, &TOKENS, &["ev"]).await?;
    let (client, _) = host(&proxy.url, Era::Legacy, Some(ALICE_TOKEN)).await?;
    let complete = |template: &str, value: &str| {
        let argument = ArgumentInfo::new("resourceId", value);
        CompleteRequestParams::new(Reference::for_resource(template), argument)
    };
    let text = "ev+demo://resource/dynamic/text/{resourceId}";
    let answer = client.complete(complete(text, "7")).await?;
    assert_eq!(answer.completion.values, ["7"]);
    assert!(client.complete(complete(text, "x")).await?.completion.values.is_empty());
    let denied = client.complete(complete("ev+demo://resource/dynamic/blob/{resourceId}", "7")).await;
    let missing = client.complete(complete("ev+demo://resource/nothing/{resourceId}", "7")).await;
    let (denied, missing) = (denied.expect_err("denied"), missing.expect_err("missing"));
    assert_eq!(error_code(&denied), error_code(&missing), "{denied} / {missing}");

    // bob may use none of ev's prompts: completing one answers exactly like an unknown prompt.
    let (bob, _) = host(&proxy.url, Era::Legacy, Some(BOB_TOKEN)).await?;
    let complete_prompt = |name: &str| {
        let argument = ArgumentInfo::new("city", "Par");
        bob.complete(CompleteRequestParams::new(Reference::for_prompt(name), argument))
    };
    let shape = |error: rmcp::ServiceError, name: &str| (error_code(&error), error.to_string().replace(name, "NAME"));
    let denied = complete_prompt("ev__args-prompt").await.expect_err("denied prompt");
    let unknown = complete_prompt("ev__no-such-prompt").await.expect_err("unknown prompt");
    assert_eq!(shape(denied, "ev__args-prompt"), shape(unknown, "ev__no-such-prompt"));
    Ok(())
}
