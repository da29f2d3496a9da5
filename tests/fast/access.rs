//! Access control end to end: bearer principals over HTTP and a `--principal` over stdio, glob
//! policies from a real policies folder, real upstreams (the rmcp fixture, the folder server),
//! the real proxy binary, real clients. What a principal may not see must be invisible to it
//! everywhere: lists, templates, reads, subscriptions, notifications, errors, cache hits.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::fixture::{
    self, Era, Events, FixtureClient, FixtureEvent, HttpFixture, call_json, connect_http_with_token,
    list_all_resources, stats, wait_for_stats,
};
use crate::support::proxy::{
    PROXY_BIN, ProxyProcess, connect_stdio_proxy_with, fixture_upstream, http_upstream, toml_str,
};
use rmcp::model::{
    PaginatedRequestParams, ReadResourceRequestParams, ResourceContents, ServerNotification, SubscribeRequestParams,
    SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{ServiceError, Subscription};
use serde_json::{Value, json};

const ALICE_TOKEN: &str = "alice-tok-3f9c1b7e5d2a4c68";
const BOB_TOKEN: &str = "bob-tok-8e4d2c6a0f1b9d37";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];

/// The not-found codes: 2025 hosts get -32002, 2026-07-28 hosts -32602.
const NOT_FOUND_LEGACY: i32 = -32002;
const NOT_FOUND_MODERN: i32 = -32602;

/// alice: all of `alpha`. bob: all of `beta`, alpha's items but item 0, alpha's `multi` and
/// its parts but part `b`. carol (stdio): beta's `multi` and `echo`, alpha's part `multi/a`.
const ALICE_POLICY: &str = "principals = [\"alice\"]\nallow = [\"alpha+**\"]\n";
const BOB_POLICY: &str = "principals = [\"bob\"]
allow = [\"beta+**\", \"alpha+fx://fx/item/*\", \"alpha+fx://fx/multi\", \"alpha+fx://fx/multi/**\"]
deny = [\"alpha+fx://fx/item/0\", \"alpha+fx://fx/multi/b\"]
";
const CAROL_POLICY: &str = "principals = [\"carol\"]\nallow = [\"alpha+fx://fx/multi/a\", \"beta+fx://fx/multi\", \"beta+fx://fx/multi/**\", \"beta+fx://fx/echo/*\"]\n";

/// The `[server]`, `[auth]` (alice and bob by bearer token) and `[policies]` sections.
fn access_config(policies: &Path, upstreams: &str) -> String {
    format!(
        "[server]\npage_size = 2\n\n[auth]\nmode = \"bearer\"\n\n\
         [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n\
         [policies]\ndir = {}\n\n{upstreams}",
        toml_str(policies.to_str().expect("utf-8 path"))
    )
}

/// A policies folder holding `files` as `(name, text)`.
fn policies_folder(files: &[(&str, &str)]) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text)?;
    }
    Ok(dir)
}

/// Replace a policy file the way an editor that saves atomically does.
fn rewrite_policy(dir: &Path, name: &str, text: &str) -> anyhow::Result<()> {
    let temporary = dir.join(format!("{name}.saving"));
    std::fs::write(&temporary, text)?;
    std::fs::rename(temporary, dir.join(name))?;
    Ok(())
}

/// Two fixtures (`alpha` legacy-era with six items, so a `multi` subscription also covers its
/// parts; `beta` both eras with three items), one HTTP proxy with alice and bob, and a config
/// file from which carol's stdio proxy starts.
struct Principals {
    proxy: ProxyProcess,
    alpha: HttpFixture,
    beta: HttpFixture,
    _policies: tempfile::TempDir,
    stdio_config: tempfile::TempDir,
}

impl Principals {
    async fn start() -> anyhow::Result<Principals> {
        let alpha = HttpFixture::spawn(&["--era", "legacy", "--resources", "6"]).await?;
        let beta = HttpFixture::spawn(&["--era", "both", "--resources", "3"]).await?;
        let policies =
            policies_folder(&[("alice.toml", ALICE_POLICY), ("bob.toml", BOB_POLICY), ("carol.toml", CAROL_POLICY)])?;
        let upstreams = format!("{}{}", http_upstream("alpha", &alpha.url, ""), http_upstream("beta", &beta.url, ""));
        let config = access_config(policies.path(), &upstreams);
        let stdio_config = tempfile::tempdir()?;
        crate::support::proxy::write_config(stdio_config.path(), &config)?;
        let proxy = ProxyProcess::start_with(&config, &[], &TOKENS).await?;
        proxy.wait_up("alpha", 1).await?;
        proxy.wait_up("beta", 1).await?;
        Ok(Principals { proxy, alpha, beta, _policies: policies, stdio_config })
    }

    async fn http(&self, principal: &str, era: Era) -> anyhow::Result<(FixtureClient, Events)> {
        let token = match principal {
            "alice" => ALICE_TOKEN,
            "bob" => BOB_TOKEN,
            other => anyhow::bail!("no token for {other}"),
        };
        connect_http_with_token(&self.proxy.url, era, token).await
    }

    /// carol: `serve --stdio --principal carol` on the same config.
    async fn carol(&self, era: Era) -> anyhow::Result<(FixtureClient, Events)> {
        let config = self.stdio_config.path().join("config.toml");
        connect_stdio_proxy_with(&config, era, &["--principal", "carol"], &TOKENS).await
    }

    /// A direct connection to the `alpha` fixture, for `touch` and `stats`.
    async fn alpha_side(&self) -> anyhow::Result<FixtureClient> {
        Ok(fixture::connect_http(&self.alpha.url, Era::Legacy).await?.0)
    }

    /// A direct connection to the `beta` fixture.
    async fn beta_side(&self) -> anyhow::Result<FixtureClient> {
        Ok(fixture::connect_http(&self.beta.url, Era::Legacy).await?.0)
    }
}

fn set(items: impl IntoIterator<Item = String>) -> BTreeSet<String> {
    items.into_iter().collect()
}

fn fixture_resources(upstream: &str, items: impl IntoIterator<Item = u32>) -> BTreeSet<String> {
    let mut all: BTreeSet<String> = items.into_iter().map(|i| format!("{upstream}+fx://fx/item/{i}")).collect();
    all.insert(format!("{upstream}+fx://fx/multi"));
    all.insert(format!("{upstream}+fx://fx/blob"));
    all
}

fn fixture_templates(upstream: &str, names: &[&str]) -> BTreeSet<String> {
    let variable = |name: &str| match name {
        "item" => "id",
        "echo" => "text",
        _ => "bytes",
    };
    names.iter().map(|name| format!("{upstream}+fx://fx/{name}/{{{}}}", variable(name))).collect()
}

