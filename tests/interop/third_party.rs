//! The real npm `@modelcontextprotocol/server-everything@2026.8.31` (a 2025-era server) as an
//! upstream of the real proxy, over stdio (pinned era, and `auto` to prove it lands in the 2025
//! era) and over streamable HTTP (whose replies open with an empty SSE priming event), driven
//! by rmcp clients in both eras. Installed by `.ci/install-peers.sh`; never downloaded by npx.

use std::collections::BTreeSet;

use crate::support::fixture::{self, Era, error_code, list_all_resources};
use crate::support::peers::{everything_upstream, spawn_everything_http};
use crate::support::proxy::{ProxyProcess, http_upstream};
use base64::Engine;
use rmcp::model::{ReadResourceRequestParams, ResourceContents};

const NOT_FOUND_LEGACY: i32 = -32002;
const INVALID_PARAMS: i32 = -32602;
const DOCUMENT_PREFIX: &str = "demo://resource/static/document/";

/// server-everything over stdio, its era pinned to 2025-11-25: everything it has is served
/// namespaced to clients of both eras.
#[tokio::test]
async fn everything_over_stdio_is_served_namespaced_to_both_eras() -> anyhow::Result<()> {
    let proxy = ProxyProcess::start(&everything_upstream("everything", "protocol = \"2025-11-25\"")).await?;
    proxy.wait_up("everything", 1).await?;
    assert_everything_served(&proxy, "everything").await
}

/// With `protocol = "auto"` the proxy starts with the 2025 handshake, which it keeps for
/// server-everything (it offers tools): the upstream comes up in the 2025 era and serves as with
/// a pinned era.
#[tokio::test]
async fn everything_over_stdio_with_auto_protocol_comes_up_in_the_2025_era() -> anyhow::Result<()> {
    let proxy = ProxyProcess::start(&everything_upstream("auto", "protocol = \"auto\"")).await?;
    proxy.wait_up("auto", 1).await?;
    let up = proxy.matching(&["\"upstream up\"", "\"upstream\":\"auto\""]);
    assert!(up.iter().all(|line| line.contains("\"era\":\"2025")), "came up in the 2025 era: {up:?}");
    assert_everything_served(&proxy, "auto").await
}

/// server-everything over streamable HTTP (era detected; its POST replies are SSE streams that
/// open with an empty priming event): served namespaced to clients of both eras.
#[tokio::test]
async fn everything_over_streamable_http_is_served_namespaced_to_both_eras() -> anyhow::Result<()> {
    let everything = spawn_everything_http();
    let proxy = ProxyProcess::start(&http_upstream("web", &everything.url, "")).await?;
    proxy.wait_up("web", 1).await?;
    assert_everything_served(&proxy, "web").await
}

/// Through the proxy, for a legacy and a 2026-07-28 client: the 7 static documents and the two
/// templates are listed under `<name>+`, a dynamic text read and a blob template read come back
/// with namespaced content URIs, and an unknown URI gets the not-found of the client's era.
async fn assert_everything_served(proxy: &ProxyProcess, name: &str) -> anyhow::Result<()> {
    for (era, not_found) in [(Era::Legacy, NOT_FOUND_LEGACY), (Era::Modern, INVALID_PARAMS)] {
        let (client, _) = fixture::connect_http(&proxy.url, era).await?;
        let (resources, _) = list_all_resources(&client).await?;
        let uris: BTreeSet<String> = resources.iter().map(|r| r.uri.clone()).collect();
        assert!(uris.iter().all(|u| u.starts_with(&format!("{name}+demo://"))), "{era:?}: {uris:?}");
        let documents: Vec<&String> =
            uris.iter().filter(|u| u.starts_with(&format!("{name}+{DOCUMENT_PREFIX}")) && u.ends_with(".md")).collect();
        assert_eq!(documents.len(), 7, "{era:?}: the 7 static documents in {uris:?}");

        let templates: BTreeSet<String> =
            client.list_all_resource_templates().await?.into_iter().map(|t| t.uri_template).collect();
        for kind in ["text", "blob"] {
            let template = format!("{name}+demo://resource/dynamic/{kind}/{{resourceId}}");
            assert!(templates.contains(&template), "{era:?}: {template} in {templates:?}");
        }

        let text_uri = format!("{name}+demo://resource/dynamic/text/1");
        let read = client.read_resource(ReadResourceRequestParams::new(text_uri.clone())).await?;
        assert_eq!(read.contents.len(), 1, "{era:?}");
        let ResourceContents::TextResourceContents { uri, text, .. } = &read.contents[0] else {
            panic!("{era:?}: expected text, got {:?}", read.contents[0]);
        };
        assert_eq!(uri, &text_uri, "{era:?}: the content URI is namespaced");
        assert!(text.starts_with("Resource 1:"), "{era:?}: {text:?}");

        let blob_uri = format!("{name}+demo://resource/dynamic/blob/2");
        let read = client.read_resource(ReadResourceRequestParams::new(blob_uri.clone())).await?;
        let ResourceContents::BlobResourceContents { uri, blob, .. } = &read.contents[0] else {
            panic!("{era:?}: expected a blob, got {:?}", read.contents[0]);
        };
        assert_eq!(uri, &blob_uri, "{era:?}: the content URI is namespaced");
        let bytes = base64::engine::general_purpose::STANDARD.decode(blob)?;
        assert!(!bytes.is_empty(), "{era:?}: the blob decodes to bytes");

        for missing in [format!("{name}+demo://resource/no/such/thing"), format!("nope+{DOCUMENT_PREFIX}features.md")] {
            let error =
                client.read_resource(ReadResourceRequestParams::new(missing.clone())).await.expect_err(&missing);
            assert_eq!(error_code(&error), Some(not_found), "{missing} ({era:?}): {error}");
        }
        client.cancel().await?;
    }
    Ok(())
}
