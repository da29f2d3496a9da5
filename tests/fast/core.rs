//! The proxy core end to end: real upstream processes (the rmcp-built fixture over stdio and
//! HTTP, in both eras), the real proxy binary, real rmcp clients in both eras.

use std::collections::BTreeSet;

use crate::support::fixture::{
    self, Era, HttpFixture, call_json, connect_stdio_proxy, error_code, list_all_resources, read_control_file,
};
use crate::support::proxy::{ProxyProcess, fixture_upstream, http_upstream, write_config};
use base64::Engine;
use rmcp::model::{PaginatedRequestParams, ReadResourceRequestParams, ResourceContents};
use serde_json::json;

const NOT_FOUND_LEGACY: i32 = -32002;
const INVALID_PARAMS: i32 = -32602;

fn uris(resources: &[rmcp::model::Resource]) -> BTreeSet<String> {
    resources.iter().map(|r| r.uri.clone()).collect()
}

fn text_of(content: &ResourceContents) -> (&str, &str) {
    match content {
        ResourceContents::TextResourceContents { uri, text, .. } => (uri, text),
        other => panic!("expected text, got {other:?}"),
    }
}

/// Two upstreams of different eras and transports, merged: every URI namespaced, every page
/// followed, in both client eras.
#[tokio::test]
async fn lists_merge_every_upstream_page_under_namespaces() -> anyhow::Result<()> {
    let modern = HttpFixture::spawn(&["--era", "modern", "--resources", "5", "--page-size", "2"]).await?;
    let config = format!(
        "[server]\npage_size = 3\n\n{}{}",
        fixture_upstream("old", &["--era", "legacy", "--resources", "4", "--page-size", "3"]),
        http_upstream("new", &modern.url, ""),
    );
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("old", 1).await?;
    proxy.wait_up("new", 1).await?;

    let mut expected = BTreeSet::new();
    for i in 0..4 {
        expected.insert(format!("old+fx://fx/item/{i}"));
    }
    for i in 0..5 {
        expected.insert(format!("new+fx://fx/item/{i}"));
    }
    for name in ["old", "new"] {
        expected.insert(format!("{name}+fx://fx/multi"));
        expected.insert(format!("{name}+fx://fx/blob"));
    }
    for era in [Era::Legacy, Era::Modern] {
        let (client, _) = fixture::connect_http(&proxy.url, era).await?;
        let (resources, pages) = list_all_resources(&client).await?;
        assert_eq!(uris(&resources), expected, "{era:?}");
        assert_eq!(resources.len(), expected.len(), "no duplicates ({era:?})");
        assert_eq!(pages, expected.len().div_ceil(3), "pages of 3 ({era:?})");
        let item = resources.iter().find(|r| r.uri == "new+fx://fx/item/0").unwrap();
        assert_eq!(item.name, "item-0");
        assert_eq!(item.mime_type.as_deref(), Some("text/plain"));

        let templates = client.list_all_resource_templates().await?;
        let templates: BTreeSet<_> = templates.into_iter().map(|t| t.uri_template).collect();
        for name in ["old", "new"] {
            assert!(templates.contains(&format!("{name}+fx://fx/item/{{id}}")), "{templates:?}");
            assert!(templates.contains(&format!("{name}+fx://fx/echo/{{text}}")), "{templates:?}");
        }
    }
    Ok(())
}

