//! Subscriptions from hosts and notifications from upstreams: the event loop over
//! [`UpstreamEvent`]s, fan-out of `updated` to holders, and debounced `list_changed`.
//!
//! The life of an upstream `updated`: the upstream's supervisor reports it → the cache drops
//! the URI and everything under it → every holder of the URI (or of a parent) that may still
//! see it is queued one `updated` — legacy sessions the URI itself, listen streams the URI
//! their filter named.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Proxy;
use crate::error::ProxyError;
use crate::fanout::{Outgoing, Outlet, OutletInfo, OutletKind};
use crate::metrics::{DenialAction, InvalidationCause, NotificationKind};
use crate::namespace;
use crate::subscriptions::HolderId;
use crate::upstream::UpstreamEvent;

impl Proxy {
    /// Register a host's notification outlet (a legacy session or a listen stream).
    pub fn register_outlet(&self, info: OutletInfo, outlet: Arc<dyn Outlet>) -> HolderId {
        // What the host sees now: it hears `list_changed` only once that changes.
        let view = if info.wants_list_changed { self.view_of(&info.principal) } else { 0 };
        self.inner.fanout.register(info, view, outlet)
    }

    /// `holder` is gone: drop its outlet and everything it held.
    pub fn release(&self, holder: HolderId) {
        self.inner.fanout.deregister(holder);
        self.inner.watches.release_all(holder);
    }

    /// Does `holder` hold any subscription?
    pub fn holds_anything(&self, holder: HolderId) -> bool {
        !self.inner.watches.held_by(holder).is_empty()
    }

    /// `holder` subscribes to a namespaced URI. Unknown and forbidden URIs are not found.
    pub fn subscribe(&self, holder: HolderId, principal: &str, uri: &str) -> Result<(), ProxyError> {
        let route = self.route_for(principal, uri, DenialAction::Subscribe)?;
        self.inner.watches.hold(holder, &route.upstream, &route.original);
        Ok(())
    }

    /// `holder` lets go of a namespaced URI (a no-op when it did not hold it).
    pub fn unsubscribe(&self, holder: HolderId, principal: &str, uri: &str) -> Result<(), ProxyError> {
        let route = self.route_for(principal, uri, DenialAction::Subscribe)?;
        self.inner.watches.release(holder, &route.upstream, &route.original);
        Ok(())
    }

    /// The subset of `uris` that `principal` may subscribe to: known namespaces, allowed.
    pub fn subscribable(&self, principal: &str, uris: &[String]) -> Vec<String> {
        uris.iter().filter(|uri| self.route_for(principal, uri, DenialAction::Subscribe).is_ok()).cloned().collect()
    }

    pub(super) async fn event_loop(
        self,
        mut events: mpsc::UnboundedReceiver<UpstreamEvent>,
        mut gone: mpsc::UnboundedReceiver<HolderId>,
        shutdown: CancellationToken,
    ) {
        let mut list_changed = Debounce::new(self.inner.config.server.list_changed_debounce);
        let mut gauges = tokio::time::interval(GAUGE_INTERVAL);
        loop {
            tokio::select! {
                _ = gauges.tick() => self.update_gauges().await,
                Some(event) = events.recv() => self.on_upstream_event(event, &mut list_changed),
                Some(holder) = gone.recv() => self.release(holder),
                _ = list_changed.fired() => {
                    let sent = self.announce_list_changes();
                    tracing::debug!(sent, "list_changed sent to hosts whose view changed");
                }
                _ = shutdown.cancelled() => return,
            }
        }
    }

    fn on_upstream_event(&self, event: UpstreamEvent, list_changed: &mut Debounce) {
        self.inner.tools.on_upstream_event(&event);
        match event {
            UpstreamEvent::ResourceUpdated { upstream, uri, heard } => {
                // Keys are normalised URIs; the upstream may spell them its own way.
                let normalized = normalized_original(&upstream, &uri);
                let dropped = self.inner.cache.invalidate(&upstream, &normalized);
                // Unheard ones follow a reconnect, whose flush was counted already.
                if heard {
                    self.inner.metrics.notification_received(&upstream, NotificationKind::Updated);
                    self.inner.metrics.cache_invalidation(InvalidationCause::Updated, dropped as u64);
                }
                self.fan_out_update(&upstream, &normalized);
            }
            UpstreamEvent::Up { upstream, reconnected, .. } => {
                // Updates may have been missed while it was away.
                if reconnected {
                    let connection = self.inner.upstreams.get(&upstream).map_or(0, |u| u.connection());
                    let dropped = self.inner.cache.flush_upstream(&upstream, connection);
                    self.inner.metrics.cache_invalidation(InvalidationCause::Reconnect, dropped);
                }
                list_changed.poke();
            }
            UpstreamEvent::CatalogChanged { upstream } => {
                self.inner.metrics.notification_received(&upstream, NotificationKind::ListChanged);
                list_changed.poke();
            }
            UpstreamEvent::Down { .. } => list_changed.poke(),
            UpstreamEvent::Progress { .. } => {}
            UpstreamEvent::OfferingsChanged { upstream, .. } => {
                self.inner.metrics.notification_received(&upstream, NotificationKind::ListChanged);
            }
        }
    }

    /// Gauges that are cheaper to sample than to track on every change.
    async fn update_gauges(&self) {
        // Let the cache finish its bookkeeping (evictions, expiries) even while nobody reads.
        self.inner.cache.settle().await;
        let (entries, bytes) = self.inner.cache.size();
        self.inner.metrics.set_cache_size(entries, bytes);
        for (upstream, uris, hosts) in self.inner.watches.per_upstream(self.inner.cache_holder) {
            self.inner.metrics.set_upstream_subscriptions(&upstream, uris);
            self.inner.metrics.set_downstream_subscriptions(&upstream, hosts);
        }
    }

    /// Tell every holder of `uri` (or of a parent of it) that it changed. Legacy sessions hear
    /// the URI itself; listen streams hear the URI they asked for, since their filter is exact.
    /// Either way only when the holder's principal may see `uri` itself: a change of a denied
    /// sub-resource is not news to a holder of its parent (it would reveal that it exists).
    fn fan_out_update(&self, upstream: &str, uri: &str) {
        let policy = self.policy();
        let Some(changed) = namespace::namespaced(upstream, uri) else { return };
        for (holder, held) in self.inner.watches.holders_of_update(upstream, uri) {
            let Some(info) = self.inner.fanout.info(holder) else { continue };
            if !self.visible(&policy, &info.principal, &changed) {
                continue;
            }
            let uris = match info.kind {
                OutletKind::Session => vec![uri.to_string()],
                OutletKind::ListenStream => held,
            };
            for original in uris {
                let Some(namespaced) = namespace::namespaced(upstream, &original) else { continue };
                if self.visible(&policy, &info.principal, &namespaced) {
                    self.inner.fanout.deliver(holder, Outgoing::Updated(namespaced));
                }
            }
        }
    }
}

/// How often sampled gauges (cache size, subscription counts) are refreshed.
const GAUGE_INTERVAL: Duration = Duration::from_secs(1);

/// `uri` of `upstream` in the normalised form the proxy keys everything by (as is when it
/// cannot be normalised).
fn normalized_original(upstream: &str, uri: &str) -> String {
    namespace::namespaced(upstream, uri)
        .and_then(|namespaced| crate::uri::normalize(&namespaced).ok())
        .and_then(|normalized| namespace::split(&normalized).map(|(_, original)| original.to_string()))
        .unwrap_or_else(|| uri.to_string())
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