async fn listed(client: &FixtureClient) -> anyhow::Result<(BTreeSet<String>, usize, BTreeSet<String>)> {
    let (resources, pages) = list_all_resources(client).await?;
    let templates = client.list_all_resource_templates().await?;
    Ok((set(resources.into_iter().map(|r| r.uri)), pages, set(templates.into_iter().map(|t| t.uri_template))))
}

/// Each principal's `resources/list` (every page) and `resources/templates/list` hold exactly
/// what its policy allows, over HTTP in both eras and over stdio.
#[tokio::test]
async fn each_principal_lists_only_its_own_resources_and_templates() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let alice_resources = fixture_resources("alpha", 0..6);
    let alice_templates = fixture_templates("alpha", &["item", "echo", "sized"]);
    let mut bob_resources = fixture_resources("beta", 0..3);
    bob_resources.extend(fixture_resources("alpha", 1..6));
    bob_resources.remove("alpha+fx://fx/blob");
    let mut bob_templates = fixture_templates("beta", &["item", "echo", "sized"]);
    bob_templates.extend(fixture_templates("alpha", &["item"]));
    for era in [Era::Legacy, Era::Modern] {
        let (alice, _) = world.http("alice", era).await?;
        let (resources, pages, templates) = listed(&alice).await?;
        assert_eq!(resources, alice_resources, "alice's list ({era:?})");
        assert!(pages > 1, "alice's list is paged ({pages} pages)");
        assert_eq!(templates, alice_templates, "alice's templates ({era:?})");

        let (bob, _) = world.http("bob", era).await?;
        let (resources, pages, templates) = listed(&bob).await?;
        assert_eq!(resources, bob_resources, "bob's list ({era:?})");
        assert!(pages > 1, "bob's list is paged ({pages} pages)");
        assert_eq!(templates, bob_templates, "bob's templates ({era:?})");
    }
    let (carol, _) = world.carol(Era::Legacy).await?;
    let (resources, _, templates) = listed(&carol).await?;
    assert_eq!(resources, set(["beta+fx://fx/multi".to_string()]), "carol's list (stdio)");
    assert_eq!(templates, fixture_templates("beta", &["echo"]), "carol's templates (stdio)");
    Ok(())
}

/// An error as the host sees it, with the URI it named replaced by `<URI>` everywhere (message
/// and data), so two not-found answers for different URIs can be compared whole.
fn error_shape(error: &ServiceError, uri: &str) -> (i32, String, Option<Value>) {
    let ServiceError::McpError(data) = error else { panic!("not a JSON-RPC error: {error}") };
    let data_shape = data.data.clone().map(|value| swap_uri(value, uri));
    (data.code.0, data.message.replace(uri, "<URI>"), data_shape)
}

fn swap_uri(value: Value, uri: &str) -> Value {
    match value {
        Value::String(text) => Value::String(text.replace(uri, "<URI>")),
        Value::Array(items) => Value::Array(items.into_iter().map(|v| swap_uri(v, uri)).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, swap_uri(v, uri))).collect()),
        other => other,
    }
}

async fn read_error(client: &FixtureClient, uri: &str) -> ServiceError {
    match client.read_resource(ReadResourceRequestParams::new(uri)).await {
        Ok(read) => panic!("{uri} was read: {read:?}"),
        Err(error) => error,
    }
}

/// Assert `denied` and every one of `missing` get the same error, URI aside, with `code`.
async fn assert_denied_like_missing(client: &FixtureClient, denied: &str, missing: &[&str], code: i32) {
    let denied_shape = error_shape(&read_error(client, denied).await, denied);
    assert_eq!(denied_shape.0, code, "{denied}: {denied_shape:?}");
    assert!(denied_shape.1.contains("<URI>"), "the message names the URI asked for: {denied_shape:?}");
    for uri in missing {
        let missing_shape = error_shape(&read_error(client, uri).await, uri);
        assert_eq!(denied_shape, missing_shape, "denied {denied} vs missing {uri}");
    }
}

/// A read of a URI the principal may not see answers exactly like one that does not exist:
/// same code, same message and data but for the URI — in both eras, and over stdio.
#[tokio::test]
async fn a_denied_read_answers_exactly_like_a_missing_uri() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    for (era, code) in [(Era::Legacy, NOT_FOUND_LEGACY), (Era::Modern, NOT_FOUND_MODERN)] {
        let (alice, _) = world.http("alice", era).await?;
        // Positive control: what is allowed reads.
        alice.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/item/0")).await?;
        let missing = ["alpha+fx://fx/missing", "nowhere+fx://fx/item/1"];
        assert_denied_like_missing(&alice, "beta+fx://fx/item/1", &missing, code).await;

        let (bob, _) = world.http("bob", era).await?;
        bob.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/item/1")).await?;
        let missing = ["beta+fx://fx/missing", "alpha+fx://fx/item/x", "nowhere+fx://fx/item/0"];
        assert_denied_like_missing(&bob, "alpha+fx://fx/item/0", &missing, code).await;
        assert_denied_like_missing(&bob, "alpha+fx://fx/echo/hello", &missing, code).await;
    }
    let (carol, _) = world.carol(Era::Legacy).await?;
    carol.read_resource(ReadResourceRequestParams::new("beta+fx://fx/multi")).await?;
    assert_denied_like_missing(&carol, "alpha+fx://fx/item/1", &["nowhere+fx://fx/item/1"], NOT_FOUND_LEGACY).await;
    assert_denied_like_missing(&carol, "beta+fx://fx/item/1", &["nowhere+fx://fx/item/1"], NOT_FOUND_LEGACY).await;
    Ok(())
}

#[allow(deprecated)]
async fn subscribe_error(client: &FixtureClient, uri: &str) -> ServiceError {
    match client.subscribe(SubscribeRequestParams::new(uri)).await {
        Ok(()) => panic!("subscribed to {uri}"),
        Err(error) => error,
    }
}

