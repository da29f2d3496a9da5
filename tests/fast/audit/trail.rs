//! The trail of served requests: one event per call, prompt, read, subscription, denial,
//! refused token and reload, no token or part of one, agreeing with `/metrics`; the rmcp
//! handler's reads (the fast path off) audited alike.

use std::path::Path;

use rmcp::model::{
    GetPromptRequestParams, ReadResourceRequestParams, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams,
};
use serde_json::{Value, json};

use super::{ALICE_TOKEN, BOB_TOKEN, UNKNOWN_TOKEN, call, expect, post_initialize, rotated, wait_tally};
use crate::support::fixture::{Era, FixtureClient, connect_http_with_token};
use crate::support::jwt::{ISSUER, JwksServer, RESOURCE, claims, now, rsa_a, rsa_b};
use crate::support::proxy::{ProxyProcess, fixture_upstream, toml_str};
use crate::support::{DEADLINE, eventually};

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

async fn read(client: &FixtureClient, uri: &str) -> bool {
    client.read_resource(ReadResourceRequestParams::new(uri)).await.is_ok()
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
