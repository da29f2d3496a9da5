//! A hostile host with a valid token, on tools: it cannot reach another host's progress or
//! cancel another host's call (same request id, same progress token, another principal, either
//! era); a tool it may not use answers exactly like one that does not exist and is named in no
//! log line at info or above, and is counted under the policy file that decided it; completion
//! for a template it may not see answers like an unknown template; an MCP App's UI resource it
//! may not read is named nowhere. The proxy binary (its logs are read) in front of the fixture
//! over stdio.

use anyhow::Context;
use rmcp::model::{
    ArgumentInfo, CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientNotification, ClientRequest, CompleteRequestParams, Reference, RequestId, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RequestHandle, RoleClient, ServiceError};
use serde_json::json;

use crate::support::eventually;
use crate::support::exposition::Exposition;
use crate::support::fixture::{DEADLINE, Era, error_code};
use crate::support::proxy::{ProxyProcess, fixture_upstream, toml_str};
use crate::support::wire::{self, WireHost, WireLog};

const ALICE_TOKEN: &str = "alice-tok-6a2d9e4c1f7b3058";
const BOB_TOKEN: &str = "bob-tok-0c5e8a3f7d1b9264";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];

/// alice: everything. bob: the fixture's tools but `stats`, its resources but the `sized` template
/// and the `widget` tool's UI resource.
const ALICE: &str = "principals = [\"alice\"]\nallow = [\"**\"]\n";
const BOB: &str = "principals = [\"bob\"]\nallow = [\"tool://fx/*\", \"fx+**\"]\n\
                   deny = [\"tool://fx/stats\", \"fx+fx://fx/sized/**\", \"fx+ui://fx/widget\"]\n";
const POLICY_DENIALS: &str = "mcp_proxy_policy_denials_total";

/// The proxy binary with alice and bob by bearer token, in front of the fixture (stdio).
async fn start() -> anyhow::Result<(ProxyProcess, tempfile::TempDir)> {
    start_with("").await
}

/// The same with `server` as the `[server]` section's body.
async fn start_with(server: &str) -> anyhow::Result<(ProxyProcess, tempfile::TempDir)> {
    let policies = tempfile::tempdir()?;
    std::fs::write(policies.path().join("alice.toml"), ALICE)?;
    std::fs::write(policies.path().join("bob.toml"), BOB)?;
    let config = format!(
        "[server]\n{server}\n\n[auth]\nmode = \"bearer\"\n\n\
         [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n\
         [policies]\ndir = {}\n\n{}",
        toml_str(policies.path().to_str().expect("utf-8 path")),
        fixture_upstream("fx", &["--apps-tool"])
    );
    let proxy = ProxyProcess::start_with_offerings(&config, &TOKENS, &["fx"]).await?;
    Ok((proxy, policies))
}

/// Send `fx__progress` with these arguments; the handle (its id and progress token).
async fn send_progress_call(
    host: &WireHost,
    arguments: serde_json::Value,
) -> anyhow::Result<RequestHandle<RoleClient>> {
    let arguments = arguments.as_object().cloned().context("an object")?;
    let params = CallToolRequestParams::new("fx__progress").with_arguments(arguments);
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    Ok(host.send_request_with_option(request, PeerRequestOptions::no_options()).await?)
}

/// Call `fx__progress` for `count` steps; the steps read before the result, and all read.
async fn progress_call(host: &WireHost, log: &WireLog, count: u64) -> anyhow::Result<(Vec<f64>, usize)> {
    let handle = send_progress_call(host, json!({"count": count})).await?;
    let (id, token) = (handle.id.clone(), handle.progress_token.clone());
    tokio::time::timeout(DEADLINE, handle.await_response()).await??;
    let before = log.progress_before_answer(&token, &id).context("no answer read")?;
    let all = log.reads().iter().filter(|read| matches!(read, wire::Read::Progress(..))).count();
    Ok((before, all))
}

/// Two principals' hosts, whose calls carry the same request id and the same progress token
/// (each a fresh rmcp client), call at once: each reads its own steps and nothing of the other's.
#[tokio::test]
async fn the_same_request_id_and_progress_token_from_two_hosts_never_cross() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    for era in [Era::Legacy, Era::Modern] {
        let (alice, alice_log) = wire::connect(&proxy.url, era, Some(ALICE_TOKEN)).await?;
        let (bob, bob_log) = wire::connect(&proxy.url, era, Some(BOB_TOKEN)).await?;
        let (a, b) = tokio::join!(progress_call(&alice, &alice_log, 7), progress_call(&bob, &bob_log, 11));
        let steps = |n: u64| (1..=n).map(|s| s as f64).collect::<Vec<_>>();
        assert_eq!(a?, (steps(7), 7), "{era:?}: alice");
        assert_eq!(b?, (steps(11), 11), "{era:?}: bob");
    }
    Ok(())
}

