//! The built-in folder server behind the real proxy binary (HTTP, bearer principal) with a
//! deny policy: a symlink inside the folder cannot carry a denied file out under its own URI,
//! and a directory read names nothing the principal may not read; a refusal of its own names its cause.

use std::path::{Path, PathBuf};

use crate::support::fixture::{Era, FixtureClient, connect_http_with_token, list_all_resources};
use crate::support::proxy::{ProxyProcess, toml_str};
use rmcp::model::{ReadResourceRequestParams, ResourceContents};

const TOKEN: &str = "dana-tok-6b1e9f3c7a2d5e80";
/// Everything, except `.env` files and anything named `secret*` (and what is under it).
const POLICY: &str = "principals = [\"*\"]\nallow = [\"**\"]\n\
    deny = [\"*+file:///**/.env\", \"*+file:///**/secret*\", \"*+file:///**/secret*/**\"]\n";
const ENV_TEXT: &str = "API_KEY=env-value-never-to-be-read";

/// The served folder: `.env` (denied), `notes/` with a readme, links to `.env` (relative
/// and absolute), a denied `secret.txt`, a denied `secret-dir/`, and `sub/` whose only file
/// is denied.
fn folder() -> anyhow::Result<(tempfile::TempDir, PathBuf)> {
    let temp = tempfile::Builder::new().prefix("folder-policy").tempdir()?;
    let root = temp.path().canonicalize()?;
    std::fs::create_dir_all(root.join("notes/secret-dir"))?;
    std::fs::create_dir_all(root.join("notes/sub"))?;
    std::fs::write(root.join(".env"), ENV_TEXT)?;
    std::fs::write(root.join("notes/readme.md"), "readme")?;
    std::fs::write(root.join("notes/secret.txt"), "hidden")?;
    std::fs::write(root.join("notes/secret-dir/inner.md"), "hidden")?;
    std::fs::write(root.join("notes/sub/secret-child.md"), "hidden")?;
    std::os::unix::fs::symlink("../.env", root.join("notes/link"))?;
    std::os::unix::fs::symlink(root.join(".env"), root.join("notes/absolute-link.txt"))?;
    std::os::unix::fs::symlink("..", root.join("notes/up"))?;
    Ok((temp, root))
}

async fn proxy(root: &Path) -> anyhow::Result<(ProxyProcess, tempfile::TempDir)> {
    let policies = tempfile::tempdir()?;
    std::fs::write(policies.path().join("default.toml"), POLICY)?;
    let config = format!(
        "[auth]\nmode = \"bearer\"\n\n[[auth.tokens]]\nprincipal = \"dana\"\ntoken_env = \"DANA_TOKEN\"\n\n\
         [policies]\ndir = {}\n\n[[upstreams]]\nname = \"docs\"\ndir = {}\n",
        toml_str(policies.path().to_str().expect("utf-8")),
        toml_str(root.to_str().expect("utf-8"))
    );
    let proxy = ProxyProcess::start_with(&config, &[], &[("DANA_TOKEN", TOKEN)]).await?;
    proxy.wait_up("docs", 1).await?;
    Ok((proxy, policies))
}

/// The namespaced URI of `relative` (the folder's files are named relative to it).
fn uri(_root: &Path, relative: &str) -> String {
    match relative.trim_end_matches('/') {
        "" => "docs+file:///".to_string(),
        relative => format!("docs+file:///{relative}"),
    }
}

/// `(uri, text)` of each content (blobs as `<blob>`), or the error as text.
async fn read(client: &FixtureClient, uri: &str) -> Result<Vec<(String, String)>, String> {
    let read = client.read_resource(ReadResourceRequestParams::new(uri)).await.map_err(|e| format!("{e:?}"))?;
    Ok(read
        .contents
        .iter()
        .map(|content| match content {
            ResourceContents::TextResourceContents { uri, text, .. } => (uri.clone(), text.clone()),
            ResourceContents::BlobResourceContents { uri, .. } => (uri.clone(), "<blob>".into()),
            _ => unreachable!("text or blob"),
        })
        .collect())
}

