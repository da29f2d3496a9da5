//! The proxy's own background tasks: the `event-loop` over what upstreams report
//! ([`Inbound`]) and hosts that went away, with debounced `list_changed`; and
//! `cache-housekeeping`, which lets the cache finish its bookkeeping and samples gauges on its
//! own tick, so the event loop never waits for it.
//!
//! Both are types owning what they use ([`EventLoop`], [`Housekeeping`]), spawned on the spine,
//! and select on its shutdown. Ingress is bounded: upstream
//! events through [`crate::upstream::events`] (overflow coalesces per upstream), gone subscribers
//! through the fan-out's bounded channel (an ending send task waits for room).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::subscriptions::Subscriptions;
use super::views::Views;
use crate::coherence::{Coherence, UpstreamSubscriptions};
use crate::metrics::{InvalidationCause, Metrics, NotificationKind};
use crate::namespace;
use crate::rate_limits::RateLimits;
use crate::spine::Spine;
use crate::subscription_table::SubscriberId;
use crate::telemetry::Span;
use crate::tools::Tools;
use crate::upstream::{Change, EventInbox, Inbound, Lost, Registry, UpstreamEvent};

/// How often the cache's bookkeeping (its sweep included) runs and sampled gauges are
/// refreshed: the coherence layer's sweep period, which its generation records count on.
const HOUSEKEEPING_INTERVAL: Duration = crate::coherence::SWEEP_EVERY;

/// What "anything of this upstream may have changed" does: shared by the event loop (events
/// lost) and the reloader (an upstream replaced).
#[derive(Clone)]
pub(super) struct Changes {
    pub(super) cache: Coherence,
    pub(super) metrics: Metrics,
    pub(super) subscriptions: Subscriptions,
}

impl Changes {
    /// Anything of `upstream` may have changed (events lost past the bound, or it was
    /// replaced). Its cache entries go and every subscriber of its URIs hears `updated` (the caller
    /// has list views compared again).
    pub(super) async fn everything_changed(&self, upstream: &str) {
        let dropped = self.cache.invalidate_upstream_everywhere(upstream).await;
        self.metrics.cache_invalidation(InvalidationCause::Reconnect, dropped);
        self.subscriptions.all_updated(upstream);
    }
}

/// The `event-loop` task, with what it uses.
pub(super) struct EventLoop {
    pub(super) changes: Changes,
    /// Who is told `list_changed` once the debounce fires.
    pub(super) views: Views,
    /// Tools and prompts come and go with their upstream's events.
    pub(super) tools: Tools,
    /// An upstream's connection number, for a reconnect's flush.
    pub(super) upstreams: Registry,
    /// `server.list_changed_debounce`.
    pub(super) debounce: Duration,
}

impl EventLoop {
    /// Run on `spine` until its shutdown, over what upstreams report and hosts that went away.
    pub(super) fn spawn(self, spine: &Spine, events: EventInbox, gone: mpsc::Receiver<SubscriberId>) {
        spine.spawn("event-loop", self.run(events, gone, spine.shutdown()));
    }

    async fn run(self, mut events: EventInbox, mut gone: mpsc::Receiver<SubscriberId>, shutdown: CancellationToken) {
        let mut list_changed = Debounce::new(self.debounce);
        loop {
            tokio::select! {
                Some(inbound) = events.recv() => self.on_inbound(inbound, &mut list_changed).await,
                Some(subscriber) = gone.recv() => self.changes.subscriptions.deregister(subscriber),
                _ = list_changed.fired() => {
                    let sent = self.views.announce();
                    tracing::debug!(sent, "list_changed sent to hosts whose view changed");
                }
                _ = shutdown.cancelled() => return,
            }
        }
    }

