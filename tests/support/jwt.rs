//! JWT access tokens for the tests of both tiers: the test-only keys of `tests/data/jwt`, tokens
//! signed in the test, a JWKS served over real HTTP on 127.0.0.1:0 (counting its fetches, able
//! to hang), and a proxy configured to accept them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use super::fixture::{Era, FixtureClient, connect_http_with_token};
use super::proxy::{ProxyProcess, fixture_upstream, toml_str};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rmcp::model::ReadResourceRequestParams;
use serde_json::{Value, json};

pub const RESOURCE: &str = "https://proxy.test/mcp";
pub const ISSUER: &str = "https://issuer.test";
pub const METADATA_URL: &str = "https://proxy.test/.well-known/oauth-protected-resource/mcp";
pub const CI_TOKEN: &str = "ci-static-token-5b1e9d";

/// alice: items but item 0. Group eng: the blob and item 3, never item 1 (deny wins over
/// alice's allow). `*` (nobody named, no named group): item 4. ci-bot (static token): all.
pub const POLICIES: [(&str, &str); 4] = [
    ("alice.toml", "principals = [\"alice\"]\nallow = [\"fx+fx://fx/item/*\"]\ndeny = [\"fx+fx://fx/item/0\"]\n"),
    (
        "eng.toml",
        "principals = [\"group:eng\"]\nallow = [\"fx+fx://fx/blob\", \"fx+fx://fx/item/3\"]\ndeny = [\"fx+fx://fx/item/1\"]\n",
    ),
    ("default.toml", "principals = [\"*\"]\nallow = [\"fx+fx://fx/item/4\"]\n"),
    ("ci-bot.toml", "principals = [\"ci-bot\"]\nallow = [\"fx+**\"]\n"),
];

/// A signing key of the test and its public JWK.
pub struct TestKey {
    kid: &'static str,
    algorithm: Algorithm,
    encoding: EncodingKey,
}

impl TestKey {
    pub fn load(file: &str, kid: &'static str, algorithm: Algorithm) -> TestKey {
        mcp_resource_proxy::crypto::install();
        let der = std::fs::read(data_dir().join(file)).expect("test key");
        let encoding = match algorithm {
            Algorithm::ES256 => EncodingKey::from_ec_der(&der),
            _ => EncodingKey::from_rsa_der(&der),
        };
        TestKey { kid, algorithm, encoding }
    }

    pub fn jwk(&self) -> Jwk {
        let mut jwk = Jwk::from_encoding_key(&self.encoding, self.algorithm).expect("public JWK");
        jwk.common.key_id = Some(self.kid.to_string());
        jwk
    }

    /// A token with these claims, signed by this key under `kid`.
    pub fn sign_as(&self, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(self.algorithm);
        header.kid = Some(kid.to_string());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("sign")
    }

    pub fn sign(&self, claims: &Value) -> String {
        self.sign_as(self.kid, claims)
    }
}

pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/jwt")
}

pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()
}

/// Valid claims for `sub` with `groups`.
pub fn claims(sub: &str, groups: &[&str]) -> Value {
    json!({"iss": ISSUER, "aud": RESOURCE, "sub": sub, "groups": groups, "iat": now(), "exp": now() + 600})
}

/// A JWKS served over HTTP whose keys the test can change, counting every fetch.
pub struct JwksServer {
    pub url: String,
    pub keys: Arc<Mutex<Vec<Jwk>>>,
    pub fetches: Arc<AtomicUsize>,
    /// While set, a fetch never gets an answer (a JWKS endpoint that hangs).
    pub stalled: Arc<AtomicBool>,
}

impl JwksServer {
    pub async fn start(keys: Vec<Jwk>) -> anyhow::Result<JwksServer> {
        mcp_resource_proxy::crypto::install();
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

    pub fn publish(&self, keys: Vec<Jwk>) {
        *self.keys.lock().expect("keys") = keys;
    }

    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

/// The proxy: one fixture upstream, a static token for ci-bot, `[auth.jwt]` on `jwks_url`
/// with `jwt_extra` (more `[auth.jwt]` lines).
pub async fn start_proxy(jwks_url: &str, jwt_extra: &str) -> anyhow::Result<(ProxyProcess, tempfile::TempDir)> {
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

pub async fn can_read(client: &FixtureClient, uri: &str) -> bool {
    client.read_resource(ReadResourceRequestParams::new(uri)).await.is_ok()
}

/// For the bearer `token`: which of `fx+fx://fx/item/0..5` and the blob it may read.
pub async fn readable(proxy: &ProxyProcess, token: &str) -> anyhow::Result<Vec<String>> {
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
pub async fn post_initialize(proxy: &ProxyProcess, authorization: Option<&str>) -> anyhow::Result<(u16, String)> {
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

pub fn rsa_a() -> TestKey {
    TestKey::load("rsa-a.der", "rsa-a", Algorithm::RS256)
}

pub fn rsa_b() -> TestKey {
    TestKey::load("rsa-b.der", "rsa-b", Algorithm::RS256)
}

pub fn ec_a() -> TestKey {
    TestKey::load("ec-a.der", "ec-a", Algorithm::ES256)
}
