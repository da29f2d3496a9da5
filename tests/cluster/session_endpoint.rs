//! A session another replica holds is reached over MCP: the owner's session endpoint
//! (`/mcp-proxy/session`) serves a `tools/call` on the upstream's own name to the replica a
//! host's call landed on, and to this test playing another replica (a real rmcp client whose
//! every request carries a fresh pass sealed with the cluster's key). A request without such a
//! pass (none, another cluster's, a stale one, one made for another replica) is refused before
//! a byte of its body is sent; an MCP session bound to alice's session refuses a request whose
//! pass names bob's. Two replicas, a real Redis, the fixture per principal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{CallToolRequestParams, ClientJsonRpcMessage};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse,
};
use rmcp::{RoleClient, ServiceExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use mcp_resource_proxy::cluster::ClusterKeys;
use mcp_resource_proxy::cluster::keys::label;
use mcp_resource_proxy::cluster::session_pass::{self, Identity, Passes};
use mcp_resource_proxy::crypto::SealingKey;

use crate::support::DEADLINE;
use crate::support::cluster::{Replicas, SECRET, SECRET_ENV, cluster_when};
use crate::support::proxy::{
    ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, fixture_upstream, metric_value,
};

const ALICE_TOKEN: &str = "alice-tok-session-endpoint-6a1d";
const BOB_TOKEN: &str = "bob-tok-session-endpoint-c47e";
/// What the owner logs for each request it serves over MCP.
const SERVED: &str = "serving another replica's request over MCP";

/// Two replicas of one cluster serving `upstream` to alice and bob (everything allowed), once
/// each sees the other; the policies' folder lives as long as it is held.
async fn two_replicas(upstream: &str) -> anyhow::Result<(Replicas, tempfile::TempDir)> {
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let config = alice_and_bob_under_policies("", policies.path(), upstream);
    let env = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN), (SECRET_ENV, SECRET)];
    let cluster = Replicas::start(2, &config, &env).await?;
    for replica in &cluster.replicas {
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 2)).await?;
    }
    Ok((cluster, policies))
}

/// The fixture, one session per principal.
fn per_principal_fixture() -> String {
    format!("{}\nsession = \"per-principal\"\n\n", fixture_upstream("fx", &[]).trim_end())
}

/// The rmcp client of a replica that is not one: each request with a fresh pass for `to`,
/// naming `whose` session (which the test may change between requests).
#[derive(Clone)]
struct SealedClient {
    http: reqwest::Client,
    passes: Passes,
    to: String,
    whose: Arc<Mutex<Identity>>,
}

type HttpError = StreamableHttpError<reqwest::Error>;

impl SealedClient {
    fn with_pass(&self, mut headers: HashMap<HeaderName, HeaderValue>) -> HashMap<HeaderName, HeaderValue> {
        let whose = self.whose.lock().expect("whose lock").clone();
        let pass = self.passes.make(&self.to, &whose, None, None);
        headers.insert(HeaderName::from_static(session_pass::HEADER), HeaderValue::from_str(&pass).expect("ascii"));
        headers
    }
}

impl StreamableHttpClient for SealedClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.http.post_message(uri, message, session_id, auth_header, self.with_pass(headers)).await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.http.delete_session(uri, session_id, auth_header, self.with_pass(headers)).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<sse_stream::Sse, SseError>>, HttpError> {
        self.http.get_stream(uri, session_id, last_event_id, auth_header, self.with_pass(headers)).await
    }
}

fn identity(principal: &str) -> Identity {
    Identity { principal: principal.into(), upstream: "fx".into(), host: None }
}

/// `replica`'s listener, without `/mcp`.
fn base(replica: &ProxyProcess) -> anyhow::Result<&str> {
    replica.url.strip_suffix("/mcp").context("an /mcp URL")
}

/// `replica`'s `mcp_proxy_cluster_forwards_total{outcome}`.
async fn forwards(replica: &ProxyProcess, outcome: &str) -> anyhow::Result<f64> {
    let metrics = replica.admin_get("/metrics").await?;
    Ok(metric_value(&metrics, &format!("mcp_proxy_cluster_forwards_total{{outcome=\"{outcome}\"}}")).unwrap_or(0.0))
}

/// Call `name` with no arguments: the result's text, or the error.
async fn call(client: &RunningService<RoleClient, ()>, name: &str) -> anyhow::Result<String> {
    let call = client.peer().call_tool(CallToolRequestParams::new(name.to_string()));
    let result = tokio::time::timeout(DEADLINE, call).await.context("the call hung")??;
    anyhow::ensure!(result.is_error != Some(true), "{name}: {result:?}");
    Ok(result.content.first().and_then(|c| c.as_text()).context("no text")?.text.clone())
}

