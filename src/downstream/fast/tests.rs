//! The fast path in process: which requests it answers, and that everything else reaches the
//! service behind it (rmcp in the real stack; here a stand-in that answers 418 with the body it
//! got) with the same body.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use http::{Request, StatusCode};
use hyper::service::Service;
use hyper_util::service::TowerToHyperService;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::{Value, json};

use super::{AllowedHosts, BodyGuard, FastPath, Front, front};
use crate::auth::Authenticator;
use crate::config::Config;
use crate::config::{AuthConfig, AuthMode, TokenDigest};
use crate::downstream::sessions::SessionBook;
use crate::metrics::Transport;
use crate::protocol::Era;
use crate::proxy::Proxy;
use crate::spine::Spine;

const URI: &str = "docs+file:///a.txt";
const MODERN: &str = "2026-07-28";

struct Stack {
    fast: FastPath,
    auth: Authenticator,
    _files: tempfile::TempDir,
    _shutdown: tokio_util::sync::DropGuard,
}

impl Stack {
    async fn start(server: &str) -> Self {
        let files = tempfile::tempdir().expect("tempdir");
        std::fs::write(files.path().join("a.txt"), "alpha").expect("write");
        let dir = files.path().to_str().expect("utf-8").replace('\\', "\\\\");
        let text = format!("[server]\n{server}\n[[upstreams]]\nname = \"docs\"\ndir = \"{dir}\"\n");
        let config = Config::from_toml(&text, files.path(), &|_| None).expect("config");
        let spine = Spine::new();
        let shutdown = spine.shutdown();
        let proxy = Proxy::start(config, &spine);
        assert!(proxy.wait_settled(std::time::Duration::from_secs(10)).await, "upstream up");
        let book = Arc::new(SessionBook::new(10, 10));
        let manager = Arc::new(LocalSessionManager::default());
        let hosts = Arc::new(AllowedHosts::new(&["127.0.0.1".to_owned(), "localhost".to_owned()]));
        let fast = FastPath { proxy, book, manager, hosts };
        Self { fast, auth: bearer(&["alice", "bob"]), _files: files, _shutdown: shutdown.drop_guard() }
    }

    /// A session rmcp holds, entered in the book for `owner`; handshaken when `ready`.
    async fn session(&self, owner: &str, ready: bool) -> String {
        let (id, _transport) = self.fast.manager.create_session().await.expect("session");
        let counted = self.fast.proxy.metrics().downstream_session(Transport::Http, Era::Legacy);
        self.fast.book.admit(&id, owner, counted).expect("admitted");
        if ready {
            self.fast.book.handshake_done(&id);
        }
        id.to_string()
    }

    async fn send(&self, request: Request<Body>) -> (StatusCode, String, String) {
        let inner = axum::Router::new()
            .route("/mcp", axum::routing::any(|body: Bytes| async move { (StatusCode::IM_A_TEAPOT, body) }));
        let proxy = &self.fast.proxy;
        let bodies = BodyGuard::new(Duration::from_secs(10), 16 << 20, proxy.metrics().clone(), proxy.audit().clone());
        let state = Front { auth: self.auth.clone(), fast: self.fast.clone(), bodies };
        let app = inner.layer(axum::middleware::from_fn_with_state(state, front));
        let response: Response = TowerToHyperService::new(app).call(request).await.expect("infallible");
        let status = response.status();
        let kind = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
        (status, kind, String::from_utf8(body.to_vec()).expect("utf-8"))
    }

    fn requests(&self, method: &str, outcome: &str) -> f64 {
        let text = self.fast.proxy.metrics().render();
        let series = format!("mcp_proxy_downstream_requests_total{{method=\"{method}\",outcome=\"{outcome}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&series)).map_or(0.0, |v| v.parse().expect("number"))
    }
}

/// Bearer authentication where `<name>-token` is the token of each principal `name`.
fn bearer(principals: &[&str]) -> Authenticator {
    let digest = |token: String| -> [u8; 32] { <sha2::Sha256 as sha2::Digest>::digest(token.as_bytes()).into() };
    let tokens =
        principals.iter().map(|p| TokenDigest { principal: p.to_string(), sha256: digest(format!("{p}-token")) });
    Authenticator::new(&AuthConfig {
        mode: AuthMode::Bearer,
        allow_unauthenticated: false,
        tokens: tokens.collect(),
        jwt: None,
    })
}

/// Request metadata as the rmcp client sends it (with a progress token on every request).
fn modern_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
        "progressToken": 3})
}

/// A POST as the rmcp client sends it, as `principal`.
fn post(principal: &str, body: &Value, headers: &[(&str, &str)]) -> Request<Body> {
    post_bytes(principal, serde_json::to_vec(body).expect("json"), headers)
}