/// A legacy subscribe to a denied URI gets the not-found answer of an unknown one; a 2026
/// listen on [denied, allowed] acknowledges only the allowed URI.
#[tokio::test]
async fn a_denied_uri_is_not_subscribable() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let (bob, _) = world.http("bob", Era::Legacy).await?;
    #[allow(deprecated)]
    bob.subscribe(SubscribeRequestParams::new("alpha+fx://fx/item/1")).await?;
    let denied = error_shape(&subscribe_error(&bob, "alpha+fx://fx/item/0").await, "alpha+fx://fx/item/0");
    let missing = error_shape(&subscribe_error(&bob, "nowhere+fx://fx/item/0").await, "nowhere+fx://fx/item/0");
    assert_eq!(denied.0, NOT_FOUND_LEGACY, "{denied:?}");
    assert_eq!(denied, missing, "a denied subscribe looks like an unknown URI");

    let (carol, _) = world.carol(Era::Legacy).await?;
    let denied = error_shape(&subscribe_error(&carol, "alpha+fx://fx/item/0").await, "alpha+fx://fx/item/0");
    let missing = error_shape(&subscribe_error(&carol, "nowhere+fx://fx/item/0").await, "nowhere+fx://fx/item/0");
    assert_eq!(denied.0, NOT_FOUND_LEGACY, "{denied:?}");
    assert_eq!(denied, missing, "a denied subscribe looks like an unknown URI (stdio)");

    let (bob_modern, _) = world.http("bob", Era::Modern).await?;
    let filter = SubscriptionFilter::builder()
        .resource_subscriptions(["alpha+fx://fx/item/0", "alpha+fx://fx/item/1", "alpha+fx://fx/multi/b"])
        .build();
    let stream = bob_modern.listen(filter).await?;
    assert_eq!(
        stream.acknowledged().resource_subscriptions,
        Some(vec!["alpha+fx://fx/item/1".to_string()]),
        "only the allowed URI is acknowledged"
    );
    Ok(())
}

/// The next `updated` a legacy host hears, passing over list changes.
async fn next_updated(events: &mut Events) -> anyhow::Result<String> {
    loop {
        if let FixtureEvent::Updated(uri) = events.next().await? {
            return Ok(uri);
        }
    }
}

/// The next `updated` on a listen stream.
async fn next_stream_updated(stream: &mut Subscription) -> anyhow::Result<String> {
    loop {
        match tokio::time::timeout(fixture::DEADLINE, stream.next()).await {
            Ok(Ok(Some(ServerNotification::ResourceUpdatedNotification(n)))) => return Ok(n.params.uri),
            Ok(Ok(Some(_))) => continue,
            Ok(Ok(None)) => anyhow::bail!("the stream ended"),
            Ok(Err(error)) => return Err(error.into()),
            Err(_) => anyhow::bail!("no update on the stream within {:?}", fixture::DEADLINE),
        }
    }
}

/// URIs the fixture holds upstream subscriptions for, whatever the era.
fn watched(stats: &Value) -> Vec<String> {
    let legacy = stats["subscribed"].as_array().cloned().unwrap_or_default();
    let modern = stats["listen_uris"].as_array().cloned().unwrap_or_default();
    legacy.into_iter().chain(modern).filter_map(|v| v.as_str().map(str::to_owned)).collect()
}

async fn touch(side: &FixtureClient, uri: &str) -> anyhow::Result<()> {
    call_json(side, "touch", json!({ "uri": uri })).await.map(drop)
}

/// An `updated` reaches a host only when its principal may see the URI — also when the upstream
/// subscription that brought it is held for another principal (alice holds `multi`, bob holds
/// `multi` too but may not see `multi/b`). Order proves absence: each host's first update is a
/// later, allowed one from the same upstream.
#[tokio::test]
async fn updates_reach_only_principals_who_may_see_the_uri() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let side = world.alpha_side().await?;
    let (alice, mut alice_events) = world.http("alice", Era::Legacy).await?;
    let (bob, mut bob_events) = world.http("bob", Era::Legacy).await?;
    let (bob_modern, _) = world.http("bob", Era::Modern).await?;
    let (carol, mut carol_events) = world.carol(Era::Legacy).await?;
    #[allow(deprecated)]
    {
        alice.subscribe(SubscribeRequestParams::new("alpha+fx://fx/item/0")).await?;
        alice.subscribe(SubscribeRequestParams::new("alpha+fx://fx/multi")).await?;
        bob.subscribe(SubscribeRequestParams::new("alpha+fx://fx/multi")).await?;
        carol.subscribe(SubscribeRequestParams::new("alpha+fx://fx/multi/a")).await?;
    }
    subscribe_error(&bob, "alpha+fx://fx/item/0").await;
    subscribe_error(&carol, "alpha+fx://fx/item/0").await;
    let filter =
        SubscriptionFilter::builder().resource_subscriptions(["alpha+fx://fx/item/0", "alpha+fx://fx/item/1"]).build();
    let mut bob_stream = bob_modern.listen(filter).await?;
    let wanted = ["fx://fx/item/0", "fx://fx/multi", "fx://fx/multi/a", "fx://fx/item/1"];
    wait_for_stats(&side, |s| wanted.iter().all(|uri| watched(s).iter().any(|w| w == uri))).await?;

    for uri in ["fx://fx/item/0", "fx://fx/multi/b", "fx://fx/multi/a", "fx://fx/item/1"] {
        touch(&side, uri).await?;
    }
    // alice may see everything she holds: she hears all three, in order.
    for expected in ["alpha+fx://fx/item/0", "alpha+fx://fx/multi/b", "alpha+fx://fx/multi/a"] {
        assert_eq!(next_updated(&mut alice_events).await?, expected, "alice");
    }
    assert_eq!(next_updated(&mut bob_events).await?, "alpha+fx://fx/multi/a", "bob: nothing of multi/b or item/0");
    assert_eq!(next_stream_updated(&mut bob_stream).await?, "alpha+fx://fx/item/1", "bob's stream: nothing of item/0");
    assert_eq!(next_updated(&mut carol_events).await?, "alpha+fx://fx/multi/a", "carol: nothing of item/0");
    Ok(())
}

/// A read the upstream marked `cacheScope: private` is cached for the principal who read it and
/// never served to another: the fixture counts its upstream reads.
#[tokio::test]
async fn a_private_cached_read_is_not_served_across_principals() -> anyhow::Result<()> {
    let vault = HttpFixture::spawn(&["--scope", "private", "--ttl-ms", "60000", "--resources", "1"]).await?;
    let both = "principals = [\"alice\", \"bob\"]\nallow = [\"vault+**\"]\n";
    let policies = policies_folder(&[("vault.toml", both)])?;
    let config = access_config(policies.path(), &http_upstream("vault", &vault.url, ""));
    let proxy = ProxyProcess::start_with(&config, &[], &TOKENS).await?;
    proxy.wait_up("vault", 1).await?;
    let (side, _) = fixture::connect_http(&vault.url, Era::Auto).await?;
    let uri = "vault+fx://fx/item/0";
    let upstream_reads = |stats: &Value| stats["reads_by_uri"]["fx://fx/item/0"].as_u64().unwrap_or(0);

    let (alice, _) = connect_http_with_token(&proxy.url, Era::Modern, ALICE_TOKEN).await?;
    for _ in 0..2 {
        alice.read_resource(ReadResourceRequestParams::new(uri)).await?;
    }
    assert_eq!(upstream_reads(&stats(&side).await?), 1, "alice's second read is a cache hit");

    let (bob, _) = connect_http_with_token(&proxy.url, Era::Modern, BOB_TOKEN).await?;
    let read = bob.read_resource(ReadResourceRequestParams::new(uri)).await?;
    assert!(!read.contents.is_empty());
    assert_eq!(upstream_reads(&stats(&side).await?), 2, "bob is not served alice's private entry");
    Ok(())
}

