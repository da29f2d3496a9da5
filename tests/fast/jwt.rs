//! The proxy as an OAuth 2.1 resource server, end to end: a JWKS served over real HTTP on
//! 127.0.0.1:0 by the test (counting its fetches), tokens signed in the test with the
//! test-only keys of `tests/data/jwt`, the real proxy binary with a real fixture upstream,
//! real MCP clients (rmcp, and the Python SDK) and plain HTTP for the 401s and the metadata.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::fixture::{Era, FixtureClient, connect_http_with_token};
use crate::support::peers::{parse_json_lines, py_client};
use crate::support::proxy::{ProxyProcess, fixture_upstream, toml_str};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rmcp::model::ReadResourceRequestParams;
use serde_json::{Value, json};

const RESOURCE: &str = "https://proxy.test/mcp";
const ISSUER: &str = "https://issuer.test";
const METADATA_URL: &str = "https://proxy.test/.well-known/oauth-protected-resource/mcp";
const CI_TOKEN: &str = "ci-static-token-5b1e9d";

/// alice: items but item 0. Group eng: the blob and item 3, never item 1 (deny wins over
/// alice's allow). `*` (nobody named, no named group): item 4. ci-bot (static token): all.
const POLICIES: [(&str, &str); 4] = [
    ("alice.toml", "principals = [\"alice\"]\nallow = [\"fx+fx://fx/item/*\"]\ndeny = [\"fx+fx://fx/item/0\"]\n"),
    (
        "eng.toml",
        "principals = [\"group:eng\"]\nallow = [\"fx+fx://fx/blob\", \"fx+fx://fx/item/3\"]\ndeny = [\"fx+fx://fx/item/1\"]\n",
    ),
    ("default.toml", "principals = [\"*\"]\nallow = [\"fx+fx://fx/item/4\"]\n"),
    ("ci-bot.toml", "principals = [\"ci-bot\"]\nallow = [\"fx+**\"]\n"),
];

/// A signing key of the test and its public JWK.
struct TestKey {
    kid: &'static str,
    algorithm: Algorithm,
    encoding: EncodingKey,
}

impl TestKey {
    fn load(file: &str, kid: &'static str, algorithm: Algorithm) -> TestKey {
        let pem = std::fs::read(data_dir().join(file)).expect("test key");
        let encoding = match algorithm {
            Algorithm::ES256 => EncodingKey::from_ec_pem(&pem),
            _ => EncodingKey::from_rsa_pem(&pem),
        }
        .expect("valid test key");
        TestKey { kid, algorithm, encoding }
    }

    fn jwk(&self) -> Jwk {
        let mut jwk = Jwk::from_encoding_key(&self.encoding, self.algorithm).expect("public JWK");
        jwk.common.key_id = Some(self.kid.to_string());
        jwk
    }

    /// A token with these claims, signed by this key under `kid`.
    fn sign_as(&self, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(self.algorithm);
        header.kid = Some(kid.to_string());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("sign")
    }

    fn sign(&self, claims: &Value) -> String {
        self.sign_as(self.kid, claims)
    }
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/jwt")
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()
}

/// Valid claims for `sub` with `groups`.
fn claims(sub: &str, groups: &[&str]) -> Value {
    json!({"iss": ISSUER, "aud": RESOURCE, "sub": sub, "groups": groups, "iat": now(), "exp": now() + 600})
}

/// A JWKS served over HTTP whose keys the test can change, counting every fetch.
struct JwksServer {
    url: String,
    keys: Arc<Mutex<Vec<Jwk>>>,
    fetches: Arc<AtomicUsize>,
    /// While set, a fetch never gets an answer (a JWKS endpoint that hangs).
    stalled: Arc<AtomicBool>,
}