/// A POST of these exact body bytes.
fn post_bytes(principal: &str, bytes: Vec<u8>, headers: &[(&str, &str)]) -> Request<Body> {
    let mut builder = Request::post("/mcp")
        .header("authorization", format!("Bearer {principal}-token"))
        .header("host", "127.0.0.1:8080")
        .header("accept", "text/event-stream, application/json")
        .header("content-type", "application/json")
        .header("content-length", bytes.len());
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let mut request = builder.body(Body::from(bytes.clone())).expect("request");
    request.extensions_mut().insert(Sent(String::from_utf8(bytes).expect("utf-8")));
    request
}

/// The body a test request carries, to compare with what the service behind received.
#[derive(Clone)]
struct Sent(String);

fn modern_read(uri: &str) -> Request<Body> {
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": uri, "_meta": modern_meta()}});
    post("alice", &body, &[("mcp-protocol-version", MODERN), ("mcp-method", "resources/read"), ("mcp-name", uri)])
}

fn session_call(principal: &str, session: &str, method: &str, params: Value) -> Request<Body> {
    let body = json!({"jsonrpc": "2.0", "id": "s", "method": method, "params": params});
    post(principal, &body, &[("mcp-session-id", session), ("mcp-protocol-version", "2025-06-18")])
}

#[tokio::test]
async fn stateless_reads_and_lists_are_answered_in_front_of_rmcp_and_counted() {
    let stack = Stack::start("").await;
    let (status, kind, body) = stack.send(modern_read(URI)).await;
    assert_eq!((status, kind.as_str()), (StatusCode::OK, "application/json"), "{body}");
    let reply: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(reply["result"]["contents"][0]["text"], "alpha");
    assert_eq!(reply["result"]["resultType"], "complete");
    assert_eq!(stack.requests("resources/read", "ok"), 1.0);
    for method in ["resources/list", "resources/templates/list"] {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": {"_meta": modern_meta()}});
        let request = post("alice", &body, &[("mcp-protocol-version", MODERN), ("mcp-method", method)]);
        let (status, _, body) = stack.send(request).await;
        assert_eq!(status, StatusCode::OK, "{method}: {body}");
        assert_eq!(stack.requests(method, "ok"), 1.0, "{method} counted");
    }
    // Not found is answered here too, with the 2026-07-28 code.
    let (status, _, body) = stack.send(modern_read("docs+file:///missing.txt")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(serde_json::from_str::<Value>(&body).expect("json")["error"]["code"], -32602);
    assert_eq!(stack.requests("resources/read", "not_found"), 1.0);
}

#[tokio::test]
async fn a_session_is_served_only_when_known_handshaken_held_and_of_the_same_principal() {
    let stack = Stack::start("").await;
    let ready = stack.session("alice", true).await;
    let read = |principal: &str, session: &str| {
        session_call(principal, session, "resources/read", json!({"uri": URI, "_meta": {"progressToken": 4}}))
    };
    let (status, kind, body) = stack.send(read("alice", &ready)).await;
    assert_eq!((status, kind.as_str()), (StatusCode::OK, "text/event-stream"), "{body}");
    let data = body.strip_prefix("data: ").and_then(|b| b.strip_suffix("\n\n")).expect("one SSE event");
    let reply: Value = serde_json::from_str(data).expect("json");
    assert_eq!(reply["result"]["contents"][0]["text"], "alpha");
    assert!(reply["result"].get("ttlMs").is_none() && reply["result"].get("resultType").is_none(), "{reply}");

    let not_ready = stack.session("alice", false).await;
    assert_eq!(stack.send(read("alice", &not_ready)).await.0, StatusCode::IM_A_TEAPOT, "before its handshake");
    assert_eq!(stack.send(read("bob", &ready)).await.0, StatusCode::IM_A_TEAPOT, "another principal");
    assert_eq!(stack.send(read("alice", "no-such-session")).await.0, StatusCode::IM_A_TEAPOT, "unknown");
    stack.fast.manager.close_session(&Arc::from(ready.as_str())).await.expect("closed");
    assert_eq!(stack.send(read("alice", &ready)).await.0, StatusCode::IM_A_TEAPOT, "closed by rmcp");
}

#[tokio::test]
async fn anything_it_is_not_sure_of_reaches_rmcp_with_the_same_body() {
    let stack = Stack::start("").await;
    let session = stack.session("alice", true).await;
    let read =
        json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": URI, "_meta": modern_meta()}});
    let modern = [("mcp-protocol-version", MODERN), ("mcp-method", "resources/read"), ("mcp-name", URI)];
    let mut extra_meta = read.clone();
    extra_meta["params"]["_meta"]["io.modelcontextprotocol/other"] = json!(1);
    let mut mrtr = read.clone();
    mrtr["params"]["requestState"] = json!("opaque");
    let cases: Vec<(&str, Request<Body>)> = vec![
        ("batch", post("alice", &json!([read.clone()]), &modern)),
        ("notification", post("alice", &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), &modern)),
        ("other method", session_call("alice", &session, "resources/subscribe", json!({"uri": URI}))),
        ("extra _meta", post("alice", &extra_meta, &modern)),
        ("MRTR state", post("alice", &mrtr, &modern)),
        ("Mcp-Method disagrees", post("alice", &read, &[modern[0], ("mcp-method", "resources/list"), modern[2]])),
        ("Mcp-Name missing", post("alice", &read, &modern[..2])),
        ("no version header", post("alice", &read, &modern[1..])),
        (
            "session and 2026 _meta",
            post("alice", &read, &[modern[0], modern[1], modern[2], ("mcp-session-id", &session)]),
        ),
        (
            "session with _meta",
            session_call("alice", &session, "resources/read", json!({"uri": URI, "_meta": {"other": 1}})),
        ),
        ("session at 2026", {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"});
            post("alice", &body, &[("mcp-session-id", &session), ("mcp-protocol-version", MODERN)])
        }),
    ];
    for (what, request) in cases {
        let sent = request.extensions().get::<Sent>().cloned().expect("sent body").0;
        let (status, _, body) = stack.send(request).await;
        assert_eq!(status, StatusCode::IM_A_TEAPOT, "{what}: answered by the fast path: {body}");
        assert_eq!(body, sent, "{what}: body changed on the way to rmcp");
    }
    // Authentication comes first: no token, or one nobody holds, is 401 and reaches nothing.
    for token in [None, Some("Bearer mallory-token")] {
        let mut request = modern_read(URI);
        match token {
            None => request.headers_mut().remove("authorization"),
            Some(value) => request.headers_mut().insert("authorization", value.parse().expect("header")),
        };
        let (status, _, body) = stack.send(request).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}: {body}");
    }
    let head_cases = [("origin", "https://evil.example"), ("host", "evil.example"), ("accept", "application/json")];
    for (name, value) in head_cases {
        let mut request = modern_read(URI);
        request.headers_mut().insert(name, value.parse().expect("header"));
        assert_eq!(stack.send(request).await.0, StatusCode::IM_A_TEAPOT, "{name}: {value}");
    }
    let off = Stack::start("fast_path = false").await;
    assert_eq!(off.send(modern_read(URI)).await.0, StatusCode::IM_A_TEAPOT, "server.fast_path = false");
}