/// One section of the bypass corpus: its policy, the lines that must be denied, and the
/// positive controls `(URI, file it must read)` (see the corpus header for the format).
struct CorpusSection {
    name: String,
    policy: String,
    denied: Vec<String>,
    allowed: Vec<(String, Option<String>)>,
}

fn bypass_corpus() -> Vec<CorpusSection> {
    let text = include_str!("../data/bypass-corpus.txt");
    let new = |name: &str| CorpusSection { name: name.into(), policy: String::new(), denied: vec![], allowed: vec![] };
    let mut sections = vec![new("default")];
    for line in text.lines() {
        let section = sections.last_mut().expect("one section");
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push(new(name));
        } else if let Some(toml) = line.strip_prefix("#| ") {
            section.policy.push_str(toml);
            section.policy.push('\n');
        } else if let Some(control) = line.strip_prefix("allowed: ") {
            let (uri, file) = match control.split_once(" -> ") {
                Some((uri, file)) => (uri, Some(file.to_string())),
                None => (control, None),
            };
            section.allowed.push((uri.to_string(), file));
        } else if !line.is_empty() && !line.starts_with('#') {
            section.denied.push(line.to_string());
        }
    }
    sections
}

/// `line` with `root` (an absolute path, without its leading `/`) inserted after the `file:`
/// scheme's `//authority` and leading slashes; the line's own quirks stay as they are.
fn under_root(line: &str, root: &str) -> String {
    let scheme_end = line.to_ascii_lowercase().find("file:").expect("a file: URI") + "file:".len();
    let mut cut = scheme_end;
    if line[cut..].starts_with("//") {
        cut += 2 + line[cut + 2..].find('/').unwrap_or(line.len() - cut - 2);
    }
    cut += line[cut..].len() - line[cut..].trim_start_matches('/').len();
    format!("{}{root}/{}", &line[..cut], &line[cut..])
}

/// A folder holding every file the corpus aims at, each with a text naming it.
fn corpus_folder() -> anyhow::Result<(tempfile::TempDir, PathBuf)> {
    let folder = tempfile::Builder::new().prefix("bypass").tempdir()?;
    let root = folder.path().canonicalize()?;
    for file in [
        "app/secrets/key",
        "app/.env",
        "secrets/key",
        "secrets/.env",
        ".env",
        "app/public/readme.md",
        "app/public/secret.txt",
        "pub/x.md",
    ] {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().expect("has a parent"))?;
        std::fs::write(&path, format!("content of {file}"))?;
    }
    Ok((folder, root))
}

/// The shipped default policy for everyone (the corpus's `[default]` section).
const DEFAULT_POLICY: &str =
    "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"*+file:///**/secrets/**\", \"*+file:///**/.env\"]\n";

/// A proxy over a `docs` folder upstream with `policy` for everyone, plus `admin`, whose policy
/// allows everything (bob's token is admin's here).
async fn corpus_proxy(root: &Path, policy: &str) -> anyhow::Result<(ProxyProcess, tempfile::TempDir)> {
    let admin = "principals = [\"admin\"]\nallow = [\"**\"]\n";
    let policies = policies_folder(&[("default.toml", policy), ("admin.toml", admin)])?;
    // The corpus is written against absolute names: it runs with the `absolute` option.
    let upstream = format!(
        "[[upstreams]]\nname = \"docs\"\ndir = {}\nuri_base = \"absolute\"\n",
        toml_str(root.to_str().expect("utf-8"))
    );
    let config = access_config(policies.path(), &upstream).replace("principal = \"bob\"", "principal = \"admin\"");
    let proxy = ProxyProcess::start_with(&config, &[], &TOKENS).await?;
    proxy.wait_up("docs", 1).await?;
    Ok((proxy, policies))
}

fn text_of(contents: &[ResourceContents]) -> Vec<(String, String)> {
    contents
        .iter()
        .map(|content| match content {
            ResourceContents::TextResourceContents { uri, text, .. } => (uri.clone(), text.clone()),
            ResourceContents::BlobResourceContents { uri, .. } => (uri.clone(), "<blob>".into()),
            _ => unreachable!("text or blob"),
        })
        .collect()
}

/// Every bypass-corpus line, pointed into a real folder that has the files it aims at, read
/// through the real HTTP endpoint as a principal under its section's policy: each answers like
/// a missing URI. Controls: the section's allowed lines read the file they name, and a
/// principal allowed everything reads the secrets through the same proxy, so the denials come
/// from the policy.
#[tokio::test]
async fn every_bypass_corpus_uri_is_denied_through_the_http_endpoint() -> anyhow::Result<()> {
    let (_folder, root) = corpus_folder()?;
    let root_text = root.to_str().expect("utf-8").trim_start_matches('/').to_string();
    let corpus = bypass_corpus();
    assert!(corpus.len() >= 2 && corpus[0].denied.len() >= 40, "the corpus has its sections and lines");
    for section in &corpus {
        let (proxy, _policies) = corpus_proxy(&root, &section.policy).await?;
        for (era, code) in [(Era::Legacy, NOT_FOUND_LEGACY), (Era::Modern, NOT_FOUND_MODERN)] {
            let (alice, _) = connect_http_with_token(&proxy.url, era, ALICE_TOKEN).await?;
            let mut wrong = corpus_controls(&alice, section, &root_text).await?;
            let missing = under_root("docs+file:///app/public/missing.md", &root_text);
            let missing_shape = error_shape(&read_error(&alice, &missing).await, &missing);
            assert_eq!(missing_shape.0, code);
            for line in &section.denied {
                let uri = under_root(line, &root_text);
                match alice.read_resource(ReadResourceRequestParams::new(uri.clone())).await {
                    Ok(read) => wrong.push(format!("{line:?} → {uri:?} was READ: {:?}", text_of(&read.contents))),
                    Err(error) if error_shape(&error, &uri) != missing_shape => {
                        wrong.push(format!("{line:?} → {uri:?}: {:?}", error_shape(&error, &uri)))
                    }
                    Err(_) => {}
                }
            }
            let name = &section.name;
            assert!(wrong.is_empty(), "[{name}] {era:?}: {} corpus lines wrong:\n{}", wrong.len(), wrong.join("\n"));
        }
    }

    // A proxy serves the secrets to a principal allowed everything — also by corpus spellings
    // that normalise to them — so the folder server is not what denied them.
    let (proxy, _policies) = corpus_proxy(&root, DEFAULT_POLICY).await?;
    let (admin, _) = connect_http_with_token(&proxy.url, Era::Legacy, BOB_TOKEN).await?;
    for (line, file) in [
        ("docs+file:///app/secrets/key", "app/secrets/key"),
        ("docs+file:///app/.env", "app/.env"),
        ("docs+file:///app/%73ecrets/key", "app/secrets/key"),
        ("docs+file:///app/x/../../secrets/key", "secrets/key"),
        ("docs+file://localhost/app/.env", "app/.env"),
        ("docs+file:///app//secrets//key", "app/secrets/key"),
        ("DOCS+FILE:///app/.env", "app/.env"),
        ("docs+file:///app/public/secret.txt", "app/public/secret.txt"),
        ("docs+file:///app/.env#top", "app/.env"),
    ] {
        let uri = under_root(line, &root_text);
        let read = admin.read_resource(ReadResourceRequestParams::new(uri.clone())).await?;
        assert_eq!(text_of(&read.contents)[0].1, format!("content of {file}"), "admin reads {uri}");
    }
    Ok(())
}

