//! The audit trail end to end: the real proxy binary with `[audit] file`, a real fixture
//! upstream (one child shared by every principal, so reads are cached), real rmcp clients in both eras (a 2025 session and 2026-07-28 stateless requests,
//! both answered on the fast path for reads), static tokens and a JWT checked against a JWKS
//! served by the test, refused tokens over plain HTTP, a policy reload and a config reload
//! (SIGHUP). The file must hold exactly one event per call, prompt, read, subscription,
//! denial, refused token and reload of the script (counted by kind), no token or part of one,
//! and agree with `/metrics`. A second proxy with the fast path off shows the rmcp handler's
//! reads audited alike. Refusals before a request is served (caps, another principal's session,
//! 2026-07-28 headers that disagree with the body) are one event each.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;

use rmcp::model::{
    CallToolRequestParams, GetPromptRequestParams, JsonObject, ReadResourceRequestParams, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequestParams,
};
use serde_json::{Value, json};

use crate::support::fixture::{Era, FixtureClient, connect_http_with_token};
use crate::support::jwt::{ISSUER, JwksServer, RESOURCE, claims, now, rsa_a, rsa_b};
use crate::support::proxy::{ProxyProcess, fixture_upstream, toml_str};
use crate::support::{DEADLINE, eventually};

const ALICE_TOKEN: &str = "alice-audit-tok-7c21e9f04b";
const BOB_TOKEN: &str = "bob-audit-tok-1d8a3f6e52";
const UNKNOWN_TOKEN: &str = "nobody-audit-tok-93b7c0d1a4";

/// alice (static token): the fixture's items but item 0, its `stats` tool, its `ask` prompt.
/// dave (a JWT): item 1 only, no tools. bob (static token): everything.
const POLICIES: [(&str, &str); 3] = [
    (
        "alice.toml",
        "principals = [\"alice\"]\nallow = [\"fx+fx://fx/item/*\", \"tool://fx/stats\", \"prompt://fx/ask\"]\ndeny = [\"fx+fx://fx/item/0\"]\n",
    ),
    ("dave.toml", "principals = [\"dave\"]\nallow = [\"fx+fx://fx/item/1\", \"prompt://fx/ask\"]\n"),
    ("bob.toml", "principals = [\"bob\"]\nallow = [\"fx+**\", \"tool://fx/**\", \"prompt://fx/**\"]\n"),
];

fn config(jwks_url: &str, policies: &Path, audit_file: &Path, server: &str) -> String {
    format!(
        "[server]\n{server}\n\n[auth]\nmode = \"bearer\"\n\n\
         [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n\
         [auth.jwt]\nresource = {}\nissuer = {}\njwks_url = {}\njwks_min_refresh = \"1h\"\n\n\
         [policies]\ndir = {}\n\n[audit]\nfile = {}\n\n{}session = \"shared\"\n",
        toml_str(RESOURCE),
        toml_str(ISSUER),
        toml_str(jwks_url),
        toml_str(policies.to_str().expect("utf-8 path")),
        toml_str(audit_file.to_str().expect("utf-8 path")),
        fixture_upstream("fx", &["--resources", "4", "--ttl-ms", "600000"]),
    )
}

/// A proxy over `config`: it, its policies folder, and the folder of its audit file with the
/// file's path.
async fn start(jwks_url: &str, server: &str) -> anyhow::Result<(ProxyProcess, tempfile::TempDir, AuditFile)> {
    let policies = tempfile::tempdir()?;
    for (name, text) in POLICIES {
        std::fs::write(policies.path().join(name), text)?;
    }
    let audit_dir = tempfile::tempdir()?;
    let audit_file = audit_dir.path().join("audit.jsonl");
    let text = config(jwks_url, policies.path(), &audit_file, server);
    let env = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
    let proxy = ProxyProcess::start_with(&text, &[], &env).await?;
    proxy.wait_offerings("fx").await?;
    Ok((proxy, policies, (audit_dir, audit_file)))
}

/// The audit file's folder (removed when dropped) and its path.
type AuditFile = (tempfile::TempDir, std::path::PathBuf);

