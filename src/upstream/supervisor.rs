//! The supervisor of one upstream: connect, load the catalog, serve until the connection ends,
//! reconnect with capped exponential backoff. One task per upstream, looping over a closed set
//! of events and selecting on shutdown.

use std::time::Duration;

use rmcp::model::{PaginatedRequestParams, Resource, ResourceTemplate, ServerNotification, SubscriptionFilter};
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
        Self { upstream, catalog, events, shutdown }
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
            let _ = self.events.send(UpstreamEvent::Down { upstream: self.upstream.name().to_string() });
            tokio::select! {
                _ = tokio::time::sleep(jittered(backoff)) => {}
                _ = self.shutdown.cancelled() => return,
            }
            backoff = (backoff * 2).min(self.upstream.config().reconnect_max.max(BACKOFF_MIN));
            self.upstream.update_status(|s| s.reconnects += 1);
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
        let _ = self.events.send(UpstreamEvent::Up { upstream: self.upstream.name().to_string(), era });
        let listener = CancellationToken::new();
        if era == Era::Modern && link.capabilities.resources.as_ref().is_some_and(|r| r.list_changed == Some(true)) {
            tokio::spawn(listen_for_list_changes(link.peer.clone(), notices_tx, listener.clone()));
        }
        let end = self.serve(running, &link, &mut notices).await;
        listener.cancel();
        end
    }

    async fn serve(&self, running: Running, link: &Link, notices: &mut mpsc::UnboundedReceiver<Notice>) -> End {
        let mut running = std::pin::pin!(running.waiting());
        loop {
            tokio::select! {
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
                // A burst of list_changed costs one reload: drain what queued meanwhile.
                while let Ok(next) = notices.try_recv() {
                    if let Notice::Updated(uri) = next {
                        let _ = self
                            .events
                            .send(UpstreamEvent::ResourceUpdated { upstream: self.upstream.name().to_string(), uri });
                    }
                }
                self.load_catalog(&link.peer).await?;
                tracing::info!(resources = self.resource_count(), "upstream catalog reloaded");
                let _ = self.events.send(UpstreamEvent::CatalogChanged { upstream: self.upstream.name().to_string() });
                Ok(())
            }
        }
    }

    fn resource_count(&self) -> usize {
        let snapshot = self.catalog.snapshot();
        snapshot.counts().iter().find(|(n, _, _)| n == self.upstream.name()).map_or(0, |(_, r, _)| *r)
    }

    /// Every page of resources and templates, namespaced, into the catalog.
    async fn load_catalog(&self, peer: &Peer<RoleClient>) -> Result<(), String> {
        let name = self.upstream.name();
        let timeout = self.upstream.config().request_timeout;
        let resources = all_pages(timeout, |cursor| async {
            let page = peer.list_resources(Some(PaginatedRequestParams::default().with_cursor(cursor))).await?;
            Ok((page.resources, page.next_cursor))
        })
        .await
        .map_err(|e| format!("resources/list: {e}"))?;
        let templates = all_pages(timeout, |cursor| async {
            let page =
                peer.list_resource_templates(Some(PaginatedRequestParams::default().with_cursor(cursor))).await?;
            Ok((page.resource_templates, page.next_cursor))
        })
        .await
        .or_else(|e| {
            if e.is_method_not_found() { Ok(Vec::new()) } else { Err(format!("resources/templates/list: {e}")) }
        })?;
        let entries = UpstreamCatalog {
            resources: resources.into_iter().filter_map(|r| namespace_resource(name, r)).collect(),
            templates: templates.into_iter().filter_map(|t| namespace_template(name, t)).collect(),
        };
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

/// 2026-07-28 upstreams send `list_changed` only on a listen stream. Keep one open; when it ends
/// (the upstream closed it, or it lagged), report a change — one may have been missed — and
/// listen again.
async fn listen_for_list_changes(
    peer: Peer<RoleClient>,
    notices: mpsc::UnboundedSender<Notice>,
    stop: CancellationToken,
) {
    let filter = SubscriptionFilter::builder().resources_list_changed().build();
    let mut delay = BACKOFF_MIN;
    while !stop.is_cancelled() {
        if let Ok(mut subscription) = peer.listen(filter.clone()).await {
            delay = BACKOFF_MIN;
            loop {
                let next = tokio::select! {
                    next = subscription.next() => next,
                    _ = stop.cancelled() => { let _ = subscription.cancel().await; return; }
                };
                match next {
                    Ok(Some(ServerNotification::ResourceListChangedNotification(_))) => {
                        drop(notices.send(Notice::ListChanged))
                    }
                    Ok(Some(ServerNotification::ResourceUpdatedNotification(n))) => {
                        drop(notices.send(Notice::Updated(n.params.uri)))
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
            let _ = notices.send(Notice::ListChanged);
        }
        tokio::select! {
            _ = tokio::time::sleep(jittered(delay)) => {}
            _ = stop.cancelled() => return,
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// ±20% so that many upstreams that fell together do not come back in lockstep.
fn jittered(delay: Duration) -> Duration {
    delay.mul_f64(0.8 + rand::random::<f64>() * 0.4)
}