/// The section's positive controls that name a file: each must read exactly that file.
async fn corpus_controls(client: &FixtureClient, section: &CorpusSection, root: &str) -> anyhow::Result<Vec<String>> {
    let mut wrong = Vec::new();
    for (line, file) in &section.allowed {
        let Some(file) = file else { continue };
        let uri = under_root(line, root);
        match client.read_resource(ReadResourceRequestParams::new(uri.clone())).await {
            Ok(read) if text_of(&read.contents).first().is_some_and(|(_, t)| *t == format!("content of {file}")) => {}
            Ok(read) => wrong.push(format!("control {line:?} read {:?}", text_of(&read.contents))),
            Err(error) => wrong.push(format!("control {line:?} → {uri:?} failed: {error}")),
        }
    }
    Ok(wrong)
}

/// A read of a resource the principal may see must not carry contents it may not see: reading
/// the folder `app/` (which holds `.env` and `secrets/`, denied by the default policy), and bob
/// reading alpha's `multi`, whose contents are `multi/a`, `multi/b` (denied to him) and `multi/c`.
#[tokio::test]
async fn a_read_does_not_carry_contents_the_principal_may_not_see() -> anyhow::Result<()> {
    let (_folder, root) = corpus_folder()?;
    let (proxy, _policies) = corpus_proxy(&root, DEFAULT_POLICY).await?;
    let (alice, _) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE_TOKEN).await?;
    let mut leaks = Vec::new();
    for folder in ["app", ""] {
        let uri = format!("docs+file://{}/{folder}", root.display()).trim_end_matches('/').to_string();
        let contents = match alice.read_resource(ReadResourceRequestParams::new(uri.clone())).await {
            Ok(read) => text_of(&read.contents),
            Err(_) => continue, // refusing the whole folder would be fine too
        };
        for (content_uri, text) in &contents {
            let denied = content_uri.ends_with("/.env") || content_uri.contains("/secrets");
            if denied || text.contains("content of app/.env") || text.contains("content of .env") {
                leaks.push(format!("reading {uri} carried {content_uri}: {text:?}"));
            }
        }
    }

    let world = Principals::start().await?;
    let (bob, _) = world.http("bob", Era::Legacy).await?;
    let read = bob.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/multi")).await?;
    let contents = text_of(&read.contents);
    assert!(
        contents.iter().any(|(uri, _)| uri == "alpha+fx://fx/multi/a"),
        "control: allowed parts come: {contents:?}"
    );
    for (content_uri, text) in &contents {
        if content_uri == "alpha+fx://fx/multi/b" {
            leaks.push(format!("bob reading alpha+fx://fx/multi carried {content_uri}: {text:?}"));
        }
    }
    assert!(leaks.is_empty(), "contents the principal may not see:\n{}", leaks.join("\n"));
    Ok(())
}

/// `POST /mcp` initialize with these headers.
async fn post_initialize(url: &str, authorization: Option<&str>) -> anyhow::Result<reqwest::Response> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "auth-test", "version": "0"}}});
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    Ok(tokio::time::timeout(fixture::DEADLINE, request.send()).await??)
}

/// Without a valid `Authorization: Bearer <token>` the endpoint answers 401 with
/// `WWW-Authenticate: Bearer` before any MCP processing; a right token gets the SSE answer. Even
/// at `RUST_LOG=trace` no token reaches the logs.
#[tokio::test]
async fn requests_without_a_valid_bearer_token_get_401_and_tokens_never_reach_the_logs() -> anyhow::Result<()> {
    let policies = policies_folder(&[("all.toml", "principals = [\"*\"]\nallow = [\"**\"]\n")])?;
    let config = access_config(policies.path(), &fixture_upstream("fx", &[]));
    let proxy = ProxyProcess::start_with(&config, &[], &[TOKENS[0], TOKENS[1], ("RUST_LOG", "trace")]).await?;
    proxy.wait_up("fx", 1).await?;
    let wrong_token = "wrong-tok-5a7c9e1b3d";
    let refused = [
        ("no header", None),
        ("wrong token", Some(format!("Bearer {wrong_token}"))),
        ("scheme alone", Some("Bearer".to_string())),
        ("scheme and space", Some("Bearer ".to_string())),
        ("basic", Some("Basic YWxpY2U6cGFzc3dvcmQ=".to_string())),
        ("two spaces", Some(format!("Bearer  {ALICE_TOKEN}"))),
        ("token without scheme", Some(ALICE_TOKEN.to_string())),
    ];
    for (case, authorization) in &refused {
        let response = post_initialize(&proxy.url, authorization.as_deref()).await?;
        assert_eq!(response.status(), reqwest::StatusCode::UNAUTHORIZED, "{case}");
        let challenge = response.headers().get("www-authenticate").map(|v| v.to_str().unwrap_or("").to_owned());
        assert_eq!(challenge.as_deref(), Some("Bearer"), "{case}");
        assert!(response.headers().get("mcp-session-id").is_none(), "{case}: no session was opened");
    }
    for token in [ALICE_TOKEN, BOB_TOKEN] {
        let response = post_initialize(&proxy.url, Some(&format!("Bearer {token}"))).await?;
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap_or("").to_owned());
        assert!(content_type.as_deref().is_some_and(|t| t.starts_with("text/event-stream")), "{content_type:?}");
        let body = response.text().await?;
        assert!(body.contains("\"result\""), "{body}");
    }
    // A whole session with each token, so every layer gets its chance to log something.
    for (token, era) in [(ALICE_TOKEN, Era::Legacy), (BOB_TOKEN, Era::Modern)] {
        let (client, _) = connect_http_with_token(&proxy.url, era, token).await?;
        list_all_resources(&client).await?;
        client.read_resource(ReadResourceRequestParams::new("fx+fx://fx/item/1")).await?;
        client.cancel().await?;
    }
    proxy.wait_log_count(&["unauthorized request"], refused.len()).await?;
    let logs = proxy.logs();
    assert!(logs.len() > 50, "trace logging is on ({} lines)", logs.len());
    for secret in [ALICE_TOKEN, BOB_TOKEN, wrong_token] {
        let found: Vec<&String> = logs.iter().filter(|line| line.contains(secret)).take(3).collect();
        assert!(found.is_empty(), "a token reached the logs: {found:#?}");
    }
    Ok(())
}

