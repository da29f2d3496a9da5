//! Bad input across replicas: a cursor or an upstream's `requestState` that is forged, made by a
//! cluster with another secret (a real one, sharing the same Redis), or replayed by another
//! principal answers exactly like an unknown one — on whichever replica it lands.

use rmcp::model::{CallToolRequestParams, CallToolResponse, PaginatedRequestParams};
use rmcp::service::ServiceError;
use serde_json::json;

use super::replicas::{ALICE_TOKEN, BOB_TOKEN, TOKENS, config, straight_to, three_replicas};
use crate::support::cluster::{SECRET_ENV, with_cluster};
use crate::support::fixture::{DEADLINE, Era, FixtureClient, connect_http_with_token, error_code};
use crate::support::proxy::ProxyProcess;

/// Another cluster's secret (as long as the real one).
const OTHER_SECRET: &str = "another-cluster-secret-0b8e5d3f7a1c9e24";

/// An error as a host sees it: code and message (`None`: it was answered).
type Shape = (Option<i32>, String);

fn shape<T>(result: Result<T, ServiceError>) -> Shape {
    match result {
        Ok(_) => (None, "answered".into()),
        Err(error) => (error_code(&error), error.to_string()),
    }
}

async fn page(host: &FixtureClient, cursor: &str) -> Shape {
    let params = PaginatedRequestParams::default().with_cursor(Some(cursor.to_owned()));
    shape(host.list_resources(Some(params)).await)
}

/// Round one of `fx__ask` (or a retry with `state` and an answer): the state handed back, or the
/// error's shape.
async fn ask(host: &FixtureClient, state: Option<String>) -> anyhow::Result<Result<Option<String>, Shape>> {
    let mut params = CallToolRequestParams::new("fx__ask".to_owned())
        .with_arguments(json!({"rounds": 2}).as_object().cloned().unwrap_or_default());
    if state.is_some() {
        params.input_responses =
            Some([("who".to_owned(), json!({"action": "accept", "content": {"name": "x"}}))].into());
    }
    params.request_state = state;
    Ok(match tokio::time::timeout(DEADLINE, host.call_tool_once(params)).await? {
        Ok(CallToolResponse::InputRequired(needs)) => Ok(needs.request_state),
        Ok(other) => anyhow::bail!("expected input_required: {other:?}"),
        Err(error) => Err(shape::<()>(Err(error))),
    })
}

#[tokio::test]
async fn forged_foreign_and_replayed_cursors_and_request_states_answer_like_unknown_ones() -> anyhow::Result<()> {
    let (cluster, _policies) = three_replicas().await?;
    let (alice, _) = connect_http_with_token(cluster.url(), Era::Modern, ALICE_TOKEN).await?;
    let (bob, _) = connect_http_with_token(cluster.url(), Era::Modern, BOB_TOKEN).await?;

    // A replica of another cluster (another secret) on the same Redis and the same upstream.
    let (plain, _other_policies) = config()?;
    let stranger_config = with_cluster(&plain, &cluster.redis.url(), "stranger-0");
    let mut env = TOKENS.to_vec();
    env.push((SECRET_ENV, OTHER_SECRET));
    let stranger = ProxyProcess::start_with(&stranger_config, &[], &env).await?;
    stranger.wait_offerings("fx").await?;
    stranger.status_when("fx", |fx| fx["resources"] == 7).await?;
    let alice_there = straight_to(&stranger, ALICE_TOKEN).await?;

    // Cursors: alice's own pages anywhere; bob replaying hers, the stranger's (minted for alice,
    // same list), a forged one and garbage all answer alike, on every replica.
    let hers = alice.list_resources(None).await?.next_cursor.expect("a second page");
    let foreign = alice_there.list_resources(None).await?.next_cursor.expect("a second page");
    assert_ne!(hers, foreign, "another secret, another cursor");
    let mut forged = hers.clone().into_bytes();
    let last = forged.len() - 2;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged)?;
    for _ in 0..3 {
        assert_eq!(page(&alice, &hers).await, (None, "answered".into()), "alice's own cursor on any replica");
        let unknown = page(&alice, "bm90LWEtY3Vyc29y").await;
        assert_eq!(unknown.0, Some(-32602), "{unknown:?}");
        assert_eq!(page(&bob, &hers).await, unknown, "bob replaying alice's cursor");
        assert_eq!(page(&alice, &foreign).await, unknown, "a cursor of another cluster");
        assert_eq!(page(&alice, &forged).await, unknown, "a forged cursor");
    }
    assert_eq!(page(&alice_there, &hers).await, page(&alice_there, "bm90LWEtY3Vyc29y").await, "and the other way");

    // requestState: alice's sealed state retried by alice works on the next replica; bob's
    // replay, the stranger's state and garbage answer like an unknown state.
    let sealed = ask(&alice, None).await?.map_err(|e| anyhow::anyhow!("{e:?}"))?.expect("a state");
    let foreign_state = ask(&alice_there, None).await?.map_err(|e| anyhow::anyhow!("{e:?}"))?.expect("a state");
    for _ in 0..3 {
        let unknown = ask(&alice, Some("mcp-proxy-sealed:bm90LWEtc3RhdGU".into())).await?;
        let Err(unknown) = unknown else { anyhow::bail!("an unknown state was taken") };
        assert_eq!(unknown.0, Some(-32602), "{unknown:?}");
        assert_eq!(ask(&bob, Some(sealed.clone())).await?, Err(unknown.clone()), "bob replaying alice's state");
        assert_eq!(ask(&alice, Some(foreign_state.clone())).await?, Err(unknown.clone()), "another cluster's state");
        assert!(ask(&alice, Some(sealed.clone())).await?.is_ok(), "alice's own state, on any replica");
    }
    Ok(())
}