impl JwksServer {
    async fn start(keys: Vec<Jwk>) -> anyhow::Result<JwksServer> {
        let keys = Arc::new(Mutex::new(keys));
        let fetches = Arc::new(AtomicUsize::new(0));
        let stalled = Arc::new(AtomicBool::new(false));
        let (served, counted, stall) = (keys.clone(), fetches.clone(), stalled.clone());
        let handler = move || {
            let (served, counted, stall) = (served.clone(), counted.clone(), stall.clone());
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                if stall.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                let set = JwkSet { keys: served.lock().expect("keys").clone() };
                axum::Json(serde_json::to_value(set).expect("JWKS json"))
            }
        };
        let app = axum::Router::new().route("/jwks", axum::routing::get(handler));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/jwks", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(JwksServer { url, keys, fetches, stalled })
    }

    fn publish(&self, keys: Vec<Jwk>) {
        *self.keys.lock().expect("keys") = keys;
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

/// The proxy: one fixture upstream, a static token for ci-bot, `[auth.jwt]` on `jwks_url`
/// with `jwt_extra` (more `[auth.jwt]` lines).
async fn start_proxy(jwks_url: &str, jwt_extra: &str) -> anyhow::Result<(ProxyProcess, tempfile::TempDir)> {
    let policies = tempfile::tempdir()?;
    for (name, text) in POLICIES {
        std::fs::write(policies.path().join(name), text)?;
    }
    let config = format!(
        "[auth]\nmode = \"bearer\"\n\n[[auth.tokens]]\nprincipal = \"ci-bot\"\ntoken_env = \"CI_TOKEN\"\n\n\
         [auth.jwt]\nresource = {}\nissuer = {}\njwks_url = {}\ngroups_claim = \"groups\"\n\
         scopes_supported = [\"resources:read\"]\n{jwt_extra}\n\n[policies]\ndir = {}\n\n{}",
        toml_str(RESOURCE),
        toml_str(ISSUER),
        toml_str(jwks_url),
        toml_str(policies.path().to_str().expect("utf-8 path")),
        fixture_upstream("fx", &["--resources", "5"]),
    );
    let proxy = ProxyProcess::start_with(&config, &[], &[("CI_TOKEN", CI_TOKEN)]).await?;
    proxy.wait_up("fx", 1).await?;
    Ok((proxy, policies))
}

async fn can_read(client: &FixtureClient, uri: &str) -> bool {
    client.read_resource(ReadResourceRequestParams::new(uri)).await.is_ok()
}

/// For the bearer `token`: which of `fx+fx://fx/item/0..5` and the blob it may read.
async fn readable(proxy: &ProxyProcess, token: &str) -> anyhow::Result<Vec<String>> {
    let (client, _) = connect_http_with_token(&proxy.url, Era::Legacy, token).await?;
    let mut uris: Vec<String> = (0..5).map(|i| format!("fx+fx://fx/item/{i}")).collect();
    uris.push("fx+fx://fx/blob".into());
    let mut found = Vec::new();
    for uri in uris {
        if can_read(&client, &uri).await {
            found.push(uri.trim_start_matches("fx+fx://fx/").to_string());
        }
    }
    Ok(found)
}

/// An `initialize` POST with `authorization` (if any): status and `WWW-Authenticate`.
async fn post_initialize(proxy: &ProxyProcess, authorization: Option<&str>) -> anyhow::Result<(u16, String)> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let mut request =
        reqwest::Client::new().post(&proxy.url).header("accept", "application/json, text/event-stream").json(&body);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = request.send().await?;
    let challenge = response.headers().get("www-authenticate").map(|v| v.to_str().unwrap_or("?").to_string());
    Ok((response.status().as_u16(), challenge.unwrap_or_default()))
}

fn rsa_a() -> TestKey {
    TestKey::load("rsa-a.pem", "rsa-a", Algorithm::RS256)
}

fn rsa_b() -> TestKey {
    TestKey::load("rsa-b.pem", "rsa-b", Algorithm::RS256)
}

fn ec_a() -> TestKey {
    TestKey::load("ec-a.pem", "ec-a", Algorithm::ES256)
}

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

/// The Python SDK client, with the JWT as a custom header, reads through the proxy.
#[tokio::test]
async fn python_client_reads_with_a_jwt() -> anyhow::Result<()> {
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, _policies) = start_proxy(&jwks.url, "jwks_min_refresh = \"30s\"").await?;
    let token = rsa_a().sign(&claims("alice", &["eng"]));
    let header = format!("Authorization: Bearer {token}");
    let args = [
        "--url",
        &proxy.url,
        "--mode",
        "legacy",
        "--header",
        &header,
        "read:fx+fx://fx/blob",
        "read:fx+fx://fx/item/1",
    ];
    let mut command = tokio::process::Command::from(py_client(&args));
    command.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output()).await??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "client.py failed:\n{stderr}");
    let lines = parse_json_lines(&output.stdout);
    assert_eq!(lines.len(), 2, "{lines:?}\n{stderr}");
    assert_eq!(lines[0]["contents"][0]["uri"], "fx+fx://fx/blob", "{}", lines[0]);
    assert!(lines[1]["error"].is_object(), "item 1 is denied to group eng: {}", lines[1]);
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
        let mut command = std::process::Command::new(crate::support::proxy::PROXY_BIN);
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