/// Bodies the typed parse declines (float id, escaped key, `null` cursor, an unknown field)
/// are read by rmcp's parse and still answered here, as a plain body is.
#[tokio::test]
async fn shapes_left_to_rmcps_parse_are_answered_alike() {
    let stack = Stack::start("").await;
    let headers = [("mcp-protocol-version", MODERN), ("mcp-method", "resources/read"), ("mcp-name", URI)];
    let meta = modern_meta().to_string();
    let bodies = [
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{{"uri":"{URI}","_meta":{meta}}}}}"#),
        format!(r#"{{"jsonrpc":"2.0","id":1.0,"method":"resources/read","params":{{"uri":"{URI}","_meta":{meta}}}}}"#),
        format!(
            r#"{{"jsonrpc":"2.0","\u0069d":1,"method":"resources/read","params":{{"uri":"{URI}","_meta":{meta}}}}}"#
        ),
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{{"uri":"{URI}","x":[],"_meta":{meta}}}}}"#
        ),
    ];
    let mut answers = Vec::new();
    for body in bodies {
        let (status, kind, reply) = stack.send(post_bytes("alice", body.clone().into_bytes(), &headers)).await;
        assert_eq!((status, kind.as_str()), (StatusCode::OK, "application/json"), "{body}: {reply}");
        let mut reply: Value = serde_json::from_str(&reply).expect("json");
        reply["result"]["ttlMs"] = json!("<remaining lifetime>");
        answers.push(reply);
    }
    assert!(answers.iter().all(|a| *a == answers[0]), "{answers:#?}");
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"resources/list","params":{"cursor":null,"_meta":META}}"#;
    let list = list.replace("META", &meta).into_bytes();
    let request = post_bytes("alice", list, &[("mcp-protocol-version", MODERN), ("mcp-method", "resources/list")]);
    assert_eq!(stack.send(request).await.0, StatusCode::OK, "a null cursor");
}
