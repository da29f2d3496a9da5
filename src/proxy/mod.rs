//! The `Proxy` handle: the catalog, the upstreams, the read cache, the watch book and the
//! fan-out, and the paths every downstream request takes: lists (here), reads (`read`),
//! subscriptions and notifications (`events`).
//!
//! Lists are cut from the catalog's immutable snapshot: no upstream call per page.
//!
//! Invariant: everything a client receives carries namespaced URIs; nothing un-namespaced and
//! no upstream error text leaves this module.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rmcp::model::{ListResourceTemplatesResult, ListResourcesResult};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::admin::{StatusReport, UpstreamReport};
use crate::catalog::{Catalog, Snapshot};
use crate::coherence::{Coherence, WatchBook};
use crate::config::Config;
use crate::cursor::{CursorKey, ListKind, Position};
use crate::error::ProxyError;
use crate::fanout::Delivery;
use crate::fanout::Fanout;
use crate::metrics::{Metrics, NotificationKind};
use crate::policy::PolicySet;
use crate::subscriptions::HolderId;
use crate::tools::{Tools, ToolsParts};
use crate::upstream::{Upstream, UpstreamStatus};

mod access;
mod events;
mod read;
mod views;

pub use self::read::ReadAnswer;

/// A cheap `Clone` handle on the running proxy.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    catalog: Catalog,
    upstreams: Arc<BTreeMap<String, Upstream>>,
    cursor_key: CursorKey,
    watches: Arc<WatchBook>,
    fanout: Fanout,
    /// The read cache and its coherence (generations, watch holds, admission).
    cache: Coherence,
    /// The cache's own holder id in the watch book.
    cache_holder: HolderId,
    /// Shared with the tools-and-prompts service.
    policy: Arc<RwLock<PolicySet>>,
    /// Tools, prompts and completion (`crate::tools`).
    tools: Tools,
    /// Per-principal digests of the visible catalog, for `list_changed`.
    views: views::ViewDigests,
    metrics: Metrics,
}

