//! An OAuth authorization server for RFC 8693 token exchange tests, and a gate in front of an
//! upstream (the fixture), both served here (axum on 127.0.0.1:0): `/token` issues a token for
//! each exchange of a JWT (recording the subject token it was given) and, to the proxy's own
//! client ([`CLIENT_ID`], [`CLIENT_SECRET`] in HTTP Basic), client-credentials tokens; every
//! other path forwards to the fixture only a request carrying a live token it issued (401
//! otherwise), recording which token each JSON-RPC method came with.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use futures::TryStreamExt;
use serde_json::{Value, json};

/// The proxy's client at the authority.
pub const CLIENT_ID: &str = "proxy-client";
pub const CLIENT_SECRET: &str = "exchange-secret-41f2";
const EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";

/// How the token endpoint answers exchanges (client credentials are always issued).
#[derive(Clone, Copy, PartialEq)]
pub enum Mode {
    /// Exchanged tokens that live this long.
    Issue(Duration),
    /// 400 `invalid_grant`.
    Refuse,
    /// Accepts the request and never answers.
    Hang,
}

/// One exchange the authority answered: the subject token and form it was given, the token
/// issued (if any) and when that expires.
#[derive(Clone)]
pub struct Exchange {
    pub form: Vec<(String, String)>,
    pub subject: String,
    pub issued: Option<(String, Instant)>,
}

/// The authorization server and the gate in front of the fixture.
pub struct Authority {
    pub mode: Mutex<Mode>,
    pub exchanges: Mutex<Vec<Exchange>>,
    /// Client-credentials tokens issued (the shared connection's).
    pub client_tokens: Mutex<Vec<String>>,
    /// Upstream requests forwarded: the JSON-RPC method and the token it carried.
    pub accepted: Mutex<Vec<(String, String)>>,
    pub refused: AtomicU64,
    fixture: String,
    client: reqwest::Client,
}

impl Authority {
    /// An authority answering exchanges as `mode`, its gate in front of the fixture at
    /// `fixture` (its `/mcp` URL), served on 127.0.0.1:0; its base URL (`/token`, `/mcp`).
    pub async fn start(mode: Mode, fixture: &str) -> anyhow::Result<(Arc<Authority>, String)> {
        mcp_resource_proxy::crypto::install();
        let authority = Arc::new(Authority {
            mode: Mutex::new(mode),
            exchanges: Mutex::default(),
            client_tokens: Mutex::default(),
            accepted: Mutex::default(),
            refused: AtomicU64::new(0),
            fixture: fixture.to_string(),
            client: reqwest::Client::new(),
        });
        let base = serve(authority.clone()).await?;
        Ok((authority, base))
    }

    /// The tokens issued in exchange for `subject`, in order.
    pub fn issued_for(&self, subject: &str) -> Vec<String> {
        let exchanges = self.exchanges.lock().unwrap();
        exchanges.iter().filter(|e| e.subject == subject).filter_map(|e| Some(e.issued.as_ref()?.0.clone())).collect()
    }

    /// The tokens `tools/call` requests reached the upstream with, in order.
    pub fn call_tokens(&self) -> Vec<String> {
        self.tokens_of("tools/call")
    }

    /// The tokens `method` requests reached the upstream with, in order.
    pub fn tokens_of(&self, method: &str) -> Vec<String> {
        let accepted = self.accepted.lock().unwrap();
        accepted.iter().filter(|(sent, _)| sent == method).map(|(_, token)| token.clone()).collect()
    }

    /// The JWT the token endpoint was asked to exchange for `token`, if it issued it.
    pub fn exchanged_for(&self, token: &str) -> Option<String> {
        let exchanges = self.exchanges.lock().unwrap();
        let exchange = exchanges.iter().find(|e| e.issued.as_ref().is_some_and(|(value, _)| value == token));
        exchange.map(|e| e.subject.clone())
    }

