//! Requests turned away before they were served, or past a cap: over a rate limit, over the
//! calls or sessions a principal may have, on another principal's session, with 2026-07-28
//! headers that disagree with the body; each is one event.

use anyhow::Context;
use rmcp::model::{CallToolRequestParams, JsonObject};
use serde_json::{Value, json};

use super::{ALICE_TOKEN, BOB_TOKEN, call, expect, post_initialize, wait_tally};
use crate::support::fixture::{Era, connect_http_with_token};
use crate::support::proxy::{ProxyProcess, fixture_upstream, toml_str};
use crate::support::{DEADLINE, eventually};

/// Requests turned away before they were served, and a call past an upstream's session cap: a
/// call over its upstream's rate limit (429), a call past `server.max_calls_per_principal`, a
/// request on another principal's session (404), and a call that found its per-principal
/// upstream's sessions all taken are each exactly one event.
#[tokio::test]
async fn every_refusal_before_or_past_a_cap_is_one_event() -> anyhow::Result<()> {
    let policies = tempfile::tempdir()?;
    for who in ["alice", "bob"] {
        let rules = format!("principals = [\"{who}\"]\nallow = [\"fx+**\", \"tool://**\", \"prompt://**\"]\n");
        std::fs::write(policies.path().join(format!("{who}.toml")), rules)?;
    }
    let audit_dir = tempfile::tempdir()?;
    let audit_file = audit_dir.path().join("audit.jsonl");
    let per_principal = fixture_upstream("px", &["--resources", "1"]).replace(
        "\n\n",
        "\nsession = \"per-principal\"\nmax_sessions = 1\n[upstreams.rate_limits]\ncalls_per_minute = 2\n\n",
    );
    let text = format!(
        "[server]\nmax_calls_per_principal = 1\n\n[auth]\nmode = \"bearer\"\n\n\
         [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n\
         [policies]\ndir = {}\n\n[audit]\nfile = {}\n\n{}{per_principal}",
        toml_str(policies.path().to_str().expect("utf-8 path")),
        toml_str(audit_file.to_str().expect("utf-8 path")),
        fixture_upstream("fx", &["--resources", "1"]),
    );
    let env = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
    let proxy = ProxyProcess::start_with_offerings(&text, &env, &["fx", "px"]).await?;
    let (alice, _) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE_TOKEN).await?;
    let (bob, _) = connect_http_with_token(&proxy.url, Era::Modern, BOB_TOKEN).await?;

    // px: alice's call opens its one session; bob's finds none left; alice's third call is over
    // her px bucket (two a minute).
    assert!(call(&alice, "px__stats").await);
    assert!(!call(&bob, "px__stats").await, "past max_sessions");
    assert!(call(&alice, "px__stats").await);
    let (alice_stateless, _) = connect_http_with_token(&proxy.url, Era::Modern, ALICE_TOKEN).await?;
    assert!(!call(&alice_stateless, "px__stats").await, "over px's rate limit");

    // One call of alice's in flight (held 5 s, from another host of hers: one rmcp client sends
    // its requests one after another): her next is over max_calls_per_principal. The calls that
    // went through before the held one was in flight are counted, and so are the held call's
    // own refusals while a probe of hers was in flight (it is sent again until it is admitted).
    let (alice_holding, _) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE_TOKEN).await?;
    let peer = alice_holding.peer().clone();
    let held_refused = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let held = tokio::spawn({
        let held_refused = held_refused.clone();
        async move {
            let arguments = json!({"count": 0, "hold_ms": 5000}).as_object().cloned().unwrap_or_default();
            loop {
                let params = CallToolRequestParams::new("fx__progress").with_arguments(arguments.clone());
                match peer.call_tool(params).await {
                    Err(error) if error.to_string().contains("call limit reached") => {
                        held_refused.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    answer => return answer,
                }
            }
        }
    });
    let through = std::cell::Cell::new(0);
    eventually(DEADLINE, "a call refused over the in-flight cap", || {
        let (alice, through) = (&alice, &through);
        async move {
            let params = CallToolRequestParams::new("fx__stats").with_arguments(JsonObject::new());
            match alice.call_tool(params).await {
                Ok(_) => {
                    through.set(through.get() + 1);
                    anyhow::bail!("the call went through")
                }
                Err(error) if error.to_string().contains("call limit reached") => Ok(()),
                Err(error) => Err(error.into()),
            }
        }
    })
    .await?;
    held.await??;

    // bob names alice's session: the same 404 as an unknown session.
    let session = initialize_session(&proxy.url, ALICE_TOKEN).await?;
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let status = reqwest::Client::new()
        .post(&proxy.url)
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {BOB_TOKEN}"))
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&body)
        .send()
        .await?
        .status();
    assert_eq!(status.as_u16(), 404);

    let expected = expect(&[
        ("call", 4 + through.get()),
        ("refused:rate_limited", 1),
        ("refused:call_limit", 1 + held_refused.load(std::sync::atomic::Ordering::SeqCst)),
        ("refused:wrong_principal", 1),
    ]);
    let found = wait_tally(&audit_file, &expected).await?;
    let over = found.iter().find(|e| e["event"] == "call" && e["principal"] == "bob").expect("bob's call");
    assert_eq!((over["name"].as_str(), over["outcome"].as_str()), (Some("px__stats"), Some("over_limit")));
    let limited = found.iter().find(|e| e["reason"] == "rate_limited").expect("the rate-limited call");
    assert_eq!(
        (limited["principal"].as_str(), limited["method"].as_str(), limited["name"].as_str()),
        (Some("alice"), Some("tools/call"), Some("px__stats"))
    );
    // The probe refused over the cap (and any refusal of the held call, sent again) are alice's.
    let capped: Vec<_> = found.iter().filter(|e| e["reason"] == "call_limit").collect();
    assert!(capped.iter().all(|e| e["principal"] == "alice"), "{capped:?}");
    assert!(capped.iter().any(|e| e["name"] == "fx__stats"), "the probe over the cap: {capped:?}");
    let wrong = found.iter().find(|e| e["reason"] == "wrong_principal").expect("bob on alice's session");
    assert_eq!(wrong["principal"], "bob");
    let text = std::fs::read_to_string(&audit_file)?;
    for secret in [ALICE_TOKEN, BOB_TOKEN, &session] {
        assert!(!text.contains(secret), "the audit file holds a token or a session id");
    }
    Ok(())
}

