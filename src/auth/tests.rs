use std::io::Write;
use std::sync::Mutex;

use http::HeaderValue;

use super::*;
use crate::config::TokenDigest;
use axum::extract::State;

const CI_TOKEN: &str = "ci-bot-t0ken-Zq9";
const ALICE_TOKEN: &str = "alice.token_~+/=";

fn bearer() -> Authenticator {
    let digest = |token: &str| -> [u8; 32] { Sha256::digest(token.as_bytes()).into() };
    Authenticator::new(&AuthConfig {
        mode: AuthMode::Bearer,
        allow_unauthenticated: false,
        tokens: vec![
            TokenDigest { principal: "ci-bot".into(), sha256: digest(CI_TOKEN) },
            TokenDigest { principal: "alice".into(), sha256: digest(ALICE_TOKEN) },
        ],
        jwt: None,
    })
}

/// `headers`: the `Authorization` values sent; `expected`: the principal or the rejection.
fn check(headers: &[&str], expected: Result<&str, Rejection>) {
    let mut map = HeaderMap::new();
    for value in headers {
        map.append(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
    }
    let got = futures::executor::block_on(bearer().authenticate(&map));
    assert_eq!(got.as_ref().map(|p| p.0.as_str()).map_err(|r| *r), expected, "{headers:?}");
}

#[test]
fn bearer_headers() {
    check(&[], Err(Rejection::Missing));
    check(&[&format!("Bearer {CI_TOKEN}")], Ok("ci-bot"));
    check(&[&format!("bearer {ALICE_TOKEN}")], Ok("alice"));
    check(&[&format!("BEARER {CI_TOKEN}")], Ok("ci-bot"));
    check(&["Bearer wrong"], Err(Rejection::UnknownToken));
    check(&[&format!("Bearer {CI_TOKEN}x")], Err(Rejection::UnknownToken));
    check(&["Bearer"], Err(Rejection::Malformed));
    check(&["Bearer "], Err(Rejection::Malformed));
    check(&[&format!("Bearer  {CI_TOKEN}")], Err(Rejection::Malformed));
    check(&[&format!("Bearer {CI_TOKEN} x")], Err(Rejection::Malformed));
    check(&[&format!("Basic {CI_TOKEN}")], Err(Rejection::Malformed));
    check(&["Basic Y2k6Ym90"], Err(Rejection::Malformed));
    check(&[&format!("Bearer {CI_TOKEN}"), &format!("Bearer {CI_TOKEN}")], Err(Rejection::Malformed));
}

#[test]
fn mode_none_is_anonymous_whatever_is_sent() {
    let none = Authenticator::new(&AuthConfig {
        mode: AuthMode::None,
        allow_unauthenticated: false,
        tokens: vec![],
        jwt: None,
    });
    let mut headers = HeaderMap::new();
    assert_eq!(futures::executor::block_on(none.authenticate(&headers)), Ok(Principal(ANONYMOUS.into())));
    headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer whatever"));
    assert_eq!(futures::executor::block_on(none.authenticate(&headers)), Ok(Principal(ANONYMOUS.into())));
}

/// A writer into a shared buffer, for capturing logs.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Authentication alone as a middleware: what `downstream::fast::front` does before the fast path.
async fn require_principal(State(auth): State<Authenticator>, request: Request, next: Next) -> Response {
    match auth.authenticate(request.headers()).await {
        Ok(principal) => run_as(principal, None, request, next).await,
        Err(rejection) => auth.refuse(rejection, request.method()),
    }
}

/// A real server on 127.0.0.1:0 whose `/mcp` answers with the principal it was given.
async fn serve(auth: Authenticator) -> String {
    let echo = |request: Request| async move {
        let (parts, _) = request.into_parts();
        principal_of(&parts).unwrap_or("<none>").to_string()
    };
    let app = axum::Router::new()
        .route("/mcp", axum::routing::any(echo))
        .layer(axum::middleware::from_fn_with_state(auth, require_principal));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}/mcp")
}

#[tokio::test]
async fn the_middleware_answers_401_or_passes_the_principal_and_never_logs_tokens() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let url = serve(bearer()).await;
    let client = crate::crypto::http_client().build().unwrap();
    let unauthorized = [
        None,
        Some("Bearer wrong-token-123".to_string()),
        Some("Bearer".into()),
        Some(format!("Basic {CI_TOKEN}")),
        Some(format!("Bearer  {CI_TOKEN}")),
    ];
    for header in unauthorized {
        let mut request = client.post(&url).body("{}");
        if let Some(value) = &header {
            request = request.header("authorization", value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{header:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer", "{header:?}");
        assert_eq!(response.text().await.unwrap(), "missing or invalid bearer token\n");
    }
    for (token, principal) in [(CI_TOKEN, "ci-bot"), (ALICE_TOKEN, "alice")] {
        let response = client.post(&url).bearer_auth(token).body("{}").send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.text().await.unwrap(), principal);
    }
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("unauthorized request"), "logs were captured: {logs}");
    for secret in [CI_TOKEN, ALICE_TOKEN, "wrong-token-123"] {
        assert!(!logs.contains(secret), "a token is in the logs: {logs}");
    }
}

#[tokio::test]
async fn mode_none_passes_anonymous() {
    let none = Authenticator::new(&AuthConfig {
        mode: AuthMode::None,
        allow_unauthenticated: false,
        tokens: vec![],
        jwt: None,
    });
    let url = serve(none).await;
    let response = crate::crypto::http_client().build().unwrap().post(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), ANONYMOUS);
}
