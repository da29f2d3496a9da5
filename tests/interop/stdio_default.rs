//! A stdio upstream's default session, end to end: alice and bob (static tokens), each an rmcp
//! host declaring sampling and elicitation, call at the same time, ten rounds over, the sampling
//! and elicitation tools of two stdio SDK servers configured with nothing but their command —
//! the Python SDK's `tests/py/conformance_server.py` and the real server-everything (TypeScript
//! SDK). Neither names its call in the requests it sends (SEP-2260 defines no field), so on one
//! shared child they reach a host only while one principal ever called it; under the default (a
//! child per principal that uses it) every call of both, alice's and bob's at the same time, is
//! asked of its own host and returns its host's answer, 10/10 each. The children this costs are counted (the shared one that lists,
//! plus one per principal) and server-everything's resident memory printed.

#![allow(deprecated)] // Sampling is deprecated by SEP-2577 but still in the 2025 era.

use std::sync::{Arc, Mutex};

use anyhow::Context;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability, FormElicitationCapability,
    Implementation, SamplingCapability, SamplingMessage,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::support::fixture::DEADLINE;
use crate::support::peers::{everything_upstream, py_script, python};
use crate::support::processes::{resident_bytes, running_below};
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, toml_str};

const ALICE_TOKEN: &str = "alice-tok-stdio-default-61c0";
const BOB_TOKEN: &str = "bob-tok-stdio-default-d52e";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
const ROUNDS: usize = 10;

/// A host that answers sampling with "the answer of <name>" and elicitation with its name, and
/// keeps what it was asked (sampling prompts, elicitation messages).
#[derive(Clone)]
struct Answering {
    name: &'static str,
    asked: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Answering {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(SamplingCapability::default());
        let mut elicitation = ElicitationCapability::default();
        elicitation.form = Some(FormElicitationCapability::default());
        capabilities.elicitation = Some(elicitation);
        ClientConfig::new(capabilities, Implementation::new(self.name, "1.0.0"))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.asked.lock().expect("asked").push(serde_json::to_string(&params.messages).unwrap_or_default());
        let answer = SamplingMessage::assistant_text(format!("the answer of {}", self.name));
        Ok(CreateMessageResult::new(answer, "test-model".into()).with_stop_reason("endTurn"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::FormElicitationParams { message, requested_schema, .. } = request else {
            return Err(ErrorData::invalid_params("a form elicitation only", None));
        };
        self.asked.lock().expect("asked").push(message);
        // The fields each server asks for: server-everything's `name`, the Python server's
        // `username` and `email`.
        let properties = serde_json::to_value(&requested_schema).unwrap_or_default()["properties"].clone();
        let mut content = serde_json::Map::new();
        for (field, value) in [("name", self.name.to_string()), ("username", self.name.to_string())] {
            if properties.get(field).is_some() {
                content.insert(field.into(), json!(value));
            }
        }
        if properties.get("email").is_some() {
            content.insert("email".into(), json!(format!("{}@example.com", self.name)));
        }
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content)))
    }
}

type Host = RunningService<RoleClient, Answering>;

async fn host(url: &str, name: &'static str, token: &str) -> anyhow::Result<(Host, Arc<Mutex<Vec<String>>>)> {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    let handler = Answering { name, asked: asked.clone() };
    let host = tokio::time::timeout(DEADLINE, handler.serve(transport)).await.context("connect")??;
    Ok((host, asked))
}

/// The text of one call of `tool` by `host` (an error or an error result fails).
async fn call(host: &Host, tool: &str, arguments: Value) -> anyhow::Result<String> {
    let params =
        CallToolRequestParams::new(tool.to_string()).with_arguments(arguments.as_object().cloned().unwrap_or_default());
    let result = tokio::time::timeout(DEADLINE, host.peer().call_tool(params)).await.context("the call hung")??;
    anyhow::ensure!(result.is_error != Some(true), "{tool}: {result:?}");
    Ok(serde_json::to_string(&result.content)?)
}

