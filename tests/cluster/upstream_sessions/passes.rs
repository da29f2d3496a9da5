//! A forwarded request's mark: one made as a replica makes it is run on the principal's
//! session; a forged, altered, stale, misdirected or replayed one is refused and not run, and an
//! upload without one is refused before its body.

use anyhow::Context;
use serde_json::{Value, json};

use mcp_resource_proxy::cluster::ClusterKeys;
use mcp_resource_proxy::cluster::keys::label;
use mcp_resource_proxy::cluster::session_pass::{self, Identity, Passes};
use mcp_resource_proxy::crypto::SealingKey;

use super::start;
use crate::support::DEADLINE;
use crate::support::cluster::{SECRET, forwards};

/// A POST of `body` to the session endpoint at `url`, with `pass` on its head (and the MCP
/// session `session` once there is one): its status, its `Mcp-Session-Id` and its text.
async fn post_sealed(
    url: &str,
    pass: Option<&str>,
    session: Option<&str>,
    body: &Value,
) -> anyhow::Result<(u16, Option<String>, String)> {
    let mut post = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(pass) = pass {
        post = post.header(session_pass::HEADER, pass);
    }
    if let Some(session) = session {
        post = post.header("mcp-session-id", session).header("mcp-protocol-version", "2025-11-25");
    }
    let response = post.send().await?;
    let status = response.status().as_u16();
    let id = response.headers().get("mcp-session-id").and_then(|id| id.to_str().ok()).map(str::to_owned);
    let text = tokio::time::timeout(DEADLINE, response.text()).await.context("the answer hung")??;
    Ok((status, id, text))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_altered_stale_misdirected_or_replayed_forward_is_refused() -> anyhow::Result<()> {
    let (cluster, _policies) = start(1).await?;
    let replica = &cluster.replicas[0];
    let url = format!("{}{}", replica.url.strip_suffix("/mcp").context("an /mcp URL")?, session_pass::PATH);
    let keys = ClusterKeys::new(SECRET.as_bytes());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as u64;
    let alice = Identity { principal: "alice".into(), upstream: "per".into(), host: None };
    let passes = Passes::new("replica-9", &keys.derive(label::SESSION_PASS));
    let pass = || passes.make("replica-0", &alice, None, None);

    // A request made as a replica makes it is run on alice's session.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "replica-9", "version": "1"}}});
    let (status, session, answer) = post_sealed(&url, Some(&pass()), None, &initialize).await?;
    assert_eq!(status, 200, "{answer}");
    let session = session.context("an MCP session")?;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post_sealed(&url, Some(&pass()), Some(&session), &initialized).await?;
    let recall = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall"}});
    let genuine = pass();
    let (status, _, answer) = post_sealed(&url, Some(&genuine), Some(&session), &recall).await?;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("nothing"), "alice's fresh session answered: {answer}");

    let foreign = Passes::new(
        "replica-9",
        &ClusterKeys::new(b"another cluster's secret, 32 bytes or more").derive(label::SESSION_PASS),
    );
    let mut altered = genuine.clone().into_bytes();
    altered[genuine.len() / 2] = if altered[genuine.len() / 2] == b'A' { b'B' } else { b'A' };
    let key = SealingKey::new(&keys.derive(label::SESSION_PASS));
    let refused = [
        ("replayed", Some(genuine.clone())),
        ("no mark", None),
        ("another secret", Some(foreign.make("replica-0", &alice, None, None))),
        ("altered", Some(String::from_utf8(altered)?)),
        ("stale", Some(session_pass::seal_with(&key, "replica-0", (now - 60_000, None), &alice, None))),
        ("for another replica", Some(passes.make("replica-9", &alice, None, None))),
    ];
    for (what, pass) in refused {
        let (status, _, answer) = post_sealed(&url, pass.as_deref(), Some(&session), &recall).await?;
        assert_eq!(status, 403, "{what}: {answer}");
        assert!(!answer.contains("nothing"), "{what} was run: {answer}");
    }
    // Without a right pass on its head, a request is refused before its body is read.
    let passes = [
        ("no pass", None),
        ("another secret's pass", Some(foreign.make("replica-0", &alice, None, None))),
        (
            "a pass for another replica",
            Some(Passes::new("replica-9", &keys.derive(label::SESSION_PASS)).make("replica-8", &alice, None, None)),
        ),
        ("a stale pass", Some(session_pass::seal_with(&key, "replica-0", (now - 60_000, None), &alice, None))),
    ];
    for (what, pass) in passes {
        let (status, _, answer) = post_sealed(&url, pass.as_deref(), None, &initialize).await?;
        assert_eq!(status, 403, "{what}: {answer}");
        assert!(!answer.contains("nothing"), "{what} was run: {answer}");
    }
    let all = [replica];
    assert_eq!(forwards(all.iter().copied(), "refused").await?, 10.0);
    assert_eq!(forwards(all.iter().copied(), "served").await?, 1.0, "only the genuine request ran");
    Ok(())
}

/// An upload to the replicas' route that carries no pass is answered on its head: a client
/// that announces 30 MiB and sends none of it is refused at once, and the replica reads none of
/// it (its connection is closed rather than drained).
#[tokio::test(flavor = "multi_thread")]
async fn an_unmarked_upload_to_the_replicas_route_is_refused_before_its_body() -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (cluster, _policies) = start(1).await?;
    let replica = &cluster.replicas[0];
    let address =
        replica.url.strip_prefix("http://").and_then(|rest| rest.strip_suffix("/mcp")).context("an address")?;
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        session_pass::PATH,
        30 << 20
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(b"{\"to\":").await?;
    let mut answer = vec![0u8; 1024];
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut answer))
        .await
        .context("no answer to the head within 5 s: the body was waited for")??;
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    Ok(())
}
