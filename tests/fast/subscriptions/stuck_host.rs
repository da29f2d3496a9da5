//! A host that never reads its stream delays no other host: the fan-out does not wait on it.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Heard, Host, proxy_with_fixture, touch, wait_subscribed};
use crate::support::fixture::Era;

/// A host that never reads does not delay anyone else: 20 hosts hear 30 updates each while a
/// stuck session holds the same URI.
#[tokio::test]
async fn a_stuck_host_does_not_delay_the_others() -> anyhow::Result<()> {
    let (proxy, _upstream, side) = proxy_with_fixture("legacy", "").await?;
    let uri = "fx+fx://fx/item/0";
    let _stuck = StuckSession::open(&proxy.url, uri).await?;
    let mut hosts = Vec::new();
    for _ in 0..20 {
        hosts.push(Host::connect(&proxy.url, Era::Legacy, &[uri], false).await?);
    }
    wait_subscribed(&side, "fx://fx/item/0", 1).await?;
    let started = std::time::Instant::now();
    for _ in 0..30 {
        touch(&side, "fx://fx/item/0").await?;
    }
    for host in &mut hosts {
        for _ in 0..30 {
            assert_eq!(host.next().await?, Heard::Updated(uri.into()));
        }
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(5),
        "20 hosts × 30 updates took {elapsed:?}: something waited on the stuck host"
    );
    Ok(())
}

/// A legacy session, opened by hand, that subscribes and then never opens or reads its stream.
struct StuckSession {
    _client: reqwest::Client,
}

impl StuckSession {
    async fn open(url: &str, uri: &str) -> anyhow::Result<Self> {
        let client = reqwest::Client::new();
        let post = |body: Value, session: Option<&str>| {
            let mut request = client
                .post(url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .json(&body);
            if let Some(session) = session {
                request = request.header("mcp-session-id", session).header("mcp-protocol-version", "2025-11-25");
            }
            request.send()
        };
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "stuck", "version": "0"}}});
        let response = post(init, None).await?;
        let session = response.headers().get("mcp-session-id").expect("session id").to_str()?.to_owned();
        response.bytes().await?;
        post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), Some(&session)).await?.bytes().await?;
        let subscribe = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": uri}});
        let response = post(subscribe, Some(&session)).await?;
        assert!(response.status().is_success());
        response.bytes().await?;
        Ok(Self { _client: client })
    }
}
