//! The proxy as an OAuth 2.1 resource server, end to end: a JWKS served over real HTTP on
//! 127.0.0.1:0 by the test (counting its fetches), tokens signed in the test with the
//! test-only keys of `tests/data/jwt` (`support::jwt`), the real proxy binary with a real fixture
//! upstream, real rmcp clients and plain HTTP for the 401s and the metadata. (The Python SDK
//! client with a JWT: the interop tier's `jwt`.)

use std::sync::atomic::Ordering;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::support::fixture::{Era, connect_http_with_token};
use crate::support::jwt::*;
use crate::support::proxy::ProxyProcess;

/// Principal rules, group rules (deny wins across them), the `*` fallback only for identities
/// nothing names, RS256 and ES256 keys, and a static token alongside.
#[tokio::test]
async fn valid_tokens_read_what_principal_and_group_policies_allow_and_static_tokens_still_work() -> anyhow::Result<()>
{
    let jwks = JwksServer::start(vec![rsa_a().jwk(), ec_a().jwk()]).await?;
    let (proxy, _policies) = start_proxy(&jwks.url, "jwks_min_refresh = \"30s\"").await?;
    let cases: [(String, &[&str]); 6] = [
        (rsa_a().sign(&claims("alice", &[])), &["item/1", "item/2", "item/3", "item/4"]),
        (rsa_a().sign(&claims("alice", &["eng", "other"])), &["item/2", "item/3", "item/4", "blob"]),
        (ec_a().sign(&claims("dave", &[])), &["item/4"]),
        (ec_a().sign(&claims("dave", &["eng"])), &["item/3", "blob"]),
        (rsa_a().sign(&claims("dave", &["unnamed-group"])), &["item/4"]),
        (CI_TOKEN.to_string(), &["item/0", "item/1", "item/2", "item/3", "item/4", "blob"]),
    ];
    for (token, expected) in &cases {
        assert_eq!(readable(&proxy, token).await?, *expected, "{}", &token[..12]);
    }
    Ok(())
}

/// Every bad token is answered 401 before MCP, naming the metadata; none reaches the logs.
#[tokio::test]
async fn bad_tokens_get_401_naming_the_metadata_and_are_never_logged() -> anyhow::Result<()> {
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, _policies) = start_proxy(&jwks.url, "jwks_min_refresh = \"1h\"").await?;
    let key = rsa_a();
    let with = |change: &dyn Fn(&mut Value)| {
        let mut claims = claims("alice", &[]);
        change(&mut claims);
        key.sign(&claims)
    };
    let unsigned = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(claims("alice", &[]).to_string())
    );
    // (what, token, the reason the proxy logs)
    let bad = [
        ("expired", with(&|c| c["exp"] = json!(now() - 120)), "InvalidJwt(Expired)"),
        ("not yet valid", with(&|c| c["nbf"] = json!(now() + 600)), "InvalidJwt(NotYetValid)"),
        ("wrong issuer", with(&|c| c["iss"] = json!("https://other-issuer.test")), "InvalidJwt(Issuer)"),
        ("wrong audience", with(&|c| c["aud"] = json!("https://other-proxy.test/mcp")), "InvalidJwt(Audience)"),
        ("no audience", with(&|c| drop(c.as_object_mut().expect("object").remove("aud"))), "InvalidJwt(Claims)"),
        ("bad signature", rsa_b().sign_as("rsa-a", &claims("alice", &[])), "InvalidJwt(Signature)"),
        ("unknown kid", rsa_b().sign(&claims("alice", &[])), "InvalidJwt(UnknownKey)"),
        ("alg none", unsigned, "InvalidJwt(Malformed)"),
        ("garbage", "not-a-known-token".to_string(), "UnknownToken"),
    ];
    let invalid = format!("Bearer error=\"invalid_token\", resource_metadata=\"{METADATA_URL}\"");
    for (what, token, reason) in &bad {
        let answer = post_initialize(&proxy, Some(&format!("Bearer {token}"))).await?;
        assert_eq!(answer, (401, invalid.clone()), "{what}");
        proxy.wait_log(&["unauthorized request", &format!("\"{reason}\"")]).await?;
    }
    let missing = post_initialize(&proxy, None).await?;
    assert_eq!(missing, (401, format!("Bearer resource_metadata=\"{METADATA_URL}\"")));
    // Positive control: the same request with a valid token passes.
    let good = rsa_a().sign(&claims("alice", &[]));
    assert_eq!(post_initialize(&proxy, Some(&format!("Bearer {good}"))).await?.0, 200);
    let logs = proxy.logs().join("\n");
    assert!(logs.contains("unauthorized request"), "the refusals are logged");
    for (what, token) in bad.iter().map(|(what, token, _)| (*what, token.as_str())).chain([("good", good.as_str())]) {
        let signature = token.rsplit('.').next().unwrap_or(token);
        assert!(signature.is_empty() || !logs.contains(signature), "{what}: token in the logs");
    }
    Ok(())
}