/// Reads route by prefix; every content URI comes back namespaced; several contents stay
/// several; blobs pass byte for byte; template-expanded URIs work.
#[tokio::test]
async fn reads_route_by_prefix_and_rewrite_contents() -> anyhow::Result<()> {
    let modern = HttpFixture::spawn(&["--era", "modern"]).await?;
    let config = format!("{}{}", fixture_upstream("old", &["--era", "legacy"]), http_upstream("new", &modern.url, ""));
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("old", 1).await?;
    proxy.wait_up("new", 1).await?;
    for era in [Era::Legacy, Era::Modern] {
        let (client, _) = fixture::connect_http(&proxy.url, era).await?;
        for name in ["old", "new"] {
            let read = client.read_resource(ReadResourceRequestParams::new(format!("{name}+fx://fx/item/1"))).await?;
            assert_eq!(read.contents.len(), 1);
            assert_eq!(text_of(&read.contents[0]), (format!("{name}+fx://fx/item/1").as_str(), "item 1 v1"));

            let expanded = format!("{name}+fx://fx/item/987654");
            let read = client.read_resource(ReadResourceRequestParams::new(expanded.clone())).await?;
            assert_eq!(text_of(&read.contents[0]), (expanded.as_str(), "item 987654 v1"));

            let read = client.read_resource(ReadResourceRequestParams::new(format!("{name}+fx://fx/multi"))).await?;
            let content_uris: Vec<_> = read
                .contents
                .iter()
                .map(|c| match c {
                    ResourceContents::TextResourceContents { uri, .. }
                    | ResourceContents::BlobResourceContents { uri, .. } => uri.clone(),
                    _ => unreachable!(),
                })
                .collect();
            let want: Vec<_> = ["a", "b", "c"].iter().map(|p| format!("{name}+fx://fx/multi/{p}")).collect();
            assert_eq!(content_uris, want);

            let read = client.read_resource(ReadResourceRequestParams::new(format!("{name}+fx://fx/blob"))).await?;
            let ResourceContents::BlobResourceContents { uri, blob, .. } = &read.contents[0] else { panic!("blob") };
            assert_eq!(uri, &format!("{name}+fx://fx/blob"));
            let bytes = base64::engine::general_purpose::STANDARD.decode(blob)?;
            assert_eq!(bytes, (0..=255u8).collect::<Vec<_>>());
        }
    }
    Ok(())
}

/// Unknown prefix, no prefix, an upstream's own not-found: the not-found error of the
/// client's era, and the message names the URI the client asked for.
#[tokio::test]
async fn missing_resources_get_the_not_found_of_the_clients_era() -> anyhow::Result<()> {
    let config = fixture_upstream("fx", &["--era", "both"]);
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("fx", 1).await?;
    for (era, code) in [(Era::Legacy, NOT_FOUND_LEGACY), (Era::Modern, INVALID_PARAMS)] {
        let (client, _) = fixture::connect_http(&proxy.url, era).await?;
        for uri in
            ["nope+fx://fx/item/1", "fx://fx/item/1", "fx+fx://fx/missing", "fx+", "+fx://fx/item/1", "fx+fx://fx/%zz"]
        {
            let error = client.read_resource(ReadResourceRequestParams::new(uri)).await.expect_err(uri);
            assert_eq!(error_code(&error), Some(code), "{uri} ({era:?}): {error}");
            assert!(error.to_string().contains(uri), "{error}");
        }
    }
    Ok(())
}