/// Every event in the audit file (after those of the file rotated away, `<file>.1`).
fn events(path: &Path) -> anyhow::Result<Vec<Value>> {
    let mut text = std::fs::read_to_string(rotated(path)).unwrap_or_default();
    text += &std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|line| Ok(serde_json::from_str(line)?)).collect()
}

/// Where the test moves the audit file before a SIGHUP (log rotation).
fn rotated(path: &Path) -> std::path::PathBuf {
    path.with_extension("jsonl.1")
}

/// `event` (with its denial kind or refusal reason) → how many.
fn tally(events: &[Value]) -> BTreeMap<String, usize> {
    let mut tally = BTreeMap::new();
    for event in events {
        let detail = event["denied"].as_str().or(event["reason"].as_str());
        let key = match detail {
            Some(detail) => format!("{}:{detail}", event["event"].as_str().unwrap_or("?")),
            None => event["event"].as_str().unwrap_or("?").to_string(),
        };
        *tally.entry(key).or_default() += 1;
    }
    tally
}

/// Wait until the audit file's tally is `expected` (the writer flushes soon after each event).
async fn wait_tally(path: &Path, expected: &BTreeMap<String, usize>) -> anyhow::Result<Vec<Value>> {
    eventually(DEADLINE, "the audit file holds the expected events", || async {
        let found = events(path)?;
        match tally(&found) == *expected {
            true => Ok(found),
            false => Err(anyhow::anyhow!("found {:?}, expected {expected:?}", tally(&found))),
        }
    })
    .await
}

fn expect(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(key, count)| (key.to_string(), *count)).collect()
}

async fn read(client: &FixtureClient, uri: &str) -> bool {
    client.read_resource(ReadResourceRequestParams::new(uri)).await.is_ok()
}

async fn call(client: &FixtureClient, tool: &str) -> bool {
    let params = CallToolRequestParams::new(tool.to_string()).with_arguments(JsonObject::new());
    client.call_tool(params).await.is_ok()
}

/// A POST of `initialize` with `authorization`; its HTTP status.
async fn post_initialize(url: &str, authorization: Option<&str>) -> anyhow::Result<u16> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let mut request =
        reqwest::Client::new().post(url).header("accept", "application/json, text/event-stream").json(&body);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    Ok(request.send().await?.status().as_u16())
}

