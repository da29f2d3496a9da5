//! The proxy: capability services over one shared `Core` (`core`), behind the thin [`Proxy`]
//! handle.
//!
//! - `core`: the shared context (catalog, upstream registry, cache, watch book, fan-out,
//!   access, views, metrics, startup config, spine).
//! - `caller`: [`Caller`], the principal and the policy snapshot one request is decided with.
//! - `access`: [`Access`], the policy in force, routing and list-denial counting; policy reload.
//! - `lists`: [`Lists`], pages of the merged resource and template lists.
//! - `read`: [`Reads`], the read path through the cache.
//! - `subscriptions`: [`Subscriptions`], outlets, holds and fan-out of `updated`.
//! - `events`: the `event-loop` and `cache-housekeeping` tasks.
//! - `views`: per-principal view digests, so `list_changed` goes only where a view changed.
//! - `reload`: live reload of the upstream set (SIGHUP, config file change).
//! - `status`: the typed `/status` report.
//! - `watch`: debounced folder/file change signals for the reload tasks.
//!
//! A new capability (tools, prompts) is a new service type holding `Arc<Core>` (made in
//! `Proxy::over` next to the others), taking a [`Caller`] per request and exposed by a `Proxy`
//! accessor; the existing services do not change.
//!
//! Invariant: everything a client receives carries namespaced URIs; nothing un-namespaced and
//! no upstream error text leaves this module; every request is decided with one policy
//! snapshot (its [`Caller`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CacheScope, ListResourceTemplatesResult, ListResourcesResult};
use tokio::sync::mpsc;

use crate::catalog::Catalog;
use crate::coherence::{Coherence, WatchBook};
use crate::config::Config;
use crate::cursor::CursorKey;
use crate::error::ProxyError;
use crate::fanout::{Delivery, Fanout, Outlet, OutletInfo};
use crate::metrics::{Metrics, NotificationKind};
use crate::policy::PolicySet;
use crate::spine::Spine;
use crate::subscriptions::HolderId;
use crate::tools::{Tools, ToolsParts};
use crate::upstream::{Registry, Upstream};

mod access;
mod caller;
mod core;
mod events;
mod lists;
mod read;
mod reload;
mod status;
mod subscriptions;
mod views;
mod watch;

pub use self::access::Access;
pub use self::caller::Caller;
pub(crate) use self::core::Core;
pub use self::lists::Lists;
pub use self::read::{ReadAnswer, Reads};
pub use self::reload::ConfigSource;
pub use self::subscriptions::Subscriptions;

/// Hosts gone (their send task saw the transport closed) that may wait for the event loop.
const GONE_CAPACITY: usize = 256;

/// A cheap `Clone` handle on the running proxy and its capability services.
#[derive(Clone)]
pub struct Proxy {
    core: Arc<Core>,
    lists: Lists,
    reads: Reads,
    subscriptions: Subscriptions,
    /// Tools, prompts and completion (`crate::tools`): one per process, like the core.
    tools: Tools,
}

impl Proxy {
    /// Start a supervisor per upstream (all connect concurrently), the event loop, cache
    /// housekeeping and the policies watch, all on `spine`.
    pub fn start(config: Config, spine: &Spine) -> Proxy {
        let metrics = Metrics::new();
        let upstreams = Registry::default();
        let (events, inbox) = crate::upstream::events::channel(crate::upstream::events::EVENT_CAPACITY);
        let (gone_tx, gone) = mpsc::channel(GONE_CAPACITY);
        let fanout = Fanout::new(gone_tx, spine.clone());
        fanout.set_delivery_hook(delivery_metrics(metrics.clone()));
        let watches = Arc::new(WatchBook::new(upstreams.clone()));
        let cache_holder = fanout.next_holder_id();
        let max_load = longest_request(&config) + read::WATCH_WAIT;
        let cache = Coherence::new(config.cache.clone(), watches.clone(), cache_holder, metrics.clone(), max_load);
        let access = Access::new(config.policies.set.clone(), upstreams.clone(), metrics.clone());
        let core = Core {
            catalog: Catalog::new(),
            upstreams,
            cursor_key: CursorKey::random(),
            watches,
            fanout,
            cache,
            cache_holder,
            access,
            views: views::ViewDigests::default(),
            metrics,
            spine: spine.clone(),
            events,
            last_reload: Mutex::new(None),
            reloading: tokio::sync::Mutex::new(()),
            config,
        };
        let tools = Tools::new(ToolsParts {
            resources: core.catalog.clone(),
            upstreams: core.upstreams.clone(),
            fanout: core.fanout.clone(),
            metrics: core.metrics.clone(),
            cursor_key: core.cursor_key.clone(),
            page_size: core.config.server.page_size,
            policy: core.access.shared_policy(),
            bridge: core.config.bridge.enabled,
            max_calls_per_principal: core.config.server.max_calls_per_principal,
        });
        let proxy = Proxy::over(Arc::new(core), tools);
        for upstream in &proxy.core.config.upstreams {
            proxy.core.start_upstream(Upstream::new(upstream.clone(), proxy.core.metrics.clone()));
        }
        proxy.spawn_tasks(inbox, gone);
        proxy.watch_policies();
        proxy
    }

