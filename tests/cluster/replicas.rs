//! 2026-07-28 hosts (the rmcp client) through the load balancer: every request may land on
//! another replica, and paging, reads, tool calls and a multi-round `input_required` call all
//! work — cursors and `requestState`s one replica made are taken by the next.

use std::collections::BTreeSet;

use rmcp::model::{CallToolRequestParams, CallToolResponse, ReadResourceRequestParams};
use serde_json::json;

use crate::support::cluster::Replicas;
use crate::support::exposition::Exposition;
use crate::support::fixture::{DEADLINE, Era, FixtureClient, connect_http_with_token, list_all_resources};
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, fixture_upstream};

pub const ALICE_TOKEN: &str = "alice-tok-cluster-3c9e71";
pub const BOB_TOKEN: &str = "bob-tok-cluster-8d2a40";
pub const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];

/// alice and bob (both allowed everything), lists of 2 per page, one fixture upstream `fx` per
/// replica (a stdio child each, shared by both: `session = "shared"`) speaking 2026-07-28: 7
/// resources, the `ask` tool.
pub fn config() -> anyhow::Result<(String, tempfile::TempDir)> {
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let upstream = fixture_upstream("fx", &["--era", "modern", "--resources", "5"]);
    let upstream = format!("{}\nprotocol = \"2026-07-28\"\nsession = \"shared\"\n\n", upstream.trim_end());
    Ok((alice_and_bob_under_policies("page_size = 2", policies.path(), &upstream), policies))
}

/// Three replicas of [`config`], each with `fx`'s resources and tools in.
pub async fn three_replicas() -> anyhow::Result<(Replicas, tempfile::TempDir)> {
    let (config, policies) = config()?;
    let cluster = Replicas::start(3, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("fx").await?;
        replica.status_when("fx", |fx| fx["resources"] == 7).await?;
    }
    Ok((cluster, policies))
}

/// How many `method` requests `replica` answered with `outcome`.
pub async fn answered(replica: &ProxyProcess, method: &str, outcome: &str) -> anyhow::Result<f64> {
    let metrics = Exposition::parse(&replica.admin_get("/metrics").await?)?;
    Ok(metrics.value("mcp_proxy_downstream_requests_total", &[("method", method), ("outcome", outcome)]).unwrap_or(0.0))
}

#[tokio::test]
async fn a_modern_host_pages_reads_and_calls_tools_with_every_request_on_another_replica() -> anyhow::Result<()> {
    let (cluster, _policies) = three_replicas().await?;
    let (alice, _) = connect_http_with_token(cluster.url(), Era::Modern, ALICE_TOKEN).await?;

    // 7 resources, 2 per page: 4 pages, round-robin over 3 replicas, so each page's cursor was
    // made by another replica than the one that takes it.
    let (resources, pages) = tokio::time::timeout(DEADLINE, list_all_resources(&alice)).await??;
    let uris: BTreeSet<String> = resources.iter().map(|r| r.uri.clone()).collect();
    assert_eq!((uris.len(), resources.len(), pages), (7, 7, 4), "{uris:?}");
    let mut lists = Vec::new();
    for replica in &cluster.replicas {
        lists.push(answered(replica, "resources/list", "ok").await?);
        assert_eq!(answered(replica, "resources/list", "invalid_cursor").await?, 0.0, "no cursor refused");
    }
    assert_eq!(lists.iter().sum::<f64>(), 4.0, "{lists:?}");
    assert!(lists.iter().all(|served| *served >= 1.0), "every replica served a page: {lists:?}");

    // Reads, each on the next replica.
    for uri in ["fx+fx://fx/item/0", "fx+fx://fx/item/1", "fx+fx://fx/item/2"] {
        let read = alice.read_resource(ReadResourceRequestParams::new(uri)).await?;
        let text = serde_json::to_value(&read.contents)?;
        assert_eq!(text[0]["uri"], uri, "{text}");
        assert!(text[0]["text"].as_str().is_some_and(|t| t.starts_with("item ")), "{text}");
    }

    // An `input_required` call in three requests — round one, two and the completion — each on
    // another replica: the upstream's `requestState`, sealed by one, is opened by the next.
    let mut state = None;
    let mut answer = None;
    let mut rounds = 0;
    let done = loop {
        let mut params = CallToolRequestParams::new("fx__ask".to_owned())
            .with_arguments(json!({"rounds": 2}).as_object().cloned().unwrap_or_default());
        params.input_responses = answer
            .map(|name: &str| [("who".to_owned(), json!({"action": "accept", "content": {"name": name}}))].into());
        params.request_state = state.take();
        match tokio::time::timeout(DEADLINE, alice.call_tool_once(params)).await?? {
            CallToolResponse::InputRequired(needs) => {
                let sealed = needs.request_state.clone().unwrap_or_default();
                assert!(
                    sealed.starts_with("mcp-proxy-sealed:"),
                    "the upstream's state reaches the host sealed: {sealed}"
                );
                state = needs.request_state;
                rounds += 1;
                answer = Some(if rounds == 1 { "ada" } else { "grace" });
            }
            CallToolResponse::Complete(result) => break serde_json::to_value(&result)?,
            other => anyhow::bail!("{other:?}"),
        }
        anyhow::ensure!(rounds <= 2, "more rounds than asked for");
    };
    let names: serde_json::Value = serde_json::from_str(done["content"][0]["text"].as_str().unwrap_or_default())?;
    assert_eq!(names["names"], json!(["ada", "grace"]), "{done}");
    let mut calls = Vec::new();
    for replica in &cluster.replicas {
        calls.push(answered(replica, "tools/call", "ok").await?);
    }
    assert_eq!(calls.iter().filter(|served| **served >= 1.0).count(), 3, "the 3 requests on 3 replicas: {calls:?}");
    Ok(())
}

/// The same cursor, presented three times in a row, is taken by each replica alike.
#[tokio::test]
async fn one_cursor_is_taken_alike_by_every_replica() -> anyhow::Result<()> {
    let (cluster, _policies) = three_replicas().await?;
    let (alice, _) = connect_http_with_token(cluster.url(), Era::Modern, ALICE_TOKEN).await?;
    let first = alice.list_resources(None).await?;
    let cursor = first.next_cursor.clone().expect("a second page");
    let mut pages = Vec::new();
    for _ in 0..3 {
        let params = rmcp::model::PaginatedRequestParams::default().with_cursor(Some(cursor.clone()));
        let page = alice.list_resources(Some(params)).await?;
        pages.push(page.resources.iter().map(|r| r.uri.clone()).collect::<Vec<_>>());
    }
    assert!(pages.iter().all(|page| page == &pages[0] && page.len() == 2), "{pages:?}");
    for replica in &cluster.replicas {
        assert!(answered(replica, "resources/list", "ok").await? >= 1.0, "every replica took it");
    }
    Ok(())
}

/// A client connected straight to one replica (for what must come from a given one).
pub async fn straight_to(replica: &ProxyProcess, token: &str) -> anyhow::Result<FixtureClient> {
    Ok(connect_http_with_token(&replica.url, Era::Modern, token).await?.0)
}
