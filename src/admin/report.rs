//! What `/status` and `/readyz` report: the [`StatusReport`] the proxy assembles on each request
//! (upstreams, cache and subscription totals, the last reloads, the cluster) and the
//! [`Readiness`] verdict drawn from it.

use serde::Serialize;

use crate::cluster::{ClusterReport, RedisState};
use crate::coherence::Tracked;
use crate::protocol::Era;
use crate::upstream::{LinkState, UpstreamStatus};

/// The body of `/status`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StatusReport {
    pub upstreams: Vec<UpstreamReport>,
    pub cache: CacheReport,
    pub subscriptions: SubscriptionReport,
    /// What the last reload of the configuration did (absent until one ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_reload: Option<ReloadReport>,
    /// What the last reload of the policies folder did (absent until one ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_reload: Option<PolicyReloadReport>,
    /// `[cluster]`: this replica, the replicas seen, Redis's state (absent for one process).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterReport>,
}

/// Cache totals in `/status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CacheReport {
    pub enabled: bool,
    pub entries: u64,
    pub weighted_bytes: u64,
    pub max_bytes: u64,
    /// Per-URI bookkeeping kept (bounded; returns to zero as entries expire).
    pub tracked: Tracked,
}

/// Subscription totals in `/status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SubscriptionReport {
    /// Registered notification outlets (legacy sessions and listen streams).
    pub hosts: usize,
    /// Subscriber × URI pairs, the cache's own holds included.
    pub held: usize,
    /// Distinct upstream URIs held.
    pub upstream_uris: usize,
}

/// The outcome of the last configuration reload in `/status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReloadReport {
    /// `applied`, `unchanged` or `rejected`.
    pub outcome: &'static str,
    /// Seconds since the Unix epoch.
    pub at_unix: u64,
    /// Every problem of a rejected config (`at: message`), or the sections that need a restart.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// Upstreams given other roots in place, without a reconnect (not in `changed`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roots_changed: Vec<String>,
    /// Sections that differ but take effect only after a restart.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub restart_needed: Vec<String>,
}

/// The last reload of the policies folder in `/status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyReloadReport {
    /// Reloads so far, applied or refused.
    pub reloads: u64,
    /// `applied`, or `refused` (the files had problems; the rules in force stay).
    pub outcome: &'static str,
    /// Hosts the last applied reload told their resource list changed.
    pub hosts_told: usize,
    /// Hosts the last applied reload told their tools or prompts changed.
    pub tools_told: usize,
}

/// One upstream in `/status`.
#[derive(Debug, Clone, Serialize)]
pub struct UpstreamReport {
    pub name: String,
    pub state: LinkState,
    pub era: Option<Era>,
    /// `/readyz` waits for it.
    pub required: bool,
    pub resources: usize,
    pub templates: usize,
    /// Its tools and prompts as hosts see them (0 until they are fetched, and while it is down).
    pub tools: usize,
    pub prompts: usize,
    /// Why it is (or last was) down, in plain words.
    pub last_error: Option<String>,
    /// What its stdio child last wrote to stderr before it went down (bounded).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stderr_tail: Vec<String>,
    pub reconnects: u64,
    /// Per-principal or per-host upstream sessions open besides the shared connection.
    pub sessions: usize,
}

/// Whether the proxy is ready, and which required upstreams keep it from being so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    pub ready: bool,
    /// Required upstreams that are not up, in report order.
    pub missing: Vec<String>,
    /// `[cluster]`: Redis as this replica sees it (it keeps the replica unready only with
    /// `ready_without_redis = false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<RedisState>,
}

impl StatusReport {
    /// Ready when every required upstream is up (and, with `[cluster] ready_without_redis =
    /// false`, Redis is reached).
    pub fn readiness(&self) -> Readiness {
        let missing: Vec<String> = self
            .upstreams
            .iter()
            .filter(|upstream| upstream.required && upstream.state != LinkState::Up)
            .map(|upstream| upstream.name.clone())
            .collect();
        let redis = self.cluster.as_ref().map(|cluster| cluster.redis.state);
        let cluster_ready = !self.cluster.as_ref().is_some_and(ClusterReport::keeps_unready);
        Readiness { ready: missing.is_empty() && cluster_ready, missing, redis }
    }
}

impl UpstreamReport {
    /// From an upstream's health snapshot plus what the config and the catalog know.
    pub fn new(status: UpstreamStatus, required: bool, resources: usize, templates: usize) -> Self {
        let UpstreamStatus { name, state, era, last_error, stderr_tail, reconnects, sessions } = status;
        let (tools, prompts) = (0, 0);
        Self {
            name,
            state,
            era,
            required,
            resources,
            templates,
            tools,
            prompts,
            last_error,
            stderr_tail,
            reconnects,
            sessions,
        }
    }

    /// With the tools and prompts the offerings catalog holds for it.
    pub fn with_offerings(mut self, tools: usize, prompts: usize) -> Self {
        (self.tools, self.prompts) = (tools, prompts);
        self
    }
}
