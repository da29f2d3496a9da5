//! Hostile and careless upstreams, end to end: the real proxy binary in front of the fixture
//! (`--faults`, `--duplicate-uris`) over stdio and streamable HTTP, in both eras.
//!
//! - stdio children see only the environment allowlist, `inherit_env` and their own `env`;
//! - secrets in an upstream URL reach neither `/status` nor the logs;
//! - a reply too large, not UTF-8, not JSON-RPC, or with the wrong id fails its own read at
//!   once with a clear error; a reply that never comes fails at the timeout; meanwhile other
//!   reads and other upstreams keep working and the upstream is not reconnected;
//! - a completion that never answers fails at the timeout and is cancelled upstream;
//! - an upstream that lists a URI twice has it listed once.

use std::time::{Duration, Instant};

use crate::support::eventually;
use crate::support::fixture::{self, DEADLINE, Era, FixtureClient, HttpFixture, list_all_resources, wait_for_stats};
use crate::support::proxy::{ProxyProcess, fixture_upstream, http_upstream, toml_str};
use rmcp::model::{
    ArgumentInfo, CompleteRequestParams, ReadResourceRequestParams, Reference, ResourceContents, SubscribeRequestParams,
};
use rmcp::service::ServiceError;
use serde_json::Value;

/// Hostile upstreams answer within this; the faults must be reported long before it.
const UPSTREAM_TIMEOUT: &str = "4s";
const LIMITS: &str = "max_response_bytes = \"64KiB\"\nrequest_timeout = \"4s\"\nrequired = false";

/// [`LIMITS`] for the upstreams whose every fault must be placed. A stdio reply with a wrong id
/// can be blamed only when exactly one request waits upstream, so nothing else may be in flight:
/// no health pings, and no cache subscriptions (a failed read's hold is released by an
/// `unsubscribe` that may still be on its way while the next read waits).
const QUIET_LIMITS: &str = "max_response_bytes = \"64KiB\"\nrequest_timeout = \"4s\"\nrequired = false\n\
    health_interval = \"1h\"\n[upstreams.cache]\nenabled = false";

async fn read(client: &FixtureClient, uri: &str) -> Result<Vec<ResourceContents>, ServiceError> {
    client.read_resource(ReadResourceRequestParams::new(uri)).await.map(|r| r.contents)
}

async fn text(client: &FixtureClient, uri: &str) -> anyhow::Result<String> {
    match read(client, uri).await?.as_slice() {
        [ResourceContents::TextResourceContents { text, .. }] => Ok(text.clone()),
        other => anyhow::bail!("expected one text for {uri}, got {other:?}"),
    }
}

/// The `/status` entry of `upstream`.
async fn status_of(proxy: &ProxyProcess, upstream: &str) -> anyhow::Result<Value> {
    let status: Value = serde_json::from_str(&proxy.admin_get("/status").await?)?;
    let entry = status["upstreams"].as_array().and_then(|all| all.iter().find(|u| u["name"] == upstream));
    entry.cloned().ok_or_else(|| anyhow::anyhow!("{upstream} not in /status: {status}"))
}

#[tokio::test]
async fn stdio_children_see_only_the_allowlist_inherit_env_and_their_env() -> anyhow::Result<()> {
    let config = format!(
        "[auth]\nmode = \"bearer\"\n\n[[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [[upstreams]]\nname = \"child\"\ncommand = {}\nenv = {{ OWN = \"mine\" }}\ninherit_env = [\"EXTRA\"]\n\n",
        toml_str(fixture::fixture_bin().to_str().unwrap())
    );
    let env = [("ALICE_TOKEN", "alice-s3cret"), ("OTHER_UPSTREAM_KEY", "other-s3cret"), ("EXTRA", "passed")];
    let proxy = ProxyProcess::start_with(&config, &[], &env).await?;
    proxy.wait_up("child", 1).await?;
    let (client, _) = fixture::connect_http_with_token(&proxy.url, Era::Legacy, "alice-s3cret").await?;
    let seen = |name: &str| format!("child+fx://fx/env/{name}");
    assert_eq!(text(&client, &seen("ALICE_TOKEN")).await?, "", "a principal's token reached the child");
    assert_eq!(text(&client, &seen("OTHER_UPSTREAM_KEY")).await?, "", "another secret reached the child");
    assert_eq!(text(&client, &seen("OWN")).await?, "mine");
    assert_eq!(text(&client, &seen("EXTRA")).await?, "passed");
    assert!(!text(&client, &seen("PATH")).await?.is_empty(), "PATH is on the default allowlist");
    Ok(())
}

