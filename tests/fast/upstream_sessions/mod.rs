//! Upstream sessions per principal and per host, against a real Python SDK server over stdio
//! (`tests/py/session_server.py`: one process is one session, which remembers one value and
//! tells its process id). alice's and bob's hosts (rmcp, over streamable HTTP) on a
//! per-principal upstream never see each other's value, neither by a call nor by a read, and
//! each gets a process of its own, while a shared upstream of the same server serves both from
//! one process. Per host: two hosts of one principal are separate; a host session's process
//! ends when the host session ends, and declares upstream only what its host declared; past
//! `max_sessions` (or `max_sessions_per_principal`) a call gets a clear error at once.
//! Subscriptions (a 2025 host's `resources/subscribe`, a 2026-07-28 listen stream) are held on
//! the subscriber's own session: alice hears her session's `updated`, never bob's, and a
//! shared upstream's change reaches both.
//!
//! A session's own tool list, listed to its own hosts only, is `tool_lists`.

mod tool_lists;

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, ReadResourceRequestParams, ResourceContents, ServerNotification, SubscribeRequestParams,
    SubscriptionFilter,
};
use rmcp::service::{Peer, RunningService, Subscription};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

use crate::support::eventually;
use crate::support::fixture::{DEADLINE, Era, FixtureEvent, connect_http_with_token};
use crate::support::peers::{py_script, python};
use crate::support::proxy::{
    ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, toml_str, write_config,
};

const ALICE_TOKEN: &str = "alice-tok-sessions-71d3";
const BOB_TOKEN: &str = "bob-tok-sessions-2a9e";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];

type Host = RunningService<RoleClient, ()>;

/// A `[[upstreams]]` entry running the session server over stdio, with `extra` lines.
fn session_upstream(name: &str, extra: &str) -> String {
    let program = toml_str(python().to_str().expect("utf-8 path"));
    let script = toml_str(py_script("session_server.py").to_str().expect("utf-8 path"));
    format!("[[upstreams]]\nname = \"{name}\"\ncommand = {program}\nargs = [{script}]\n{extra}\n\n")
}

async fn start(upstreams: &[(&str, &str)]) -> anyhow::Result<(ProxyProcess, tempfile::TempDir)> {
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let entries: String = upstreams.iter().map(|(name, extra)| session_upstream(name, extra)).collect();
    let config = alice_and_bob_under_policies("", policies.path(), &entries);
    let names: Vec<&str> = upstreams.iter().map(|(name, _)| *name).collect();
    let proxy = ProxyProcess::start_with_offerings(&config, &TOKENS, &names).await?;
    Ok((proxy, policies))
}

/// A 2025 host session of the principal whose bearer token is `token`.
async fn host(url: &str, token: &str) -> anyhow::Result<Host> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    Ok(tokio::time::timeout(DEADLINE, ().serve(transport)).await.context("connect")??)
}

/// Call `name` with `arguments`: its text, or the error's message.
async fn call(host: &Host, name: &str, arguments: serde_json::Value) -> anyhow::Result<Result<String, String>> {
    let params =
        CallToolRequestParams::new(name.to_string()).with_arguments(arguments.as_object().cloned().unwrap_or_default());
    let answer = tokio::time::timeout(DEADLINE, host.peer().call_tool(params)).await.context("the call hung")?;
    Ok(match answer {
        Ok(result) => match result.content.first().and_then(|c| c.as_text()) {
            Some(text) => Ok(text.text.clone()),
            None => anyhow::bail!("no text in {result:?}"),
        },
        Err(rmcp::ServiceError::McpError(error)) => Err(error.message.to_string()),
        Err(other) => return Err(other.into()),
    })
}

async fn text(host: &Host, name: &str, arguments: serde_json::Value) -> anyhow::Result<String> {
    call(host, name, arguments).await?.map_err(|error| anyhow::anyhow!("{name}: {error}"))
}

async fn read(host: &Host, uri: &str) -> anyhow::Result<String> {
    let read = host.peer().read_resource(ReadResourceRequestParams::new(uri.to_string()));
    let result = tokio::time::timeout(DEADLINE, read).await.context("the read hung")??;
    match result.contents.first() {
        Some(ResourceContents::TextResourceContents { text, .. }) => Ok(text.clone()),
        other => anyhow::bail!("no text in {other:?}"),
    }
}