/// Links to the denied `.env` are neither listed nor readable under their own URIs (nor
/// carried by a directory read), for both eras; the readme is the control.
#[tokio::test]
async fn a_link_to_a_denied_file_is_neither_listed_nor_read() -> anyhow::Result<()> {
    let (_folder, root) = folder()?;
    let (proxy, _policies) = proxy(&root).await?;
    for era in [Era::Legacy, Era::Modern] {
        let (client, _) = connect_http_with_token(&proxy.url, era, TOKEN).await?;
        let (listed, _) = list_all_resources(&client).await?;
        let uris: Vec<&str> = listed.iter().map(|r| r.uri.as_str()).collect();
        assert!(uris.contains(&uri(&root, "notes/readme.md").as_str()), "control: {uris:?}");
        assert!(uris.iter().all(|u| !u.contains("link") && !u.contains("/up/")), "{era:?}: links listed: {uris:?}");

        let readme = read(&client, &uri(&root, "notes/readme.md")).await;
        assert_eq!(readme, Ok(vec![(uri(&root, "notes/readme.md"), "readme".into())]), "control");
        for linked in ["notes/link", "notes/absolute-link.txt", "notes/up/.env", "notes/up/notes/readme.md", "notes"] {
            let answer = read(&client, &uri(&root, linked)).await;
            assert!(!format!("{answer:?}").contains(ENV_TEXT), "{era:?}: reading {linked} carried .env: {answer:?}");
        }
        for link in ["notes/link", "notes/absolute-link.txt", "notes/up/notes/readme.md"] {
            assert!(read(&client, &uri(&root, link)).await.is_err(), "{era:?}: {link} is not served");
        }
    }
    Ok(())
}

/// Reading `notes/` and the folder itself carries the readme and `sub/` but no name, URI or
/// text of anything denied (`secret.txt`, `secret-dir/`, `sub/secret-child.md`, `.env`).
#[tokio::test]
async fn a_directory_read_names_nothing_the_principal_may_not_read() -> anyhow::Result<()> {
    let (_folder, root) = folder()?;
    let (proxy, _policies) = proxy(&root).await?;
    let (client, _) = connect_http_with_token(&proxy.url, Era::Legacy, TOKEN).await?;
    let notes = read(&client, &uri(&root, "notes")).await.map_err(anyhow::Error::msg)?;
    let entries: Vec<&str> = notes.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(entries, [uri(&root, "notes/readme.md"), uri(&root, "notes/sub")], "{notes:?}");
    let top = read(&client, &uri(&root, "")).await.map_err(anyhow::Error::msg)?;
    assert_eq!(top.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>(), [uri(&root, "notes")], "{top:?}");
    // sub's only file is denied: the proxy answers like a missing resource (or with nothing).
    let sub = read(&client, &uri(&root, "notes/sub")).await.unwrap_or_default();
    assert_eq!(sub, [], "sub's only file is denied");
    for answer in [&notes, &top] {
        let seen = format!("{answer:?}");
        assert!(!seen.contains("secret") && !seen.contains(".env") && !seen.contains(ENV_TEXT), "leak: {seen}");
    }
    Ok(())
}

/// A file over the folder server's reply cap is refused with the folder server's own reason
/// (it is the proxy's code, not a third party's), not a bare error code.
#[tokio::test]
async fn a_file_over_the_folder_cap_is_refused_naming_the_cause() -> anyhow::Result<()> {
    let (_folder, root) = folder()?;
    std::fs::write(root.join("notes/big.txt"), vec![b'a'; 17 * 1024 * 1024])?;
    let (proxy, _policies) = proxy(&root).await?;
    for era in [Era::Legacy, Era::Modern] {
        let (client, _) = connect_http_with_token(&proxy.url, era, TOKEN).await?;
        let answer = read(&client, &uri(&root, "notes/big.txt")).await;
        let error = answer.expect_err("over the cap");
        assert!(error.contains("too large"), "{era:?}: the cause is named: {error}");
        assert!(!error.contains("answered with error"), "{era:?}: {error}");
        let readme = read(&client, &uri(&root, "notes/readme.md")).await;
        assert_eq!(readme, Ok(vec![(uri(&root, "notes/readme.md"), "readme".into())]), "control");
    }
    Ok(())
}