#[tokio::test]
async fn secrets_in_an_upstream_url_reach_neither_status_nor_logs() -> anyhow::Result<()> {
    // Port 1 on loopback refuses: the connect fails and its error quotes the URL.
    let url = "http://bob:pa55word@127.0.0.1:1/mcp/${PATH_TOKEN}/sse?api_key=${URL_KEY}";
    let config = format!(
        "[server]\nstartup_wait = \"0s\"\n\n{}",
        http_upstream("remote", url, "required = false\nreconnect_max = \"250ms\"")
    );
    let proxy =
        ProxyProcess::start_with(&config, &[], &[("URL_KEY", "k3y-s3cret"), ("PATH_TOKEN", "pa7h-s3cret")]).await?;
    proxy.wait_log_count(&["upstream down", "\"upstream\":\"remote\""], 2).await?;
    let status = eventually(DEADLINE, "/status shows the failed connect", || async {
        let status = status_of(&proxy, "remote").await?;
        if status["last_error"].is_null() { Err(anyhow::anyhow!("{status}")) } else { Ok(status) }
    })
    .await?;
    let last_error = status["last_error"].as_str().unwrap_or_default().to_string();
    assert!(!last_error.is_empty(), "a failed connect is shown: {status}");
    assert!(last_error.contains("127.0.0.1:1/***"), "the host and port still show: {last_error}");
    for secret in ["pa55word", "k3y-s3cret", "pa7h-s3cret"] {
        assert!(!last_error.contains(secret), "/status shows {secret}: {last_error}");
        let leaks = proxy.matching(&[secret]);
        assert!(leaks.is_empty(), "the log shows {secret}: {leaks:?}");
    }
    Ok(())
}

/// The faults every hostile upstream sends, with what the host must be told.
const FAULTS: &[(&str, &str)] = &[
    ("sized/100000", "reply too large"),
    ("fault/invalid_utf8", "not valid UTF-8"),
    ("fault/malformed", "not a valid JSON-RPC message"),
    ("fault/wrong_id", "id no request was waiting for"),
];

#[tokio::test]
async fn each_faulty_reply_fails_only_its_read_and_the_upstream_stays() -> anyhow::Result<()> {
    let http_modern = HttpFixture::spawn(&["--faults", "--duplicate-uris", "--era", "modern"]).await?;
    let http_legacy = HttpFixture::spawn(&["--faults", "--duplicate-uris", "--era", "legacy"]).await?;
    let config = [
        fixture_upstream("sm", &["--faults", "--duplicate-uris", "--era", "modern"])
            .replace("\n\n", &format!("\n{QUIET_LIMITS}\n\n")),
        fixture_upstream("sl", &["--faults", "--duplicate-uris", "--era", "legacy"])
            .replace("\n\n", &format!("\n{QUIET_LIMITS}\n\n")),
        http_upstream("hm", &http_modern.url, QUIET_LIMITS),
        http_upstream("hl", &http_legacy.url, QUIET_LIMITS),
        fixture_upstream("ok", &[]),
    ]
    .concat();
    let proxy = ProxyProcess::start(&config).await?;
    let hostile = ["sm", "sl", "hm", "hl"];
    for name in hostile.iter().chain(&["ok"]) {
        proxy.wait_up(name, 1).await?;
    }
    let (client, mut events) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    for upstream in hostile {
        // A dropped connection would tell every subscriber that this may have changed.
        #[allow(deprecated)]
        client.subscribe(SubscribeRequestParams::new(format!("{upstream}+fx://fx/item/2"))).await?;
    }
    for upstream in hostile {
        for (path, expected) in FAULTS {
            let uri = format!("{upstream}+fx://fx/{path}");
            let started = Instant::now();
            let error = read(&client, &uri).await.expect_err(&uri);
            let message = error.to_string();
            assert!(message.contains(expected), "{uri}: {message}");
            assert!(!message.contains("did not answer"), "{uri} waited for the timeout: {message}");
            assert!(started.elapsed() < Duration::from_secs(3), "{uri} took {:?}", started.elapsed());
            assert_eq!(text(&client, &format!("{upstream}+fx://fx/item/0")).await?, "item 0 v1", "after {uri}");
            assert_eq!(text(&client, "ok+fx://fx/item/1").await?, "item 1 v1", "after {uri}");
        }
        // With other reads in flight, a fault whose line names its id still fails only that read.
        // (Items never read before, so both go upstream while the faulty read is there.)
        for (n, (path, expected)) in FAULTS.iter().filter(|(path, _)| !path.ends_with("wrong_id")).enumerate() {
            let uri = format!("{upstream}+fx://fx/{path}");
            let (a_id, b_id) = (100 + 2 * n, 101 + 2 * n);
            let (item3, item4) = (format!("{upstream}+fx://fx/item/{a_id}"), format!("{upstream}+fx://fx/item/{b_id}"));
            let (faulty, a, b) = tokio::join!(read(&client, &uri), text(&client, &item3), text(&client, &item4));
            let message = faulty.expect_err(&uri).to_string();
            assert!(message.contains(expected), "{uri} among others: {message}");
            assert_eq!((a?, b?), (format!("item {a_id} v1"), format!("item {b_id} v1")));
        }
        let status = status_of(&proxy, upstream).await?;
        assert_eq!((status["state"].as_str(), status["reconnects"].as_u64()), (Some("up"), Some(0)), "{status}");
        let last_error = status["last_error"].as_str().unwrap_or_default();
        assert!(last_error.contains("resources/read: upstream reply"), "the cause is in /status: {status}");
    }
    let logged = proxy.matching(&["faulty upstream", "wrong_id"]);
    assert!(!logged.is_empty(), "the cause is in the log");
    assert!(proxy.matching(&["upstream down"]).is_empty(), "no upstream was dropped: {:?}", proxy.logs());
    assert_eq!(events.try_next(), None, "no spurious updated or list_changed reached the host");
    Ok(())
}