/// RFC 9728 metadata at the path-suffixed and the bare well-known URL, without a token.
#[tokio::test]
async fn the_protected_resource_metadata_is_served_without_a_token() -> anyhow::Result<()> {
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, _policies) = start_proxy(&jwks.url, "jwks_min_refresh = \"30s\"").await?;
    let base = proxy.url.trim_end_matches("/mcp");
    let expected = json!({
        "resource": RESOURCE,
        "authorization_servers": [ISSUER],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["resources:read"],
    });
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"] {
        let response = reqwest::get(format!("{base}{path}")).await?;
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.json::<Value>().await?, expected, "{path}");
    }
    Ok(())
}

/// A key published after start is fetched when a token names its `kid`.
#[tokio::test]
async fn a_key_published_later_is_picked_up_by_its_kid() -> anyhow::Result<()> {
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, _policies) = start_proxy(&jwks.url, "jwks_min_refresh = \"0ms\"").await?;
    let rotated = rsa_b().sign(&claims("alice", &[]));
    assert_eq!(post_initialize(&proxy, Some(&format!("Bearer {rotated}"))).await?.0, 401, "not published yet");
    jwks.publish(vec![rsa_a().jwk(), rsa_b().jwk()]);
    let before = jwks.fetches();
    assert_eq!(readable(&proxy, &rotated).await?, ["item/1", "item/2", "item/3", "item/4"]);
    assert_eq!(jwks.fetches(), before + 1, "one fetch for the new kid, then cached");
    Ok(())
}

/// Random `kid`s cost no fetch within `jwks_min_refresh`.
#[tokio::test]
async fn random_kids_do_not_make_the_proxy_fetch_the_jwks_again() -> anyhow::Result<()> {
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, _policies) = start_proxy(&jwks.url, "jwks_min_refresh = \"1h\"").await?;
    let good = rsa_a().sign(&claims("alice", &[]));
    assert_eq!(post_initialize(&proxy, Some(&format!("Bearer {good}"))).await?.0, 200);
    assert_eq!(jwks.fetches(), 1);
    for index in 0..20 {
        let token = rsa_a().sign_as(&format!("random-{index}"), &claims("alice", &[]));
        assert_eq!(post_initialize(&proxy, Some(&format!("Bearer {token}"))).await?.0, 401);
    }
    assert_eq!(jwks.fetches(), 1, "unknown kids within jwks_min_refresh fetch nothing");
    Ok(())
}

/// `policy explain --group` decides for a principal with groups as a JWT would give them.
#[tokio::test]
async fn policy_explain_takes_groups() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("policies"))?;
    for (name, text) in POLICIES {
        std::fs::write(dir.path().join("policies").join(name), text)?;
    }
    let config = "[policies]\ndir = \"policies\"\n";
    let path = crate::support::proxy::write_config(dir.path(), config)?;
    let explain = |groups: &[&str]| -> anyhow::Result<String> {
        let mut command = std::process::Command::new(crate::support::PROXY_BIN);
        command.args(["policy", "explain", "--principal", "alice", "--config"]).arg(&path);
        for group in groups {
            command.args(["--group", group]);
        }
        let output = command.args(["fx+fx://fx/item/1", "fx+fx://fx/blob"]).output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        anyhow::ensure!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
        Ok(String::from_utf8(output.stdout)?)
    };
    let alone = explain(&[])?;
    assert!(alone.contains("allowed by alice.toml: fx+fx://fx/item/*"), "{alone}");
    assert!(alone.contains("denied: no rule allows it"), "{alone}");
    let in_eng = explain(&["eng"])?;
    assert!(in_eng.contains("denied by eng.toml: fx+fx://fx/item/1"), "{in_eng}");
    assert!(in_eng.contains("allowed by eng.toml: fx+fx://fx/blob"), "{in_eng}");
    Ok(())
}

/// A cache that is merely old is refreshed in the background: with the JWKS endpoint hanging,
/// a token whose key is known is still answered at once (not after the 5 s fetch timeout).
#[tokio::test]
async fn a_hanging_jwks_refresh_does_not_hold_requests_with_known_keys() -> anyhow::Result<()> {
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, _policies) = start_proxy(&jwks.url, "jwks_refresh = \"0ms\"\njwks_min_refresh = \"0ms\"").await?;
    let good = format!("Bearer {}", rsa_a().sign(&claims("alice", &[])));
    assert_eq!(post_initialize(&proxy, Some(&good)).await?.0, 200);
    jwks.stalled.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        let answer = tokio::time::timeout(Duration::from_secs(2), post_initialize(&proxy, Some(&good))).await;
        assert_eq!(answer.expect("answered while the JWKS fetch hangs")?.0, 200);
    }
    assert!(jwks.fetches() >= 2, "a background refresh was started: {}", jwks.fetches());
    Ok(())
}

