//! The wiring behind [`Proxy::start`](super::Proxy::start): the handles more than one service
//! shares are made once ([`Shared`]), and each service, background task and reloader is given
//! exactly the ones it uses.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::Services;
use super::access::Access;
use super::events::{Changes, EventLoop, Housekeeping};
use super::lists::Lists;
use super::metered::Door;
use super::policies::Policies;
use super::read::{self, Reads};
use super::reload::{Reloader, ReloaderParts, longest_request};
use super::status::Status;
use super::subscriptions::Subscriptions;
use super::views::Views;
use crate::audit::Audit;
use crate::auth::subjects::Subjects;
use crate::catalog::Catalog;
use crate::cluster::Cluster;
use crate::cluster::keys::label;
use crate::cluster::peers::PeerClient;
use crate::coherence::shared::SharedTier;
use crate::coherence::{Coherence, UpstreamSubscriptions};
use crate::config::Config;
use crate::cursor::CursorKey;
use crate::fanout::{Delivery, Fanout};
use crate::metrics::{Metrics, NotificationKind};
use crate::rate_limits::RateLimits;
use crate::spine::Spine;
use crate::subscription_table::{Caps, SubscriberId};
use crate::tools::{Tools, ToolsParts};
use crate::upstream::{EventInbox, EventSender, Registry};

/// Hosts gone (their send task saw the transport closed) that may wait for the event loop.
const GONE_CAPACITY: usize = 256;

/// Make the services and start what runs in the background on `spine`.
pub(super) fn start(config: Config, spine: &Spine) -> Services {
    let shared = Shared::new(&config, spine);
    let policies = Policies {
        access: shared.access.clone(),
        subscriptions: shared.subscriptions.clone(),
        tools: shared.tools.clone(),
        views: shared.views.clone(),
        audit: shared.audit.clone(),
        dir: config.policies.dir.clone(),
    };
    let status = Status {
        catalog: shared.catalog.clone(),
        tools: shared.tools.clone(),
        upstreams: shared.upstreams.clone(),
        cache: shared.cache.clone(),
        cache_config: config.cache.clone(),
        upstream_subscriptions: shared.upstream_subscriptions.clone(),
        fanout: shared.fanout.clone(),
        last_reload: Arc::default(),
        access: shared.access.clone(),
        cluster: shared.cluster.clone(),
    };
    let reloader = Reloader::new(ReloaderParts {
        config: config.clone(),
        upstreams: shared.upstreams.clone(),
        catalog: shared.catalog.clone(),
        upstream_subscriptions: shared.upstream_subscriptions.clone(),
        events: shared.events.0.clone(),
        spine: spine.clone(),
        metrics: shared.metrics.clone(),
        changes: shared.changes(),
        tools: shared.tools.clone(),
        policies: policies.clone(),
        views: shared.views.clone(),
        last_reload: status.last_reload.clone(),
        rate_limits: shared.rate_limits.clone(),
        audit: shared.audit.clone(),
        subjects: shared.subjects.clone(),
    });
    for upstream in &config.upstreams {
        reloader.start_upstream(upstream.clone());
    }
    policies.watch(spine);
    shared.services(config, spine, status, reloader)
}

/// The handles more than one service shares, made once by [`Shared::new`].
struct Shared {
    metrics: Metrics,
    /// The principals' latest JWTs: the authenticator keeps them, `token_exchange` upstreams
    /// exchange them.
    subjects: Subjects,
    audit: Audit,
    upstreams: Registry,
    catalog: Catalog,
    cursor_key: CursorKey,
    fanout: Fanout,
    upstream_subscriptions: Arc<UpstreamSubscriptions>,
    cache: Coherence,
    /// The cache's own subscriber id in the upstream subscriptions.
    cache_subscriber: SubscriberId,
    access: Access,
    views: Views,
    tools: Tools,
    subscriptions: Subscriptions,
    /// Token buckets per principal and per principal × upstream.
    rate_limits: RateLimits,
    /// Where supervisors send their events, and where the event loop takes them.
    events: (EventSender, EventInbox),
    /// Hosts gone, for the event loop.
    gone: mpsc::Receiver<SubscriberId>,
    /// `[cluster]`: this replica's place in it (keys, Redis).
    cluster: Option<Cluster>,
}

