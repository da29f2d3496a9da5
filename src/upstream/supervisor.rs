//! The supervisor of one upstream: connect, load the catalog, serve until the connection ends,
//! reconnect with capped exponential backoff. One task per upstream, looping over a closed set
//! of events and selecting on shutdown.

use std::time::Duration;

use rmcp::model::{ClientRequest, PaginatedRequestParams, Resource, ResourceTemplate};
use rmcp::service::{Peer, RoleClient, ServiceError};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::client::Notice;
use super::connect::{Running, connect};
use super::{Era, Link, LinkState, Upstream, UpstreamEvent};
use crate::catalog::{Catalog, UpstreamCatalog};
use crate::namespace;

const BACKOFF_MIN: Duration = Duration::from_millis(250);
/// A guard against upstreams whose cursors never end.
const MAX_PAGES: usize = 100_000;

pub(super) struct Supervisor {
    upstream: Upstream,
    /// Whether it has been up before (so the next `Up` is a reconnect).
    was_up: std::sync::Mutex<bool>,
    catalog: Catalog,
    events: mpsc::UnboundedSender<UpstreamEvent>,
    shutdown: CancellationToken,
}

/// Why a connection ended.
enum End {
    Shutdown,
    Lost(String),
}

impl Supervisor {
    pub fn new(
        upstream: Upstream,
        catalog: Catalog,
        events: mpsc::UnboundedSender<UpstreamEvent>,
        shutdown: CancellationToken,
    ) -> Self {
        Self { upstream, was_up: std::sync::Mutex::new(false), catalog, events, shutdown }
    }

    pub async fn run(self) {
        let mut backoff = BACKOFF_MIN;
        let mut remembered = None;
        loop {
            self.upstream.update_status(|s| s.state = LinkState::Connecting);
            let end = self.connect_and_serve(&mut remembered, &mut backoff).await;
            self.upstream.set_link(None);
            self.catalog.remove_upstream(self.upstream.name());
            let error = match end {
                End::Shutdown => return,
                End::Lost(error) => error,
            };
            tracing::warn!(error = %error, retry_in = ?backoff, "upstream down");
            self.upstream.update_status(|s| {
                s.state = LinkState::Down;
                s.last_error = Some(error);
            });
            let metrics = &self.upstream.inner.metrics;
            metrics.set_upstream_up(self.upstream.name(), false);
            metrics.set_catalog_size(self.upstream.name(), 0, 0);
            let _ = self.events.send(UpstreamEvent::Down { upstream: self.upstream.name().to_string() });
            tokio::select! {
                _ = tokio::time::sleep(jittered(backoff)) => {}
                _ = self.shutdown.cancelled() => return,
            }
            backoff = (backoff * 2).min(self.upstream.config().reconnect_max.max(BACKOFF_MIN));
            self.upstream.update_status(|s| s.reconnects += 1);
            self.upstream.inner.metrics.upstream_reconnected(self.upstream.name());
        }
    }

    async fn connect_and_serve(&self, remembered: &mut Option<Era>, backoff: &mut Duration) -> End {
        let (notices_tx, mut notices) = mpsc::unbounded_channel();
        let connected = tokio::select! {
            connected = connect(self.upstream.config(), notices_tx.clone(), *remembered) => connected,
            _ = self.shutdown.cancelled() => return End::Shutdown,
        };
        let (running, era) = match connected {
            Ok(connected) => connected,
            Err(error) => {
                *remembered = None;
                return End::Lost(error);
            }
        };
        *remembered = Some(era);
        let capabilities = running.peer_info().map(|i| i.capabilities.clone()).unwrap_or_default();
        let link = Link { peer: running.peer().clone(), era, capabilities };
        if let Err(error) = self.load_catalog(&link.peer).await {
            return End::Lost(error);
        }
        *backoff = BACKOFF_MIN;
        self.upstream.set_link(Some(link.clone()));
        self.upstream.update_status(|s| {
            s.state = LinkState::Up;
            s.era = Some(era);
            s.last_error = None;
        });
        tracing::info!(era = era.label(), resources = self.resource_count(), "upstream up");
        self.upstream.inner.metrics.set_upstream_up(self.upstream.name(), true);
        let reconnected = std::mem::replace(&mut *self.was_up.lock().expect("was_up lock"), true);
        let _ = self.events.send(UpstreamEvent::Up { upstream: self.upstream.name().to_string(), era, reconnected });
        let watcher = CancellationToken::new();
        let upstream = self.upstream.clone();
        tokio::spawn(super::watching::keep(
            self.upstream.name().to_string(),
            link.clone(),
            self.upstream.inner.watched.subscribe(),
            self.upstream.inner.applied.clone(),
            notices_tx,
            watcher.clone(),
            move || upstream.inner.broken.notify_one(),
        ));
        let end = self.serve(running, &link, &mut notices).await;
        watcher.cancel();
        self.upstream.inner.applied.send_replace(Default::default());
        end
    }