/// Has process `pid` ended (gone, or a zombie)?
fn ended(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |stat| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
}

#[tokio::test(flavor = "multi_thread")]
async fn per_principal_sessions_keep_alice_and_bob_apart_while_a_shared_upstream_serves_both_from_one()
-> anyhow::Result<()> {
    let (proxy, _policies) =
        start(&[("per", "session = \"per-principal\""), ("shared", "session = \"shared\"")]).await?;
    let (alice, bob) = (host(&proxy.url, ALICE_TOKEN).await?, host(&proxy.url, BOB_TOKEN).await?);

    assert_eq!(text(&alice, "per__remember", json!({"value": "alice's"})).await?, "kept alice's");
    assert_eq!(text(&bob, "per__recall", json!({})).await?, "nothing", "bob saw alice's session");
    assert_eq!(read(&bob, "per+session://value").await?, "nothing", "bob read alice's session");
    assert_eq!(text(&bob, "per__remember", json!({"value": "bob's"})).await?, "kept bob's");
    assert_eq!(text(&alice, "per__recall", json!({})).await?, "alice's");
    // Reads go on the reader's own session and are never served from another's.
    for _ in 0..2 {
        assert_eq!(read(&alice, "per+session://value").await?, "alice's");
        assert_eq!(read(&bob, "per+session://value").await?, "bob's");
    }
    // One process per principal, neither of them the shared connection's.
    let (alice_pid, bob_pid) = (text(&alice, "per__pid", json!({})).await?, text(&bob, "per__pid", json!({})).await?);
    assert_ne!(alice_pid, bob_pid);
    let second = host(&proxy.url, ALICE_TOKEN).await?;
    assert_eq!(text(&second, "per__pid", json!({})).await?, alice_pid, "a principal's hosts share its session");
    assert_eq!(text(&second, "per__recall", json!({})).await?, "alice's");
    // A principal's session declares what the shared connection does (its hosts vary).
    assert_eq!(text(&alice, "per__declared", json!({})).await?, "sampling,elicitation");
    let status = proxy.upstream_status("per").await?;
    assert_eq!(status["sessions"], 2, "{status}");
    proxy.wait_metric("mcp_proxy_upstream_sessions", &[("upstream", "per")], |n| n == 2.0).await?;

    // The shared upstream: one session for everyone.
    assert_eq!(text(&alice, "shared__remember", json!({"value": "alice's"})).await?, "kept alice's");
    assert_eq!(text(&bob, "shared__recall", json!({})).await?, "alice's");
    assert_eq!(text(&alice, "shared__pid", json!({})).await?, text(&bob, "shared__pid", json!({})).await?);
    assert_eq!(proxy.upstream_status("shared").await?["sessions"], 0);
    for host in [alice, bob, second] {
        host.cancel().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn per_host_sessions_are_one_child_per_host_session_bounded_and_end_with_it() -> anyhow::Result<()> {
    let settings = "session = \"per-host\"\nmax_sessions = 3\nmax_sessions_per_principal = 2";
    let (proxy, _policies) = start(&[("hs", settings)]).await?;
    let (first, second) = (host(&proxy.url, ALICE_TOKEN).await?, host(&proxy.url, ALICE_TOKEN).await?);
    assert_eq!(text(&first, "hs__remember", json!({"value": "first"})).await?, "kept first");
    assert_eq!(text(&second, "hs__recall", json!({})).await?, "nothing", "two hosts of alice are separate");
    let first_pid = text(&first, "hs__pid", json!({})).await?;
    assert_ne!(first_pid, text(&second, "hs__pid", json!({})).await?);
    assert_eq!(text(&first, "hs__recall", json!({})).await?, "first");
    // Its host declared neither sampling nor elicitation, so neither does its session.
    assert_eq!(text(&first, "hs__declared", json!({})).await?, "none");

    // Past either bound: a clear error at once, never a wait.
    let third = host(&proxy.url, ALICE_TOKEN).await?;
    let refused = call(&third, "hs__recall", json!({})).await?.expect_err("alice's third, past 2 per principal");
    assert!(refused.contains("`max_sessions_per_principal`") && refused.contains("hs"), "{refused}");
    let bob = host(&proxy.url, BOB_TOKEN).await?;
    assert_eq!(text(&bob, "hs__recall", json!({})).await?, "nothing");
    let bob_again = host(&proxy.url, BOB_TOKEN).await?;
    let refused = call(&bob_again, "hs__recall", json!({})).await?.expect_err("a fourth, past max_sessions = 3");
    assert!(refused.contains("`max_sessions`") && refused.contains("hs"), "{refused}");

    // A host session ends: its child ends, and its place is free again.
    first.cancel().await?;
    eventually(DEADLINE, "the first host's upstream child ends", || async {
        if ended(&first_pid) { Ok(()) } else { Err(format!("process {first_pid} still runs")) }
    })
    .await?;
    proxy.wait_metric("mcp_proxy_upstream_sessions", &[("upstream", "hs")], |n| n == 2.0).await?;
    assert_eq!(text(&third, "hs__recall", json!({})).await?, "nothing");
    for host in [second, third, bob, bob_again] {
        host.cancel().await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_unused_for_session_idle_is_closed_and_opened_afresh_on_next_use() -> anyhow::Result<()> {
    let (proxy, _policies) = start(&[("per", "session = \"per-principal\"\nsession_idle = \"1s\"")]).await?;
    let alice = host(&proxy.url, ALICE_TOKEN).await?;
    assert_eq!(text(&alice, "per__remember", json!({"value": "soon gone"})).await?, "kept soon gone");
    let pid = text(&alice, "per__pid", json!({})).await?;
    eventually(DEADLINE, "the idle session's child ends", || async {
        if ended(&pid) { Ok(()) } else { Err(format!("process {pid} still runs")) }
    })
    .await?;
    proxy.wait_metric("mcp_proxy_upstream_sessions", &[("upstream", "per")], |n| n == 0.0).await?;
    assert_eq!(text(&alice, "per__recall", json!({})).await?, "nothing", "a new session");
    assert_ne!(text(&alice, "per__pid", json!({})).await?, pid);
    alice.cancel().await?;
    Ok(())
}

/// Call `name` on `peer` with `arguments`: its text (an error fails).
async fn said(peer: &Peer<RoleClient>, name: &str, arguments: serde_json::Value) -> anyhow::Result<String> {
    let params =
        CallToolRequestParams::new(name.to_string()).with_arguments(arguments.as_object().cloned().unwrap_or_default());
    let result = tokio::time::timeout(DEADLINE, peer.call_tool(params)).await.context("the call hung")??;
    let text = result.content.first().and_then(|c| c.as_text()).with_context(|| format!("no text in {result:?}"))?;
    Ok(text.text.clone())
}

/// The URI of the next `updated` on a listen stream.
async fn next_updated(stream: &mut Subscription) -> anyhow::Result<String> {
    loop {
        match tokio::time::timeout(DEADLINE, stream.next()).await.context("no updated on the listen stream")?? {
            Some(ServerNotification::ResourceUpdatedNotification(n)) => return Ok(n.params.uri),
            Some(_) => continue,
            None => anyhow::bail!("the listen stream ended"),
        }
    }
}

/// alice (a 2025 host: `resources/subscribe`) and bob (a 2026-07-28 listen stream) hold the
/// same URI of a per-principal upstream and of a shared one. Each per-principal hold is made on
/// its principal's own session, so alice hears `updated` when her session's value changes and
/// never when bob's does (and the other way round), with no `updated` at subscribe time; a
/// change on the shared upstream reaches both. The shared upstream's change is the marker: what
/// a host hears before it would be what leaked.
#[tokio::test(flavor = "multi_thread")]
async fn per_principal_subscriptions_hear_only_their_own_session_while_a_shared_upstream_tells_both()
-> anyhow::Result<()> {
    let (proxy, _policies) =
        start(&[("per", "session = \"per-principal\""), ("shared", "session = \"shared\"")]).await?;
    let (per, shared) = ("per+session://value", "shared+session://value");
    let (alice, mut alice_heard) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE_TOKEN).await?;
    for uri in [per, shared] {
        #[allow(deprecated)]
        alice.subscribe(SubscribeRequestParams::new(uri)).await?;
    }
    let (bob, _) = connect_http_with_token(&proxy.url, Era::Modern, BOB_TOKEN).await?;
    let filter = SubscriptionFilter::builder().resource_subscriptions([per.to_string(), shared.to_string()]).build();
    let mut bob_heard = bob.listen(filter).await?;
    let acknowledged = bob_heard.acknowledged().resource_subscriptions.clone().unwrap_or_default();
    assert_eq!(acknowledged.len(), 2, "{acknowledged:?}");
    // Both sessions and the shared connection hold the URI upstream.
    let applied = |upstream: &str| format!("\"upstream\":\"{upstream}\"");
    proxy.wait_log_count(&["upstream subscriptions applied", &applied("per"), "\"watched\":1"], 2).await?;
    proxy.wait_log(&["upstream subscriptions applied", &applied("shared"), "\"watched\":1"]).await?;
    assert_eq!(proxy.upstream_status("per").await?["sessions"], 2, "a session each, opened by the subscription");
    assert_eq!(proxy.upstream_status("shared").await?["sessions"], 0);

    // The marker first: nothing was said at subscribe time.
    assert_eq!(said(alice.peer(), "shared__remember", json!({"value": "s1"})).await?, "kept s1");
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(shared.into()), "a false initial updated");
    assert_eq!(next_updated(&mut bob_heard).await?, shared, "a false initial updated");

    // alice's session changes: she hears it, bob does not.
    assert_eq!(said(alice.peer(), "per__remember", json!({"value": "a1"})).await?, "kept a1");
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(per.into()));
    assert_eq!(said(alice.peer(), "shared__remember", json!({"value": "s2"})).await?, "kept s2");
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(shared.into()));
    assert_eq!(next_updated(&mut bob_heard).await?, shared, "bob heard of alice's session");

    // bob's session changes: he hears it, alice does not.
    assert_eq!(said(bob.peer(), "per__remember", json!({"value": "b1"})).await?, "kept b1");
    assert_eq!(next_updated(&mut bob_heard).await?, per);
    assert_eq!(said(bob.peer(), "shared__remember", json!({"value": "s3"})).await?, "kept s3");
    assert_eq!(next_updated(&mut bob_heard).await?, shared);
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(shared.into()), "alice heard of bob's session");
    assert_eq!(said(alice.peer(), "per__recall", json!({})).await?, "a1");
    assert_eq!(said(bob.peer(), "per__recall", json!({})).await?, "b1");

    // alice lets go: her session no longer tells her.
    let released = ["upstream subscriptions applied", &applied("per"), "\"watched\":0"];
    let before = proxy.matching(&released).len();
    #[allow(deprecated)]
    alice.unsubscribe(rmcp::model::UnsubscribeRequestParams::new(per)).await?;
    proxy.wait_log_count(&released, before + 1).await?;
    assert_eq!(said(alice.peer(), "per__remember", json!({"value": "a2"})).await?, "kept a2");
    assert_eq!(said(alice.peer(), "shared__remember", json!({"value": "s4"})).await?, "kept s4");
    assert_eq!(alice_heard.next().await?, FixtureEvent::Updated(shared.into()), "unsubscribed, still told");
    assert_eq!(next_updated(&mut bob_heard).await?, shared);
    bob_heard.cancel().await?;
    alice.cancel().await?;
    bob.cancel().await?;
    Ok(())
}