    pub(super) async fn on_inbound(&self, inbound: Inbound, list_changed: &mut Debounce) {
        let event = match inbound {
            Inbound::Event(event) => event,
            Inbound::Overflowed(upstream, lost) => {
                self.overflowed(&upstream, lost).await;
                return list_changed.poke();
            }
        };
        self.tools.on_upstream_event(&event);
        let Changes { cache, metrics, subscriptions } = &self.changes;
        match event {
            UpstreamEvent::ResourceUpdated { upstream, uri, change } => {
                // Keys are normalised URIs; the upstream may spell them its own way.
                let normalized = normalized_original(&upstream, &uri);
                // An `updated` the upstream sent is a span (when traced) until it is fanned out.
                let span = if change == Change::Heard { updated_span(&upstream, &normalized) } else { Span::default() };
                // Recorded for every replica before any subscriber is told.
                let dropped = cache.invalidate_everywhere(&upstream, &normalized).await;
                span.note("mcp_proxy.cache.invalidated", i64::try_from(dropped).unwrap_or(i64::MAX));
                // Unheard ones follow a reconnect, whose flush was counted already.
                if change == Change::Heard {
                    metrics.notification_received(&upstream, NotificationKind::Updated);
                    metrics.cache_invalidation(InvalidationCause::Updated, dropped as u64);
                }
                // Nobody held a rewatched URI while it may have changed: nobody to tell.
                if change != Change::Resubscribed {
                    subscriptions.updated(&upstream, &normalized, &span);
                }
            }
            UpstreamEvent::Up { upstream, reconnected, .. } => {
                // Updates may have been missed while it was away.
                if reconnected {
                    let connection = self.upstreams.get(&upstream).map_or(0, |u| u.connection());
                    let dropped = cache.flush_upstream(&upstream, connection);
                    metrics.cache_invalidation(InvalidationCause::Reconnect, dropped);
                    // The other replicas' entries of it are no better: its floor rises.
                    if let Some(tier) = cache.shared_tier() {
                        let _ = tier.raise_floor(&upstream).await;
                    }
                }
                list_changed.poke();
            }
            UpstreamEvent::CatalogChanged { upstream } => {
                metrics.notification_received(&upstream, NotificationKind::ListChanged);
                list_changed.poke();
            }
            UpstreamEvent::Down { .. } => list_changed.poke(),
            UpstreamEvent::OfferingsChanged { upstream, .. } => {
                metrics.notification_received(&upstream, NotificationKind::ListChanged);
            }
            UpstreamEvent::SessionOfferingsChanged { upstream, .. } => {
                // Its hosts were told by `tools`, which lists it for them.
                metrics.notification_received(&upstream, NotificationKind::ListChanged);
            }
            UpstreamEvent::SessionUpdated { upstream, uri, heard, subscribers } => {
                // Reads of such an upstream are never cached: nothing to invalidate.
                if heard {
                    metrics.notification_received(&upstream, NotificationKind::Updated);
                }
                let normalized = normalized_original(&upstream, &uri);
                let span = if heard { updated_span(&upstream, &normalized) } else { Span::default() };
                subscriptions.session_updated(&upstream, &normalized, subscribers, &span);
            }
        }
    }

    /// Events of `upstream` were lost (ingress full): its cache entries go (whatever the lost
    /// events said), and subscribers hear `updated` for the lost URIs — for all they hold of it
    /// when those were not kept.
    async fn overflowed(&self, upstream: &str, lost: Lost) {
        let Lost::Updated(uris) = lost else {
            tracing::warn!(
                upstream,
                "event queue full: events were dropped; subscribers of all its URIs are told updated"
            );
            return self.changes.everything_changed(upstream).await;
        };
        let lost = uris.len();
        tracing::warn!(
            upstream,
            lost,
            "event queue full: updated events were dropped; their subscribers are told updated"
        );
        let dropped = self.changes.cache.invalidate_upstream_everywhere(upstream).await;
        self.changes.metrics.cache_invalidation(InvalidationCause::Reconnect, dropped);
        for uri in uris {
            self.changes.subscriptions.updated(upstream, &normalized_original(upstream, &uri), &Span::default());
        }
    }
}

/// The `cache-housekeeping` task, with what it uses: the cache's bookkeeping (its sweep
/// included, the only one) and the sampled gauges, on their own tick.
pub(super) struct Housekeeping {
    pub(super) cache: Coherence,
    pub(super) upstream_subscriptions: Arc<UpstreamSubscriptions>,
    /// The cache's own subscriber id in the upstream subscriptions (not a host).
    pub(super) cache_subscriber: SubscriberId,
    pub(super) metrics: Metrics,
    /// Principals whose buckets are full again are forgotten on each tick.
    pub(super) rate_limits: RateLimits,
}

impl Housekeeping {
    /// Run on `spine` until its shutdown.
    pub(super) fn spawn(self, spine: &Spine) {
        spine.spawn("cache-housekeeping", self.run(spine.shutdown()));
    }

    async fn run(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(HOUSEKEEPING_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.update_gauges().await,
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// Gauges that are cheaper to sample than to track on every change.
    async fn update_gauges(&self) {
        // Let the cache finish its bookkeeping (evictions, expiries, its per-URI state) even
        // while nobody reads.
        self.cache.settle().await;
        self.rate_limits.retain_recent();
        // A shared tier found down comes back here (its pending floors raised first).
        if let Some(tier) = self.cache.shared_tier() {
            tier.recover().await;
        }
        let (entries, bytes) = self.cache.size();
        self.metrics.set_cache_size(entries, bytes);
        for (upstream, uris, hosts) in self.upstream_subscriptions.per_upstream(self.cache_subscriber) {
            self.metrics.set_upstream_subscriptions(&upstream, uris);
            self.metrics.set_downstream_subscriptions(&upstream, hosts);
        }
    }
}

/// The span of an `updated` `upstream` sent of its `uri` (nothing when traces are off), naming
/// the URI (namespaced) only when the operator opted in.
fn updated_span(upstream: &str, uri: &str) -> Span {
    let span = crate::telemetry::updated_span(upstream);
    if span.is_recorded()
        && let Some(namespaced) = namespace::namespaced(upstream, uri)
    {
        span.note_uri(&namespaced);
    }
    span
}

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
pub(super) struct Debounce {
    window: Duration,
    first: Option<tokio::time::Instant>,
    deadline: Option<tokio::time::Instant>,
}

impl Debounce {
    pub(super) fn new(window: Duration) -> Self {
        Self { window, first: None, deadline: None }
    }

    /// Is a debounced event pending?
    #[cfg(test)]
    pub(super) fn is_due(&self) -> bool {
        self.deadline.is_some()
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
