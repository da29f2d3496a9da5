//! Smoke tests of `mcp-proxy-fixture`, the scriptable upstream the proxy's tests and benchmarks use:
//! both eras over stdio and HTTP, pagination, multi-content and blob reads, templates, pushes
//! (legacy subscribe, modern listen), the control tools and the shared state behind them.

use std::time::Duration;

use crate::support::fixture::{
    Era, FixtureEvent, HttpFixture, call_json, connect_http, connect_stdio, error_code, list_all_resources,
    read_control_file, stats, wait_for_stats,
};
use base64::{Engine, engine::general_purpose::STANDARD};
use rmcp::{
    model::{
        CacheScope, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ResourceContents,
        ServerNotification, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
    },
    service::{ClientInitializeError, Peer, RoleClient, ServiceError},
};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(15);

#[tokio::test]
async fn stdio_legacy_lists_reads_and_pushes_updates() -> anyhow::Result<()> {
    let (client, mut events) = connect_stdio(&[], Era::Legacy).await?;
    let info = client.peer_info().expect("peer info");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
    let resources = info.capabilities.resources.clone().expect("resources capability");
    assert_eq!((resources.subscribe, resources.list_changed), (Some(true), Some(true)));

    let (listed, pages) = list_all_resources(&client).await?;
    let uris: Vec<&str> = listed.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(uris, ["fx://fx/multi", "fx://fx/blob", "fx://fx/item/0", "fx://fx/item/1", "fx://fx/item/2"]);
    assert_eq!(pages, 3, "page size 2 makes clients follow cursors");
    assert_eq!(listed[2].name, "item-0");
    let bad = client
        .list_resources(Some(PaginatedRequestParams::default().with_cursor(Some("bogus".into()))))
        .await
        .expect_err("invalid cursor");
    assert_eq!(error_code(&bad), Some(-32602));

    check_reads(&client).await?;
    let missing = read(&client, "fx://fx/nope").await.expect_err("unknown uri");
    assert_eq!(error_code(&missing), Some(-32002));

    #[allow(deprecated)]
    client.subscribe(SubscribeRequestParams::new("fx://fx/item/0")).await?;
    let touched = call_json(&client, "touch", json!({"uri": "fx://fx/item/0"})).await?;
    assert_eq!((touched["version"].as_u64(), touched["notified"].as_u64()), (Some(2), Some(1)));
    assert_eq!(events.next().await?, FixtureEvent::Updated("fx://fx/item/0".into()));
    assert_eq!(text_of(&client, "fx://fx/item/0").await?, "item 0 v2");

    let before = stats(&client).await?;
    assert_eq!(before["subscribes"], 1);
    assert_eq!(before["subscribed"], json!(["fx://fx/item/0"]));
    assert_eq!(before["reads_by_uri"]["fx://fx/item/0"], 1);
    assert_eq!(before["lists"], 4);
    #[allow(deprecated)]
    client.unsubscribe(UnsubscribeRequestParams::new("fx://fx/item/0")).await?;
    let after = stats(&client).await?;
    assert_eq!((after["unsubscribes"].as_u64(), after["subscribed"].clone()), (Some(1), json!([])));

    let added = call_json(&client, "add", json!({"count": 2})).await?;
    assert_eq!(added["items"], 5);
    assert_eq!(events.next().await?, FixtureEvent::ListChanged);
    assert_eq!(list_all_resources(&client).await?.0.len(), 7);
    call_json(&client, "list_changed_burst", json!({"count": 3})).await?;
    for _ in 0..3 {
        assert_eq!(events.next().await?, FixtureEvent::ListChanged);
    }
    client.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn stdio_modern_listen_receives_updates_and_list_changes() -> anyhow::Result<()> {
    let (client, _events) = connect_stdio(&[], Era::Modern).await?;
    assert_eq!(client.peer_info().expect("peer info").protocol_version, ProtocolVersion::V_2026_07_28);
    assert_eq!(list_all_resources(&client).await?.1, 3);
    check_reads(&client).await?;
    let missing = read(&client, "fx://fx/nope").await.expect_err("unknown uri");
    assert_eq!(error_code(&missing), Some(-32602), "rmcp maps -32002 for modern peers");

    let filter =
        SubscriptionFilter::builder().resources_list_changed().resource_subscriptions(["fx://fx/item/1"]).build();
    let mut subscription = client.listen(filter).await?;
    // The fixture registers a listen right after rmcp sends the acknowledgment: wait for it.
    let open = wait_for_stats(&client, |s| s["listens_open"] == 1).await?;
    assert_eq!((open["listens_open"].as_u64(), open["listen_uris"].clone()), (Some(1), json!(["fx://fx/item/1"])));

    let other = call_json(&client, "touch", json!({"uri": "fx://fx/item/2"})).await?;
    assert_eq!(other["notified"], 0, "item/2 is not in the filter");
    call_json(&client, "touch", json!({"uri": "fx://fx/item/1"})).await?;
    match tokio::time::timeout(DEADLINE, subscription.next()).await?? {
        Some(ServerNotification::ResourceUpdatedNotification(n)) => assert_eq!(n.params.uri, "fx://fx/item/1"),
        other => panic!("expected updated, got {other:?}"),
    }
    call_json(&client, "add", json!({"count": 1})).await?;
    match tokio::time::timeout(DEADLINE, subscription.next()).await?? {
        Some(ServerNotification::ResourceListChangedNotification(_)) => {}
        other => panic!("expected list_changed, got {other:?}"),
    }

    subscription.cancel().await?;
    wait_for_stats(&client, |s| s["listens_open"] == 0).await?;
    client.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn legacy_era_refuses_discover_and_auto_falls_back() -> anyhow::Result<()> {
    let refused = connect_stdio(&["--era", "legacy"], Era::Modern).await.err().expect("discover must fail");
    match refused.downcast_ref::<ClientInitializeError>() {
        Some(ClientInitializeError::JsonRpcError(data)) => assert_eq!(data.code.0, -32601, "{data:?}"),
        _ => panic!("expected method-not-found from server/discover, got {refused:?}"),
    }

    let (client, _events) = connect_stdio(&["--era", "legacy"], Era::Auto).await?;
    assert_eq!(client.peer_info().expect("peer info").protocol_version, ProtocolVersion::V_2025_11_25);
    assert_eq!(text_of(&client, "fx://fx/item/0").await?, "item 0 v1");
    client.cancel().await?;

    let fixture = HttpFixture::spawn(&["--era", "legacy"]).await?;
    let (client, _events) = connect_http(&fixture.url, Era::Auto).await?;
    assert_eq!(client.peer_info().expect("peer info").protocol_version, ProtocolVersion::V_2025_11_25);
    client.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn modern_era_refuses_initialize() -> anyhow::Result<()> {
    assert!(connect_stdio(&["--era", "modern"], Era::Legacy).await.is_err());
    let (client, _events) = connect_stdio(&["--era", "modern"], Era::Auto).await?;
    assert_eq!(client.peer_info().expect("peer info").protocol_version, ProtocolVersion::V_2026_07_28);
    client.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn http_shares_state_across_connections_and_holds_reads() -> anyhow::Result<()> {
    let fixture = HttpFixture::spawn(&["--prefix", "web", "--resources", "1"]).await?;
    let (modern, _) = connect_http(&fixture.url, Era::Modern).await?;
    let (legacy, _) = connect_http(&fixture.url, Era::Legacy).await?;
    assert_eq!(text_of(&modern, "fx://web/item/0").await?, "item 0 v1");

    let filter = SubscriptionFilter::builder().resource_subscriptions(["fx://web/item/0"]).build();
    let mut subscription = modern.listen(filter).await?;
    wait_for_stats(&legacy, |s| s["listens_open"] == 1).await?;
    let touched = call_json(&legacy, "touch", json!({"uri": "fx://web/item/0"})).await?;
    assert_eq!(touched["notified"], 1);
    match tokio::time::timeout(DEADLINE, subscription.next()).await?? {
        Some(ServerNotification::ResourceUpdatedNotification(n)) => assert_eq!(n.params.uri, "fx://web/item/0"),
        other => panic!("expected updated, got {other:?}"),
    }
    assert_eq!(text_of(&legacy, "fx://web/item/0").await?, "item 0 v2");

    call_json(&legacy, "hold_reads", json!({"on": true})).await?;
    let held = tokio::spawn({
        let modern = modern.peer().clone();
        async move { text_of(&modern, "fx://web/item/7").await }
    });
    let in_flight = wait_for_stats(&legacy, |s| s["reads_in_flight"] == 1).await?;
    assert_eq!(in_flight["reads_by_uri"]["fx://web/item/7"], 1);
    assert!(!held.is_finished());
    call_json(&legacy, "hold_reads", json!({"on": false})).await?;
    assert_eq!(tokio::time::timeout(DEADLINE, held).await???, "item 7 v1");
    let done = stats(&modern).await?;
    assert_eq!((done["reads"].as_u64(), done["reads_in_flight"].as_u64()), (Some(3), Some(0)));

    #[allow(deprecated)]
    legacy.subscribe(SubscribeRequestParams::new("fx://web/item/0")).await?;
    assert_eq!(stats(&modern).await?["subscribed"], json!(["fx://web/item/0"]));
    #[allow(deprecated)]
    legacy.unsubscribe(UnsubscribeRequestParams::new("fx://web/item/0")).await?;
    assert_eq!(stats(&modern).await?["subscribed"], json!([]));
    subscription.cancel().await?;
    modern.cancel().await?;
    legacy.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn control_endpoint_drives_the_stdio_fixture() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("control-url");
    let path_arg = path.to_str().expect("utf-8 path");
    let args = ["--control", "127.0.0.1:0", "--control-file", path_arg];
    let (client, mut events) = connect_stdio(&args, Era::Legacy).await?;
    let url = read_control_file(&path).await?;
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"), "{url}");
    let (control, _) = connect_http(&url, Era::Modern).await?;

    #[allow(deprecated)]
    client.subscribe(SubscribeRequestParams::new("fx://fx/item/1")).await?;
    call_json(&control, "touch", json!({"uri": "fx://fx/item/1"})).await?;
    assert_eq!(events.next().await?, FixtureEvent::Updated("fx://fx/item/1".into()));
    call_json(&control, "set_read_delay", json!({"ms": 200})).await?;
    let started = tokio::time::Instant::now();
    assert_eq!(text_of(&client, "fx://fx/item/1").await?, "item 1 v2");
    assert!(started.elapsed() >= Duration::from_millis(200));
    let shared = stats(&control).await?;
    assert_eq!(shared["pid"], stats(&client).await?["pid"]);
    assert_eq!(shared["reads"], 1);
    control.cancel().await?;
    client.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn options_shape_catalog_and_results() -> anyhow::Result<()> {
    let args = [
        "--no-subscribe",
        "--bad-uri",
        "--text-bytes",
        "64",
        "--ttl-ms",
        "5000",
        "--scope",
        "public",
        "--page-size",
        "1",
        "--resources",
        "1",
    ];
    let (client, _events) = connect_stdio(&args, Era::Modern).await?;
    let resources = client.peer_info().expect("peer info").capabilities.resources.clone().expect("resources");
    assert_ne!(resources.subscribe, Some(true));
    let (listed, pages) = list_all_resources(&client).await?;
    assert_eq!(pages, 4);
    assert!(listed.iter().any(|r| r.uri == "no-scheme/item"));
    let first = client.list_resources(None).await?;
    assert_eq!((first.ttl_ms, first.cache_scope), (Some(5000), Some(CacheScope::Public)));
    let templates = client.list_resource_templates(None).await?;
    assert_eq!(templates.resource_templates.len(), 1);
    assert!(templates.next_cursor.is_some());
    let text = text_of(&client, "fx://fx/item/0").await?;
    assert_eq!((text.len(), text.starts_with("item 0 v1.")), (64, true));
    let result = client.read_resource(ReadResourceRequestParams::new("fx://fx/item/0")).await?;
    assert_eq!((result.ttl_ms, result.cache_scope), (Some(5000), Some(CacheScope::Public)));
    assert_eq!(text_of(&client, "no-scheme/item").await?, "no-scheme v1");
    client.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn exit_tool_ends_the_process() -> anyhow::Result<()> {
    let mut fixture = HttpFixture::spawn(&[]).await?;
    let (client, _) = connect_http(&fixture.url, Era::Legacy).await?;
    assert_eq!(stats(&client).await?["pid"], fixture.pid().expect("pid"));
    assert_eq!(call_json(&client, "exit", json!({"code": 3})).await?["exiting"], 3);
    assert_eq!(fixture.wait_exit().await?.code(), Some(3));
    Ok(())
}

/// multi, blob, template and echo reads, shared by both eras.
async fn check_reads(client: &Peer<RoleClient>) -> anyhow::Result<()> {
    let multi = read(client, "fx://fx/multi").await?;
    let uris: Vec<&str> = multi.contents.iter().map(uri_of).collect();
    assert_eq!(uris, ["fx://fx/multi/a", "fx://fx/multi/b", "fx://fx/multi/c"]);
    let all_bytes: Vec<u8> = (0..=255).collect();
    match &multi.contents[2] {
        ResourceContents::BlobResourceContents { blob, .. } => assert_eq!(STANDARD.decode(blob)?, all_bytes),
        other => panic!("multi/c should be a blob: {other:?}"),
    }
    match &read(client, "fx://fx/blob").await?.contents[..] {
        [ResourceContents::BlobResourceContents { blob, mime_type, .. }] => {
            assert_eq!(STANDARD.decode(blob)?, all_bytes);
            assert_eq!(mime_type.as_deref(), Some("application/octet-stream"));
        }
        other => panic!("blob should be one blob: {other:?}"),
    }
    assert_eq!(text_of(client, "fx://fx/item/123456789").await?, "item 123456789 v1");
    assert_eq!(text_of(client, "fx://fx/echo/hello%20world").await?, "hello world");
    assert_eq!(text_of(client, "fx://fx/sized/10").await?, "x".repeat(10));
    let templates = client.list_resource_templates(None).await?;
    assert_eq!(templates.resource_templates[0].uri_template, "fx://fx/item/{id}");
    Ok(())
}

async fn read(client: &Peer<RoleClient>, uri: &str) -> Result<rmcp::model::ReadResourceResult, ServiceError> {
    client.read_resource(ReadResourceRequestParams::new(uri)).await
}

async fn text_of(client: &Peer<RoleClient>, uri: &str) -> anyhow::Result<String> {
    match &read(client, uri).await?.contents[..] {
        [ResourceContents::TextResourceContents { text, uri: got, .. }] => {
            assert_eq!(got, uri);
            Ok(text.clone())
        }
        other => anyhow::bail!("{uri}: expected one text content, got {other:?}"),
    }
}

fn uri_of(contents: &ResourceContents) -> &str {
    match contents {
        ResourceContents::TextResourceContents { uri, .. } | ResourceContents::BlobResourceContents { uri, .. } => uri,
        _ => "",
    }
}

#[tokio::test]
async fn hostility_knobs_list_twice_and_fault_uris_exist_only_with_faults() -> anyhow::Result<()> {
    let (plain, _) = connect_stdio(&[], Era::Legacy).await?;
    let missing = read(&plain, "fx://fx/fault/malformed").await.expect_err("no --faults");
    assert_eq!(error_code(&missing), Some(-32002));
    assert!(!text_of(&plain, "fx://fx/env/PATH").await?.is_empty(), "env/NAME reads the fixture's environment");
    assert_eq!(text_of(&plain, "fx://fx/env/NO_SUCH_VARIABLE_SET").await?, "");
    plain.cancel().await?;

    let (hostile, _) = connect_stdio(&["--duplicate-uris", "--faults"], Era::Legacy).await?;
    let (listed, _) = list_all_resources(&hostile).await?;
    let multi = listed.iter().filter(|r| r.uri == "fx://fx/multi").count();
    assert_eq!(multi, 2, "--duplicate-uris lists multi twice");
    assert_eq!(text_of(&hostile, "fx://fx/item/0").await?, "item 0 v1", "unmarked replies pass untouched");
    hostile.cancel().await?;
    Ok(())
}