/// The status line of a POST to `replica`'s session endpoint that announces a large body and
/// sends none of it, with `pass` (if any) on its head; answered or not within 5 s.
async fn head_only(replica: &ProxyProcess, pass: Option<&str>) -> anyhow::Result<String> {
    let address = base(replica)?.strip_prefix("http://").context("http")?;
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let pass = pass.map(|pass| format!("{}: {pass}\r\n", session_pass::HEADER)).unwrap_or_default();
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 1048576\r\n{pass}\r\n",
        session_pass::PATH
    );
    stream.write_all(head.as_bytes()).await?;
    let mut answer = vec![0u8; 12];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut answer)).await.context("no answer")??;
    Ok(String::from_utf8_lossy(&answer).to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_on_a_session_another_replica_holds_crosses_as_mcp_under_a_sealed_pass() -> anyhow::Result<()> {
    let (cluster, _policies) = two_replicas(&per_principal_fixture()).await?;

    // alice calls through each replica: the one not holding her session asks the owner over MCP,
    // on the upstream's own name.
    for replica in &cluster.replicas {
        let config = StreamableHttpClientTransportConfig::with_uri(replica.url.as_str()).auth_header(ALICE_TOKEN);
        let alice = ().serve(StreamableHttpClientTransport::from_config(config)).await?;
        call(&alice, "fx__stats").await?;
        alice.cancel().await?;
    }
    let served: Vec<usize> = (0..2)
        .filter(|&i| {
            !cluster.replicas[i].matching(&[SERVED, "\"method\":\"tools/call\"", "\"target\":\"stats\""]).is_empty()
        })
        .collect();
    assert_eq!(served.len(), 1, "one replica, the owner, served the other's call over MCP");
    let (owner, front) = (&cluster.replicas[served[0]], &cluster.replicas[1 - served[0]]);
    assert_eq!(forwards(front, "forwarded").await?, 1.0, "the front's one call crossed");
    assert_eq!(forwards(owner, "served").await?, 1.0);
    assert!(front.matching(&[SERVED]).is_empty(), "the front served nothing of the owner's");

    // The test as another replica: a real MCP client, a fresh pass on each request.
    let keys = ClusterKeys::new(SECRET.as_bytes());
    let passes = Passes::new("replica-9", &keys.derive(label::SESSION_PASS));
    let to = format!("replica-{}", served[0]);
    let whose = Arc::new(Mutex::new(identity("alice")));
    let sealed = SealedClient { http: reqwest::Client::new(), passes, to: to.clone(), whose: whose.clone() };
    let url = format!("{}{}", base(owner)?, session_pass::PATH);
    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).reinit_on_expired_session(false);
    let client = ().serve(StreamableHttpClientTransport::with_client(sealed, config)).await?;
    call(&client, "stats").await.context("the upstream's own name")?;
    let namespaced = call(&client, "fx__stats").await;
    assert!(namespaced.is_err(), "no namespace on the endpoint: {namespaced:?}");
    *whose.lock().expect("whose lock") = identity("bob");
    let error = call(&client, "stats").await.expect_err("a pass naming another session is refused");
    assert!(error.to_string().contains("another session"), "{error:#}");
    client.cancel().await?;

    // No pass, another cluster's, a stale one, one for the other replica: refused on the head.
    let refused_before = forwards(owner, "refused").await?;
    let foreign = Passes::new("replica-9", &ClusterKeys::new(b"another cluster's secret").derive(label::SESSION_PASS));
    let stale_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as u64 - 60_000;
    let key = SealingKey::new(&keys.derive(label::SESSION_PASS));
    let other = format!("replica-{}", 1 - served[0]);
    let passes = [
        None,
        Some(foreign.make(&to, &identity("alice"), None, None)),
        Some(session_pass::seal_with(&key, &to, (stale_ms, None), &identity("alice"), None)),
        Some(Passes::new("replica-9", &keys.derive(label::SESSION_PASS)).make(&other, &identity("alice"), None, None)),
    ];
    for pass in &passes {
        let status = head_only(owner, pass.as_deref()).await?;
        assert_eq!(status, "HTTP/1.1 403", "{pass:?}");
    }
    assert_eq!(forwards(owner, "refused").await? - refused_before, passes.len() as f64);
    Ok(())
}

