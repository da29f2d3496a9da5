//! The `Proxy` handle: the catalog, the upstreams and the cursor key, and the paths every
//! downstream request takes.
//!
//! The life of a `resources/read`: split the namespace (unknown → not found) → the upstream it
//! routes to → read with the upstream's timeout → rewrite every `contents[*].uri` back into the
//! namespace. Lists are cut from the catalog's immutable snapshot: no upstream call per page.
//!
//! Invariant: everything a client receives carries namespaced URIs; nothing un-namespaced and
//! no upstream error text leaves this module.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ListResourceTemplatesResult, ListResourcesResult, ReadResourceResponse, ResourceContents};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::catalog::{Catalog, Snapshot};
use crate::config::Config;
use crate::cursor::{CursorKey, ListKind, Position};
use crate::error::ProxyError;
use crate::fanout::{Fanout, Outgoing, Outlet, OutletInfo, OutletKind};
use crate::subscriptions::{HolderId, Subscriptions};
use crate::namespace;
use crate::upstream::{LinkState, Upstream, UpstreamEvent, UpstreamStatus};

/// Upstream list changes within this window reach hosts as one `list_changed`.
const LIST_CHANGED_WINDOW: Duration = Duration::from_millis(100);

/// A cheap `Clone` handle on the running proxy.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    catalog: Catalog,
    upstreams: BTreeMap<String, Upstream>,
    cursor_key: CursorKey,
    subscriptions: Mutex<Subscriptions>,
    fanout: Fanout,
}

impl Proxy {
    /// Start a supervisor per upstream (all connect concurrently) and the event loop.
    pub fn start(config: Config, shutdown: CancellationToken) -> Proxy {
        let catalog = Catalog::new();
        let (events_tx, events) = mpsc::unbounded_channel();
        let upstreams: BTreeMap<_, _> =
            config.upstreams.iter().map(|u| (u.name.clone(), Upstream::new(u.clone()))).collect();
        for upstream in upstreams.values() {
            upstream.spawn(catalog.clone(), events_tx.clone(), shutdown.clone());
        }
        let (gone_tx, gone) = mpsc::unbounded_channel();
        let inner = Inner {
            config,
            catalog,
            upstreams,
            cursor_key: CursorKey::random(),
            subscriptions: Mutex::new(Subscriptions::new()),
            fanout: Fanout::new(gone_tx),
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

    pub fn statuses(&self) -> Vec<UpstreamStatus> {
        self.inner.upstreams.values().map(Upstream::status).collect()
    }

    /// Wait until every upstream is up (or `timeout`); true when they all are.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        let all_up = futures::future::join_all(
            self.inner.upstreams.values().map(|u| u.wait_state(|state| *state == LinkState::Up)),
        );
        tokio::time::timeout(timeout, all_up).await.is_ok()
    }

    /// One page of the merged resource list.
    pub fn list_resources(&self, principal: &str, cursor: Option<&str>) -> Result<ListResourcesResult, ProxyError> {
        let snapshot = self.inner.catalog.snapshot();
        let offset = self.offset(principal, ListKind::Resources, cursor, &snapshot)?;
        let page = snapshot.resources_page(offset, self.inner.config.server.page_size, &|_| true);
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
        let page = snapshot.templates_page(offset, self.inner.config.server.page_size, &|_| true);
        let mut result = ListResourceTemplatesResult::with_all_items(page.items);
        result.next_cursor = page.next.map(|next| self.cursor(principal, ListKind::Templates, &snapshot, next));
        Ok(result)
    }

