//! The `Proxy` handle: the catalog, the upstreams and the cursor key, and the paths every
//! downstream request takes.
//!
//! The life of a `resources/read`: split the namespace (unknown → not found) → the upstream it
//! routes to → read with the upstream's timeout → rewrite every `contents[*].uri` back into the
//! namespace. Lists are cut from the catalog's immutable snapshot: no upstream call per page.
//!
//! Invariant: everything a client receives carries namespaced URIs; nothing un-namespaced and
//! no upstream error text leaves this module.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ListResourceTemplatesResult, ListResourcesResult, ReadResourceResponse, ResourceContents};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::catalog::{Catalog, Snapshot};
use crate::config::Config;
use crate::cursor::{CursorKey, ListKind, Position};
use crate::error::ProxyError;
use crate::namespace;
use crate::upstream::{LinkState, Upstream, UpstreamEvent, UpstreamStatus};

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
        let inner = Inner { config, catalog, upstreams, cursor_key: CursorKey::random() };
        let proxy = Proxy { inner: Arc::new(inner) };
        tokio::spawn(proxy.clone().event_loop(events, shutdown));
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

    async fn event_loop(self, mut events: mpsc::UnboundedReceiver<UpstreamEvent>, shutdown: CancellationToken) {
        loop {
            let event = tokio::select! {
                Some(event) = events.recv() => event,
                _ = shutdown.cancelled() => return,
            };
            tracing::debug!(?event, "upstream event");
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