/// A subscription and the session's own lists cross as MCP too: the test, as another replica,
/// subscribes a URI on alice's session at a replica's endpoint and hears its `updated` as
/// `notifications/resources/updated` on its MCP session (one of a URI under a held one too);
/// after unsubscribing it hears nothing more of it (the next it hears is of another URI it
/// holds). `tools/list` before her session lists tools of its own is an error naming why, so
/// the asking replica keeps the shared connection's lists.
#[tokio::test(flavor = "multi_thread")]
#[allow(deprecated)] // resources/subscribe is the 2025 era's, which the endpoint speaks.
async fn a_subscription_on_a_session_another_replica_holds_is_held_over_mcp() -> anyhow::Result<()> {
    use crate::support::fixture::EventRecorder;
    use serde_json::json;
    let (cluster, _policies) = two_replicas(&per_principal_fixture()).await?;
    let owner = &cluster.replicas[0];

    let passes = Passes::new("replica-9", &ClusterKeys::new(SECRET.as_bytes()).derive(label::SESSION_PASS));
    let whose = Arc::new(Mutex::new(identity("alice")));
    let sealed = SealedClient { http: reqwest::Client::new(), passes, to: "replica-0".into(), whose };
    let url = format!("{}{}", base(owner)?, session_pass::PATH);
    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).reinit_on_expired_session(false);
    let (recorder, mut heard) = EventRecorder::new();
    let client = recorder.serve(StreamableHttpClientTransport::with_client(sealed, config)).await?;
    let subscribe = |uri: &str| client.peer().subscribe(rmcp::model::SubscribeRequestParams::new(uri.to_string()));
    let touch = |uri: &str| {
        let arguments = json!({ "uri": uri }).as_object().cloned().unwrap_or_default();
        client.peer().call_tool(CallToolRequestParams::new("touch").with_arguments(arguments))
    };

    let listed = tokio::time::timeout(DEADLINE, client.peer().list_tools(None)).await.context("list hung")?;
    let error = listed.expect_err("no lists of its own yet");
    assert!(error.to_string().contains("lists no tools or prompts of its own"), "{error:#}");

    tokio::time::timeout(DEADLINE, subscribe("fx://fx/item/1")).await.context("subscribe hung")??;
    tokio::time::timeout(DEADLINE, touch("fx://fx/item/1")).await.context("touch hung")??;
    heard.updated("fx://fx/item/1").await.context("the held URI's change")?;

    tokio::time::timeout(DEADLINE, subscribe("fx://fx/item")).await.context("subscribe hung")??;
    tokio::time::timeout(DEADLINE, touch("fx://fx/item/2")).await.context("touch hung")??;
    heard.updated("fx://fx/item/2").await.context("a change under a held URI")?;

    let unsubscribe = rmcp::model::UnsubscribeRequestParams::new("fx://fx/item".to_string());
    tokio::time::timeout(DEADLINE, client.peer().unsubscribe(unsubscribe)).await.context("unsubscribe hung")??;
    tokio::time::timeout(DEADLINE, touch("fx://fx/item/2")).await.context("touch hung")??;
    tokio::time::timeout(DEADLINE, touch("fx://fx/item/1")).await.context("touch hung")??;
    let next = heard.next().await?;
    assert_eq!(next, crate::support::fixture::FixtureEvent::Updated("fx://fx/item/1".into()), "nothing of item/2");
    client.cancel().await?;
    Ok(())
}

/// A session's own lists reach the replica connected to it as MCP list changes: the test, as
/// another replica, connects to alice's session (the Python session server, per principal) at
/// a replica's endpoint. `tools/list` there is first an error whose data says the session lists
/// none of its own (`no_own_lists`); once a call on that MCP session unlocks `secret`, the
/// owner says `notifications/tools/list_changed` on it, and `tools/list` lists `secret`.
#[tokio::test(flavor = "multi_thread")]
async fn a_sessions_own_list_change_reaches_the_replica_connected_to_it_as_list_changed() -> anyhow::Result<()> {
    use crate::support::peers::{py_script, python};
    use crate::support::proxy::toml_str;
    use crate::support::told::{Told, answered, next_heard, tool_names};
    let program = toml_str(python().to_str().context("utf-8 path")?);
    let script = toml_str(py_script("session_server.py").to_str().context("utf-8 path")?);
    let upstream = format!(
        "[[upstreams]]\nname = \"per\"\ncommand = {program}\nargs = [{script}]\nsession = \"per-principal\"\n\n"
    );
    let (cluster, _policies) = two_replicas(&upstream).await?;
    let owner = &cluster.replicas[0];

    let passes = Passes::new("replica-9", &ClusterKeys::new(SECRET.as_bytes()).derive(label::SESSION_PASS));
    let alice = Identity { principal: "alice".into(), upstream: "per".into(), host: None };
    let sealed = SealedClient {
        http: reqwest::Client::new(),
        passes,
        to: "replica-0".into(),
        whose: Arc::new(Mutex::new(alice)),
    };
    let url = format!("{}{}", base(owner)?, session_pass::PATH);
    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).reinit_on_expired_session(false);
    let (told, mut heard) = Told::new();
    let transport = StreamableHttpClientTransport::with_client(sealed, config);
    let client = tokio::time::timeout(DEADLINE, told.serve(transport)).await.context("connect")??;

    let listed = tokio::time::timeout(DEADLINE, client.peer().list_tools(None)).await.context("list hung")?;
    let Err(rmcp::ServiceError::McpError(error)) = listed else {
        anyhow::bail!("listed before it had lists of its own: {listed:?}")
    };
    let kind = error.data.as_ref().map(|data| data["kind"].clone());
    assert_eq!(kind, Some(serde_json::json!("no_own_lists")), "{error:?}");

    assert_eq!(answered(client.peer(), "unlock").await?, Ok("unlocked".into()));
    assert_eq!(next_heard(&mut heard).await?, "tools/list_changed", "the owner says its session's list changed");
    let names = tool_names(client.peer()).await?;
    assert!(names.contains(&"secret".to_string()) && names.contains(&"unlock".to_string()), "{names:?}");
    client.cancel().await?;
    Ok(())
}