/// A host's `logging/setLevel` reaches its own upstream session before its next call: a
/// per-host session is told its host's level, a per-principal one only a level more verbose
/// than it was told (its hosts' own filters still apply); the shared connection is never told.
#[tokio::test(flavor = "multi_thread")]
#[allow(deprecated)]
async fn a_hosts_log_level_reaches_its_own_upstream_session_before_its_next_call() -> anyhow::Result<()> {
    use rmcp::model::{LoggingLevel, SetLevelRequestParams};
    let upstreams =
        [("own", "session = \"per-host\""), ("per", "session = \"per-principal\""), ("shared", "session = \"shared\"")];
    let (proxy, _policies) = start(&upstreams).await?;
    let (first, second) = (host(&proxy.url, ALICE_TOKEN).await?, host(&proxy.url, ALICE_TOKEN).await?);
    let level = async |host: &Host, upstream: &str| text(host, &format!("{upstream}__level"), json!({})).await;
    first.peer().set_level(SetLevelRequestParams::new(LoggingLevel::Warning)).await?;
    assert_eq!(level(&first, "own").await?, "warning");
    assert_eq!(level(&second, "own").await?, "none", "another host session's session was told");
    assert_eq!(level(&first, "per").await?, "warning");
    second.peer().set_level(SetLevelRequestParams::new(LoggingLevel::Error)).await?;
    assert_eq!(level(&second, "own").await?, "error");
    assert_eq!(level(&second, "per").await?, "warning", "a principal's session is never made quieter");
    second.peer().set_level(SetLevelRequestParams::new(LoggingLevel::Debug)).await?;
    assert_eq!(level(&second, "per").await?, "debug");
    assert_eq!(level(&first, "own").await?, "warning");
    assert_eq!(level(&first, "shared").await?, "none", "the shared connection is every host's");
    first.cancel().await?;
    second.cancel().await?;
    Ok(())
}

