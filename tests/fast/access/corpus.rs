//! The bypass corpus (`tests/data/bypass-corpus.txt`) through the HTTP endpoint: every line is
//! denied or refused, every positive control served.

use crate::support::fixture::{Era, FixtureClient, connect_http_with_token};
use rmcp::model::ReadResourceRequestParams;

use super::*;
use crate::support::bypass_corpus::{CorpusSection, bypass_corpus};

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
