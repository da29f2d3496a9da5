//! Access control end to end: bearer principals over HTTP and a `--principal` over stdio, glob
//! policies from a real policies folder, real upstreams (the rmcp fixture, the folder server),
//! the real proxy binary, real clients. What a principal may not see must be invisible to it
//! everywhere: lists, templates, reads, subscriptions, notifications, errors, cache hits.
//!
//! This module holds the principals, policies and steps the parts share: `views` (lists, reads,
//! cursors), `notifications` (`updated`, `list_changed`, policy reload), `corpus` (the bypass
//! corpus over HTTP), `credentials` (tokens, `check` and `policy explain`).

mod corpus;
mod credentials;
mod notifications;
mod views;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::fixture::{
    self, Era, Events, FixtureClient, FixtureEvent, HttpFixture, call_json, connect_http_with_token,
    connect_stdio_proxy_with, list_all_resources, watched,
};
use crate::support::proxy::{ProxyProcess, http_upstream, toml_str};
use rmcp::model::{ReadResourceRequestParams, ResourceContents, ServerNotification, SubscribeRequestParams};
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

#[allow(deprecated)]
async fn subscribe_error(client: &FixtureClient, uri: &str) -> ServiceError {
    match client.subscribe(SubscribeRequestParams::new(uri)).await {
        Ok(()) => panic!("subscribed to {uri}"),
        Err(error) => error,
    }
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

async fn touch(side: &FixtureClient, uri: &str) -> anyhow::Result<()> {
    call_json(side, "touch", json!({ "uri": uri })).await.map(drop)
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

/// `line` with `root` (an absolute path, without its leading `/`) inserted after the `file:`
/// scheme's `//authority` and leading slashes; the line's own quirks stay as they are. A line
/// that is no `file:` URI aims at no file and stays as it is.
fn under_root(line: &str, root: &str) -> String {
    let Some(scheme) = line.to_ascii_lowercase().find("file:") else { return line.to_owned() };
    let scheme_end = scheme + "file:".len();
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
