//! The proxy: a composition root. [`Proxy::start`] makes the shared handles (catalog, upstream
//! registry, cache and its watch book, fan-out, access, views, tools), gives each service
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
//! - `subscriptions`: `Subscriptions`, outlets, holds and fan-out of `updated`.
//! - `policies`: `Policies`, putting a reloaded policy set in force (and the `policy-watch` task).
//! - `events`: `EventLoop` (the `event-loop` task) and `Housekeeping` (`cache-housekeeping`,
//!   which also runs the cache's sweep).
//! - `reload`: `Reloader`, the upstream set's lifecycle and live config reload.
//! - `status`: `Status`, the typed `/status` report.
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
use tokio::sync::mpsc;

use crate::catalog::Catalog;
use crate::coherence::{Coherence, WatchBook};
use crate::config::Config;
use crate::cursor::CursorKey;
use crate::error::ProxyError;
use crate::fanout::{Delivery, Fanout, Outlet, OutletInfo};
use crate::metrics::{Metrics, NotificationKind};
use crate::spine::Spine;
use crate::subscriptions::{Caps, HolderId};
use crate::tools::{Tools, ToolsParts};
use crate::upstream::{EventInbox, EventSender, Registry, Upstream, UpstreamStatus};

mod access;
mod caller;
mod events;
mod lists;
mod policies;
mod read;
mod reload;
mod status;
mod subscriptions;
#[cfg(test)]
mod tests;
mod views;
mod watch;

use self::access::Access;
pub use self::caller::Caller;
use self::events::{Changes, EventLoop, Housekeeping};
use self::lists::Lists;
use self::policies::Policies;
pub use self::read::ReadAnswer;
use self::read::Reads;
pub use self::reload::ConfigSource;
use self::reload::{Reloader, ReloaderParts};
use self::status::Status;
use self::subscriptions::Subscriptions;
use self::views::Views;
use crate::admin::{ReloadReport, StatusReport};
use crate::config::ConfigError;

/// Hosts gone (their send task saw the transport closed) that may wait for the event loop.
const GONE_CAPACITY: usize = 256;

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
}

/// The handles more than one service shares, made once by [`Shared::new`].
struct Shared {
    metrics: Metrics,
    upstreams: Registry,
    catalog: Catalog,
    cursor_key: CursorKey,
    fanout: Fanout,
    watches: Arc<WatchBook>,
    cache: Coherence,
    /// The cache's own holder id in the watch book.
    cache_holder: HolderId,
    access: Access,
    views: Views,
    tools: Tools,
    subscriptions: Subscriptions,
    /// Where supervisors send their events, and where the event loop takes them.
    events: (EventSender, EventInbox),
    /// Hosts gone, for the event loop.
    gone: mpsc::Receiver<HolderId>,
}

impl Proxy {
    /// Start a supervisor per upstream (all connect concurrently), the event loop, cache
    /// housekeeping and the policies watch, all on `spine`.
    pub fn start(config: Config, spine: &Spine) -> Proxy {
        let shared = Shared::new(&config, spine);
        let policies = Policies {
            access: shared.access.clone(),
            subscriptions: shared.subscriptions.clone(),
            tools: shared.tools.clone(),
            views: shared.views.clone(),
            dir: config.policies.dir.clone(),
        };
        let status = Status {
            catalog: shared.catalog.clone(),
            tools: shared.tools.clone(),
            upstreams: shared.upstreams.clone(),
            cache: shared.cache.clone(),
            cache_config: config.cache.clone(),
            watches: shared.watches.clone(),
            fanout: shared.fanout.clone(),
            last_reload: Arc::default(),
            access: shared.access.clone(),
        };
        let reloader = Reloader::new(ReloaderParts {
            config: config.clone(),
            upstreams: shared.upstreams.clone(),
            catalog: shared.catalog.clone(),
            watches: shared.watches.clone(),
            events: shared.events.0.clone(),
            spine: spine.clone(),
            metrics: shared.metrics.clone(),
            changes: shared.changes(),
            tools: shared.tools.clone(),
            policies: policies.clone(),
            views: shared.views.clone(),
            last_reload: status.last_reload.clone(),
        });
        for upstream in &config.upstreams {
            reloader.start_upstream(upstream.clone());
        }
        policies.watch(spine);
        let services = shared.services(config, spine, status, reloader);
        Proxy { inner: Arc::new(services) }
    }

