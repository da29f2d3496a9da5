//! Real rmcp clients over streamable HTTP, and timing what they do: one operation repeated by
//! every client at once (the concurrency is the number of clients), either a fixed number of
//! times or for a fixed duration, and the percentiles of the latencies.
//!
//! Invariant: clients never answer from rmcp's response cache — every timed request reaches the
//! server.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::future::try_join_all;
use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient,
    model::{
        CallToolRequestParams, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
        ResourceUpdatedNotificationParam,
    },
    service::{ClientCacheConfig, NotificationContext, Peer, RunningService},
    transport::{StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig},
};
use serde_json::Value;
use tokio::sync::mpsc;

/// How long connecting one client may take.
const CONNECT_DEADLINE: Duration = Duration::from_secs(60);

/// A connected client; derefs to `Peer<RoleClient>`.
pub type Client = RunningService<RoleClient, UpdateRecorder>;

/// Which lifecycle a client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// `initialize` and a session (2025-11-25).
    Legacy,
    /// `server/discover`, self-contained requests (2026-07-28).
    Modern,
    /// Probe 2026-07-28, fall back to the 2025 handshake.
    Auto,
}

/// One timed request.
#[derive(Debug, Clone)]
pub enum Operation {
    Read(String),
    /// A read the server must refuse (e.g. a URI no upstream has).
    ReadUnknown(String),
    ListTemplates,
    ListPage(Option<String>),
}

/// Forwards `notifications/resources/updated` (with when it arrived) to a channel, if any.
#[derive(Clone, Default)]
pub struct UpdateRecorder {
    updates: Option<mpsc::UnboundedSender<(usize, Instant)>>,
    host: usize,
}

/// Latency percentiles of one set of samples.
#[derive(Debug, Clone, Copy)]
pub struct Percentiles {
    pub p50: Duration,
    pub p99: Duration,
    pub count: usize,
}

impl ClientHandler for UpdateRecorder {
    async fn on_resource_updated(&self, _params: ResourceUpdatedNotificationParam, _: NotificationContext<RoleClient>) {
        if let Some(updates) = &self.updates {
            let _ = updates.send((self.host, Instant::now()));
        }
    }
}

impl UpdateRecorder {
    /// A recorder that reports updates as `(host, when)`.
    pub fn reporting(host: usize, updates: mpsc::UnboundedSender<(usize, Instant)>) -> Self {
        Self { updates: Some(updates), host }
    }
}

impl Era {
    fn lifecycle(self) -> ClientLifecycleMode {
        let modern = vec![ProtocolVersion::V_2026_07_28];
        match self {
            Era::Legacy => ClientLifecycleMode::Initialize,
            Era::Modern => ClientLifecycleMode::Discover { preferred_versions: modern },
            Era::Auto => ClientLifecycleMode::Auto {
                preferred_versions: modern,
                legacy_version: Some(ProtocolVersion::V_2025_11_25),
            },
        }
    }
}

impl Percentiles {
    /// Nearest-rank percentiles; `samples` may be in any order.
    pub fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        let at = |q: f64| {
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len().max(1));
            samples.get(rank - 1).copied().unwrap_or_default()
        };
        Self { p50: at(0.50), p99: at(0.99), count: samples.len() }
    }
}

/// Connect one client to `url` with a recorder.
pub async fn connect_with(url: &str, era: Era, recorder: UpdateRecorder) -> anyhow::Result<Client> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).reinit_on_expired_session(false);
    let transport = StreamableHttpClientTransport::from_config(config);
    let connecting = recorder.serve_with_lifecycle(transport, era.lifecycle());
    let client = tokio::time::timeout(CONNECT_DEADLINE, connecting).await.context("connect timed out")??;
    client.set_response_cache_config(ClientCacheConfig::disabled()).await;
    Ok(client)
}

/// Connect `count` clients to `url`, `batch` at a time.
pub async fn connect_many(url: &str, era: Era, count: usize, batch: usize) -> anyhow::Result<Vec<Client>> {
    let mut clients = Vec::with_capacity(count);
    while clients.len() < count {
        let now = batch.min(count - clients.len());
        let connecting = (0..now).map(|_| connect_with(url, era, UpdateRecorder::default()));
        clients.extend(try_join_all(connecting).await?);
    }
    Ok(clients)
}

/// Run `operation` once; the number of items or bytes it returned.
pub async fn perform(peer: &Peer<RoleClient>, operation: &Operation) -> anyhow::Result<usize> {
    match operation {
        Operation::Read(uri) => {
            let result = peer.read_resource(ReadResourceRequestParams::new(uri.clone())).await?;
            Ok(result.contents.len())
        }
        Operation::ReadUnknown(uri) => match peer.read_resource(ReadResourceRequestParams::new(uri.clone())).await {
            Ok(_) => bail!("reading {uri} succeeded; it must not exist"),
            Err(_) => Ok(0),
        },
        Operation::ListTemplates => Ok(peer.list_resource_templates(None).await?.resource_templates.len()),
        Operation::ListPage(cursor) => {
            let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
            Ok(peer.list_resources(Some(params)).await?.resources.len())
        }
    }
}

/// Every client runs `operation` `each` times in a row, all clients at once; the latencies.
pub async fn repeat(clients: &[Peer<RoleClient>], operation: &Operation, each: usize) -> anyhow::Result<Vec<Duration>> {
    let per_client = clients.iter().map(|client| async move {
        let mut samples = Vec::with_capacity(each);
        for _ in 0..each {
            let started = Instant::now();
            perform(client, operation).await?;
            samples.push(started.elapsed());
        }
        anyhow::Ok(samples)
    });
    Ok(try_join_all(per_client).await?.into_iter().flatten().collect())
}

/// Every client runs `operation` back to back until `duration` has passed; the latencies.
pub async fn run_for(
    clients: &[Peer<RoleClient>],
    operation: &Operation,
    duration: Duration,
) -> anyhow::Result<Vec<Duration>> {
    let until = Instant::now() + duration;
    let per_client = clients.iter().map(|client| async move {
        let mut samples = Vec::new();
        while Instant::now() < until {
            let started = Instant::now();
            perform(client, operation).await?;
            samples.push(started.elapsed());
        }
        anyhow::Ok(samples)
    });
    Ok(try_join_all(per_client).await?.into_iter().flatten().collect())
}

/// The peers of `clients`, to hand to [`repeat`] and [`run_for`].
pub fn peers(clients: &[Client]) -> Vec<Peer<RoleClient>> {
    clients.iter().map(|client| client.peer().clone()).collect()
}

/// Call a fixture tool and parse its JSON text reply.
pub async fn call_json(peer: &Peer<RoleClient>, tool: &str, arguments: Value) -> anyhow::Result<Value> {
    let Value::Object(arguments) = arguments else { bail!("tool arguments must be an object") };
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    let result = peer.call_tool(params).await?;
    let text = result.content.first().and_then(|c| c.as_text()).with_context(|| format!("{tool}: no text"))?;
    Ok(serde_json::from_str(&text.text)?)
}

/// The fixture's `stats` tool.
pub async fn fixture_stats(peer: &Peer<RoleClient>) -> anyhow::Result<Value> {
    call_json(peer, "stats", serde_json::json!({})).await
}