    /// Read a namespaced URI.
    pub async fn read(&self, _principal: &str, uri: &str) -> Result<ReadResourceResponse, ProxyError> {
        let (name, original) = namespace::split(uri).ok_or_else(|| ProxyError::not_found(uri))?;
        let upstream = self.inner.upstreams.get(name).ok_or_else(|| ProxyError::not_found(uri))?;
        let response = upstream.read(original).await.map_err(|e| match e {
            ProxyError::NotFound { .. } => ProxyError::not_found(uri),
            other => other,
        })?;
        Ok(match response {
            ReadResourceResponse::Complete(mut result) => {
                for content in &mut result.contents {
                    namespace_content(name, uri, content);
                }
                ReadResourceResponse::Complete(result)
            }
            other => other,
        })
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

    /// Register a host's notification outlet (a legacy session or a listen stream).
    pub fn register_outlet(&self, info: OutletInfo, outlet: Arc<dyn Outlet>) -> HolderId {
        let generation = self.inner.catalog.snapshot().generation;
        self.inner.fanout.register(info, generation, outlet)
    }

    /// `holder` is gone: drop its outlet and everything it held.
    pub fn release(&self, holder: HolderId) {
        self.inner.fanout.deregister(holder);
        let dropped = self.inner.subscriptions.lock().expect("subscriptions lock").release_all(holder);
        let upstreams: BTreeSet<String> = dropped.into_iter().map(|(upstream, _)| upstream).collect();
        for upstream in upstreams {
            self.sync_watch(&upstream);
        }
    }

    /// `holder` subscribes to a namespaced URI. Unknown namespaces are not found.
    pub fn subscribe(&self, holder: HolderId, _principal: &str, uri: &str) -> Result<(), ProxyError> {
        let (upstream, original) = self.route(uri)?;
        let first = self.inner.subscriptions.lock().expect("subscriptions lock").hold(holder, (upstream.clone(), original));
        if first {
            self.sync_watch(&upstream);
        }
        Ok(())
    }

    /// `holder` lets go of a namespaced URI (a no-op when it did not hold it).
    pub fn unsubscribe(&self, holder: HolderId, _principal: &str, uri: &str) -> Result<(), ProxyError> {
        let (upstream, original) = self.route(uri)?;
        let last = self.inner.subscriptions.lock().expect("subscriptions lock").release(holder, &(upstream.clone(), original));
        if last {
            self.sync_watch(&upstream);
        }
        Ok(())
    }

    /// The subset of `uris` that `principal` may subscribe to (known namespaces).
    pub fn subscribable(&self, _principal: &str, uris: &[String]) -> Vec<String> {
        uris.iter().filter(|uri| self.route(uri).is_ok()).cloned().collect()
    }

    fn route(&self, uri: &str) -> Result<(String, String), ProxyError> {
        match namespace::split(uri) {
            Some((upstream, original)) if self.inner.upstreams.contains_key(upstream) => {
                Ok((upstream.to_string(), original.to_string()))
            }
            _ => Err(ProxyError::not_found(uri)),
        }
    }

    /// Tell `upstream` what to keep subscribed, from the current holdings.
    fn sync_watch(&self, upstream: &str) {
        let watched = self.inner.subscriptions.lock().expect("subscriptions lock").watched(upstream);
        if let Some(upstream) = self.inner.upstreams.get(upstream) {
            upstream.set_watched(watched);
        }
    }

    async fn event_loop(
        self,
        mut events: mpsc::UnboundedReceiver<UpstreamEvent>,
        mut gone: mpsc::UnboundedReceiver<HolderId>,
        shutdown: CancellationToken,
    ) {
        let mut list_changed = Debounce::new(LIST_CHANGED_WINDOW);
        loop {
            tokio::select! {
                Some(event) = events.recv() => self.on_upstream_event(event, &mut list_changed),
                Some(holder) = gone.recv() => self.release(holder),
                _ = list_changed.fired() => {
                    let generation = self.inner.catalog.snapshot().generation;
                    let sent = self.inner.fanout.broadcast_list_changed(generation, |_| true);
                    tracing::debug!(sent, "list_changed sent to hosts");
                }
                _ = shutdown.cancelled() => return,
            }
        }
    }

    fn on_upstream_event(&self, event: UpstreamEvent, list_changed: &mut Debounce) {
        match event {
            UpstreamEvent::ResourceUpdated { upstream, uri } => self.fan_out_update(&upstream, &uri),
            UpstreamEvent::Up { .. } | UpstreamEvent::Down { .. } | UpstreamEvent::CatalogChanged { .. } => {
                list_changed.poke()
            }
        }
    }

    /// An upstream said `uri` changed: tell every host holding it (or a parent of it). Legacy
    /// sessions hear the URI itself; listen streams hear the URI they asked for, since their
    /// filter is exact.
    fn fan_out_update(&self, upstream: &str, uri: &str) {
        let holders = self.inner.subscriptions.lock().expect("subscriptions lock").holders_of_update(upstream, uri);
        for (holder, held) in holders {
            let Some(info) = self.inner.fanout.info(holder) else { continue };
            let uris = match info.kind {
                OutletKind::Session => vec![uri.to_string()],
                OutletKind::ListenStream => held,
            };
            for original in uris {
                if let Some(namespaced) = namespace::namespaced(upstream, &original) {
                    self.inner.fanout.deliver(holder, Outgoing::Updated(namespaced));
                }
            }
        }
    }
}

/// Trailing-edge debounce: fires `window` after the last poke, but no later than ten windows
/// after the first, so a steady stream of events still produces notifications.
struct Debounce {
    window: Duration,
    first: Option<tokio::time::Instant>,
    deadline: Option<tokio::time::Instant>,
}

impl Debounce {
    fn new(window: Duration) -> Self {
        Self { window, first: None, deadline: None }
    }

    fn poke(&mut self) {
        let now = tokio::time::Instant::now();
        let first = *self.first.get_or_insert(now);
        self.deadline = Some((now + self.window).min(first + self.window * 10));
    }

    /// Resolves when the debounced event is due (pending while none is).
    async fn fired(&mut self) {
        match self.deadline {
            Some(deadline) => {
                tokio::time::sleep_until(deadline).await;
                self.first = None;
                self.deadline = None;
            }
            None => std::future::pending().await,
        }
    }
}

/// Put a content's URI into the namespace of the upstream it came from. A content URI without
/// a scheme cannot be namespaced: it is presented as the URI that was read.
fn namespace_content(upstream: &str, requested: &str, content: &mut ResourceContents) {
    if let ResourceContents::TextResourceContents { uri, .. } | ResourceContents::BlobResourceContents { uri, .. } =
        content
    {
        *uri = namespace::namespaced(upstream, uri).unwrap_or_else(|| requested.to_string());
    }
}
