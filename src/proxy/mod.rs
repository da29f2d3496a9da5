//! The proxy: a composition root. [`Proxy::start`] (through `wiring`) makes the shared handles (catalog, upstream
//! registry, cache and the upstream subscriptions, fan-out, access, views, tools), gives each service
//! exactly the handles it uses (a parts struct per service, as `crate::tools` has), starts the
//! background tasks on the spine, and keeps the services behind [`Proxy`], whose methods are the
//! one API the hosts' side and the admin listener use. No service holds another's whole state.
//!
//! The files, lowest first (a file imports only from files above it; `mod.rs` from all):
//! - `caller`: [`Caller`], the principal and the policy snapshot one request is decided with.
//! - `watch`: debounced folder/file change signals for the reload tasks.
//! - `access`: `Access`, the policy in force, routing and list-denial counting.
//! - `views`: per-principal view digests, so `list_changed` goes only where a view changed.
//! - `lists`: `Lists`, pages of the merged resource and template lists.
//! - `read`: `Reads`, the read path through the cache.
//! - `metered`: `Door`, the rate limits' check of a host's call or read, before any work.
//! - `subscriptions`: `Subscriptions`, outlets, subscriptions and fan-out of `updated`.
//! - `policies`: `Policies`, putting a reloaded policy set in force (and the `policy-watch` task).
//! - `events`: `EventLoop` (the `event-loop` task) and `Housekeeping` (`cache-housekeeping`,
//!   which also runs the cache's sweep).
//! - `reload`: `Reloader`, the upstream set's lifecycle and live config reload.
//! - `status`: `Status`, the typed `/status` report.
//! - `wiring`: the shared handles made once, and each service given the ones it uses.
//!
//! A new capability is a new service with its own parts struct, made in `Proxy::start` from
//! the shared handles, taking a [`Caller`] per request, reached through a `Proxy` method.
//!
//! Invariant: everything a client receives carries namespaced URIs; nothing un-namespaced and
//! no upstream error text leaves this module; every request is decided with one policy
//! snapshot (its [`Caller`], made once by the caller of the request and passed down).

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ListResourceTemplatesResult, ListResourcesResult};

use crate::admin::{ReloadReport, StatusReport};
use crate::audit::Audit;
use crate::auth::subjects::Subjects;
use crate::cluster::Cluster;
use crate::config::{Config, ConfigError};
use crate::error::ProxyError;
use crate::fanout::{Outlet, OutletInfo};
use crate::metrics::Metrics;
use crate::spine::Spine;
use crate::subscription_table::SubscriberId;
use crate::tools::Tools;
use crate::upstream::{HostSession, Registry, UpstreamStatus};

mod access;
mod caller;
mod events;
mod lists;
mod metered;
mod owner_routes;
mod policies;
mod read;
mod reload;
mod status;
mod subscriptions;
mod views;
mod watch;
mod wiring;

use self::access::Access;
pub use self::caller::Caller;
use self::lists::Lists;
use self::metered::Door;
pub use self::metered::Metered;
pub use self::read::ReadAnswer;
use self::read::Reads;
pub use self::reload::ConfigSource;
use self::reload::Reloader;
use self::status::Status;
pub(crate) use self::subscriptions::ReplicaSubscription;
use self::subscriptions::Subscriptions;

/// A cheap `Clone` handle on the running proxy: its one API for the hosts' side and the admin
/// listener.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Services>,
}

/// The services, each holding exactly what it uses.
struct Services {
    /// The configuration the proxy started with (upstreams may have been reloaded since).
    config: Config,
    metrics: Metrics,
    /// The audit trail (`crate::audit`).
    audit: Audit,
    /// The principals' latest JWTs, for `token_exchange` upstreams (`crate::auth::subjects`).
    subjects: Subjects,
    spine: Spine,
    upstreams: Registry,
    access: Access,
    lists: Lists,
    reads: Reads,
    subscriptions: Subscriptions,
    /// Tools, prompts and completion (`crate::tools`).
    tools: Tools,
    status: Status,
    reloader: Reloader,
    /// The rate limits (`crate::rate_limits`), checked before any work.
    door: Door,
    /// `[cluster]`: this replica's place in it.
    cluster: Option<Cluster>,
}