/// A host that sends `notifications/cancelled` for another host's request id (same id as its
/// own would be; another principal) cancels nothing: the other call answers.
#[tokio::test]
async fn a_host_cannot_cancel_another_hosts_call() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    for era in [Era::Legacy, Era::Modern] {
        let (bob, bob_log) = wire::connect(&proxy.url, Era::Legacy, Some(BOB_TOKEN)).await?;
        let handle = send_progress_call(&bob, json!({"count": 1, "hold_ms": 2000})).await?;
        let (id, token) = (handle.id.clone(), handle.progress_token.clone());
        // The call is in flight upstream once its first step was read.
        eventually(DEADLINE, "bob's first step", || async {
            let read = bob_log.reads().iter().any(|r| matches!(r, wire::Read::Progress(_, p) if *p == 1.0));
            if read { Ok(()) } else { Err("not yet") }
        })
        .await?;
        let (alice, _) = wire::connect(&proxy.url, era, Some(ALICE_TOKEN)).await?;
        cancel(&alice, id.clone()).await?;
        // One round trip after the notice: it has been taken.
        alice.list_tools(None).await?;
        let answer = tokio::time::timeout(DEADLINE, handle.await_response()).await.context("bob's call hung")??;
        assert!(matches!(answer, ServerResult::CallToolResult(_)), "{era:?}: {answer:?}");
        assert_eq!(bob_log.progress_before_answer(&token, &id), Some(vec![1.0]), "{era:?}");
    }
    Ok(())
}

async fn cancel(host: &WireHost, id: RequestId) -> anyhow::Result<()> {
    let params = CancelledNotificationParam::new(Some(id), Some("hostile".into()));
    let notification = CancelledNotification::new(params);
    Ok(host.send_notification(ClientNotification::CancelledNotification(notification)).await?)
}

/// An error as the host sees it with the name it sent replaced, so two can be compared whole.
fn shape(error: &ServiceError, name: &str) -> (Option<i32>, String) {
    (error_code(error), error.to_string().replace(name, "<NAME>"))
}

/// A tool bob may not use answers exactly like a tool that does not exist, in both eras, and no
/// log line at info or above names it; completion for a template bob may not see answers like
/// one that does not exist.
#[tokio::test]
async fn a_denied_tool_or_template_answers_like_an_unknown_one_and_is_not_logged() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    for era in [Era::Legacy, Era::Modern] {
        let (bob, _) = wire::connect(&proxy.url, era, Some(BOB_TOKEN)).await?;
        let listed = bob.list_all_tools().await?;
        assert!(listed.iter().all(|tool| tool.name != "fx__stats"), "{era:?}: listed");
        let call = |name: &str| bob.call_tool(CallToolRequestParams::new(name.to_owned()));
        let denied = call("fx__stats").await.expect_err("denied");
        let unknown = call("fx__no-such-tool").await.expect_err("unknown");
        assert_eq!(shape(&denied, "fx__stats"), shape(&unknown, "fx__no-such-tool"), "{era:?}");
        assert_eq!(error_code(&denied), Some(-32602), "{era:?}: {denied}");

        let complete = |template: &str| {
            let argument = ArgumentInfo::new("bytes", "1");
            bob.complete(CompleteRequestParams::new(Reference::for_resource(template), argument))
        };
        let (denied_template, unknown_template) = ("fx+fx://fx/sized/{bytes}", "fx+fx://fx/nothing/{bytes}");
        let denied = complete(denied_template).await.expect_err("denied template");
        let unknown = complete(unknown_template).await.expect_err("unknown template");
        assert_eq!(shape(&denied, denied_template), shape(&unknown, unknown_template), "{era:?}");
    }
    // The proxy's own lines. (rmcp's `response error` line, off in the shipped filter
    // `rmcp::service=error`, echoes the error the host got: the same for denied and unknown.)
    let loud = |line: &&String| {
        line.contains("\"target\":\"mcp_resource_proxy")
            && ["\"INFO\"", "\"WARN\"", "\"ERROR\""].iter().any(|level| line.contains(level))
    };
    let names = |line: &&String| line.contains("stats") || line.contains("sized");
    let naming: Vec<String> = proxy.logs().iter().filter(loud).filter(names).cloned().collect();
    assert!(naming.is_empty(), "log lines at info or above name what bob may not use: {naming:#?}");
    Ok(())
}

