//! Spellings of one authority against an upstream that resolves URIs with a URL parser
//! (tests/py/url_parsing_server.py: PyPI `mcp` 2.3.0, `urllib.parse`, by host and path): a deny
//! on `web+web://secret.corp/**` holds for user info (empty or not), an empty or explicit port,
//! a trailing dot and their mixtures, which that upstream all reads as the secret. Controls: the
//! public page is read, and a principal allowed everything reads the secret by those spellings
//! that normalise (so the upstream really serves them, and the denials are the policy's).

use rmcp::model::{ReadResourceRequestParams, ResourceContents};

use crate::support::fixture::{Era, connect_http_with_token};
use crate::support::peers::{py_script, python};
use crate::support::proxy::{ProxyProcess, toml_str};

const ALICE: &str = "alice-tok-url-spellings-1";
const BOB: &str = "bob-tok-url-spellings-2";
/// alice may read everything but the secret host; bob everything.
const POLICY: &str = "principals = [\"alice\"]\nallow = [\"**\"]\ndeny = [\"web+web://secret.corp/**\"]\n\n";
const BOB_POLICY: &str = "principals = [\"bob\"]\nallow = [\"**\"]\n";

/// The spellings the upstream resolves to `secret.corp/key`.
const SPELLINGS: [&str; 12] = [
    "web+web://@secret.corp/key",
    "web+web://u@secret.corp/key",
    "web+web://u:p@secret.corp/key",
    "web+web://secret.corp:/key",
    "web+web://secret.corp:80/key",
    "web+web://secret.corp:0080/key",
    "web+web://secret.corp./key",
    "web+web://SECRET.CORP./key",
    "web+web://secret.corp.:/key",
    "web+web://secret.corp.:443/key",
    "web+web://@secret.corp.:8080/key",
    "web+web://secret.corp%2E/key",
];

#[tokio::test]
async fn a_deny_on_a_host_holds_for_every_spelling_a_url_parser_reads_as_it() -> anyhow::Result<()> {
    let policies = tempfile::tempdir()?;
    std::fs::write(policies.path().join("alice.toml"), POLICY)?;
    std::fs::write(policies.path().join("bob.toml"), BOB_POLICY)?;
    let script = py_script("url_parsing_server.py");
    let config = format!(
        "[auth]\nmode = \"bearer\"\n\n\
         [[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n\
         [policies]\ndir = {}\n\n\
         [[upstreams]]\nname = \"web\"\ncommand = {}\nargs = [{}]\nprotocol = \"2025-11-25\"\n",
        toml_str(policies.path().to_str().expect("utf-8 path")),
        toml_str(python().to_str().expect("utf-8 path")),
        toml_str(script.to_str().expect("utf-8 path")),
    );
    let proxy = ProxyProcess::start_with(&config, &[], &[("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)]).await?;

    let (alice, _) = connect_http_with_token(&proxy.url, Era::Legacy, ALICE).await?;
    assert_eq!(read_text(&alice, "web+web://public.corp/readme").await?, "content of public.corp/readme");
    let missing = alice.read_resource(ReadResourceRequestParams::new("web+web://secret.corp/nothing")).await;
    let missing = missing.expect_err("a missing page is not found").to_string();
    let mut read = Vec::new();
    for spelling in std::iter::once("web+web://secret.corp/key").chain(SPELLINGS) {
        match alice.read_resource(ReadResourceRequestParams::new(spelling)).await {
            Ok(answer) => read.push(format!("{spelling} was READ: {:?}", answer.contents)),
            Err(error) => {
                let shape = error.to_string().replace(spelling, "web+web://secret.corp/nothing");
                if shape != missing {
                    read.push(format!("{spelling} answered unlike a missing page: {error}"));
                }
            }
        }
    }
    assert!(read.is_empty(), "{} spellings got through:\n{}", read.len(), read.join("\n"));

    let (bob, _) = connect_http_with_token(&proxy.url, Era::Legacy, BOB).await?;
    for spelling in ["web+web://secret.corp/key", "web+web://secret.corp./key", "web+web://secret.corp:80/key"] {
        assert_eq!(read_text(&bob, spelling).await?, "content of secret.corp/key", "bob reads {spelling}");
    }
    Ok(())
}

async fn read_text(host: &crate::support::fixture::FixtureClient, uri: &str) -> anyhow::Result<String> {
    let read = host.read_resource(ReadResourceRequestParams::new(uri)).await?;
    match read.contents.first() {
        Some(ResourceContents::TextResourceContents { text, .. }) => Ok(text.clone()),
        other => anyhow::bail!("{uri}: {other:?}"),
    }
}