impl Shared {
    /// Make the shared handles; nothing runs yet.
    fn new(config: &Config, spine: &Spine) -> Shared {
        let metrics = Metrics::new();
        let audit = Audit::start(&config.audit, metrics.clone(), spine);
        let upstreams = Registry::default();
        let catalog = Catalog::new();
        let events = crate::upstream::events::channel(config.server.event_queue);
        let (gone_tx, gone) = mpsc::channel(GONE_CAPACITY);
        let fanout = Fanout::new(gone_tx, spine.clone());
        fanout.set_delivery_hook(delivery_metrics(metrics.clone()));
        let upstream_subscriptions = Arc::new(UpstreamSubscriptions::new(upstreams.clone()));
        let cache_subscriber = fanout.next_subscriber_id();
        let max_load = longest_request(config) + read::WATCH_WAIT;
        let cluster = config.cluster.as_ref().map(|cluster| {
            Cluster::new(cluster, metrics.clone()).expect("a validated [cluster] section makes a Redis client")
        });
        let tier = cluster.as_ref().map(|cluster| Arc::new(SharedTier::for_cluster(cluster, &metrics)));
        let cache = Coherence::new(
            config.cache.clone(),
            upstream_subscriptions.clone(),
            cache_subscriber,
            metrics.clone(),
            max_load,
            tier,
        );
        let access = Access::new(config.policies.set.clone(), upstreams.clone(), metrics.clone());
        let views = Views::new(catalog.clone(), access.clone(), fanout.clone());
        let cursor_key = match &cluster {
            Some(cluster) => CursorKey::shared(cluster.keys().derive(label::CURSOR)),
            None => CursorKey::random(),
        };
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
            cluster: cluster.clone(),
            state_key: cluster.as_ref().map(|cluster| cluster.keys().derive(label::REQUEST_STATE)),
            forwarder: cluster.as_ref().map(PeerClient::new),
        });
        let caps = Caps {
            per_subscriber: server.max_subscriptions_per_session,
            per_principal: server.max_subscriptions_per_principal,
        };
        let subscriptions = Subscriptions {
            access: access.clone(),
            fanout: fanout.clone(),
            upstream_subscriptions: upstream_subscriptions.clone(),
            views: views.clone(),
            tools: tools.clone(),
            caps,
        };
        let rate_limits = RateLimits::new(&config.rate_limits, &config.upstreams);
        Shared {
            rate_limits,
            subjects: Subjects::default(),
            metrics,
            audit,
            upstreams,
            catalog,
            cursor_key,
            fanout,
            upstream_subscriptions,
            cache,
            cache_subscriber,
            access,
            views,
            tools,
            subscriptions,
            events,
            gone,
            cluster,
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
            upstream_subscriptions: self.upstream_subscriptions.clone(),
            cache_subscriber: self.cache_subscriber,
            metrics: self.metrics.clone(),
            rate_limits: self.rate_limits.clone(),
        };
        housekeeping.spawn(spine);
        if let Some(cluster) = &self.cluster {
            cluster.start(spine);
            share_rate_limits(cluster, self.rate_limits.clone(), spine);
        }
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
        let door = Door {
            limits: self.rate_limits,
            access: self.access.clone(),
            tools: self.tools.clone(),
            metrics: self.metrics.clone(),
        };
        Services {
            door,
            subjects: self.subjects,
            config,
            metrics: self.metrics,
            audit: self.audit,
            spine: spine.clone(),
            upstreams: self.upstreams,
            access: self.access,
            lists,
            reads,
            subscriptions: self.subscriptions,
            tools: self.tools,
            status,
            reloader,
            cluster: self.cluster,
        }
    }
}

/// What the `rate-limits-share` loop waits for.
enum ShareEvent {
    /// The number of live replicas changed (or is first known).
    Replicas(usize),
    Shutdown,
}

/// `[cluster]`: the `rate-limits-share` task divides the rate limits among the live replicas,
/// again whenever their number changes.
fn share_rate_limits(cluster: &Cluster, limits: RateLimits, spine: &Spine) {
    let mut live = cluster.live_replicas();
    let shutdown = spine.shutdown();
    spine.spawn("rate-limits-share", async move {
        let mut event = ShareEvent::Replicas(*live.borrow_and_update());
        while let ShareEvent::Replicas(replicas) = event {
            limits.share_among(replicas);
            event = tokio::select! {
                changed = live.changed() => match changed {
                    Ok(()) => ShareEvent::Replicas(*live.borrow_and_update()),
                    Err(_) => ShareEvent::Shutdown,
                },
                _ = shutdown.cancelled() => ShareEvent::Shutdown,
            };
        }
    });
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

#[cfg(test)]
mod tests;