/// Cursors are opaque and authenticated: a made-up, tampered or stale one gets -32602 with a
/// message saying to list again.
#[tokio::test]
async fn forged_and_stale_cursors_are_refused() -> anyhow::Result<()> {
    let control = tempfile::tempdir()?;
    let control_file = control.path().join("control-url");
    let config = format!(
        "[server]\npage_size = 2\n\n{}",
        fixture_upstream(
            "fx",
            &["--resources", "6", "--control", "127.0.0.1:0", "--control-file", control_file.to_str().unwrap()]
        )
    );
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("fx", 1).await?;
    let (client, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let first = client.list_resources(None).await?;
    let cursor = first.next_cursor.expect("more than one page");
    let mut tampered = cursor.clone().into_bytes();
    let last = tampered.len() - 3;
    tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
    for bad in ["", "garbage", "eyJvZmZzZXQiOjJ9", &String::from_utf8(tampered)?] {
        let error = client
            .list_resources(Some(PaginatedRequestParams::default().with_cursor(Some(bad.to_string()))))
            .await
            .expect_err(bad);
        assert_eq!(error_code(&error), Some(INVALID_PARAMS), "{bad:?}: {error}");
        assert!(error.to_string().contains("list again"), "{error}");
    }
    // The cursor works while the catalog stands still …
    client.list_resources(Some(PaginatedRequestParams::default().with_cursor(Some(cursor.clone())))).await?;
    // … and is refused once the upstream's list changed under it.
    let (side, _) = fixture::connect_http(&read_control_file(&control_file).await?, Era::Legacy).await?;
    let listed = proxy.upstream_status("fx").await?["resources"].as_u64();
    call_json(&side, "add", json!({"count": 1})).await?;
    proxy.status_when("fx", |fx| fx["resources"].as_u64() > listed).await?;
    let error = client
        .list_resources(Some(PaginatedRequestParams::default().with_cursor(Some(cursor))))
        .await
        .expect_err("stale cursor");
    assert_eq!(error_code(&error), Some(INVALID_PARAMS));
    let (all, _) = list_all_resources(&client).await?;
    assert!(uris(&all).contains("fx+fx://fx/item/6"), "the added resource is listed");
    Ok(())
}

/// An upstream that is down at start does not hold the others back; it joins when it comes up.
#[tokio::test]
async fn an_upstream_down_at_start_joins_later() -> anyhow::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let late_url = format!("http://127.0.0.1:{port}/mcp");
    let config = format!(
        "[server]\nstartup_wait = \"0s\"\n\n{}{}",
        fixture_upstream("early", &[]),
        http_upstream("late", &late_url, "reconnect_max = \"1s\"")
    );
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("early", 1).await?;
    proxy.wait_down("late").await?;
    let (client, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let (resources, _) = list_all_resources(&client).await?;
    assert!(resources.iter().all(|r| r.uri.starts_with("early+")), "only the early upstream is listed");
    let error = client.read_resource(ReadResourceRequestParams::new("late+fx://fx/item/0")).await.expect_err("down");
    assert!(error.to_string().contains("late"), "names the upstream: {error}");

    let _late = HttpFixture::spawn_at(&format!("127.0.0.1:{port}"), &[]).await?;
    proxy.wait_up("late", 1).await?;
    let read = client.read_resource(ReadResourceRequestParams::new("late+fx://fx/item/0")).await?;
    assert_eq!(text_of(&read.contents[0]).1, "item 0 v1");
    Ok(())
}

/// An upstream that dies mid-run: the others keep serving, it is restarted and comes back.
#[tokio::test]
async fn an_upstream_that_dies_comes_back_and_others_keep_serving() -> anyhow::Result<()> {
    let control = tempfile::tempdir()?;
    let control_file = control.path().join("control-url");
    let config = format!(
        "{}{}",
        fixture_upstream("steady", &[]),
        fixture_upstream("fragile", &["--control", "127.0.0.1:0", "--control-file", control_file.to_str().unwrap()]),
    );
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("steady", 1).await?;
    proxy.wait_up("fragile", 1).await?;
    let (client, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let (side, _) = fixture::connect_http(&read_control_file(&control_file).await?, Era::Legacy).await?;
    std::fs::remove_file(&control_file)?;
    let _ = call_json(&side, "exit", json!({"code": 3})).await;

    proxy.wait_down("fragile").await?;
    let read = client.read_resource(ReadResourceRequestParams::new("steady+fx://fx/item/2")).await?;
    assert_eq!(text_of(&read.contents[0]).1, "item 2 v1");

    proxy.wait_up("fragile", 2).await?;
    let read = client.read_resource(ReadResourceRequestParams::new("fragile+fx://fx/item/2")).await?;
    assert_eq!(text_of(&read.contents[0]).1, "item 2 v1");
    let (resources, _) = list_all_resources(&client).await?;
    assert!(resources.iter().any(|r| r.uri.starts_with("fragile+")), "its catalog is back");
    Ok(())
}

/// A slow upstream costs its own timeout, with an error naming it; never a hang.
#[tokio::test]
async fn a_slow_upstream_times_out_with_a_clear_error() -> anyhow::Result<()> {
    let config = format!(
        "{}\nrequest_timeout = \"300ms\"\n\n{}",
        fixture_upstream("slow", &["--read-delay-ms", "5000"]).trim_end(),
        fixture_upstream("quick", &[])
    );
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("slow", 1).await?;
    proxy.wait_up("quick", 1).await?;
    let (client, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    let started = std::time::Instant::now();
    let error = client.read_resource(ReadResourceRequestParams::new("slow+fx://fx/item/0")).await.expect_err("timeout");
    assert!(started.elapsed() < std::time::Duration::from_secs(4), "answered at the timeout, not the upstream's pace");
    let message = error.to_string();
    assert!(message.contains("`slow`") && message.contains("300ms"), "{message}");
    let read = client.read_resource(ReadResourceRequestParams::new("quick+fx://fx/item/0")).await?;
    assert_eq!(text_of(&read.contents[0]).1, "item 0 v1");
    Ok(())
}

/// An upstream URI without a scheme is not listed (never guessed at), and it is logged.
#[tokio::test]
async fn scheme_less_upstream_uris_are_skipped() -> anyhow::Result<()> {
    let proxy = ProxyProcess::start(&fixture_upstream("fx", &["--bad-uri"])).await?;
    proxy.wait_up("fx", 1).await?;
    let (client, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let (resources, _) = list_all_resources(&client).await?;
    assert!(resources.iter().all(|r| r.uri.starts_with("fx+fx://")), "{:?}", uris(&resources));
    assert!(!resources.is_empty());
    assert!(!proxy.matching(&["no scheme", "no-scheme/item"]).is_empty(), "logged");
    Ok(())
}

/// One host over stdio, in both eras.
#[tokio::test]
async fn serves_a_host_over_stdio_in_both_eras() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), &fixture_upstream("fx", &["--resources", "2"]))?;
    for era in [Era::Legacy, Era::Modern] {
        let (client, _) = connect_stdio_proxy(&config, era).await?;
        // `serve` answers once its upstreams are up (server.startup_wait), so the first list is whole.
        let (resources, _) = list_all_resources(&client).await?;
        assert!(uris(&resources).contains("fx+fx://fx/item/1"), "{era:?}: {:?}", uris(&resources));
        let read = client.read_resource(ReadResourceRequestParams::new("fx+fx://fx/item/1")).await?;
        assert_eq!(text_of(&read.contents[0]), ("fx+fx://fx/item/1", "item 1 v1"));
        client.cancel().await?;
    }
    Ok(())
}

/// Lists come from the catalog, not from upstream calls per page; an upstream's lists are
/// fetched again when their `ttlMs` runs out (and not otherwise).
#[tokio::test]
async fn lists_are_refetched_only_when_their_ttl_runs_out() -> anyhow::Result<()> {
    let short = HttpFixture::spawn(&["--era", "modern", "--ttl-ms", "1000"]).await?;
    let unbounded = HttpFixture::spawn(&["--era", "modern"]).await?;
    let config = format!("{}{}", http_upstream("short", &short.url, ""), http_upstream("plain", &unbounded.url, ""));
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("short", 1).await?;
    proxy.wait_up("plain", 1).await?;
    let (side_short, _) = fixture::connect_http(&short.url, Era::Modern).await?;
    let (side_plain, _) = fixture::connect_http(&unbounded.url, Era::Modern).await?;
    let plain_lists = fixture::stats(&side_plain).await?["lists"].as_u64().unwrap();
    let short_lists = fixture::stats(&side_short).await?["lists"].as_u64().unwrap();

    let (client, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    for _ in 0..5 {
        list_all_resources(&client).await?;
    }
    assert_eq!(
        fixture::stats(&side_plain).await?["lists"].as_u64().unwrap(),
        plain_lists,
        "host lists cost no upstream call"
    );
    // The short upstream's lists expire after 1 s: the proxy fetches them again by itself.
    fixture::wait_for_stats(&side_short, |s| s["lists"].as_u64().unwrap() > short_lists).await?;
    proxy.wait_log(&["upstream catalog reloaded", "\"changed\":false"]).await?;
    assert_eq!(fixture::stats(&side_plain).await?["lists"].as_u64().unwrap(), plain_lists);
    Ok(())
}