/// A tool bob may not use is counted under the policy file whose rule decided it, `bob.toml`,
/// when it is left out of his list and when his call is refused; nothing is counted under
/// `default` (no rule matched), which decided neither.
#[tokio::test]
async fn a_tool_denial_is_counted_under_the_policy_file_that_decided_it() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    let (bob, _) = wire::connect(&proxy.url, Era::Modern, Some(BOB_TOKEN)).await?;
    let listed = bob.list_all_tools().await?;
    assert!(listed.iter().all(|tool| tool.name != "fx__stats"), "listed: {listed:?}");
    bob.call_tool(CallToolRequestParams::new("fx__stats")).await.expect_err("denied");
    let decided_by = |action: &'static str, file: &'static str| [("action", action), ("policy", file)];
    proxy.wait_metric(POLICY_DENIALS, &decided_by("use", "bob.toml"), |count| count == 1.0).await?;
    proxy.wait_metric(POLICY_DENIALS, &decided_by("list", "bob.toml"), |count| count >= 1.0).await?;
    let metrics = Exposition::parse(&proxy.admin_get("/metrics").await?)?;
    for action in ["use", "list"] {
        assert_eq!(metrics.value(POLICY_DENIALS, &decided_by(action, "default")), Some(0.0), "{action}");
    }
    Ok(())
}

/// An MCP App names its UI resource in `_meta` twice — nested (`ui.resourceUri`) and flat
/// (`ui/resourceUri`, as the ext-apps SDK still sends it) — in its tool's definition, on a
/// result's block and on the result: alice gets both namespaced, bob, who may not read it,
/// gets neither, and nothing he is sent names it, in both eras.
#[tokio::test]
async fn an_apps_ui_resource_is_namespaced_and_judged_in_both_spellings() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    for era in [Era::Legacy, Era::Modern] {
        for (token, expected) in [(ALICE_TOKEN, json!("fx+ui://fx/widget")), (BOB_TOKEN, json!(null))] {
            let (host, _) = wire::connect(&proxy.url, era, Some(token)).await?;
            let listed = host.list_all_tools().await?;
            let widget = listed.iter().find(|tool| tool.name == "fx__widget").context("fx__widget listed")?;
            let widget = serde_json::to_value(widget)?;
            let result = serde_json::to_value(host.call_tool(CallToolRequestParams::new("fx__widget")).await?)?;
            for meta in [&widget["_meta"], &result["_meta"], &result["content"][0]["_meta"]] {
                let nested = meta["ui"].get("resourceUri").cloned().unwrap_or_default();
                let flat = meta.get("ui/resourceUri").cloned().unwrap_or_default();
                assert_eq!((&nested, &flat), (&expected, &expected), "{era:?}: {meta}");
            }
            let sent = format!("{widget}{result}");
            assert_eq!(sent.contains("ui://fx/widget"), !expected.is_null(), "{era:?}: {sent}");
        }
    }
    Ok(())
}

/// One principal's hosts may hold `server.max_calls_per_principal` calls in flight: the next
/// is refused at once with an error naming the limit, another principal is served meanwhile, and
/// the permits come back when the calls answer.
#[tokio::test]
async fn calls_in_flight_are_bounded_per_principal() -> anyhow::Result<()> {
    let (proxy, _policies) = start_with("max_calls_per_principal = 2").await?;
    let (bob, bob_log) = wire::connect(&proxy.url, Era::Legacy, Some(BOB_TOKEN)).await?;
    let (bob_modern, _) = wire::connect(&proxy.url, Era::Modern, Some(BOB_TOKEN)).await?;
    let held = [
        send_progress_call(&bob, json!({"count": 1, "hold_ms": 1500})).await?,
        send_progress_call(&bob, json!({"count": 1, "hold_ms": 1500})).await?,
    ];
    eventually(DEADLINE, "both held calls in flight", || async {
        let steps = bob_log.reads().iter().filter(|r| matches!(r, wire::Read::Progress(..))).count();
        if steps == 2 { Ok(()) } else { Err(format!("{steps} steps read")) }
    })
    .await?;
    let quick = || {
        let arguments = json!({"count": 0}).as_object().cloned().expect("object");
        CallToolRequestParams::new("fx__progress").with_arguments(arguments)
    };
    let refused = bob_modern.call_tool(quick()).await.expect_err("over the limit");
    assert!(refused.to_string().contains("server.max_calls_per_principal"), "{refused}");
    let (alice, _) = wire::connect(&proxy.url, Era::Legacy, Some(ALICE_TOKEN)).await?;
    alice.call_tool(quick()).await?;
    for handle in held {
        tokio::time::timeout(DEADLINE, handle.await_response()).await??;
    }
    bob_modern.call_tool(quick()).await?;
    Ok(())
}