    async fn serve(&self, running: Running, link: &Link, notices: &mut mpsc::UnboundedReceiver<Notice>) -> End {
        let mut running = std::pin::pin!(running.waiting());
        let every = self.upstream.config().health_interval;
        let mut health = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = health.tick() => {
                    if let Err(error) = self.probe(link).await {
                        return End::Lost(error);
                    }
                }
                quit = &mut running => return End::Lost(format!("connection closed ({quit:?})")),
                _ = self.upstream.inner.broken.notified() => return End::Lost("transport broken".into()),
                _ = self.shutdown.cancelled() => return End::Shutdown,
                Some(notice) = notices.recv() => {
                    if let Err(error) = self.on_notice(notice, link, notices).await {
                        return End::Lost(error);
                    }
                }
            }
        }
    }

    async fn on_notice(
        &self,
        notice: Notice,
        link: &Link,
        notices: &mut mpsc::UnboundedReceiver<Notice>,
    ) -> Result<(), String> {
        match notice {
            Notice::Updated(uri) => {
                let _ = self
                    .events
                    .send(UpstreamEvent::ResourceUpdated { upstream: self.upstream.name().to_string(), uri });
                Ok(())
            }
            Notice::ListChanged => {
                // A burst of list_changed costs one reload (two when more arrive during the
                // first) and one event.
                self.drain_list_changes(notices);
                self.load_catalog(&link.peer).await?;
                while self.drain_list_changes(notices) {
                    self.load_catalog(&link.peer).await?;
                }
                tracing::info!(resources = self.resource_count(), "upstream catalog reloaded");
                let _ = self.events.send(UpstreamEvent::CatalogChanged { upstream: self.upstream.name().to_string() });
                Ok(())
            }
        }
    }

    /// Is the upstream still there? Any answer counts — a 2026-07-28 server answers `ping` with
    /// method-not-found, which proves it alive just as well; silence or a transport error does not.
    async fn probe(&self, link: &Link) -> Result<(), String> {
        let ping = link.peer.send_request(ClientRequest::PingRequest(Default::default()));
        match tokio::time::timeout(self.upstream.config().request_timeout, ping).await {
            Ok(Ok(_)) | Ok(Err(ServiceError::McpError(_))) => Ok(()),
            Ok(Err(error)) => Err(format!("health check failed: {error}")),
            Err(_) => Err("health check timed out".into()),
        }
    }

    /// Take what queued; true when a list change was among it. Updates pass on in order.
    fn drain_list_changes(&self, notices: &mut mpsc::UnboundedReceiver<Notice>) -> bool {
        let mut changed = false;
        while let Ok(next) = notices.try_recv() {
            match next {
                Notice::ListChanged => changed = true,
                Notice::Updated(uri) => {
                    let _ = self.events.send(UpstreamEvent::ResourceUpdated { upstream: self.upstream.name().to_string(), uri });
                }
            }
        }
        changed
    }

    fn resource_count(&self) -> usize {
        let snapshot = self.catalog.snapshot();
        snapshot.counts().iter().find(|(n, _, _)| n == self.upstream.name()).map_or(0, |(_, r, _)| *r)
    }

    /// Every page of resources and templates, namespaced, into the catalog.
    async fn load_catalog(&self, peer: &Peer<RoleClient>) -> Result<(), String> {
        let name = self.upstream.name();
        let timeout = self.upstream.config().request_timeout;
        let started = std::time::Instant::now();
        let resources = all_pages(timeout, |cursor| async {
            let page = peer.list_resources(Some(PaginatedRequestParams::default().with_cursor(cursor))).await?;
            Ok((page.resources, page.next_cursor))
        })
        .await
        .map_err(|e| format!("resources/list: {e}"));
        let outcome = if resources.is_ok() { "ok" } else { "upstream_failed" };
        self.upstream.inner.metrics.upstream_request(name, "resources/list", outcome, started.elapsed());
        let resources = resources?;
        let templates = all_pages(timeout, |cursor| async {
            let page =
                peer.list_resource_templates(Some(PaginatedRequestParams::default().with_cursor(cursor))).await?;
            Ok((page.resource_templates, page.next_cursor))
        })
        .await
        .or_else(|e| {
            if e.is_method_not_found() { Ok(Vec::new()) } else { Err(format!("resources/templates/list: {e}")) }
        })?;
        let metrics = &self.upstream.inner.metrics;
        let unlisted = || metrics.catalog_entry_unlisted(name);
        let entries = UpstreamCatalog {
            resources: resources.into_iter().filter_map(|r| namespace_resource(name, r).or_else(|| {
                unlisted();
                None
            })).collect(),
            templates: templates.into_iter().filter_map(|t| namespace_template(name, t).or_else(|| {
                unlisted();
                None
            })).collect(),
        };
        metrics.set_catalog_size(name, entries.resources.len(), entries.templates.len());
        self.catalog.set_upstream(name, entries);
        Ok(())
    }
}