#[tokio::test]
#[allow(deprecated)] // resources/subscribe is the 2025 era's, which this test drives too.
async fn every_call_read_subscription_denial_refused_token_and_reload_is_one_event_and_no_token_is_written()
-> anyhow::Result<()> {
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, policies, (_audit_dir, audit_file)) = start(&jwks.url, "").await?;
    let dave = rsa_a().sign(&claims("dave", &[]));
    let expired = rsa_a().sign(&json!({"iss": ISSUER, "aud": RESOURCE, "sub": "dave", "exp": now() - 600}));
    let forged = rsa_b().sign_as("rsa-a", &claims("dave", &[]));

    // alice, a 2025 session: reads (a miss, a hit, a denial), calls (allowed, denied), a
    // subscribe and its unsubscribe, a denied subscribe.
    let (alice, _) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE_TOKEN).await?;
    // Once its handshake reached the fast path, the session's reads are the fast path's (a
    // list, which is not audited, shows when).
    let legacy_fast = || proxy.matching(&["answered on the fast path", "\"era\":\"2025\""]).len();
    eventually(DEADLINE, "the session's requests answered on the fast path", || async {
        alice.list_resources(None).await?;
        anyhow::ensure!(legacy_fast() > 0, "not yet");
        Ok(())
    })
    .await?;
    let listed = legacy_fast();
    assert!(read(&alice, "fx+fx://fx/item/1").await);
    assert!(read(&alice, "fx+fx://fx/item/1").await);
    assert!(!read(&alice, "fx+fx://fx/item/0").await);
    assert!(call(&alice, "fx__stats").await);
    assert!(!call(&alice, "fx__touch").await);
    alice.subscribe(SubscribeRequestParams::new("fx+fx://fx/item/2")).await?;
    alice.unsubscribe(UnsubscribeRequestParams::new("fx+fx://fx/item/2")).await?;
    assert!(alice.subscribe(SubscribeRequestParams::new("fx+fx://fx/item/0")).await.is_err());

    // dave, a JWT, 2026-07-28: a read, a denied read, a denied call, a prompt (which fails: the
    // 2025-era upstream asks for input in a way the proxy does not relay to this host), a
    // listen stream with one of its URIs refused.
    let (dave_client, _) = connect_http_with_token(&proxy.url, Era::Modern, &dave).await?;
    assert!(read(&dave_client, "fx+fx://fx/item/1").await);
    assert!(!read(&dave_client, "fx+fx://fx/item/2").await);
    assert!(!call(&dave_client, "fx__stats").await);
    assert!(dave_client.get_prompt_once(GetPromptRequestParams::new("fx__ask")).await.is_err());
    let filter = SubscriptionFilter::builder()
        .resource_subscriptions(["fx+fx://fx/item/1".to_string(), "fx+fx://fx/item/3".to_string()])
        .build();
    let stream = dave_client.listen(filter).await?;

    // bob (static token), 2026-07-28: a call.
    let (bob, _) = connect_http_with_token(&proxy.url, Era::Modern, BOB_TOKEN).await?;
    assert!(call(&bob, "fx__stats").await);

    // Refused tokens: none, an unknown one, an expired JWT, a forged signature.
    for (authorization, reason) in [
        (None, "missing"),
        (Some(format!("Bearer {UNKNOWN_TOKEN}")), "unknown_token"),
        (Some(format!("Bearer {expired}")), "expired"),
        (Some(format!("Bearer {forged}")), "bad_signature"),
    ] {
        assert_eq!(post_initialize(&proxy.url, authorization.as_deref()).await?, 401, "{reason}");
    }

    // A policy reload (bob loses the tools), then the file is rotated away and the config
    // reloaded (SIGHUP; nothing changed): the reload's event starts a new file.
    // Written outside the folder and renamed in: one change of the folder.
    let elsewhere = tempfile::tempdir_in(policies.path().parent().expect("a parent folder"))?;
    let aside = elsewhere.path().join("bob.toml");
    std::fs::write(&aside, "principals = [\"bob\"]\nallow = [\"fx+**\"]\n")?;
    std::fs::rename(&aside, policies.path().join("bob.toml"))?;
    proxy.wait_policy_reloads(1).await?;
    std::fs::rename(&audit_file, rotated(&audit_file))?;
    let pid = proxy.pid().expect("running").to_string();
    assert!(std::process::Command::new("kill").args(["-HUP", &pid]).status()?.success());

    let expected = expect(&[
        ("read", 3),
        ("denial:read", 2),
        ("call", 2),
        ("denial:call", 2),
        ("prompt", 1),
        ("subscribe", 1),
        ("unsubscribe", 1),
        ("denial:subscribe", 2),
        ("listen", 1),
        ("auth_refused:missing", 1),
        ("auth_refused:unknown_token", 1),
        ("auth_refused:expired", 1),
        ("auth_refused:bad_signature", 1),
        ("reload", 2),
    ]);
    let found = wait_tally(&audit_file, &expected).await?;
    drop(stream);
    let fresh = std::fs::read_to_string(&audit_file)?;
    let [line] = fresh.lines().collect::<Vec<_>>()[..] else { panic!("the new file: {fresh}") };
    assert!(line.contains("\"event\":\"reload\"") && line.contains("\"what\":\"config\""), "{line}");

    // Who, what, where: each request's event names its principal, method, upstream and era.
    let alice_reads: Vec<&Value> = found.iter().filter(|e| e["event"] == "read" && e["principal"] == "alice").collect();
    let cache: Vec<&str> = alice_reads.iter().filter_map(|e| e["cache"].as_str()).collect();
    assert_eq!(cache, ["miss", "hit"]);
    let first_read = alice_reads[0];
    assert_eq!(first_read["principal"], "alice");
    assert_eq!((first_read["upstream"].as_str(), first_read["era"].as_str()), (Some("fx"), Some("2025")));
    assert!(first_read["session"].as_str().is_some_and(|s| s.len() == 16), "{first_read}");
    assert!(first_read["duration_ms"].as_f64().is_some() && first_read["time"].as_str().is_some());
    let modern_read = found.iter().find(|e| e["event"] == "read" && e["era"] == "2026-07-28").expect("dave's read");
    assert!(modern_read["principal"].as_str().is_some_and(|p| p.starts_with("dave")), "{modern_read}");
    assert!(modern_read["session"].is_null(), "a stateless request has no session: {modern_read}");
    let prompt = found.iter().find(|e| e["event"] == "prompt").expect("prompt");
    assert_eq!((prompt["name"].as_str(), prompt["outcome"].as_str()), (Some("fx__ask"), Some("upstream_failed")));
    let call_denied = found.iter().find(|e| e["denied"] == "call" && e["name"] == "fx__touch").expect("denied call");
    assert_eq!((call_denied["principal"].as_str(), call_denied["outcome"].as_str()), (Some("alice"), Some("denied")));
    let listen = found.iter().find(|e| e["event"] == "listen").expect("listen");
    assert_eq!(listen["uris"], json!(["fx+fx://fx/item/1"]));
    let reloads: Vec<&Value> = found.iter().filter(|e| e["event"] == "reload").collect();
    assert_eq!(reloads[0]["changes"]["what"], "policies");
    assert_eq!(
        (reloads[1]["changes"]["what"].as_str(), reloads[1]["outcome"].as_str()),
        (Some("config"), Some("unchanged"))
    );
    // Both reads of the fast path's two shapes were its own (and audited all the same).
    assert!(proxy.matching(&["answered on the fast path", "\"era\":\"2026-07-28\""]).len() >= 2);
    assert_eq!(legacy_fast(), listed + 3, "alice's three reads");

    // No token, nor the start of one, anywhere in either file.
    let text = std::fs::read_to_string(rotated(&audit_file))? + &fresh;
    for token in [ALICE_TOKEN, BOB_TOKEN, UNKNOWN_TOKEN, &dave, &expired, &forged] {
        let signature = token.rsplit('.').next().unwrap_or(token);
        for part in [token, &token[..12], signature] {
            assert!(!text.contains(part), "the audit file holds a token part `{part}`");
        }
    }

    // The metrics agree with the file.
    let metric = |name: &'static str, label: &'static str, value: &'static str| {
        let proxy = &proxy;
        async move { proxy.wait_metric(name, &[(label, value)], |v| v >= 0.0).await }
    };
    for (reason, count) in [("missing", 1.0), ("unknown_token", 1.0), ("expired", 1.0), ("bad_signature", 1.0)] {
        assert_eq!(metric("mcp_proxy_auth_refused_total", "reason", reason).await?, count, "{reason}");
    }
    for (kind, count) in [("read", 2.0), ("call", 2.0), ("subscribe", 2.0), ("prompt", 0.0)] {
        assert_eq!(metric("mcp_proxy_denials_total", "kind", kind).await?, count, "{kind}");
    }
    assert_eq!(proxy.wait_metric("mcp_proxy_audit_dropped_total", &[], |v| v >= 0.0).await?, 0.0);
    Ok(())
}