/// A JWT with `sub: ci-bot` is not the static token's ci-bot: the same policy file applies by
/// name, but the legacy session the static token opened answers it 404 like an unknown one.
#[tokio::test]
async fn a_jwt_principal_is_not_the_static_principal_of_the_same_name() -> anyhow::Result<()> {
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, _policies) = start_proxy(&jwks.url, "").await?;
    let jwt = rsa_a().sign(&claims("ci-bot", &[]));
    let everything = ["item/0", "item/1", "item/2", "item/3", "item/4", "blob"];
    assert_eq!(readable(&proxy, &jwt).await?, everything, "ci-bot's policy applies to the JWT by name");
    let session = open_session(&proxy, CI_TOKEN).await?;
    assert_eq!(ping(&proxy, CI_TOKEN, &session).await?, 200, "the static token uses its own session");
    assert_eq!(ping(&proxy, &jwt, &session).await?, 404, "the JWT ci-bot used the static ci-bot's session");
    Ok(())
}

/// A legacy session opened with `token`: its `Mcp-Session-Id`, initialized.
async fn open_session(proxy: &ProxyProcess, token: &str) -> anyhow::Result<String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let response = post(proxy, token, None, &body).await?;
    let session = response.headers().get("mcp-session-id").map(|v| v.to_str().map(str::to_owned));
    let session = session.ok_or_else(|| anyhow::anyhow!("no Mcp-Session-Id: {}", response.status()))??;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post(proxy, token, Some(&session), &initialized).await?;
    Ok(session)
}

/// The status of a `ping` in `session` with `token`.
async fn ping(proxy: &ProxyProcess, token: &str, session: &str) -> anyhow::Result<u16> {
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    Ok(post(proxy, token, Some(session), &body).await?.status().as_u16())
}

async fn post(
    proxy: &ProxyProcess,
    token: &str,
    session: Option<&str>,
    body: &Value,
) -> anyhow::Result<reqwest::Response> {
    let mut request = reqwest::Client::new()
        .post(&proxy.url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(body);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    Ok(request.send().await?)
}

/// A JWT accepted for a few more seconds, with `leeway = "0s"` (`exp` is in whole seconds, so
/// `seconds` 3 leaves 2 to 3 s: at least 2 to open a session and a stream with it).
fn expiring_token(seconds: u64) -> String {
    let mut claims = claims("alice", &[]);
    claims["exp"] = json!(now() + seconds);
    rsa_a().sign(&claims)
}

/// A 2025 GET stream opened with a JWT is closed at the token's `exp`; the host coming back
/// with that token is refused.
#[tokio::test]
async fn a_get_stream_ends_when_its_jwt_expires() -> anyhow::Result<()> {
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, _policies) = start_proxy(&jwks.url, "leeway = \"0s\"").await?;
    let token = expiring_token(3);
    let session = open_session(&proxy, &token).await?;
    let stream = reqwest::Client::new()
        .get(&proxy.url)
        .bearer_auth(&token)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", &session)
        .send()
        .await?;
    assert_eq!(stream.status().as_u16(), 200, "the GET stream opens");
    let mut body = stream.bytes_stream();
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        use futures::StreamExt;
        while let Some(Ok(_)) = body.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "the GET stream outlived its token");
    assert!(now() >= claims_exp(&token), "the stream ended before the token expired");
    assert_eq!(ping(&proxy, &token, &session).await?, 401, "the expired token is refused");
    Ok(())
}

/// A 2026-07-28 listen stream opened with a JWT ends at the token's `exp`, with a final answer
/// to the listen request saying why (not an abrupt end): a JSON-RPC error, the token expired.
#[tokio::test]
async fn a_listen_stream_ends_when_its_jwt_expires() -> anyhow::Result<()> {
    use rmcp::model::SubscriptionFilter;
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, _policies) = start_proxy(&jwks.url, "leeway = \"0s\"").await?;
    let token = expiring_token(3);
    let (client, _) = connect_http_with_token(&proxy.url, Era::Modern, &token).await?;
    let filter = SubscriptionFilter::builder().resource_subscriptions(["fx+fx://fx/item/1".to_string()]).build();
    let mut stream = client.listen(filter).await?;
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match stream.next().await {
                Ok(Some(_)) => continue,
                end => return end,
            }
        }
    })
    .await;
    let end = ended.map_err(|_| anyhow::anyhow!("the listen stream outlived its token"))?;
    assert!(now() >= claims_exp(&token), "the stream ended before the token expired");
    let Err(rmcp::ServiceError::McpError(error)) = end else { panic!("no final error, the stream was cut: {end:?}") };
    assert_eq!(error.code.0, -32600, "{error:?}");
    assert!(error.message.contains("token") && error.message.contains("expired"), "says why: {}", error.message);
    assert_eq!(error.data.as_ref().map(|data| data["reason"].clone()), Some(json!("token_expired")));
    Ok(())
}

/// The `exp` claim of a token signed here.
fn claims_exp(token: &str) -> u64 {
    let payload = token.split('.').nth(1).unwrap_or_default();
    let claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap_or_default()).unwrap_or_default();
    claims["exp"].as_u64().unwrap_or(u64::MAX)
}
