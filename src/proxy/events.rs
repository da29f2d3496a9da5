//! The proxy's own background tasks: the `event-loop` over what upstreams report
//! ([`Inbound`]) and hosts that went away, with debounced `list_changed`; and
//! `cache-housekeeping`, which lets the cache finish its bookkeeping and samples gauges on its
//! own tick, so the event loop never waits for it.
//!
//! Both are spawned on the spine and select on its shutdown. Ingress is bounded: upstream
//! events through [`crate::upstream::events`] (overflow coalesces per upstream), gone holders
//! through the fan-out's bounded channel (an ending send task waits for room).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Proxy;
use crate::metrics::{InvalidationCause, NotificationKind};
use crate::namespace;
use crate::subscriptions::HolderId;
use crate::upstream::{EventInbox, Inbound, Lost, UpstreamEvent};

/// How often the cache's bookkeeping runs and sampled gauges are refreshed.
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(1);

impl Proxy {
    pub(super) fn spawn_tasks(&self, events: EventInbox, gone: mpsc::Receiver<HolderId>) {
        let spine = &self.core.spine;
        spine.spawn("event-loop", self.clone().event_loop(events, gone, spine.shutdown()));
        spine.spawn("cache-housekeeping", self.clone().housekeeping(spine.shutdown()));
    }

    async fn event_loop(self, mut events: EventInbox, mut gone: mpsc::Receiver<HolderId>, shutdown: CancellationToken) {
        let mut list_changed = Debounce::new(self.core.config.server.list_changed_debounce);
        loop {
            tokio::select! {
                Some(inbound) = events.recv() => self.on_inbound(inbound, &mut list_changed),
                Some(holder) = gone.recv() => self.subscriptions().release(holder),
                _ = list_changed.fired() => {
                    let sent = self.core.announce_list_changes();
                    tracing::debug!(sent, "list_changed sent to hosts whose view changed");
                }
                _ = shutdown.cancelled() => return,
            }
        }
    }

    fn on_inbound(&self, inbound: Inbound, list_changed: &mut Debounce) {
        let event = match inbound {
            Inbound::Event(event) => event,
            Inbound::Overflowed(upstream, lost) => {
                self.overflowed(&upstream, lost);
                return list_changed.poke();
            }
        };
        self.tools.on_upstream_event(&event);
        match event {
            UpstreamEvent::ResourceUpdated { upstream, uri, heard } => {
                // Keys are normalised URIs; the upstream may spell them its own way.
                let normalized = normalized_original(&upstream, &uri);
                let dropped = self.core.cache.invalidate(&upstream, &normalized);
                // Unheard ones follow a reconnect, whose flush was counted already.
                if heard {
                    self.core.metrics.notification_received(&upstream, NotificationKind::Updated);
                    self.core.metrics.cache_invalidation(InvalidationCause::Updated, dropped as u64);
                }
                self.subscriptions().updated(&upstream, &normalized);
            }
            UpstreamEvent::Up { upstream, reconnected, .. } => {
                // Updates may have been missed while it was away.
                if reconnected {
                    let connection = self.core.upstreams.get(&upstream).map_or(0, |u| u.connection());
                    let dropped = self.core.cache.flush_upstream(&upstream, connection);
                    self.core.metrics.cache_invalidation(InvalidationCause::Reconnect, dropped);
                }
                list_changed.poke();
            }
            UpstreamEvent::CatalogChanged { upstream } => {
                self.core.metrics.notification_received(&upstream, NotificationKind::ListChanged);
                list_changed.poke();
            }
            UpstreamEvent::Down { .. } => list_changed.poke(),
            UpstreamEvent::OfferingsChanged { upstream, .. } => {
                self.core.metrics.notification_received(&upstream, NotificationKind::ListChanged);
            }
        }
    }