/// With the fast path off, rmcp's handler answers the reads of both eras; each is audited as
/// the fast path's would be.
#[tokio::test]
async fn reads_answered_by_the_rmcp_handler_are_audited_alike() -> anyhow::Result<()> {
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, _policies, (_audit_dir, audit_file)) = start(&jwks.url, "fast_path = false").await?;
    let (legacy, _) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE_TOKEN).await?;
    let (modern, _) = connect_http_with_token(&proxy.url, Era::Modern, ALICE_TOKEN).await?;
    assert!(read(&legacy, "fx+fx://fx/item/2").await);
    assert!(read(&modern, "fx+fx://fx/item/2").await);
    assert!(!read(&modern, "fx+fx://fx/item/0").await);
    let expected = expect(&[("read", 2), ("denial:read", 1)]);
    let found = wait_tally(&audit_file, &expected).await?;
    let eras: Vec<&str> = found.iter().filter_map(|e| e["era"].as_str()).collect();
    assert_eq!(eras, ["2025", "2026-07-28", "2026-07-28"]);
    let cache: Vec<&str> = found.iter().filter_map(|e| e["cache"].as_str()).collect();
    assert_eq!(cache, ["miss", "hit"]);
    assert!(found.iter().all(|e| e["principal"] == "alice" && e["request"].is_string()), "{found:?}");
    assert!(proxy.matching(&["answered on the fast path"]).is_empty());
    Ok(())
}

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