    fn over(core: Arc<Core>, tools: Tools) -> Proxy {
        let lists = Lists::new(core.clone());
        let reads = Reads::new(core.clone());
        let subscriptions = Subscriptions::new(core.clone());
        Proxy { core, lists, reads, subscriptions, tools }
    }

    /// The configuration the proxy started with (upstreams may have been reloaded since).
    pub fn config(&self) -> &Config {
        &self.core.config
    }

    pub fn metrics(&self) -> &Metrics {
        &self.core.metrics
    }

    /// The task owner everything of this proxy runs on (listeners add their long-lived tasks).
    pub fn spine(&self) -> &Spine {
        &self.core.spine
    }

    /// Tools, prompts and completion.
    pub fn tools(&self) -> &Tools {
        &self.tools
    }

    pub fn access(&self) -> &Access {
        &self.core.access
    }

    pub fn lists(&self) -> &Lists {
        &self.lists
    }

    pub fn reads(&self) -> &Reads {
        &self.reads
    }

    pub fn subscriptions(&self) -> &Subscriptions {
        &self.subscriptions
    }

    /// The caller of one request: `principal` and the policy in force now, taken once.
    pub fn caller(&self, principal: &str) -> Caller {
        self.core.access.caller(principal)
    }

    /// The policy in force.
    pub fn policy(&self) -> PolicySet {
        self.core.access.policy()
    }

    /// Wait (at most `timeout`) until every upstream is up or has failed its first attempt,
    /// so a host's first list holds whatever is reachable without waiting for what is not.
    /// True when they all settled in time.
    pub async fn wait_settled(&self, timeout: Duration) -> bool {
        let upstreams = self.core.upstreams.snapshot();
        let all_settled = futures::future::join_all(upstreams.values().map(Upstream::wait_settled));
        tokio::time::timeout(timeout, all_settled).await.is_ok()
    }
}

/// One call per downstream request, each making its request's [`Caller`] once.
impl Proxy {
    /// One page of the merged resource list.
    pub fn list_resources(&self, principal: &str, cursor: Option<&str>) -> Result<ListResourcesResult, ProxyError> {
        self.lists.resources(&self.caller(principal), cursor)
    }

    /// One page of the merged template list.
    pub fn list_templates(
        &self,
        principal: &str,
        cursor: Option<&str>,
    ) -> Result<ListResourceTemplatesResult, ProxyError> {
        self.lists.templates(&self.caller(principal), cursor)
    }

    /// Read a namespaced URI for `principal`.
    pub async fn read(&self, principal: &str, uri: &str) -> Result<ReadAnswer, ProxyError> {
        self.reads.read(&self.caller(principal), uri).await
    }

    /// The `cacheScope` a host is told under the policy in force (a read's answer already
    /// carries the one decided with its caller's snapshot; applying this again changes nothing
    /// unless the policy changed since).
    pub fn downstream_scope(&self, upstream_scope: CacheScope) -> CacheScope {
        self.caller("").downstream_scope(upstream_scope)
    }

    pub fn register_outlet(&self, info: OutletInfo, outlet: Arc<dyn Outlet>) -> HolderId {
        self.subscriptions.register_outlet(info, outlet)
    }

    pub fn release(&self, holder: HolderId) {
        self.subscriptions.release(holder)
    }

    pub fn holds_anything(&self, holder: HolderId) -> bool {
        self.subscriptions.holds_anything(holder)
    }

    pub fn subscribe(&self, holder: HolderId, principal: &str, uri: &str) -> Result<(), ProxyError> {
        self.subscriptions.subscribe(&self.caller(principal), holder, uri)
    }

    pub fn unsubscribe(&self, holder: HolderId, principal: &str, uri: &str) -> Result<(), ProxyError> {
        self.subscriptions.unsubscribe(&self.caller(principal), holder, uri)
    }

    pub fn subscribable(&self, principal: &str, uris: &[String]) -> Vec<String> {
        self.subscriptions.subscribable(&self.caller(principal), uris)
    }

    /// How many more URIs `principal`'s hosts may subscribe (`server.max_subscriptions_per_principal`).
    pub fn subscription_room(&self, principal: &str) -> usize {
        self.subscriptions.room(&self.caller(principal))
    }
}

/// The longest upstream request the cache lets a load take (with the subscription wait): the
/// longest `request_timeout` at start (the default when none is configured yet, for the
/// upstreams a reload adds). A longer one added later is cut to it until a restart.
pub(crate) fn longest_request(config: &Config) -> Duration {
    config.upstreams.iter().map(|u| u.request_timeout).max().unwrap_or(DEFAULT_REQUEST_TIMEOUT)
}

/// `request_timeout`'s default.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Every notification's fate, counted.
fn delivery_metrics(metrics: Metrics) -> Arc<dyn Fn(Delivery) + Send + Sync> {
    let kind = |label: &str| match label {
        "updated" => NotificationKind::Updated,
        _ => NotificationKind::ListChanged,
    };
    Arc::new(move |delivery| match delivery {
        Delivery::Delivered(label) => metrics.notification_delivered(kind(label)),
        Delivery::DroppedFull(label) | Delivery::DroppedTimeout(label) => metrics.notification_dropped(kind(label)),
    })
}