impl Proxy {
    /// Start a supervisor per upstream (all connect concurrently), the event loop, cache
    /// housekeeping and the policies watch, all on `spine`.
    pub fn start(config: Config, spine: &Spine) -> Proxy {
        Proxy { inner: Arc::new(wiring::start(config, spine)) }
    }

    /// The configuration the proxy started with (upstreams may have been reloaded since).
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The audit trail: the hosts' side records each request's events here.
    pub fn audit(&self) -> &Audit {
        &self.inner.audit
    }

    /// Where the hosts' side keeps each principal's latest accepted JWT, which
    /// `token_exchange` upstreams exchange for their own tokens.
    pub fn subjects(&self) -> &Subjects {
        &self.inner.subjects
    }

    /// The task owner everything of this proxy runs on (listeners add their long-lived tasks).
    pub fn spine(&self) -> &Spine {
        &self.inner.spine
    }

    /// `[cluster]`: this replica's id, the keys derived from the cluster secret, Redis. `None`
    /// for one process on its own.
    pub fn cluster(&self) -> Option<&Cluster> {
        self.inner.cluster.as_ref()
    }

    /// Tools, prompts and completion.
    pub fn tools(&self) -> &Tools {
        &self.inner.tools
    }

    /// The caller of one request: `principal` and the policy in force now, taken once. A
    /// request makes one and decides everything with it.
    pub fn caller(&self, principal: &str) -> Caller {
        self.inner.access.caller(principal)
    }

    /// Wait (at most `timeout`) until every upstream is up or has failed its first attempt,
    /// so a host's first list holds whatever is reachable without waiting for what is not.
    /// True when they all settled in time.
    pub async fn wait_settled(&self, timeout: Duration) -> bool {
        let upstreams = self.inner.upstreams.snapshot();
        let all_settled = futures::future::join_all(upstreams.values().map(|upstream| upstream.wait_settled()));
        tokio::time::timeout(timeout, all_settled).await.is_ok()
    }

    /// What `/status` and `/readyz` show.
    pub fn status_report(&self) -> StatusReport {
        self.inner.status.report()
    }

    /// Every upstream's health, as of now.
    pub fn statuses(&self) -> Vec<UpstreamStatus> {
        self.inner.status.statuses()
    }

    /// Apply a freshly loaded configuration (or report why it cannot be); reloads apply one at
    /// a time.
    pub async fn reload_config(&self, loaded: Result<Config, ConfigError>) -> ReloadReport {
        self.inner.reloader.reload_config(loaded).await
    }

    /// Reload whenever the config file at `path` changes: the `config-watch` task.
    pub fn watch_config(&self, path: &std::path::Path, source: ConfigSource) {
        self.inner.reloader.watch_config(path, source)
    }
}

/// One call per downstream request, each decided with its request's [`Caller`].
impl Proxy {
    /// One page of the merged resource list.
    pub fn list_resources(&self, caller: &Caller, cursor: Option<&str>) -> Result<ListResourcesResult, ProxyError> {
        self.inner.lists.resources(caller, cursor)
    }

    /// One page of the merged template list.
    pub fn list_templates(
        &self,
        caller: &Caller,
        cursor: Option<&str>,
    ) -> Result<ListResourceTemplatesResult, ProxyError> {
        self.inner.lists.templates(caller, cursor)
    }

    /// Take a rate-limit token for one host request of `caller`, before any other work:
    /// `Err(ProxyError::RateLimited)` when its bucket is empty. Hosts' edges call this once per
    /// request (a read inside a bridge call is not charged again).
    pub fn admit(&self, caller: &Caller, request: Metered<'_>) -> Result<(), ProxyError> {
        self.inner.door.admit(caller, request)
    }

