//! RFC 8693 token exchange for an HTTP upstream (`[upstreams.auth] kind = "token_exchange"`),
//! end to end: an authorization server and a gate in front of the fixture, served here
//! (`support::token_exchange`), record each exchange and which token each upstream request
//! came with. Hosts authenticate with JWTs signed by the test's keys (a JWKS served here) or a
//! static token. The proxy runs as its binary.
//!
//! One principal presenting two JWTs, each request going with a token exchanged for its own,
//! is `two_jwts`.

mod two_jwts;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::http::StatusCode;
use rmcp::model::{CallToolRequestParams, JsonObject};
use serde_json::json;

use crate::support::PROXY_BIN;
use crate::support::eventually;
use crate::support::fixture::{Era, FixtureClient, HttpFixture, connect_http_with_token};
use crate::support::jwt::{ISSUER, JwksServer, RESOURCE, claims, now, rsa_a};
use crate::support::proxy::{ProxyProcess, http_upstream, toml_str, write_config};
use crate::support::token_exchange::{Authority, CLIENT_ID, CLIENT_SECRET, Mode};

const SECRET_ENV: &str = "TEST_EXCHANGE_CLIENT_SECRET";
const CI_TOKEN: &str = "ci-static-token-exchange-9a0c";

/// The proxy's config: JWTs from `jwks_url`, a static token for ci-bot, everything allowed, and
/// `upstream`.
fn config(jwks_url: &str, upstream: &str) -> String {
    config_with(jwks_url, "", upstream)
}

/// The same with more `[auth.jwt]` lines.
fn config_with(jwks_url: &str, jwt_lines: &str, upstream: &str) -> String {
    format!(
        "[auth]\nmode = \"bearer\"\n\n[[auth.tokens]]\nprincipal = \"ci-bot\"\ntoken_env = \"CI_TOKEN\"\n\n\
         [auth.jwt]\nresource = {}\nissuer = {}\njwks_url = {}\n{jwt_lines}\n{upstream}",
        toml_str(RESOURCE),
        toml_str(ISSUER),
        toml_str(jwks_url),
    )
}

/// The upstream's lines (`upstream` more of them) and its `[upstreams.auth]` exchanging at
/// `token_url` (`extra` more lines).
fn exchange_auth(token_url: &str, upstream: &str, extra: &str) -> String {
    format!(
        "session = \"per-principal\"\n{upstream}\n[upstreams.cache]\nenabled = false\n[upstreams.auth]\nkind = \"token_exchange\"\n\
         token_url = {}\naudience = \"fixture\"\nresource = \"https://fixture.test/mcp\"\nscope = \"tools\"\n{extra}\n",
        toml_str(token_url)
    )
}

/// A proxy in front of the gated fixture whose exchanges answer as `mode`; the JWKS, the
/// authority, and the fixture (kept alive).
async fn gated(
    mode: Mode,
    upstream_lines: &str,
) -> anyhow::Result<(ProxyProcess, JwksServer, Arc<Authority>, HttpFixture)> {
    gated_with(mode, upstream_lines, "").await
}

/// The same with more `[auth.jwt]` lines.
async fn gated_with(
    mode: Mode,
    upstream_lines: &str,
    jwt_lines: &str,
) -> anyhow::Result<(ProxyProcess, JwksServer, Arc<Authority>, HttpFixture)> {
    gated_on(&[], mode, upstream_lines, jwt_lines).await
}

