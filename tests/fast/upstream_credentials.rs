//! OAuth 2.1 client credentials for an HTTP upstream (`[upstreams.auth]`), end to end: a token
//! endpoint served here (axum on 127.0.0.1:0) that checks the proxy's client id and secret and
//! issues short-lived tokens, counting them; and the fixture behind a gate served here that
//! forwards only requests carrying a token it issued and that has not expired (401 otherwise),
//! counting what it accepted and refused. The proxy runs as its binary.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use futures::TryStreamExt;
use rmcp::model::ReadResourceRequestParams;

use crate::support::PROXY_BIN;
use crate::support::eventually;
use crate::support::fixture::{self, Era, HttpFixture};
use crate::support::proxy::{ProxyProcess, http_upstream, toml_str, write_config};

const CLIENT_ID: &str = "proxy-client";
const CLIENT_SECRET: &str = "client-secret-7d1c";
const SECRET_ENV: &str = "TEST_UPSTREAM_CLIENT_SECRET";
const URI: &str = "gated+fx://fx/item/1";
/// Tokens live 2 s: the proxy fetches the next one a quarter of that (0.5 s) ahead of expiry.
const LIFETIME: Duration = Duration::from_secs(2);

/// How the token endpoint answers.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Tokens that live this long.
    Issue(Duration),
    /// 503.
    Fail,
    /// Accepts the request and never answers.
    Hang,
}

/// The authorization server and the gate in front of the fixture, sharing what was issued.
struct Authority {
    mode: Mutex<Mode>,
    /// Every token issued, with when it expires.
    issued: Mutex<Vec<(String, Instant)>>,
    token_requests: AtomicU64,
    /// Upstream requests forwarded, by the token they carried.
    accepted: Mutex<Vec<String>>,
    refused: AtomicU64,
    fixture: String,
    client: reqwest::Client,
}

impl Authority {
    fn tokens_issued(&self) -> usize {
        self.issued.lock().unwrap().len()
    }
}

/// Serve the token endpoint (`/token`) and the gate (everything else) on 127.0.0.1:0.
async fn serve(authority: Arc<Authority>) -> anyhow::Result<String> {
    let app = axum::Router::new().route("/token", axum::routing::post(token)).fallback(gate).with_state(authority);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{address}"))
}

async fn token(State(authority): State<Arc<Authority>>, headers: HeaderMap, body: String) -> Response {
    authority.token_requests.fetch_add(1, Ordering::SeqCst);
    let expected = base64::engine::general_purpose::STANDARD.encode(format!("{CLIENT_ID}:{CLIENT_SECRET}"));
    let basic = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if basic != format!("Basic {expected}") || !body.split('&').any(|pair| pair == "grant_type=client_credentials") {
        return (StatusCode::UNAUTHORIZED, axum::Json(serde_json::json!({"error": "invalid_client"}))).into_response();
    }
    let mode = *authority.mode.lock().unwrap();
    match mode {
        Mode::Fail => StatusCode::SERVICE_UNAVAILABLE.into_response(),
        Mode::Hang => std::future::pending().await,
        Mode::Issue(lifetime) => {
            let mut issued = authority.issued.lock().unwrap();
            let value = format!("tok-{}-{:016x}", issued.len() + 1, rand::random::<u64>());
            issued.push((value.clone(), Instant::now() + lifetime));
            let reply = serde_json::json!({
                "access_token": value, "token_type": "Bearer", "expires_in": lifetime.as_secs_f64()
            });
            axum::Json(reply).into_response()
        }
    }
}

/// Forward to the fixture when the request carries a live token this authority issued.
async fn gate(State(authority): State<Arc<Authority>>, request: Request) -> Response {
    let bearer = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let token = bearer.strip_prefix("Bearer ").unwrap_or_default().to_string();
    let live =
        authority.issued.lock().unwrap().iter().any(|(value, expires)| *value == token && Instant::now() < *expires);
    if !live {
        authority.refused.fetch_add(1, Ordering::SeqCst);
        let challenge = [(header::WWW_AUTHENTICATE, "Bearer error=\"invalid_token\"")];
        return (StatusCode::UNAUTHORIZED, challenge).into_response();
    }
    authority.accepted.lock().unwrap().push(token);
    forward(&authority, request).await.unwrap_or_else(|e| (StatusCode::BAD_GATEWAY, e.to_string()).into_response())
}