/// A 2025 session opened over plain HTTP with `token`: its id.
async fn initialize_session(url: &str, token: &str) -> anyhow::Result<String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let response = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .json(&body)
        .send()
        .await?;
    let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    session.ok_or_else(|| anyhow::anyhow!("no session id (HTTP {})", response.status()))
}

/// A session past `server.max_sessions_per_principal` is refused (503) and is exactly one
/// `session_limit` event, of that principal's `initialize`; another principal still opens one.
#[tokio::test]
async fn a_session_past_the_principal_cap_is_one_refused_event() -> anyhow::Result<()> {
    let audit_dir = tempfile::tempdir()?;
    let audit_file = audit_dir.path().join("audit.jsonl");
    let text = format!(
        "[server]\nmax_sessions_per_principal = 1\n\n[auth]\nmode = \"bearer\"\n\n\
         [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n\
         [audit]\nfile = {}\n\n{}",
        toml_str(audit_file.to_str().expect("utf-8 path")),
        fixture_upstream("fx", &["--resources", "1"]),
    );
    let env = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
    let proxy = ProxyProcess::start_with(&text, &[], &env).await?;
    let alices = initialize_session(&proxy.url, ALICE_TOKEN).await?;
    let bearer = format!("Bearer {ALICE_TOKEN}");
    assert_eq!(post_initialize(&proxy.url, Some(&bearer)).await?, 503, "alice's second session");
    initialize_session(&proxy.url, BOB_TOKEN).await.context("bob's first session")?;

    let found = wait_tally(&audit_file, &expect(&[("refused:session_limit", 1)])).await?;
    let refused = &found[0];
    assert_eq!((refused["principal"].as_str(), refused["method"].as_str()), (Some("alice"), Some("initialize")));
    let text = std::fs::read_to_string(&audit_file)?;
    assert!(!text.contains(ALICE_TOKEN) && !text.contains(&alices), "the audit file holds a token or a session id");
    Ok(())
}