    fn live(&self, token: &str) -> bool {
        let now = Instant::now();
        let exchanged = self
            .exchanges
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.issued.as_ref().is_some_and(|(value, expires)| value == token && now < *expires));
        exchanged || self.client_tokens.lock().unwrap().iter().any(|value| value == token)
    }
}

async fn serve(authority: Arc<Authority>) -> anyhow::Result<String> {
    let app = axum::Router::new().route("/token", axum::routing::post(token)).fallback(gate).with_state(authority);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{address}"))
}

/// An `application/x-www-form-urlencoded` body's fields.
fn form(body: &str) -> Vec<(String, String)> {
    let decode =
        |text: &str| percent_encoding::percent_decode_str(&text.replace('+', " ")).decode_utf8_lossy().into_owned();
    body.split('&').filter_map(|pair| pair.split_once('=')).map(|(key, value)| (decode(key), decode(value))).collect()
}

async fn token(State(authority): State<Arc<Authority>>, headers: HeaderMap, body: String) -> Response {
    let expected = base64::engine::general_purpose::STANDARD.encode(format!("{CLIENT_ID}:{CLIENT_SECRET}"));
    let basic = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if basic != format!("Basic {expected}") {
        return (StatusCode::UNAUTHORIZED, axum::Json(json!({"error": "invalid_client"}))).into_response();
    }
    let form = form(&body);
    let field = |name: &str| form.iter().find(|(key, _)| key == name).map(|(_, value)| value.clone());
    if field("grant_type").as_deref() == Some("client_credentials") {
        let value = format!("cc-{:016x}", rand::random::<u64>());
        authority.client_tokens.lock().unwrap().push(value.clone());
        return axum::Json(json!({"access_token": value, "token_type": "Bearer", "expires_in": 600})).into_response();
    }
    if field("grant_type").as_deref() != Some(EXCHANGE_GRANT) {
        return (StatusCode::BAD_REQUEST, axum::Json(json!({"error": "unsupported_grant_type"}))).into_response();
    }
    let subject = field("subject_token").unwrap_or_default();
    let mode = *authority.mode.lock().unwrap();
    let lifetime = match mode {
        Mode::Hang => std::future::pending().await,
        Mode::Refuse => {
            authority.exchanges.lock().unwrap().push(Exchange { form, subject, issued: None });
            return (StatusCode::BAD_REQUEST, axum::Json(json!({"error": "invalid_grant"}))).into_response();
        }
        Mode::Issue(lifetime) => lifetime,
    };
    let mut exchanges = authority.exchanges.lock().unwrap();
    let value = format!("xch-{}-{:016x}", exchanges.len() + 1, rand::random::<u64>());
    let issued = Some((value.clone(), Instant::now() + lifetime));
    exchanges.push(Exchange { form, subject, issued });
    let reply = json!({
        "access_token": value,
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "token_type": "Bearer",
        "expires_in": lifetime.as_secs_f64(),
    });
    axum::Json(reply).into_response()
}

/// Forward to the fixture when the request carries a live token this authority issued.
async fn gate(State(authority): State<Arc<Authority>>, request: Request) -> Response {
    let bearer = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let token = bearer.strip_prefix("Bearer ").unwrap_or_default().to_string();
    if !authority.live(&token) {
        authority.refused.fetch_add(1, Ordering::SeqCst);
        let challenge = [(header::WWW_AUTHENTICATE, "Bearer error=\"invalid_token\"")];
        return (StatusCode::UNAUTHORIZED, challenge).into_response();
    }
    forward(&authority, request, token)
        .await
        .unwrap_or_else(|e| (StatusCode::BAD_GATEWAY, e.to_string()).into_response())
}

async fn forward(authority: &Authority, request: Request, token: String) -> anyhow::Result<Response> {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 16 << 20).await?;
    let method = serde_json::from_slice::<Value>(&body).ok().and_then(|v| v["method"].as_str().map(str::to_string));
    authority.accepted.lock().unwrap().push((method.unwrap_or_default(), token));
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