async fn forward(authority: &Authority, request: Request) -> anyhow::Result<Response> {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 16 << 20).await?;
    let mut headers = parts.headers.clone();
    headers.remove(header::HOST);
    headers.remove(header::AUTHORIZATION);
    let url = format!("{}{}", authority.fixture.trim_end_matches("/mcp"), parts.uri);
    let answer = authority.client.request(parts.method, url).headers(headers).body(body).send().await?;
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        response = response.header(name, value);
    }
    Ok(response.body(Body::from_stream(answer.bytes_stream().map_err(std::io::Error::other)))?)
}

/// The fixture, the authority in front of it (tokens of `mode`), and the upstream's config.
async fn gated_fixture(mode: Mode, extra: &str) -> anyhow::Result<(HttpFixture, Arc<Authority>, String)> {
    let fixture = HttpFixture::spawn(&["--resources", "2"]).await?;
    let authority = Arc::new(Authority {
        mode: Mutex::new(mode),
        issued: Mutex::default(),
        token_requests: AtomicU64::new(0),
        accepted: Mutex::default(),
        refused: AtomicU64::new(0),
        fixture: fixture.url.clone(),
        client: reqwest::Client::new(),
    });
    let base = serve(authority.clone()).await?;
    let auth = format!(
        "{extra}\n[upstreams.cache]\nenabled = false\n[upstreams.auth]\nkind = \"client_credentials\"\ntoken_url = {}\nclient_id = \"{CLIENT_ID}\"\nclient_secret_env = \"{SECRET_ENV}\"\nscope = \"mcp\"\n",
        toml_str(&format!("{base}/token"))
    );
    Ok((fixture, authority, http_upstream("gated", &format!("{base}/mcp"), &auth)))
}