/// Rewriting a policy while a host is subscribed: the host hears `list_changed`, its next list
/// leaves the now-denied resource out, and updates of it stop while the others go on. A policy
/// file that does not parse keeps the old rules in force and is logged.
#[tokio::test]
async fn a_policy_change_applies_to_a_subscribed_host_without_restart() -> anyhow::Result<()> {
    let alpha = HttpFixture::spawn(&["--era", "legacy", "--resources", "3"]).await?;
    let policies = policies_folder(&[("alice.toml", ALICE_POLICY)])?;
    let config = access_config(policies.path(), &http_upstream("alpha", &alpha.url, ""));
    let proxy = ProxyProcess::start_with(&config, &[], &TOKENS).await?;
    proxy.wait_up("alpha", 1).await?;
    let (side, _) = fixture::connect_http(&alpha.url, Era::Legacy).await?;
    let (alice, mut events) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE_TOKEN).await?;
    #[allow(deprecated)]
    for uri in ["alpha+fx://fx/item/0", "alpha+fx://fx/item/1"] {
        alice.subscribe(SubscribeRequestParams::new(uri)).await?;
    }
    wait_for_stats(&side, |s| ["fx://fx/item/0", "fx://fx/item/1"].iter().all(|u| watched(s).iter().any(|w| w == u)))
        .await?;
    touch(&side, "fx://fx/item/1").await?;
    assert_eq!(events.next().await?, FixtureEvent::Updated("alpha+fx://fx/item/1".into()), "before the change");

    let narrowed = format!("{ALICE_POLICY}deny = [\"alpha+fx://fx/item/0\"]\n");
    rewrite_policy(policies.path(), "alice.toml", &narrowed)?;
    assert_eq!(events.next().await?, FixtureEvent::ListChanged, "the host hears its list changed");
    proxy.wait_log(&["policies reloaded"]).await?;
    let (resources, _) = list_all_resources(&alice).await?;
    let listed = set(resources.into_iter().map(|r| r.uri));
    assert!(!listed.contains("alpha+fx://fx/item/0"), "{listed:?}");
    assert!(listed.contains("alpha+fx://fx/item/1"), "{listed:?}");
    // Its forbidden subscription stops: nobody holds item 0 upstream any more.
    wait_for_stats(&side, |s| !watched(s).iter().any(|w| w == "fx://fx/item/0")).await?;
    touch(&side, "fx://fx/item/0").await?;
    touch(&side, "fx://fx/item/1").await?;
    assert_eq!(next_updated(&mut events).await?, "alpha+fx://fx/item/1", "nothing of the now-denied item 0");

    // A file that does not parse: the rules in force stay, and the problem is logged.
    std::fs::write(policies.path().join("broken.toml"), "principals = [\"alice\"\nallow = [")?;
    let refused = proxy.wait_log(&["policy reload refused"]).await?;
    assert!(refused.contains("broken.toml"), "the log names the file: {refused}");
    proxy.wait_log(&["policies unchanged"]).await?;
    let read = alice.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/item/1")).await?;
    assert!(!read.contents.is_empty(), "an allowed read still works");
    let error = read_error(&alice, "alpha+fx://fx/item/0").await;
    assert_eq!(error_shape(&error, "alpha+fx://fx/item/0").0, NOT_FOUND_LEGACY, "the deny still holds");
    assert_eq!(proxy.matching(&["policies reloaded"]).len(), 1, "the broken file was not applied");
    Ok(())
}

/// Run the proxy binary to completion; (exit code, stdout).
fn run_cli(args: &[&str]) -> anyhow::Result<(Option<i32>, String)> {
    let output = std::process::Command::new(PROXY_BIN).args(args).env("RUST_LOG", "warn").output()?;
    Ok((output.status.code(), String::from_utf8(output.stdout)?))
}

/// `check` reports policy problems together with config problems (exit 78); `policy explain`
/// prints each URI's verdict with the file and pattern that decided it.
#[tokio::test]
async fn check_reports_policy_problems_and_explain_names_the_deciding_rule() -> anyhow::Result<()> {
    let broken = policies_folder(&[
        ("default.toml", "principals = [\"*\"]\nallow = [\"**\"]\n"),
        ("bad-glob.toml", "principals = [\"ci\"]\nallow = [\"docs+[unclosed\"]\n"),
        ("no-principals.toml", "allow = [\"**\"]\nflavour = \"vanilla\"\n"),
    ])?;
    let config_dir = tempfile::tempdir()?;
    let config = format!(
        "[server]\npage_size = 0\n\n[policies]\ndir = {}\n\n{}",
        toml_str(broken.path().to_str().expect("utf-8")),
        fixture_upstream("fx", &[])
    );
    let config_path = crate::support::proxy::write_config(config_dir.path(), &config)?;
    let config_arg = config_path.to_str().expect("utf-8");
    let (code, out) = run_cli(&["check", "--config", config_arg])?;
    assert_eq!(code, Some(78), "{out}");
    for expected in ["page_size", "bad-glob.toml", "no-principals.toml", "principals", "flavour"] {
        assert!(out.contains(expected), "check names {expected:?}:\n{out}");
    }

    let policies = policies_folder(&[
        (
            "default.toml",
            "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"*+file:///**/.env\", \"*+file:///**/secrets/**\"]\n",
        ),
        ("ci-bot.toml", "principals = [\"ci-bot\"]\nallow = [\"docs+**\"]\n"),
    ])?;
    let config = format!(
        "[policies]\ndir = {}\n\n{}",
        toml_str(policies.path().to_str().expect("utf-8")),
        fixture_upstream("fx", &[])
    );
    let config_path = crate::support::proxy::write_config(config_dir.path(), &config)?;
    let config_arg = config_path.to_str().expect("utf-8");
    let (code, out) = run_cli(&["check", "--config", config_arg])?;
    assert_eq!(code, Some(0), "{out}");

    let uris = ["docs+file:///app/.env", "docs+file:///app/guide.md", "docs+file:///app/%73ecrets/key"];
    let (code, out) =
        run_cli(&["policy", "explain", "--principal", "someone", "--config", config_arg, uris[0], uris[1], uris[2]])?;
    assert_eq!(code, Some(0), "{out}");
    let verdicts = verdict_lines(&out);
    assert_eq!(
        verdicts,
        [
            "denied by default.toml: *+file:///**/.env",
            "allowed by default.toml: **",
            "denied by default.toml: *+file:///**/secrets/**",
        ],
        "{out}"
    );
    assert!(out.contains("normalised: docs+file:///app/secrets/key"), "{out}");

    let (code, out) =
        run_cli(&["policy", "explain", "--principal", "ci-bot", "--config", config_arg, uris[0], "gh+x:y"])?;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(verdict_lines(&out), ["allowed by ci-bot.toml: docs+**", "denied: no rule allows it"], "{out}");
    Ok(())
}