/// The four calls of one principal in one round, each with whether its own host's answer came
/// back. The two upstreams are called at once; on each, sampling then elicitation (calls of one
/// principal in flight at once on one child could not tell which of them an unnamed request
/// belongs to).
async fn one_round(host: &Host, name: &str, round: usize) -> Vec<(&'static str, anyhow::Result<bool>)> {
    let own = |answer: anyhow::Result<String>, mark: String| answer.map(|text| text.contains(&mark));
    let python = async {
        let sampling = call(host, "py__test_sampling", json!({ "prompt": format!("question {round} of {name}") }));
        let sampling = sampling.await;
        (sampling, call(host, "py__test_elicitation", json!({ "message": format!("word {round} of {name}") })).await)
    };
    let everything = async {
        let prompt = json!({ "prompt": format!("question {round} of {name}") });
        let sampling = call(host, "ev__trigger-sampling-request", prompt).await;
        (sampling, call(host, "ev__trigger-elicitation-request", json!({})).await)
    };
    let ((py_sampling, py_elicitation), (ev_sampling, ev_elicitation)) = tokio::join!(python, everything);
    vec![
        ("py sampling", own(py_sampling, format!("LLM response: the answer of {name}"))),
        ("py elicitation", own(py_elicitation, format!("\\\"username\\\": \\\"{name}\\\""))),
        ("ev sampling", own(ev_sampling, format!("the answer of {name}"))),
        ("ev elicitation", own(ev_elicitation, format!("- Name: {name}"))),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn two_principals_keep_sampling_and_elicitation_of_stdio_sdk_servers_under_default_settings() -> anyhow::Result<()>
{
    let script = toml_str(py_script("conformance_server.py").to_str().context("a UTF-8 path")?);
    let python = toml_str(python().to_str().context("a UTF-8 path")?);
    let upstreams = format!(
        "[[upstreams]]\nname = \"py\"\ncommand = {python}\nargs = [{script}, \"--stdio\"]\n\
         protocol = \"2025-11-25\"\n\n{}",
        everything_upstream("ev", "")
    );
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let config = alice_and_bob_under_policies("", policies.path(), &upstreams);
    let proxy = ProxyProcess::start_with_offerings(&config, &TOKENS, &["py", "ev"]).await?;
    let (alice, alice_asked) = host(&proxy.url, "alice", ALICE_TOKEN).await?;
    let (bob, bob_asked) = host(&proxy.url, "bob", BOB_TOKEN).await?;

    let mut answered: std::collections::BTreeMap<(&str, &str), usize> = Default::default();
    for round in 0..ROUNDS {
        let (alices, bobs) = tokio::join!(one_round(&alice, "alice", round), one_round(&bob, "bob", round));
        for (name, calls) in [("alice", alices), ("bob", bobs)] {
            for (what, own) in calls {
                match own {
                    Ok(true) => *answered.entry((name, what)).or_default() += 1,
                    Ok(false) => eprintln!("round {round}: {name}'s {what} came back with another answer"),
                    Err(error) => eprintln!("round {round}: {name}'s {what} failed: {error:#}"),
                }
            }
        }
    }
    for name in ["alice", "bob"] {
        for what in ["py sampling", "py elicitation", "ev sampling", "ev elicitation"] {
            let got = answered.get(&(name, what)).copied().unwrap_or(0);
            assert_eq!(got, ROUNDS, "{name}'s {what}: {got}/{ROUNDS} answered by {name}'s own host");
        }
    }
    for (name, asked, other) in [("alice", &alice_asked, "bob"), ("bob", &bob_asked, "alice")] {
        let asked = asked.lock().expect("asked").clone();
        assert!(!asked.iter().any(|one| one.contains(&format!("of {other}"))), "{name} was asked {other}'s: {asked:?}");
    }

    // The cost: the child that lists, and one per principal that called.
    let pid = proxy.pid().context("the proxy runs")?;
    for upstream in ["py", "ev"] {
        assert_eq!(proxy.upstream_status(upstream).await?["sessions"], 2, "{upstream}: one session per principal");
    }
    let pythons = running_below(pid, "conformance_server.py");
    let everythings = running_below(pid, "server-everything");
    let mib = |pids: &[u32]| -> anyhow::Result<Vec<u64>> {
        pids.iter().map(|pid| Ok(resident_bytes(*pid)? / (1 << 20))).collect()
    };
    eprintln!(
        "children: {} Python SDK servers (resident {:?} MiB), {} server-everything (resident {:?} MiB)",
        pythons.len(),
        mib(&pythons)?,
        everythings.len(),
        mib(&everythings)?
    );
    assert_eq!((pythons.len(), everythings.len()), (3, 3), "the shared child of each, and one per principal");
    for host in [alice, bob] {
        host.cancel().await?;
    }
    Ok(())
}