    /// The configuration the proxy started with (upstreams may have been reloaded since).
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The task owner everything of this proxy runs on (listeners add their long-lived tasks).
    pub fn spine(&self) -> &Spine {
        &self.inner.spine
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
        let all_settled = futures::future::join_all(upstreams.values().map(Upstream::wait_settled));
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

    /// Read a namespaced URI for `caller`; the answer's `scope` is the one the host is told.
    pub async fn read(&self, caller: &Caller, uri: &str) -> Result<ReadAnswer, ProxyError> {
        self.inner.reads.read(caller, uri).await
    }

    /// Register a host's notification outlet (a legacy session or a listen stream).
    pub fn register_outlet(&self, info: OutletInfo, outlet: Arc<dyn Outlet>) -> HolderId {
        self.inner.subscriptions.register_outlet(info, outlet)
    }

    /// `holder` is gone: its outlet and everything it held go.
    pub fn release(&self, holder: HolderId) {
        self.inner.subscriptions.release(holder)
    }

    pub fn holds_anything(&self, holder: HolderId) -> bool {
        self.inner.subscriptions.holds_anything(holder)
    }

    pub fn subscribe(&self, caller: &Caller, holder: HolderId, uri: &str) -> Result<(), ProxyError> {
        self.inner.subscriptions.subscribe(caller, holder, uri)
    }

    pub fn unsubscribe(&self, caller: &Caller, holder: HolderId, uri: &str) -> Result<(), ProxyError> {
        self.inner.subscriptions.unsubscribe(caller, holder, uri)
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

impl Shared {
    /// Make the shared handles; nothing runs yet.
    fn new(config: &Config, spine: &Spine) -> Shared {
        let metrics = Metrics::new();
        let upstreams = Registry::default();
        let catalog = Catalog::new();
        let events = crate::upstream::events::channel(crate::upstream::events::EVENT_CAPACITY);
        let (gone_tx, gone) = mpsc::channel(GONE_CAPACITY);
        let fanout = Fanout::new(gone_tx, spine.clone());
        fanout.set_delivery_hook(delivery_metrics(metrics.clone()));
        let watches = Arc::new(WatchBook::new(upstreams.clone()));
        let cache_holder = fanout.next_holder_id();
        let max_load = longest_request(config) + read::WATCH_WAIT;
        let cache = Coherence::new(config.cache.clone(), watches.clone(), cache_holder, metrics.clone(), max_load);
        let access = Access::new(config.policies.set.clone(), upstreams.clone(), metrics.clone());
        let views = Views::new(catalog.clone(), access.clone(), fanout.clone());
        let cursor_key = CursorKey::random();
        let server = &config.server;
        let tools = Tools::new(ToolsParts {
            resources: catalog.clone(),
            upstreams: upstreams.clone(),
            fanout: fanout.clone(),
            metrics: metrics.clone(),
            cursor_key: cursor_key.clone(),
            page_size: server.page_size,
            policy: access.shared_policy(),
            bridge: config.bridge.enabled,
            max_calls_per_principal: server.max_calls_per_principal,
        });
        let caps = Caps {
            per_holder: server.max_subscriptions_per_session,
            per_principal: server.max_subscriptions_per_principal,
        };
        let subscriptions = Subscriptions {
            access: access.clone(),
            fanout: fanout.clone(),
            watches: watches.clone(),
            views: views.clone(),
            caps,
        };
        Shared {
            metrics,
            upstreams,
            catalog,
            cursor_key,
            fanout,
            watches,
            cache,
            cache_holder,
            access,
            views,
            tools,
            subscriptions,
            events,
            gone,
        }
    }

    /// What "anything of an upstream may have changed" needs.
    fn changes(&self) -> Changes {
        Changes { cache: self.cache.clone(), metrics: self.metrics.clone(), subscriptions: self.subscriptions.clone() }
    }

    /// The event loop, over these handles.
    fn event_loop(&self, config: &Config) -> EventLoop {
        EventLoop {
            changes: self.changes(),
            views: self.views.clone(),
            tools: self.tools.clone(),
            upstreams: self.upstreams.clone(),
            debounce: config.server.list_changed_debounce,
        }
    }

    /// Start the event loop and cache housekeeping on `spine`, and hand the request services
    /// what they use.
    fn services(self, config: Config, spine: &Spine, status: Status, reloader: Reloader) -> Services {
        self.event_loop(&config).spawn(spine, self.events.1, self.gone);
        let housekeeping = Housekeeping {
            cache: self.cache.clone(),
            watches: self.watches.clone(),
            cache_holder: self.cache_holder,
            metrics: self.metrics.clone(),
        };
        housekeeping.spawn(spine);
        let lists = Lists {
            catalog: self.catalog,
            access: self.access.clone(),
            cursor_key: self.cursor_key,
            page_size: config.server.page_size,
        };
        let reads = Reads {
            access: self.access.clone(),
            upstreams: self.upstreams.clone(),
            cache: self.cache,
            metrics: self.metrics.clone(),
        };
        Services {
            config,
            metrics: self.metrics,
            spine: spine.clone(),
            upstreams: self.upstreams,
            access: self.access,
            lists,
            reads,
            subscriptions: self.subscriptions,
            tools: self.tools,
            status,
            reloader,
        }
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