#[tokio::test]
async fn a_reply_that_never_comes_fails_at_the_timeout_while_other_reads_go_on() -> anyhow::Result<()> {
    let http = HttpFixture::spawn(&["--faults"]).await?;
    let config = [
        fixture_upstream("sm", &["--faults"]).replace("\n\n", &format!("\n{LIMITS}\n\n")),
        http_upstream("hm", &http.url, LIMITS),
    ]
    .concat();
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("sm", 1).await?;
    proxy.wait_up("hm", 1).await?;
    let (client, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    for upstream in ["sm", "hm"] {
        let hang = format!("{upstream}+fx://fx/fault/hang");
        let hanging = read(&client, &hang);
        let others = async {
            for i in 0..5 {
                let uri = format!("{upstream}+fx://fx/item/{i}");
                assert_eq!(text(&client, &uri).await?, format!("item {i} v1"));
            }
            anyhow::Ok(())
        };
        let (hung, others) = tokio::join!(hanging, others);
        others?;
        let message = hung.expect_err(&hang).to_string();
        assert!(message.contains(&format!("did not answer within {UPSTREAM_TIMEOUT}")), "{hang}: {message}");
        let status = status_of(&proxy, upstream).await?;
        assert_eq!((status["state"].as_str(), status["reconnects"].as_u64()), (Some("up"), Some(0)), "{status}");
    }
    Ok(())
}

/// A completion that never answers fails at the upstream's timeout, and the upstream is told to
/// stop it (`notifications/cancelled`), as a call is.
#[tokio::test]
async fn a_completion_that_never_answers_fails_at_the_timeout_and_is_cancelled_upstream() -> anyhow::Result<()> {
    let http = HttpFixture::spawn(&["--completions"]).await?;
    let proxy = ProxyProcess::start(&http_upstream("hc", &http.url, "request_timeout = \"400ms\"")).await?;
    proxy.wait_up("hc", 1).await?;
    let (client, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let template = Reference::for_resource("hc+fx://fx/sized/{bytes}");
    let hung = client.complete(CompleteRequestParams::new(template, ArgumentInfo::new("bytes", "hang"))).await;
    let message = hung.expect_err("a completion that never answers").to_string();
    assert!(message.contains("did not answer within 400ms"), "{message}");
    let (side, _) = fixture::connect_http(&http.url, Era::Legacy).await?;
    wait_for_stats(&side, |stats| stats["completions_cancelled"] == 1).await?;
    Ok(())
}

#[tokio::test]
async fn a_uri_listed_twice_upstream_is_listed_once() -> anyhow::Result<()> {
    let config = fixture_upstream("dup", &["--duplicate-uris"]);
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("dup", 1).await?;
    let (client, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let (resources, _) = list_all_resources(&client).await?;
    let multi: Vec<&str> = resources.iter().filter(|r| r.uri == "dup+fx://fx/multi").map(|r| r.name.as_str()).collect();
    assert_eq!(multi, ["multi"], "listed once, the first kept");
    assert_eq!(resources.len(), 5);
    assert!(!proxy.matching(&["lists URIs more than once", "\"duplicates\":1"]).is_empty());
    Ok(())
}