/// The `allowed …` / `denied …` lines of `policy explain`.
fn verdict_lines(out: &str) -> Vec<String> {
    out.lines()
        .map(str::trim)
        .filter(|line| line.starts_with("allowed") || line.starts_with("denied"))
        .map(str::to_owned)
        .collect()
}

/// The next notification on a listen stream, whatever it is.
async fn next_on_stream(stream: &mut Subscription) -> anyhow::Result<ServerNotification> {
    match tokio::time::timeout(fixture::DEADLINE, stream.next()).await {
        Ok(Ok(Some(notification))) => Ok(notification),
        Ok(Ok(None)) => anyhow::bail!("the stream ended"),
        Ok(Err(error)) => Err(error.into()),
        Err(_) => anyhow::bail!("nothing on the stream within {:?}", fixture::DEADLINE),
    }
}

fn is_updated(notification: &ServerNotification, uri: &str) -> bool {
    matches!(notification, ServerNotification::ResourceUpdatedNotification(n) if n.params.uri == uri)
}

/// A catalog change only bob can see (beta gains an item) tells bob `list_changed`, and tells
/// neither alice's legacy session nor her 2026 listen stream (which asked for list changes);
/// a change she can see (alpha gains one) tells her on both. Order proves absence: once bob
/// has heard of beta's change, alice's next notification on each is the update of an item she
/// holds, touched after.
#[tokio::test]
async fn list_changed_reaches_only_hosts_whose_visible_list_changed() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let (alpha_side, beta_side) = (world.alpha_side().await?, world.beta_side().await?);
    let (alice, mut alice_events) = world.http("alice", Era::Legacy).await?;
    #[allow(deprecated)]
    alice.subscribe(SubscribeRequestParams::new("alpha+fx://fx/item/1")).await?;
    let (alice_modern, _) = world.http("alice", Era::Modern).await?;
    let filter =
        SubscriptionFilter::builder().resource_subscriptions(["alpha+fx://fx/item/1"]).resources_list_changed().build();
    let mut alice_stream = alice_modern.listen(filter).await?;
    let (_bob, mut bob_events) = world.http("bob", Era::Legacy).await?;
    wait_for_stats(&alpha_side, |s| watched(s).iter().filter(|w| *w == "fx://fx/item/1").count() >= 1).await?;

    call_json(&beta_side, "add", json!({"count": 1})).await?;
    assert_eq!(bob_events.next().await?, FixtureEvent::ListChanged, "bob sees beta: he hears of it");
    touch(&alpha_side, "fx://fx/item/1").await?;
    assert_eq!(
        alice_events.next().await?,
        FixtureEvent::Updated("alpha+fx://fx/item/1".into()),
        "alice's session heard nothing of beta's change"
    );
    let next = next_on_stream(&mut alice_stream).await?;
    assert!(is_updated(&next, "alpha+fx://fx/item/1"), "alice's stream heard nothing of beta's change: {next:?}");

    // Control: a change in what she sees reaches her in both eras.
    call_json(&alpha_side, "add", json!({"count": 1})).await?;
    assert_eq!(alice_events.next().await?, FixtureEvent::ListChanged, "alice's session");
    let next = next_on_stream(&mut alice_stream).await?;
    assert!(matches!(next, ServerNotification::ResourceListChangedNotification(_)), "alice's stream: {next:?}");
    Ok(())
}

/// bob may see alpha's `multi` but not its part `multi/b`. Holding `multi` on a legacy session
/// and on a 2026 listen stream, he hears nothing when `multi/b` changes: not the part (legacy),
/// and not the parent either (the stream, whose filter names `multi`). Order proves absence:
/// the first update on each is `item/1`, touched after; alice, allowed `multi/b`, hears it.
#[tokio::test]
async fn a_change_of_a_denied_part_reaches_no_holder_of_its_parent() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let side = world.alpha_side().await?;
    let (alice, mut alice_events) = world.http("alice", Era::Legacy).await?;
    let (bob, mut bob_events) = world.http("bob", Era::Legacy).await?;
    #[allow(deprecated)]
    for (client, uri) in
        [(&alice, "alpha+fx://fx/multi"), (&bob, "alpha+fx://fx/multi"), (&bob, "alpha+fx://fx/item/1")]
    {
        client.subscribe(SubscribeRequestParams::new(uri)).await?;
    }
    let (bob_modern, _) = world.http("bob", Era::Modern).await?;
    let filter =
        SubscriptionFilter::builder().resource_subscriptions(["alpha+fx://fx/multi", "alpha+fx://fx/item/1"]).build();
    let mut bob_stream = bob_modern.listen(filter).await?;
    let acknowledged = bob_stream.acknowledged().resource_subscriptions.clone().unwrap_or_default();
    assert_eq!(acknowledged.len(), 2, "both are bob's to hold: {acknowledged:?}");
    wait_for_stats(&side, |s| ["fx://fx/multi", "fx://fx/item/1"].iter().all(|u| watched(s).iter().any(|w| w == u)))
        .await?;

    touch(&side, "fx://fx/multi/b").await?;
    touch(&side, "fx://fx/item/1").await?;
    assert_eq!(next_updated(&mut alice_events).await?, "alpha+fx://fx/multi/b", "control: alice may see multi/b");
    assert_eq!(next_updated(&mut bob_events).await?, "alpha+fx://fx/item/1", "bob's session: nothing of multi/b");
    assert_eq!(next_stream_updated(&mut bob_stream).await?, "alpha+fx://fx/item/1", "bob's stream: no `multi`");
    Ok(())
}