/// The same in front of a fixture given `fixture_args` more.
async fn gated_on(
    fixture_args: &[&str],
    mode: Mode,
    upstream_lines: &str,
    jwt_lines: &str,
) -> anyhow::Result<(ProxyProcess, JwksServer, Arc<Authority>, HttpFixture)> {
    let fixture = HttpFixture::spawn(&[&["--resources", "1", "--completions"], fixture_args].concat()).await?;
    let (authority, base) = Authority::start(mode, &fixture.url).await?;
    let client = format!("client_id = \"{CLIENT_ID}\"\nclient_secret_env = \"{SECRET_ENV}\"\n");
    let auth = exchange_auth(&format!("{base}/token"), upstream_lines, &client);
    let upstream = http_upstream("gated", &format!("{base}/mcp"), &auth);
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let env = [(SECRET_ENV, CLIENT_SECRET), ("CI_TOKEN", CI_TOKEN)];
    let proxy =
        ProxyProcess::start_with_offerings(&config_with(&jwks.url, jwt_lines, &upstream), &env, &["gated"]).await?;
    Ok((proxy, jwks, authority, fixture))
}

/// `gated__stats` as `client`: the call's outcome, the error's message when it failed.
async fn call(client: &FixtureClient) -> anyhow::Result<Result<(), String>> {
    let params = CallToolRequestParams::new("gated__stats").with_arguments(JsonObject::new());
    let answer = tokio::time::timeout(Duration::from_secs(20), client.call_tool(params)).await.context("hung")?;
    Ok(match answer {
        Ok(result) if result.is_error != Some(true) => Ok(()),
        Ok(result) => Err(format!("{result:?}")),
        Err(rmcp::ServiceError::McpError(error)) => Err(error.message.to_string()),
        Err(other) => return Err(other.into()),
    })
}

#[tokio::test]
async fn each_principal_calls_with_its_own_exchanged_token_kept_until_it_expires() -> anyhow::Result<()> {
    let (proxy, _jwks, authority, _fixture) = gated(Mode::Issue(Duration::from_secs(600)), "").await?;
    let alice_jwt = rsa_a().sign(&claims("alice", &[]));
    let bob_jwt = rsa_a().sign(&claims("bob", &[]));
    let (alice, _) = connect_http_with_token(&proxy.url, Era::Legacy, &alice_jwt).await?;
    let (bob, _) = connect_http_with_token(&proxy.url, Era::Modern, &bob_jwt).await?;

    call(&alice).await?.map_err(anyhow::Error::msg).context("alice's first call")?;
    call(&alice).await?.map_err(anyhow::Error::msg).context("alice's second call")?;
    call(&bob).await?.map_err(anyhow::Error::msg).context("bob's call")?;

    // One exchange each (alice's token kept for her second call), each of the principal's own
    // JWT, with the configured audience, resource and scope.
    let (alice_tokens, bob_tokens) = (authority.issued_for(&alice_jwt), authority.issued_for(&bob_jwt));
    assert_eq!((alice_tokens.len(), bob_tokens.len()), (1, 1), "one exchange per principal");
    assert_eq!(authority.exchanges.lock().unwrap().len(), 2);
    for exchange in authority.exchanges.lock().unwrap().iter() {
        let field = |name: &str| exchange.form.iter().find(|(key, _)| key == name).map(|(_, v)| v.as_str());
        assert_eq!(field("subject_token_type"), Some("urn:ietf:params:oauth:token-type:access_token"));
        assert_eq!(field("requested_token_type"), Some("urn:ietf:params:oauth:token-type:access_token"));
        assert_eq!((field("audience"), field("scope")), (Some("fixture"), Some("tools")));
        assert_eq!(field("resource"), Some("https://fixture.test/mcp"));
    }
    // The upstream saw each principal's call with that principal's own exchanged token.
    let expected = [alice_tokens[0].clone(), alice_tokens[0].clone(), bob_tokens[0].clone()];
    assert_eq!(authority.call_tokens(), expected);
    // The shared connection (the catalog) used the proxy's client credentials; no host's own
    // token ever reached the upstream.
    let accepted = authority.accepted.lock().unwrap().clone();
    assert!(accepted.iter().any(|(method, token)| method == "tools/list" && token.starts_with("cc-")), "{accepted:?}");
    assert!(accepted.iter().all(|(_, token)| token != &alice_jwt && token != &bob_jwt));
    assert_eq!(authority.refused.load(Ordering::SeqCst), 0);

    // No token in the logs.
    let logs = proxy.logs().join("\n");
    for secret in [&alice_jwt, &bob_jwt, &alice_tokens[0], &bob_tokens[0]] {
        assert!(!logs.contains(secret.as_str()), "a token in the logs");
    }
    assert!(!logs.contains(CLIENT_SECRET));
    Ok(())
}

