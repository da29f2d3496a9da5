//! The parked-call book: binding, bounds, undeclared capabilities.

use super::*;
use rmcp::model::SamplingMessage;
use serde_json::json;

/// A 2026-07-28 host that declares sampling and nothing else; it is never asked directly.
struct ModernHost;

impl HostRelay for ModernHost {
    fn sample(&self, _: CreateMessageRequestParams) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        unreachable!("a 2026-07-28 host is asked by input_required")
    }
    fn elicit(&self, _: ElicitRequestParams) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
        unreachable!("a 2026-07-28 host is asked by input_required")
    }
    fn log(&self, _: LoggingMessageNotificationParam) {}
    fn log_level(&self) -> Option<LoggingLevel> {
        None
    }
    fn declares_elicitation(&self) -> bool {
        false
    }
}

fn who(principal: &str) -> Resume<'_> {
    Resume { principal, name: "up__tool", timeout: Duration::from_secs(30) }
}

/// Start a call that samples once and answers with the sampled text.
async fn sampling_call(calls: &ParkedCalls<String>, principal: &str) -> Result<Outcome<String>, ProxyError> {
    calls
        .start(who(principal), Arc::new(ModernHost), |relay| async move {
            let params = CreateMessageRequestParams::new(vec![SamplingMessage::user_text("name?")], 10);
            let answer = relay.sample(params).await.map_err(|e| ProxyError::InvalidParams(e.message.into()))?;
            Ok(serde_json::to_value(answer.message.content).unwrap_or_default().to_string())
        })
        .await
}

fn state_of(outcome: Outcome<String>) -> String {
    match outcome {
        Outcome::Asks(needs) => {
            assert!(matches!(needs.input_requests.as_ref().unwrap()[INPUT_KEY], InputRequest::CreateMessage(_)));
            needs.request_state.expect("a requestState")
        }
        Outcome::Answered(answer) => panic!("expected input_required, got {answer}"),
    }
}

fn answer(text: &str) -> InputResponses {
    let result = json!({"role": "assistant", "content": {"type": "text", "text": text}, "model": "m"});
    [(INPUT_KEY.to_owned(), result)].into()
}

#[tokio::test]
async fn only_the_principal_that_parked_a_call_resumes_it_and_only_once() {
    let calls = ParkedCalls::default();
    let state = state_of(sampling_call(&calls, "alice").await.unwrap());
    assert!(state.starts_with(STATE_PREFIX) && state.len() > STATE_PREFIX.len() + 40, "{state}");
    let theft = calls.resume(who("mallory"), &state, Some(&answer("stolen")), Arc::new(ModernHost)).await;
    assert!(matches!(theft, Err(ProxyError::InvalidParams(ref m)) if m.contains("unknown or expired")));
    let outcome = calls.resume(who("alice"), &state, Some(&answer("bob")), Arc::new(ModernHost)).await.unwrap();
    let Outcome::Answered(text) = outcome else { panic!("expected the answer") };
    assert!(text.contains("bob"), "{text}");
    let again = calls.resume(who("alice"), &state, Some(&answer("bob")), Arc::new(ModernHost)).await;
    assert!(matches!(again, Err(ProxyError::InvalidParams(_))), "a state resumes once");
    assert_eq!(calls.len(), 0);
}

#[tokio::test]
async fn parked_calls_are_capped_per_principal() {
    let calls = ParkedCalls::default();
    for _ in 0..PER_PRINCIPAL {
        state_of(sampling_call(&calls, "alice").await.unwrap());
    }
    let over = sampling_call(&calls, "alice").await;
    assert!(matches!(over, Err(ProxyError::InvalidParams(ref m)) if m.contains("too many calls")));
    state_of(sampling_call(&calls, "bob").await.unwrap());
    assert_eq!(calls.len(), PER_PRINCIPAL + 1);
}

#[tokio::test]
async fn a_host_that_did_not_declare_elicitation_is_not_asked() {
    let calls: ParkedCalls<String> = ParkedCalls::default();
    let outcome = calls
        .start(who("alice"), Arc::new(ModernHost), |relay| async move {
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: "name?".into(),
                requested_schema: rmcp::model::ElicitationSchema::builder().build().unwrap(),
            };
            let error = relay.elicit(params).await.expect_err("not declared");
            Ok(format!("{:?}", error.code))
        })
        .await
        .unwrap();
    let Outcome::Answered(code) = outcome else { panic!("nothing is asked of the host") };
    assert!(code.contains("-32601"), "{code}");
}

#[test]
fn a_state_names_the_replica_its_call_is_parked_on_in_a_cluster() {
    assert_eq!(super::parked_at("mcp-proxy-input:abc@replica-1"), Some("replica-1"));
    assert_eq!(super::parked_at("mcp-proxy-input:abc"), None, "a single process names none");
    assert_eq!(super::parked_at("upstream-state@replica-1"), None, "an upstream's own state names none");
}
