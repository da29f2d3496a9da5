//! An upstream's shared connection in its supervisor's [`Role`]: the catalog it loads, its
//! status, gauges and events are its own (a session's are its subscribers', see `session`).

use tokio_util::sync::CancellationToken;

use super::role::{Reload, Role};
use super::{Connection, Era, EventSender, Link, Lost, Offered, UpstreamEvent};
use crate::catalog::Catalog;

/// An upstream's shared connection, with the catalog it loads.
pub(super) struct Shared {
    pub connection: Connection,
    pub catalog: Catalog,
}

impl Role for Shared {
    fn supervised(&self) -> &Connection {
        &self.connection
    }

    /// Every page of resources and templates, namespaced, into the catalog. Returns when the
    /// lists must be fetched again (the shortest `ttlMs` they came with), if ever.
    async fn load_catalog(&self, link: &Link, stop: &CancellationToken) -> Result<Reload, String> {
        let listing = tokio::select! {
            listing = super::listing::fetch(&self.connection, link) => listing?,
            _ = stop.cancelled() => return Err("stopped".into()),
        };
        let name = self.connection.name();
        let (resources, templates) = (listing.entries.resources.len(), listing.entries.templates.len());
        self.connection.inner.metrics.set_catalog_size(name, resources, templates);
        let changed = self.catalog.replace_if_changed(name, listing.entries);
        Ok(Reload { refresh: listing.refresh, changed })
    }

    async fn offered_at_up(&self, link: &Link) -> Offered {
        self.connection.fetch_offerings(link).await.unwrap_or_default()
    }

    fn resources(&self) -> usize {
        let snapshot = self.catalog.snapshot();
        snapshot.counts().iter().find(|(n, _, _)| n == self.connection.name()).map_or(0, |(_, r, _)| *r)
    }

    fn came_up(&self, era: Era, reconnected: bool) -> bool {
        let (name, metrics) = (self.connection.name(), &self.connection.inner.metrics);
        tracing::info!(upstream = name, era = era.label(), resources = self.resources(), "upstream up");
        metrics.set_upstream_up(name, true);
        if reconnected {
            self.connection.update_status(|s| s.reconnects += 1);
            metrics.upstream_reconnected(name);
        }
        false
    }

    fn ended(&self, lost: bool) {
        let (name, metrics) = (self.connection.name(), &self.connection.inner.metrics);
        self.catalog.remove_upstream(name);
        if lost {
            metrics.set_upstream_up(name, false);
            metrics.set_catalog_size(name, 0, 0);
        }
    }

    fn emit(&self, events: &EventSender, event: UpstreamEvent) {
        events.send(event)
    }

    fn lost_everything(&self, events: &EventSender) {
        events.overflowed(self.connection.name(), Lost::Everything)
    }

    async fn refetch_offerings(&self, link: &Link, events: &EventSender) {
        if let Some(offered) = self.connection.fetch_offerings(link).await {
            events.send(UpstreamEvent::OfferingsChanged { upstream: self.connection.name().to_string(), offered });
        }
    }
}