#[tokio::test]
async fn an_expiring_exchanged_token_is_exchanged_again_and_no_call_fails() -> anyhow::Result<()> {
    // Exchanged tokens live 2 s: the next is fetched a quarter of that (0.5 s) ahead of expiry.
    let lifetime = Duration::from_secs(2);
    let (proxy, _jwks, authority, _fixture) = gated(Mode::Issue(lifetime), "").await?;
    let alice_jwt = rsa_a().sign(&claims("alice", &[]));
    let (alice, _) = connect_http_with_token(&proxy.url, Era::Legacy, &alice_jwt).await?;
    let mut pace = tokio::time::interval(Duration::from_millis(150));
    let started = Instant::now();
    let mut calls = 0;
    while authority.issued_for(&alice_jwt).len() < 3 {
        if started.elapsed() > Duration::from_secs(60) {
            bail!("only {} exchanges in 60 s", authority.issued_for(&alice_jwt).len());
        }
        pace.tick().await;
        call(&alice).await?.map_err(anyhow::Error::msg).with_context(|| format!("call {calls}"))?;
        calls += 1;
    }
    call(&alice).await?.map_err(anyhow::Error::msg).context("the call after the third exchange")?;
    let issued = authority.issued_for(&alice_jwt);
    let used: std::collections::BTreeSet<String> = authority.call_tokens().into_iter().collect();
    assert!(issued.iter().skip(1).all(|token| used.contains(token)), "the calls went on with the new tokens");
    assert_eq!(authority.refused.load(Ordering::SeqCst), 0, "no request went with an expired token");
    Ok(())
}

/// A token exchanged for a JWT is not used once the proxy stops accepting that JWT, although
/// the authorization server said it lives longer: the principal's next call, with a new JWT,
/// goes with a token exchanged for the new one.
#[tokio::test]
async fn an_exchanged_token_is_not_used_past_the_jwt_it_was_exchanged_for() -> anyhow::Result<()> {
    let (proxy, _jwks, authority, _fixture) =
        gated_with(Mode::Issue(Duration::from_secs(600)), "", "leeway = \"0s\"\n").await?;
    let mut short = claims("alice", &[]);
    short["exp"] = json!(now() + 3);
    let short_jwt = rsa_a().sign(&short);
    let (alice, _) = connect_http_with_token(&proxy.url, Era::Legacy, &short_jwt).await?;
    call(&alice).await?.map_err(anyhow::Error::msg).context("the call with the short-lived JWT")?;
    let first = authority.issued_for(&short_jwt);
    assert_eq!(first.len(), 1, "one exchange of the short-lived JWT");

    // Once the proxy refuses the short-lived JWT, alice comes back with a new one.
    let refused = eventually(Duration::from_secs(20), "the short-lived JWT refused", || async {
        let status = reqwest::Client::new()
            .post(&proxy.url)
            .bearer_auth(&short_jwt)
            .header("accept", "application/json, text/event-stream")
            .json(&crate::support::raw_http::initialize("probe"))
            .send()
            .await?
            .status();
        if status == StatusCode::UNAUTHORIZED { Ok(()) } else { bail!("answered {status}") }
    });
    refused.await?;
    let renewed_jwt = rsa_a().sign(&claims("alice", &[]));
    let (renewed, _) = connect_http_with_token(&proxy.url, Era::Legacy, &renewed_jwt).await?;
    call(&renewed).await?.map_err(anyhow::Error::msg).context("the call with the new JWT")?;
    let second = authority.issued_for(&renewed_jwt);
    assert_eq!(second.len(), 1, "the new JWT was exchanged");
    assert_eq!(
        authority.call_tokens(),
        [first[0].clone(), second[0].clone()],
        "the second call went with the new token"
    );
    Ok(())
}