/// A 2026-07-28 stateless POST of `method` with `params` (its `_meta` filled in as of
/// `meta_version`), request id `id`, carrying `headers`: its HTTP status.
async fn post_modern(
    url: &str,
    id: u64,
    (method, mut params): (&str, Value),
    meta_version: &str,
    headers: &[(&str, &str)],
) -> anyhow::Result<u16> {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": meta_version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}});
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {ALICE_TOKEN}"))
        .json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    Ok(request.send().await?.status().as_u16())
}

/// 2026-07-28 requests whose MCP headers disagree with their body are answered 400 before any
/// handler runs, and each is one `refused` event (`header_mismatch`, alice's, with its request
/// id): an `Mcp-Name` naming another URI or tool, an `Mcp-Method` naming another method, a
/// missing `Mcp-Method`, an `MCP-Protocol-Version` other than the body's. A request whose
/// headers agree is served and audited as itself.
#[tokio::test]
async fn each_request_refused_for_headers_that_disagree_with_its_body_is_one_event() -> anyhow::Result<()> {
    let audit_dir = tempfile::tempdir()?;
    let audit_file = audit_dir.path().join("audit.jsonl");
    let text = format!(
        "[auth]\nmode = \"bearer\"\n\n[[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [audit]\nfile = {}\n\n{}",
        toml_str(audit_file.to_str().expect("utf-8 path")),
        fixture_upstream("fx", &["--resources", "2"]),
    );
    let proxy = ProxyProcess::start_with_offerings(&text, &[("ALICE_TOKEN", ALICE_TOKEN)], &["fx"]).await?;
    let (item, other) = ("fx+fx://fx/item/1", "fx+fx://fx/item/0");
    let read = || ("resources/read", json!({"uri": item}));
    let call = || ("tools/call", json!({"name": "fx__stats", "arguments": {}}));
    let v = "2026-07-28";
    let version = ("mcp-protocol-version", v);
    let refused = [
        (1, read(), v, vec![version, ("mcp-method", "resources/read"), ("mcp-name", other)]),
        (2, call(), v, vec![version, ("mcp-method", "tools/call"), ("mcp-name", "fx__other")]),
        (3, read(), v, vec![version, ("mcp-method", "tools/call"), ("mcp-name", item)]),
        (4, call(), v, vec![version, ("mcp-method", "resources/read"), ("mcp-name", "fx__stats")]),
        (5, read(), v, vec![version, ("mcp-name", item)]),
        (6, read(), "2025-11-25", vec![version, ("mcp-method", "resources/read"), ("mcp-name", item)]),
    ];
    for (id, asked, meta_version, headers) in &refused {
        let status = post_modern(&proxy.url, *id, asked.clone(), meta_version, headers).await?;
        assert_eq!(status, 400, "request {id}: {headers:?}");
    }
    let agreeing = [version, ("mcp-method", "resources/read"), ("mcp-name", item)];
    assert_eq!(post_modern(&proxy.url, 7, read(), v, &agreeing).await?, 200, "headers that agree");

    let found = wait_tally(&audit_file, &expect(&[("refused:header_mismatch", refused.len()), ("read", 1)])).await?;
    let mut ids: Vec<String> = found
        .iter()
        .filter(|e| e["reason"] == "header_mismatch")
        .map(|e| {
            assert_eq!((e["principal"].as_str(), e["outcome"].as_str()), (Some("alice"), Some("refused")), "{e}");
            e["request"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, ["1", "2", "3", "4", "5", "6"], "one event per refused request, with its id");
    assert!(!std::fs::read_to_string(&audit_file)?.contains(ALICE_TOKEN), "a token in the audit file");
    Ok(())
}
