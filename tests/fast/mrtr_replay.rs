//! An upstream's own `requestState` is bound to the principal it was handed to: the fixture's
//! `ask` tool and prompt (2026-07-28) keep the names answered so far in their `requestState`, so
//! a state that reached bob would hand him alice's elicited answer. Through the proxy a host
//! holds only a sealed state; bob replaying alice's gets exactly the answer to an unknown
//! `requestState`, and the upstream never sees it; alice's own retry completes.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, GetPromptRequestParams, GetPromptResponse, InputRequiredResult,
};
use rmcp::service::ServiceError;
use serde_json::{Value, json};

use crate::support::fixture::{self, DEADLINE, Era, FixtureClient, connect_http_with_token, error_code};
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, http_upstream};

const ALICE_TOKEN: &str = "alice-tok-mrtr-replay-51d0";
const BOB_TOKEN: &str = "bob-tok-mrtr-replay-7e3a";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
const ALICE_SECRET: &str = "alice-secret-name";

/// What one request of the test sends: a tool call or a prompt get, with answers and a state.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Tool,
    Prompt,
}

/// A round's outcome: the next `input_required`, or the text of the completed result.
enum Step {
    Needs(InputRequiredResult),
    Done(String),
}

#[tokio::test]
async fn another_principal_replaying_an_upstreams_request_state_gets_the_unknown_state_answer() -> anyhow::Result<()> {
    let upstream = fixture::serve_in_process(&["--era", "modern"]).await?;
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let config = alice_and_bob_under_policies(
        "",
        policies.path(),
        &http_upstream("fx", &upstream.url, "protocol = \"2026-07-28\""),
    );
    let proxy = ProxyProcess::start_with_offerings(&config, &TOKENS, &["fx"]).await?;
    let (alice, _) = connect_http_with_token(&proxy.url, Era::Modern, ALICE_TOKEN).await?;
    let (bob, _) = connect_http_with_token(&proxy.url, Era::Modern, BOB_TOKEN).await?;

    for kind in [Kind::Tool, Kind::Prompt] {
        // alice answers the first round with her secret; the upstream's state now holds it.
        let Step::Needs(first) = step(&alice, kind, None, None).await? else { anyhow::bail!("{kind:?}: no round") };
        let sealed = first.request_state.clone().unwrap_or_default();
        assert!(sealed.starts_with("mcp-proxy-sealed:") && !sealed.contains("fixture-ask"), "{kind:?}: {sealed}");
        let Step::Needs(second) = step(&alice, kind, Some(ALICE_SECRET), first.request_state).await? else {
            anyhow::bail!("{kind:?}: no second round")
        };
        let holding_her_answer = second.request_state.clone();

        // bob replays it with an answer of his own: refused like a state nobody minted.
        let replayed = step(&bob, kind, Some("bob"), holding_her_answer.clone()).await;
        let unknown = step(&bob, kind, Some("bob"), Some("mcp-proxy-input:nobody-minted-this".into())).await;
        let (replayed, unknown) = (shape(replayed), shape(unknown));
        assert_eq!(replayed, unknown, "{kind:?}: bob's replay answers like an unknown requestState");
        assert_eq!(replayed.0, Some(-32602), "{kind:?}: {replayed:?}");

        // alice's own retry completes with both her answers.
        let Step::Done(text) = step(&alice, kind, Some("alice-2"), holding_her_answer).await? else {
            anyhow::bail!("{kind:?}: alice's retry did not complete")
        };
        let names: Value = serde_json::from_str(&text)?;
        assert_eq!(names["names"], json!([ALICE_SECRET, "alice-2"]), "{kind:?}");
    }
    Ok(())
}

/// The fixture's `ask` (two rounds, by elicitation) as a tool or a prompt, answering `who`
/// with `name` and sending `state`.
async fn step(host: &FixtureClient, kind: Kind, name: Option<&str>, state: Option<String>) -> anyhow::Result<Step> {
    let tool = "fx__ask";
    let answers = name.map(|name| [("who".to_owned(), json!({"action": "accept", "content": {"name": name}}))].into());
    let step = match kind {
        Kind::Tool => {
            let mut params = CallToolRequestParams::new(tool.to_owned())
                .with_arguments(json!({"rounds": 2}).as_object().cloned().unwrap_or_default());
            params.input_responses = answers;
            params.request_state = state;
            match tokio::time::timeout(DEADLINE, host.call_tool_once(params)).await?? {
                CallToolResponse::InputRequired(needs) => Step::Needs(needs),
                CallToolResponse::Complete(result) => Step::Done(text_of(&serde_json::to_value(&result)?["content"])),
                other => anyhow::bail!("{other:?}"),
            }
        }
        Kind::Prompt => {
            let arguments = json!({"rounds": "2"}).as_object().cloned().unwrap_or_default();
            let mut params = GetPromptRequestParams::new(tool.to_owned()).with_arguments(arguments);
            params.input_responses = answers;
            params.request_state = state;
            match tokio::time::timeout(DEADLINE, host.get_prompt_once(params)).await?? {
                GetPromptResponse::InputRequired(needs) => Step::Needs(needs),
                GetPromptResponse::Complete(result) => {
                    let messages = serde_json::to_value(&result)?["messages"].clone();
                    Step::Done(messages[0]["content"]["text"].as_str().unwrap_or_default().to_owned())
                }
                other => anyhow::bail!("{other:?}"),
            }
        }
    };
    Ok(step)
}

fn text_of(content: &Value) -> String {
    content[0]["text"].as_str().unwrap_or_default().to_owned()
}

/// An error as a host sees it: its code and message.
fn shape(result: anyhow::Result<Step>) -> (Option<i32>, String) {
    match result {
        Ok(_) => (None, "answered".into()),
        Err(error) => match error.downcast::<ServiceError>() {
            Ok(error) => (error_code(&error), error.to_string()),
            Err(error) => (None, error.to_string()),
        },
    }
}