    /// Some rate limit is configured: the HTTP edge checks before anything else.
    pub fn rate_limited(&self) -> bool {
        self.inner.door.limits.is_on()
    }

    /// Read a namespaced URI for `caller`; the answer's `scope` is the one the host is told.
    pub async fn read(&self, caller: &Caller, uri: &str) -> Result<ReadAnswer, ProxyError> {
        self.inner.reads.read(caller, uri).await
    }

    /// Register a host's notification outlet (a legacy session or a listen stream).
    pub fn register_outlet(&self, info: OutletInfo, outlet: Arc<dyn Outlet>) -> SubscriberId {
        self.inner.subscriptions.register_outlet(info, outlet)
    }

    /// `subscriber` is gone: its outlet and everything it held go.
    /// A host session (or listen stream) ended: what it held goes, and so do its per-host
    /// upstream sessions.
    pub fn deregister(&self, subscriber: SubscriberId) {
        self.inner.subscriptions.deregister(subscriber);
        self.host_ended(subscriber);
    }

    /// The host session keyed `key` ended (see `HostSession`): its per-host upstream sessions
    /// held here are closed.
    pub fn host_ended(&self, key: u64) {
        for upstream in self.inner.upstreams.snapshot().values() {
            upstream.host_ended(key);
        }
    }

    pub fn subscribes_anything(&self, subscriber: SubscriberId) -> bool {
        self.inner.subscriptions.subscribes_anything(subscriber)
    }

    /// `[cluster]`: hold a subscription here for another replica (see
    /// `Subscriptions::subscribe_for_replica`).
    pub(crate) async fn subscribe_for_replica(
        &self,
        of: crate::cluster::peers::SessionOf<'_>,
        uri: &str,
    ) -> Result<ReplicaSubscription, ProxyError> {
        self.inner.subscriptions.subscribe_for_replica(of, uri).await
    }

    /// `subscriber` subscribes `uri`; `host`: the 2025 host session it comes on, if any (see
    /// `Subscriptions::subscribe`).
    pub fn subscribe(
        &self,
        caller: &Caller,
        subscriber: SubscriberId,
        uri: &str,
        host: Option<HostSession>,
    ) -> Result<(), ProxyError> {
        self.inner.subscriptions.subscribe(caller, subscriber, uri, host)
    }

    pub fn unsubscribe(&self, caller: &Caller, subscriber: SubscriberId, uri: &str) -> Result<(), ProxyError> {
        self.inner.subscriptions.unsubscribe(caller, subscriber, uri)
    }

    /// Wait (at most `timeout`) until the upstream acknowledged its subscription to `uri`
    /// (held by someone); false when refused, not in time, or not `caller`'s to see.
    pub async fn wait_subscribed(&self, caller: &Caller, uri: &str, timeout: Duration) -> bool {
        self.inner.reads.wait_subscribed(caller, uri, timeout).await
    }

    /// The URI a subscription of `uri` by `caller` is kept under (see
    /// `Subscriptions::subscription_uri`): `[cluster]` records it so.
    pub fn subscription_uri(&self, caller: &Caller, uri: &str) -> Result<String, ProxyError> {
        self.inner.subscriptions.subscription_uri(caller, uri)
    }

    /// The subset of `uris` that `caller` may subscribe to.
    pub fn subscribable(&self, caller: &Caller, uris: &[String]) -> Vec<String> {
        self.inner.subscriptions.subscribable(caller, uris)
    }

    /// How many more URIs `caller`'s hosts may subscribe (`server.max_subscriptions_per_principal`).
    pub fn subscription_room(&self, caller: &Caller) -> usize {
        self.inner.subscriptions.room(caller)
    }

    /// The subscriptions service, for tests that drive the event loop's side of it.
    #[cfg(test)]
    pub(crate) fn subscriptions(&self) -> &Subscriptions {
        &self.inner.subscriptions
    }
}