#[tokio::test]
async fn tokens_are_refreshed_before_they_expire_and_no_call_fails() -> anyhow::Result<()> {
    let (_fixture, authority, config) = gated_fixture(Mode::Issue(LIFETIME), "").await?;
    let proxy = ProxyProcess::start_with(&config, &[], &[(SECRET_ENV, CLIENT_SECRET)]).await?;
    proxy.wait_up("gated", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;

    // Read at a steady pace until three tokens have been issued (two expiries lived through):
    // every read must succeed.
    let mut pace = tokio::time::interval(Duration::from_millis(150));
    let started = Instant::now();
    let mut reads = 0;
    while authority.tokens_issued() < 3 {
        if started.elapsed() > Duration::from_secs(60) {
            bail!("only {} tokens issued in 60 s", authority.tokens_issued());
        }
        pace.tick().await;
        host.read_resource(ReadResourceRequestParams::new(URI)).await.with_context(|| format!("read {reads}"))?;
        reads += 1;
    }
    let accepted: BTreeSet<String> = authority.accepted.lock().unwrap().iter().cloned().collect();
    assert!(accepted.len() >= 2, "upstream requests carried {} distinct tokens", accepted.len());
    // Refreshed ahead of expiry: each token was fetched while the one before it still lived.
    let issued = authority.issued.lock().unwrap().clone();
    for pair in issued.windows(2) {
        let (fetched, before_expired) = (pair[1].1 - LIFETIME, pair[0].1);
        assert!(fetched < before_expired, "a token fetched only after the one before it expired");
    }

    // No token, nor the secret, in the logs, /status or /metrics.
    let status = proxy.status().await?.to_string();
    let metrics = proxy.admin_get("/metrics").await?;
    let logs = proxy.logs().join("\n");
    let issued: Vec<String> = authority.issued.lock().unwrap().iter().map(|(value, _)| value.clone()).collect();
    for secret in issued.iter().map(String::as_str).chain([CLIENT_SECRET]) {
        for (what, text) in [("logs", &logs), ("/status", &status), ("/metrics", &metrics)] {
            assert!(!text.contains(secret), "`{secret}` appears in {what}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_token_the_upstream_refuses_is_replaced_once_and_the_call_retried() -> anyhow::Result<()> {
    let (_fixture, authority, config) = gated_fixture(Mode::Issue(Duration::from_secs(600)), "").await?;
    let proxy = ProxyProcess::start_with(&config, &[], &[(SECRET_ENV, CLIENT_SECRET)]).await?;
    proxy.wait_up("gated", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    host.read_resource(ReadResourceRequestParams::new(URI)).await?;
    assert_eq!(authority.tokens_issued(), 1);

    // The authority revokes every token it issued (as a key rotation would).
    for (_, expires) in authority.issued.lock().unwrap().iter_mut() {
        *expires = Instant::now();
    }
    let refused_before = authority.refused.load(Ordering::SeqCst);
    host.read_resource(ReadResourceRequestParams::new(URI)).await.context("the read after the revocation")?;
    assert_eq!(authority.tokens_issued(), 2, "one new token");
    assert!(authority.refused.load(Ordering::SeqCst) > refused_before, "the upstream refused the revoked token");
    Ok(())
}

#[tokio::test]
async fn a_failing_or_silent_token_endpoint_is_a_clear_error_for_the_call_not_a_hang() -> anyhow::Result<()> {
    let (_fixture, authority, config) =
        gated_fixture(Mode::Issue(Duration::from_secs(2)), "request_timeout = \"6s\"").await?;
    let proxy = ProxyProcess::start_with(&config, &[], &[(SECRET_ENV, CLIENT_SECRET)]).await?;
    proxy.wait_up("gated", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    host.read_resource(ReadResourceRequestParams::new(URI)).await?;

    for (mode, says) in
        [(Mode::Fail, "refused the proxy's credentials (HTTP 503)"), (Mode::Hang, "did not answer in time")]
    {
        *authority.mode.lock().unwrap() = mode;
        // Once the token in use is due for refresh, a read needs a new one and cannot get it.
        let error = eventually(Duration::from_secs(30), "a read that gets no token", || async {
            let started = Instant::now();
            match host.read_resource(ReadResourceRequestParams::new(URI)).await {
                Ok(_) => bail!("the read still succeeded"),
                Err(error) => Ok((error.to_string(), started.elapsed())),
            }
        })
        .await?;
        let (text, took) = error;
        assert!(text.contains("no access token for the upstream") && text.contains(says), "{text}");
        assert!(took < Duration::from_secs(6), "answered in {took:?}, within the request timeout");
        assert!(!text.contains(CLIENT_SECRET), "{text}");
    }
    Ok(())
}

#[tokio::test]
async fn an_unreachable_token_endpoint_keeps_the_upstream_down_and_status_says_why() -> anyhow::Result<()> {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = closed.local_addr()?.port();
    drop(closed);
    let fixture = HttpFixture::spawn(&["--resources", "1"]).await?;
    let auth = format!(
        "required = false\nreconnect_max = \"250ms\"\n[upstreams.auth]\nkind = \"client_credentials\"\ntoken_url = \"http://127.0.0.1:{port}/token\"\nclient_id = \"{CLIENT_ID}\"\nclient_secret_env = \"{SECRET_ENV}\"\n"
    );
    let config = format!("[server]\nstartup_wait = \"0s\"\n\n{}", http_upstream("gated", &fixture.url, &auth));
    let proxy = ProxyProcess::start_with(&config, &[], &[(SECRET_ENV, CLIENT_SECRET)]).await?;
    let status = proxy.status_when("gated", |s| s["state"] == "down" && s["last_error"].is_string()).await?;
    let reason = status["last_error"].as_str().unwrap_or_default();
    assert!(reason.contains("token endpoint is unreachable"), "{status}");
    Ok(())
}

#[tokio::test]
async fn check_names_a_missing_client_secret_variable_with_the_other_problems() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = [
        http_upstream(
            "gated",
            "http://127.0.0.1:9/mcp",
            &format!("[upstreams.auth]\nkind = \"client_credentials\"\ntoken_url = \"http://127.0.0.1:9/token\"\nclient_id = \"a\"\nclient_secret_env = \"{SECRET_ENV}\"\n"),
        ),
        "[server]\nno_such_key = 1\n".to_string(),
    ]
    .concat();
    let path = write_config(dir.path(), &config)?;
    let output = tokio::process::Command::new(PROXY_BIN)
        .args(["check", "--config"])
        .arg(&path)
        .env_remove(SECRET_ENV)
        .output()
        .await?;
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(78), "{said}");
    assert!(said.contains(&format!("environment variable `{SECRET_ENV}` is not set")), "{said}");
    assert!(said.contains("auth.client_secret_env") && said.contains("no_such_key"), "{said}");
    Ok(())
}