    /// Events of `upstream` were lost (ingress full): its cache entries go (whatever the lost
    /// events said), and holders hear `updated` for the lost URIs — for all they hold of it
    /// when those were not kept.
    fn overflowed(&self, upstream: &str, lost: Lost) {
        let Lost::Updated(uris) = lost else {
            tracing::warn!(upstream, "event queue full: events were dropped; holders of all its URIs are told updated");
            return self.everything_changed(upstream);
        };
        let lost = uris.len();
        tracing::warn!(upstream, lost, "event queue full: updated events were dropped; their holders are told updated");
        let dropped = self.core.cache.invalidate_upstream(upstream);
        self.core.metrics.cache_invalidation(InvalidationCause::Reconnect, dropped);
        for uri in uris {
            self.subscriptions().updated(upstream, &normalized_original(upstream, &uri));
        }
    }

    /// Anything of `upstream` may have changed (events lost past the bound, or it was replaced).
    /// Its cache entries go and every holder of its URIs hears `updated` (the caller has list
    /// views compared again).
    pub(super) fn everything_changed(&self, upstream: &str) {
        let dropped = self.core.cache.invalidate_upstream(upstream);
        self.core.metrics.cache_invalidation(InvalidationCause::Reconnect, dropped);
        self.subscriptions().all_updated(upstream);
    }

    async fn housekeeping(self, shutdown: CancellationToken) {
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
        // Let the cache finish its bookkeeping (evictions, expiries) even while nobody reads.
        self.core.cache.settle().await;
        let (entries, bytes) = self.core.cache.size();
        self.core.metrics.set_cache_size(entries, bytes);
        for (upstream, uris, hosts) in self.core.watches.per_upstream(self.core.cache_holder) {
            self.core.metrics.set_upstream_subscriptions(&upstream, uris);
            self.core.metrics.set_downstream_subscriptions(&upstream, hosts);
        }
    }
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

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::config::Config;
    use crate::fanout::tests::Recorder;
    use crate::fanout::{Outgoing, OutletInfo, OutletKind};
    use crate::spine::Spine;

    /// What the loop does with an overflowed upstream (its events were lost to a full queue):
    /// every holder of one of its URIs hears `updated` for each, holders of other upstreams
    /// hear nothing, and list views are compared again.
    #[tokio::test]
    async fn an_overflow_tells_every_holder_of_that_upstream() {
        let got = overflow_heard(Lost::Everything).await;
        assert_eq!(got, [Outgoing::Updated("a+x://1".into()), Outgoing::Updated("a+x://2/".into())]);
    }

    /// An overflow that kept the lost URIs tells holders `updated` for those alone.
    #[tokio::test]
    async fn an_overflow_with_its_uris_tells_only_their_holders() {
        let got = overflow_heard(Lost::Updated(["x://1".to_string()].into())).await;
        assert_eq!(got, [Outgoing::Updated("a+x://1".into())]);
    }

    /// What a holder of `a`'s `x://1` and `x://2/` and of `b`'s `x://3` hears for an overflow of
    /// `a` that lost `lost` (list views are compared again either way).
    async fn overflow_heard(lost: Lost) -> Vec<Outgoing> {
        let config = Config::from_toml("", Path::new("/"), &|_| None).expect("config");
        let spine = Spine::new();
        let proxy = Proxy::start(config, &spine);
        let (sent, mut heard) = mpsc::unbounded_channel();
        let info = OutletInfo {
            principal: "p".into(),
            kind: OutletKind::Session,
            wants_list_changed: false,
            wants_tools_list_changed: false,
            wants_prompts_list_changed: false,
        };
        let holder = proxy.register_outlet(info, Arc::new(Recorder(sent)));
        for (upstream, uri) in [("a", "x://1"), ("a", "x://2/"), ("b", "x://3")] {
            proxy.core.watches.hold(holder, upstream, uri);
        }
        let mut list_changed = Debounce::new(Duration::from_secs(3600));
        proxy.on_inbound(Inbound::Overflowed("a".into(), lost), &mut list_changed);
        assert!(list_changed.deadline.is_some(), "list views are compared again");
        proxy.core.fanout.deliver(holder, Outgoing::ListChanged);
        let mut got = Vec::new();
        while let Some(message) = tokio::time::timeout(Duration::from_secs(5), heard.recv()).await.unwrap() {
            if message == Outgoing::ListChanged {
                break;
            }
            got.push(message);
        }
        got.sort_by_key(|m| format!("{m:?}"));
        assert_eq!(spine.drain(Duration::from_secs(5)).await, Ok(()));
        got
    }
}
