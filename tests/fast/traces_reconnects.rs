//! A request whose upstream connection breaks under it, or that is sent again, says so on its
//! CLIENT span: the real proxy binary exporting to the OTLP receiver (`support::otlp`), in front
//! of the fixture over stdio, whose child exits while it holds a traced read (the supervisor then
//! reconnects); and in front of the fixture over HTTP behind an authorization server and its gate
//! (`support::token_exchange`), which revokes the proxy's token: the thin read is refused `401`
//! and sent again on rmcp's path, which fetches a new token.

use std::sync::atomic::Ordering;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::eventually;
use crate::support::fixture::{self, DEADLINE, Era, HttpFixture, call_json};
use crate::support::otlp::{ReceivedSpan, Receiver, exporting_to, traceparent_ids};
use crate::support::proxy::{ProxyProcess, fixture_upstream, http_upstream, toml_str};
use crate::support::raw_http::{self, Reply};
use crate::support::token_exchange::{Authority, CLIENT_ID, CLIENT_SECRET, Mode};

const MODERN: &str = "2026-07-28";
const ITEM: &str = "fx+fx://fx/item/1";
const RECONNECT: &str = "mcp_proxy.upstream.reconnect";
const RETRY: &str = "mcp_proxy.upstream.retry";
const SECRET_ENV: &str = "TEST_RETRY_CLIENT_SECRET";

/// A stateless 2026-07-28 read of [`ITEM`] with `traceparent` in its `_meta`.
async fn read(url: &str, traceparent: &str) -> anyhow::Result<Reply> {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "reconnects", "version": "0"},
        "traceparent": traceparent});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": ITEM, "_meta": meta}});
    let request = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", MODERN)
        .header("Mcp-Method", "resources/read")
        .header("Mcp-Name", ITEM)
        .json(&body);
    raw_http::send(request).await
}

/// A read held by the stdio fixture when its child exits: the host gets `upstream_down`, the
/// read's CLIENT span has `error.type` `upstream_down` and the event
/// `mcp_proxy.upstream.reconnect` (reason `connection_broken`), and the supervisor does
/// reconnect.
#[tokio::test]
async fn a_read_whose_upstream_connection_broke_has_a_reconnect_event() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let config =
        format!("{}session = \"shared\"\nreconnect_max = \"500ms\"\n", fixture_upstream("fx", &["--era", "legacy"]));
    let env = exporting_to(&receiver);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let proxy = ProxyProcess::start_with(&config, &[], &env).await?;
    proxy.wait_up("fx", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    call_json(&host, "fx__hold_reads", json!({"on": true})).await?;

    let traceparent = "00-0000000000000000000000000000a001-000000000000b001-01";
    let held = tokio::spawn({
        let url = proxy.url.clone();
        async move { read(&url, traceparent).await }
    });
    eventually(DEADLINE, "the read held by the fixture", || async {
        let stats = call_json(&host, "fx__stats", json!({})).await?;
        anyhow::ensure!(stats["reads_in_flight"] == 1, "{stats}");
        Ok(())
    })
    .await?;
    call_json(&host, "fx__exit", json!({"code": 0})).await?;
    let reply = held.await??;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let error = reply.message().map(|m: Value| m["error"].clone()).unwrap_or_default();
    assert!(error.is_object(), "the read failed: {reply:?}");
    proxy.wait_up("fx", 2).await?;

    let span = client_span(&receiver, traceparent).await?;
    assert_eq!(span.attribute("error.type"), Some("upstream_down"), "{span:#?}");
    let event = span.event(RECONNECT).unwrap_or_else(|| panic!("no {RECONNECT} event: {span:#?}"));
    assert_eq!(event.get("mcp_proxy.reconnect.reason").map(String::as_str), Some("connection_broken"), "{span:#?}");
    Ok(())
}

/// The CLIENT span of `traceparent`'s trace, once the receiver has it.
async fn client_span(receiver: &Receiver, traceparent: &str) -> anyhow::Result<ReceivedSpan> {
    let (trace, _) = traceparent_ids(traceparent)?;
    let client =
        |spans: &[ReceivedSpan]| spans.iter().find(|span| span.trace_id == trace && span.kind == "CLIENT").cloned();
    let spans = receiver.wait("the read's CLIENT span", |s| client(s).is_some()).await?;
    Ok(client(&spans).expect("waited for"))
}

/// An HTTP upstream behind a gate whose authority revoked the proxy's token: a traced read's
/// thin request is refused `401`, sent again on rmcp's path (which gets a new token), and
/// answered; its CLIENT span has the event `mcp_proxy.upstream.retry` with its reason, and no
/// error.
#[tokio::test]
async fn a_read_sent_again_after_a_refusal_has_a_retry_event_and_is_answered() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let fixture = HttpFixture::spawn(&["--era", "legacy"]).await?;
    // Client credentials only: no token is exchanged here.
    let (authority, base) = Authority::start(Mode::Refuse, &fixture.url).await?;
    // No cache (each read goes upstream), no health check between the revocation and the read.
    let auth = format!(
        "health_interval = \"1h\"\n[upstreams.cache]\nenabled = false\n[upstreams.auth]\n\
         kind = \"client_credentials\"\ntoken_url = {}\nclient_id = \"{CLIENT_ID}\"\nclient_secret_env = \"{SECRET_ENV}\"\n",
        toml_str(&format!("{base}/token"))
    );
    let mut env = exporting_to(&receiver);
    env.push((SECRET_ENV, CLIENT_SECRET.into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let proxy = ProxyProcess::start_with(&http_upstream("fx", &format!("{base}/mcp"), &auth), &[], &env).await?;
    proxy.wait_up("fx", 1).await?;

    let first = "00-0000000000000000000000000000a002-000000000000b002-01";
    assert_eq!(read(&proxy.url, first).await?.contents_text().as_deref(), Some("item 1 v1"));
    let span = client_span(&receiver, first).await?;
    assert!(span.event(RETRY).is_none(), "a read answered at once is not sent again: {span:#?}");

    // The authority revokes the token it issued (as a key rotation would).
    authority.client_tokens.lock().unwrap().clear();
    let refused_before = authority.refused.load(Ordering::SeqCst);
    let retried = "00-0000000000000000000000000000a003-000000000000b003-01";
    let reply = read(&proxy.url, retried).await?;
    assert_eq!(reply.contents_text().as_deref(), Some("item 1 v1"), "the host got its answer: {reply:?}");
    assert!(authority.refused.load(Ordering::SeqCst) > refused_before, "the revoked token was refused");
    assert_eq!(authority.client_tokens.lock().unwrap().len(), 1, "one new token");

    let span = client_span(&receiver, retried).await?;
    let event = span.event(RETRY).unwrap_or_else(|| panic!("no {RETRY} event: {span:#?}"));
    let reason = event.get("mcp_proxy.retry.reason").map(String::as_str);
    assert_eq!(reason, Some("an HTTP status other than 200"), "{span:#?}");
    assert_eq!(span.attribute("error.type"), None, "the read was answered: {span:#?}");
    Ok(())
}
