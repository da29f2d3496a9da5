//! A per-principal upstream's session pool leaves room for a new principal: subjects (JWTs
//! signed by the test's keys, a JWKS served here) fill `max_sessions` of an HTTP fixture's
//! sessions with subscriptions only; once the oldest has gone `session_idle` without a request,
//! a new subject's call is served (that session is reclaimed). The reclaimed subscriber keeps its
//! subscription: its next request opens its session again, it is told `updated` for what it
//! held (a change may have gone unheard), and a change after that reaches it.

use anyhow::Context;
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams, SubscribeRequestParams};
use serde_json::json;

use crate::support::eventually;
use crate::support::fixture::{
    DEADLINE, Era, Events, FixtureClient, FixtureEvent, HttpFixture, connect_http_with_token,
};
use crate::support::jwt::{ISSUER, JwksServer, RESOURCE, claims, rsa_a};
use crate::support::proxy::{ProxyProcess, http_upstream, toml_str};

const POOL: usize = 4;
const HELD: &str = "pool+fx://fx/item/0";

/// The proxy: JWTs from `jwks_url`, everything allowed to everyone, the fixture at `fixture`
/// with sessions per principal, `max_sessions = POOL`, `session_idle = "1s"`.
async fn start(jwks_url: &str, fixture: &str) -> anyhow::Result<(ProxyProcess, tempfile::TempDir)> {
    let policies = tempfile::tempdir()?;
    std::fs::write(policies.path().join("everyone.toml"), "principals = [\"*\"]\nallow = [\"**\"]\n")?;
    let settings = format!("session = \"per-principal\"\nsession_idle = \"1s\"\nmax_sessions = {POOL}\n");
    let config = format!(
        "[auth]\nmode = \"bearer\"\n\n[auth.jwt]\nresource = {}\nissuer = {}\njwks_url = {}\n\n\
         [policies]\ndir = {}\n\n{}",
        toml_str(RESOURCE),
        toml_str(ISSUER),
        toml_str(jwks_url),
        toml_str(policies.path().to_str().context("utf-8 path")?),
        http_upstream("pool", fixture, &settings),
    );
    let proxy = ProxyProcess::start_with_offerings(&config, &[], &["pool"]).await?;
    Ok((proxy, policies))
}

/// A 2025 host of subject `sub`.
async fn host(proxy: &ProxyProcess, sub: &str) -> anyhow::Result<(FixtureClient, Events)> {
    connect_http_with_token(&proxy.url, Era::Legacy, &rsa_a().sign(&claims(sub, &[]))).await
}

/// Call `pool__<tool>`: Ok, or the error's message.
async fn call(host: &FixtureClient, tool: &str, arguments: serde_json::Value) -> anyhow::Result<Result<(), String>> {
    let params = CallToolRequestParams::new(format!("pool__{tool}"))
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    let answer = tokio::time::timeout(DEADLINE, host.call_tool(params)).await.context("the call hung")?;
    Ok(match answer {
        Ok(result) if result.is_error != Some(true) => Ok(()),
        Ok(result) => Err(format!("{result:?}")),
        Err(rmcp::ServiceError::McpError(error)) => Err(error.message.to_string()),
        Err(other) => return Err(other.into()),
    })
}

/// The next `updated` a host hears (list changes passed over).
async fn next_updated(heard: &mut Events) -> anyhow::Result<String> {
    loop {
        if let FixtureEvent::Updated(uri) = heard.next().await? {
            return Ok(uri);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_principal_is_served_while_other_subjects_hold_every_session_with_subscriptions() -> anyhow::Result<()> {
    let fixture = HttpFixture::spawn(&["--resources", "2"]).await?;
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, _policies) = start(&jwks.url, &fixture.url).await?;
    let mut subscribers = Vec::new();
    for n in 0..POOL {
        let (client, heard) = host(&proxy, &format!("subscriber-{n}")).await?;
        #[allow(deprecated)]
        client.subscribe(SubscribeRequestParams::new(HELD)).await.with_context(|| format!("subscriber-{n}"))?;
        subscribers.push((client, heard));
    }
    let full = proxy.status_when("pool", |status| status["sessions"] == POOL).await;
    full.context("every session held by a subscription")?;

    // A new subject is served once the oldest session went `session_idle` without a request;
    // meanwhile it is refused at once, naming the setting.
    let (carol, _) = host(&proxy, "carol").await?;
    eventually(DEADLINE, "carol's call served", || async {
        match call(&carol, "stats", json!({})).await? {
            Ok(()) => Ok(()),
            Err(refused) if refused.contains("`max_sessions`") => Err(anyhow::anyhow!("refused: {refused}")),
            Err(other) => panic!("carol's call failed otherwise: {other}"),
        }
    })
    .await?;
    let reclaimed = [("upstream", "pool")];
    proxy.wait_metric("mcp_proxy_upstream_sessions_reclaimed_total", &reclaimed, |n| n == 1.0).await?;
    assert_eq!(proxy.upstream_status("pool").await?["sessions"], POOL);

    // The oldest subscriber's session was the one reclaimed; it kept its subscription. Its next
    // request opens its session again, and it is told its URI may have changed.
    let (first, first_heard) = &mut subscribers[0];
    let read = || first.read_resource(ReadResourceRequestParams::new(HELD));
    eventually(DEADLINE, "subscriber-0's read served", || async { read().await.map(|_| ()) }).await?;
    assert_eq!(next_updated(first_heard).await?, HELD, "told after its session came back");
    // And a change on its new session reaches it.
    call(first, "updated_burst", json!({"count": 1, "from": 0})).await?.map_err(anyhow::Error::msg)?;
    assert_eq!(next_updated(first_heard).await?, HELD, "its subscription lives on its new session");
    for (client, _) in subscribers {
        client.cancel().await?;
    }
    carol.cancel().await?;
    Ok(())
}