/// A reload that replaces a per-principal upstream (its config changed) makes alice's
/// subscription again on her session of the new one: a change of her value after the reload
/// still reaches her. What the reload itself told her comes before a marker (a change on the
/// shared upstream she also holds).
#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_on_an_upstream_session_is_made_again_when_a_reload_replaces_the_upstream() -> anyhow::Result<()>
{
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let config = |per_extra: &str| {
        let entries = session_upstream("per", &format!("session = \"per-principal\"\n{per_extra}"))
            + &session_upstream("shared", "session = \"shared\"");
        alice_and_bob_under_policies("", policies.path(), &entries)
    };
    let proxy = ProxyProcess::start_with_offerings(&config(""), &TOKENS, &["per", "shared"]).await?;
    let (per, shared) = ("per+session://value", "shared+session://value");
    let (alice, mut heard) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE_TOKEN).await?;
    for uri in [per, shared] {
        #[allow(deprecated)]
        alice.subscribe(SubscribeRequestParams::new(uri)).await?;
    }
    let applied = ["upstream subscriptions applied", "\"upstream\":\"per\"", "\"watched\":1"];
    proxy.wait_log_count(&applied, 1).await?;
    assert_eq!(said(alice.peer(), "per__remember", json!({"value": "a1"})).await?, "kept a1");
    assert_eq!(next_host_updated(&mut heard).await?, per, "before the reload");

    write_config(proxy.dir.path(), &config("request_timeout = \"25s\"\n"))?;
    let pid = proxy.pid().context("pid")?;
    anyhow::ensure!(std::process::Command::new("kill").args(["-HUP", &pid.to_string()]).status()?.success());
    proxy.wait_log(&["configuration reloaded", "\"changed\":\"[\\\"per\\\"]\""]).await?;
    proxy.wait_log_count(&applied, 2).await.context("alice's new session holds her subscription")?;
    proxy.wait_offerings("per").await?;

    assert_eq!(said(alice.peer(), "shared__remember", json!({"value": "s1"})).await?, "kept s1");
    while heard.next().await? != FixtureEvent::Updated(shared.into()) {}
    assert_eq!(said(alice.peer(), "per__remember", json!({"value": "a2"})).await?, "kept a2", "a new session");
    // The reconnect's list changes may still be on their way; only an `updated` counts here.
    assert_eq!(next_host_updated(&mut heard).await?, per, "after the reload");
    alice.cancel().await?;
    Ok(())
}

/// The next `updated` a 2025 host hears (list changes passed over).
async fn next_host_updated(heard: &mut crate::support::fixture::Events) -> anyhow::Result<String> {
    loop {
        if let FixtureEvent::Updated(uri) = heard.next().await? {
            return Ok(uri);
        }
    }
}