/// bob's allow `alpha+fx://fx/item/*.md`, in front of an upstream that routes reads on the URL
/// path (so a forwarded `item/0#.md` would read item 0): neither a fragment nor a query makes
/// `item/0` Markdown; a fragment never reaches the upstream (the read of `item/1#top` is a read
/// of `item/1`); alice's deny of `item/2` holds with a query, a fragment or a trailing `/`.
/// The upstream's own counts show what crossed the wire.
#[tokio::test]
async fn a_query_or_fragment_neither_widens_an_allow_nor_goes_upstream() -> anyhow::Result<()> {
    let alpha = HttpFixture::spawn(&["--era", "both", "--resources", "3", "--lenient-uris"]).await?;
    let bob = "principals = [\"bob\"]\nallow = [\"alpha+fx://fx/item/*.md\", \"alpha+fx://fx/item/1\"]\n";
    let alice = "principals = [\"alice\"]\nallow = [\"alpha+**\"]\ndeny = [\"alpha+fx://fx/item/2\"]\n";
    let policies = policies_folder(&[("alice.toml", alice), ("bob.toml", bob)])?;
    let config = access_config(policies.path(), &http_upstream("alpha", &alpha.url, ""));
    let proxy = ProxyProcess::start_with(&config, &[], &TOKENS).await?;
    proxy.wait_up("alpha", 1).await?;
    let (side, _) = fixture::connect_http(&alpha.url, Era::Legacy).await?;
    for (era, code) in [(Era::Legacy, NOT_FOUND_LEGACY), (Era::Modern, NOT_FOUND_MODERN)] {
        let (bob, _) = connect_http_with_token(&proxy.url, era, BOB_TOKEN).await?;
        let read = bob.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/item/1#top")).await?;
        assert!(text_of(&read.contents)[0].1.starts_with("item 1 v"), "control: {:?}", text_of(&read.contents));
        let missing = ["alpha+fx://fx/item/x.md", "nowhere+fx://fx/item/0.md"];
        for uri in ["alpha+fx://fx/item/0#.md", "alpha+fx://fx/item/0?x=.md", "alpha+fx://fx/item/0?.md"] {
            assert_denied_like_missing(&bob, uri, &missing, code).await;
        }
        assert_denied_like_missing(&bob, "alpha+fx://fx/item/0?x=/y.md", &missing, code).await;

        let (alice, _) = connect_http_with_token(&proxy.url, era, ALICE_TOKEN).await?;
        let read = alice.read_resource(ReadResourceRequestParams::new("alpha+fx://fx/item/1?a=b")).await?;
        assert!(text_of(&read.contents)[0].1.starts_with("item 1 v"), "control: a query is forwarded");
        for uri in ["alpha+fx://fx/item/2?a=b", "alpha+fx://fx/item/2#x", "alpha+fx://fx/item/2/"] {
            assert_denied_like_missing(&alice, uri, &["alpha+fx://fx/missing"], code).await;
        }
    }
    let stats = stats(&side).await?;
    let reads: Vec<&String> = stats["reads_by_uri"].as_object().map(|m| m.keys().collect()).unwrap_or_default();
    assert!(reads.iter().any(|uri| *uri == "fx://fx/item/1"), "control: item 1 was read upstream: {reads:?}");
    assert!(reads.iter().all(|uri| !uri.contains('#')), "a fragment went upstream: {reads:?}");
    let denied = |uri: &&&String| uri.starts_with("fx://fx/item/0") || uri.starts_with("fx://fx/item/2");
    assert!(!reads.iter().any(|uri| denied(&uri)), "a denied item was read upstream: {reads:?}");
    Ok(())
}

/// A URI over the 8 KiB limit gets invalid-params with a message saying so, in both eras and
/// for subscribe, without the URI echoed back; one at the limit is served.
#[tokio::test]
async fn a_uri_over_the_length_limit_gets_a_clear_error() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let prefix = "alpha+fx://fx/echo/";
    let at_limit = format!("{prefix}{}", "a".repeat(8192 - prefix.len()));
    let over = format!("{at_limit}a");
    for era in [Era::Legacy, Era::Modern] {
        let (alice, _) = world.http("alice", era).await?;
        let read = alice.read_resource(ReadResourceRequestParams::new(at_limit.clone())).await?;
        assert_eq!(text_of(&read.contents)[0].1.len(), 8192 - prefix.len(), "control: at the limit it reads");
        let error = read_error(&alice, &over).await;
        assert_eq!(fixture::error_code(&error), Some(-32602), "{era:?}: {error}");
        let message = error.to_string();
        assert!(message.contains("longer than 8192 bytes"), "{message}");
        assert!(message.len() < 300, "the URI is not echoed back ({} bytes)", message.len());
    }
    let (alice, _) = world.http("alice", Era::Legacy).await?;
    let error = subscribe_error(&alice, &over).await;
    assert!(error.to_string().contains("longer than 8192 bytes"), "{error}");
    Ok(())
}

/// A list cursor minted for alice is refused to bob (it would page through alice's view), a
/// cursor does not reveal its position or the catalog generation, and unsubscribing reveals
/// nothing: a denied URI answers like an unknown one, an allowed one that
/// was never subscribed is a no-op.
#[tokio::test]
async fn cursors_and_unsubscribe_reveal_nothing_across_principals() -> anyhow::Result<()> {
    let world = Principals::start().await?;
    let (alice, _) = world.http("alice", Era::Legacy).await?;
    let (bob, _) = world.http("bob", Era::Legacy).await?;
    let cursor = alice.list_resources(None).await?.next_cursor.expect("alice's list has pages");
    let page = |cursor: &str| Some(PaginatedRequestParams::default().with_cursor(Some(cursor.to_string())));
    alice.list_resources(page(&cursor)).await?;
    let error = bob.list_resources(page(&cursor)).await.expect_err("alice's cursor");
    assert_eq!(fixture::error_code(&error), Some(-32602), "{error}");
    assert!(error.to_string().contains("list again"), "{error}");
    // bob's own cursor does not tell him where in the merged list (hidden entries included) his
    // next page starts, nor the catalog generation: both read as noise (a clear one is small).
    let bob_cursor = bob.list_resources(None).await?.next_cursor.expect("bob's list has pages");
    let raw = base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &bob_cursor)?;
    let field = |at: usize| u64::from_be_bytes(raw[at..at + 8].try_into().expect("8 bytes"));
    assert!(raw.len() > 18 && field(2) > u64::from(u32::MAX) && field(10) > u64::from(u32::MAX), "{raw:?}");

    #[allow(deprecated)]
    let unsubscribe = |uri: &str| bob.unsubscribe(UnsubscribeRequestParams::new(uri));
    unsubscribe("alpha+fx://fx/item/3").await?;
    let denied = unsubscribe("alpha+fx://fx/item/0").await.expect_err("denied");
    let unknown = unsubscribe("nowhere+fx://fx/item/0").await.expect_err("unknown");
    assert_eq!(
        error_shape(&denied, "alpha+fx://fx/item/0"),
        error_shape(&unknown, "nowhere+fx://fx/item/0"),
        "a denied unsubscribe looks like an unknown URI"
    );
    Ok(())
}