#[tokio::test]
async fn a_static_token_principal_and_a_refused_or_silent_exchange_get_clear_errors_not_hangs() -> anyhow::Result<()> {
    let (proxy, _jwks, authority, _fixture) =
        gated(Mode::Refuse, "request_timeout = \"4s\"\n").await.context("the proxy")?;
    // ci-bot authenticated with a static token: there is no JWT to exchange.
    let (ci, _) = connect_http_with_token(&proxy.url, Era::Legacy, CI_TOKEN).await?;
    let error = call(&ci).await?.expect_err("ci-bot's call without a JWT");
    assert!(error.contains("exchanged for the caller's own JWT") && error.contains("did not authenticate"), "{error}");
    assert!(authority.exchanges.lock().unwrap().is_empty(), "no exchange was tried");

    let alice_jwt = rsa_a().sign(&claims("alice", &[]));
    let (alice, _) = connect_http_with_token(&proxy.url, Era::Modern, &alice_jwt).await?;
    let error = call(&alice).await?.expect_err("a refused exchange");
    assert!(error.contains("no access token for the upstream") && error.contains("HTTP 400"), "{error}");
    assert_eq!(authority.issued_for(&alice_jwt).len(), 0);
    assert_eq!(authority.exchanges.lock().unwrap().len(), 1, "the exchange was asked for, with alice's JWT");

    *authority.mode.lock().unwrap() = Mode::Hang;
    let started = Instant::now();
    let error = call(&alice).await?.expect_err("a silent token endpoint");
    let took = started.elapsed();
    assert!(error.contains("did not answer in time"), "{error}");
    assert!(took < Duration::from_secs(4), "answered in {took:?}, within the request timeout");
    assert!(!error.contains(&alice_jwt) && !error.contains(CLIENT_SECRET));
    Ok(())
}

#[tokio::test]
async fn an_unreachable_token_endpoint_fails_the_call_at_once_while_the_shared_connection_needs_none()
-> anyhow::Result<()> {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = closed.local_addr()?.port();
    drop(closed);
    // No client id: the shared connection sends no token (the fixture takes none).
    let fixture = HttpFixture::spawn(&["--resources", "1"]).await?;
    let auth = exchange_auth(&format!("http://127.0.0.1:{port}/token"), "request_timeout = \"4s\"", "");
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let upstream = http_upstream("gated", &fixture.url, &auth);
    let proxy =
        ProxyProcess::start_with_offerings(&config(&jwks.url, &upstream), &[("CI_TOKEN", CI_TOKEN)], &["gated"])
            .await?;
    let alice_jwt = rsa_a().sign(&claims("alice", &[]));
    let (alice, _) = connect_http_with_token(&proxy.url, Era::Legacy, &alice_jwt).await?;
    let started = Instant::now();
    let error = call(&alice).await?.expect_err("no token endpoint");
    assert!(error.contains("token endpoint is unreachable"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(4), "answered in {:?}", started.elapsed());
    Ok(())
}

#[tokio::test]
async fn check_refuses_a_token_exchange_on_a_shared_upstream_session() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let auth = "[upstreams.auth]\nkind = \"token_exchange\"\ntoken_url = \"http://127.0.0.1:9/token\"\n";
    let config =
        [http_upstream("gated", "http://127.0.0.1:9/mcp", auth), "[server]\nno_such_key = 1\n".into()].concat();
    let path = write_config(dir.path(), &config)?;
    let output = tokio::process::Command::new(PROXY_BIN).args(["check", "--config"]).arg(&path).output().await?;
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(78), "{said}");
    assert!(said.contains("auth.kind") && said.contains("needs `session = \"per-principal\"`"), "{said}");
    assert!(said.contains("no_such_key"), "listed with the other problems: {said}");
    Ok(())
}