fn namespace_resource(upstream: &str, mut resource: Resource) -> Option<Resource> {
    match namespace::namespaced(upstream, &resource.uri) {
        Some(uri) => {
            resource.uri = uri;
            Some(resource)
        }
        None => {
            tracing::warn!(upstream, uri = %resource.uri, "resource URI has no scheme; not listed");
            None
        }
    }
}

fn namespace_template(upstream: &str, mut template: ResourceTemplate) -> Option<ResourceTemplate> {
    match namespace::namespaced_template(upstream, &template.uri_template) {
        Some(uri_template) => {
            template.uri_template = uri_template;
            Some(template)
        }
        None => {
            tracing::warn!(upstream, uri = %template.uri_template, "template has no literal scheme; not listed");
            None
        }
    }
}

/// A failed page fetch.
#[derive(Debug)]
enum PageError {
    Service(ServiceError),
    Timeout,
    Loop,
}

impl PageError {
    fn is_method_not_found(&self) -> bool {
        matches!(self, PageError::Service(ServiceError::McpError(e)) if e.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND)
    }
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PageError::Service(e) => write!(f, "{e}"),
            PageError::Timeout => f.write_str("timed out"),
            PageError::Loop => f.write_str("the upstream's cursors do not end"),
        }
    }
}

impl From<ServiceError> for PageError {
    fn from(e: ServiceError) -> Self {
        PageError::Service(e)
    }
}

async fn all_pages<T, F, Fut>(timeout: Duration, mut fetch: F) -> Result<Vec<T>, PageError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let mut items = Vec::new();
    let mut cursor = None;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..MAX_PAGES {
        let (page, next) = tokio::time::timeout(timeout, fetch(cursor)).await.map_err(|_| PageError::Timeout)??;
        items.extend(page);
        match next {
            Some(next) if !seen.insert(next.clone()) => return Err(PageError::Loop),
            Some(next) => cursor = Some(next),
            None => return Ok(items),
        }
    }
    Err(PageError::Loop)
}

/// ±20% so that many upstreams that fell together do not come back in lockstep.
fn jittered(delay: Duration) -> Duration {
    delay.mul_f64(0.8 + rand::random::<f64>() * 0.4)
}