impl Proxy {
    /// Start a supervisor per upstream (all connect concurrently) and the event loop.
    pub fn start(config: Config, shutdown: CancellationToken) -> Proxy {
        let catalog = Catalog::new();
        let (events_tx, events) = mpsc::unbounded_channel();
        let metrics = Metrics::new();
        let upstreams: BTreeMap<_, _> =
            config.upstreams.iter().map(|u| (u.name.clone(), Upstream::new(u.clone(), metrics.clone()))).collect();
        for upstream in upstreams.values() {
            upstream.spawn(catalog.clone(), events_tx.clone(), shutdown.clone());
        }
        let upstreams = Arc::new(upstreams);
        let (gone_tx, gone) = mpsc::unbounded_channel();
        let fanout = Fanout::new(gone_tx);
        let watches = Arc::new(WatchBook::new(upstreams.clone()));
        let cache_holder = fanout.next_holder_id();
        fanout.set_delivery_hook(delivery_metrics(metrics.clone()));
        let max_load = config.upstreams.iter().map(|u| u.request_timeout).max().unwrap_or_default() + read::WATCH_WAIT;
        let cache = Coherence::new(config.cache.clone(), watches.clone(), cache_holder, metrics.clone(), max_load);
        let policy = Arc::new(RwLock::new(config.policies.set.clone()));
        let cursor_key = CursorKey::random();
        let tools = Tools::new(ToolsParts {
            resources: catalog.clone(),
            upstreams: upstreams.clone(),
            fanout: fanout.clone(),
            metrics: metrics.clone(),
            cursor_key: cursor_key.clone(),
            page_size: config.server.page_size,
            policy: policy.clone(),
        });
        let inner = Inner {
            tools,
            metrics,
            policy,
            config,
            catalog,
            upstreams,
            cursor_key,
            watches,
            fanout,
            cache,
            cache_holder,
            views: views::ViewDigests::default(),
        };
        let proxy = Proxy { inner: Arc::new(inner) };
        tokio::spawn(proxy.clone().event_loop(events, gone, shutdown));
        proxy
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// Tools, prompts and completion.
    pub fn tools(&self) -> &Tools {
        &self.inner.tools
    }

    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// What `/status` and `/readyz` show.
    pub fn status_report(&self) -> StatusReport {
        let counts = self.inner.catalog.snapshot().counts();
        let upstreams = self
            .inner
            .upstreams
            .values()
            .map(|upstream| {
                let (resources, templates) =
                    counts.iter().find(|(n, _, _)| n == upstream.name()).map_or((0, 0), |(_, r, t)| (*r, *t));
                UpstreamReport::new(upstream.status(), upstream.config().required, resources, templates)
            })
            .collect();
        let (entries, weighted_bytes) = self.inner.cache.size();
        let (upstream_uris, holds) = self.inner.watches.counts();
        StatusReport {
            upstreams,
            cache: serde_json::json!({
                "enabled": self.inner.config.cache.enabled,
                "entries": entries,
                "weighted_bytes": weighted_bytes,
                "max_bytes": self.inner.config.cache.max_bytes,
                "tracked": self.inner.cache.tracked(),
            }),
            subscriptions: serde_json::json!({
                "hosts": self.inner.fanout.outlets().len(),
                "held": holds,
                "upstream_uris": upstream_uris,
            }),
        }
    }

    pub fn statuses(&self) -> Vec<UpstreamStatus> {
        self.inner.upstreams.values().map(Upstream::status).collect()
    }

    /// Wait (at most `timeout`) until every upstream is up or has failed its first attempt,
    /// so a host's first list holds whatever is reachable without waiting for what is not.
    /// True when they all settled in time.
    pub async fn wait_settled(&self, timeout: Duration) -> bool {
        let all_settled = futures::future::join_all(self.inner.upstreams.values().map(Upstream::wait_settled));
        tokio::time::timeout(timeout, all_settled).await.is_ok()
    }

    /// One page of the merged resource list.
    pub fn list_resources(&self, principal: &str, cursor: Option<&str>) -> Result<ListResourcesResult, ProxyError> {
        let snapshot = self.inner.catalog.snapshot();
        let offset = self.offset(principal, ListKind::Resources, cursor, &snapshot)?;
        let policy = self.policy();
        let page = snapshot
            .resources_page(offset, self.inner.config.server.page_size, &|uri| self.listable(&policy, principal, uri));
        let mut result = ListResourcesResult::with_all_items(page.items);
        result.next_cursor = page.next.map(|next| self.cursor(principal, ListKind::Resources, &snapshot, next));
        Ok(result)
    }

    /// One page of the merged template list.
    pub fn list_templates(
        &self,
        principal: &str,
        cursor: Option<&str>,
    ) -> Result<ListResourceTemplatesResult, ProxyError> {
        let snapshot = self.inner.catalog.snapshot();
        let offset = self.offset(principal, ListKind::Templates, cursor, &snapshot)?;
        let policy = self.policy();
        let page = snapshot.templates_page(offset, self.inner.config.server.page_size, &|template| {
            self.template_visible(&policy, principal, template)
        });
        let mut result = ListResourceTemplatesResult::with_all_items(page.items);
        result.next_cursor = page.next.map(|next| self.cursor(principal, ListKind::Templates, &snapshot, next));
        Ok(result)
    }

    fn offset(
        &self,
        principal: &str,
        list: ListKind,
        cursor: Option<&str>,
        snapshot: &Snapshot,
    ) -> Result<usize, ProxyError> {
        let Some(cursor) = cursor else { return Ok(0) };
        let position = self.inner.cursor_key.decode(principal, list, cursor).map_err(|_| ProxyError::InvalidCursor)?;
        if position.generation != snapshot.generation {
            return Err(ProxyError::InvalidCursor);
        }
        usize::try_from(position.offset).map_err(|_| ProxyError::InvalidCursor)
    }

    fn cursor(&self, principal: &str, list: ListKind, snapshot: &Snapshot, offset: usize) -> String {
        let position = Position { list, generation: snapshot.generation, offset: offset as u64 };
        self.inner.cursor_key.encode(principal, position)
    }
}

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
