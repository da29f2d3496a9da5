//! The subscriptions capability: hosts' notification outlets (legacy sessions, listen
//! streams), what they subscribe, and fan-out of `updated` to the subscribers that may see it.
//!
//! The life of an upstream `updated` (the event loop, `events`, calls [`Subscriptions::updated`]):
//! the cache has dropped the URI and everything under it → every subscriber of the URI (or of a
//! parent) that may see it is queued one `updated` — legacy sessions the URI itself, listen
//! streams the URI their filter named.
//!
//! On an upstream with sessions per principal or per host (`session`), a subscription is also made on
//! the subscriber's own upstream session (its principal's; a 2025 host session's own when per
//! host), and that session's `updated` reaches the subscribers on it only
//! ([`Subscriptions::session_updated`]): never another principal's (or host session's).
//!
//! When traces are on, the `updated` is a span (the event loop's) and each subscriber it is queued
//! for a delivery span under it ([`crate::telemetry::Span::delivered`]).
//!
//! Invariant: a subscriber hears only of URIs its principal may see under the policy in force when
//! the update is fanned out, and of a per-principal (per-host) upstream only what its own
//! session said.

use std::sync::Arc;

use super::access::Access;
use super::caller::Caller;
use super::views::Views;
use crate::coherence::UpstreamSubscriptions;
use crate::error::ProxyError;
use crate::fanout::{Fanout, Listing, Outgoing, Outlet, OutletInfo, OutletKind, Seen};
use crate::metrics::DenialAction;
use crate::namespace;
use crate::policy::PolicySet;
use crate::subscription_table::{Caps, OverCap, SubscriberId};
use crate::telemetry::{Span, Subscriber};
use crate::tools::Tools;
use crate::upstream::HostSession;

/// The subscriptions service, with what it uses. A cheap `Clone` handle.
#[derive(Clone)]
pub(crate) struct Subscriptions {
    /// Decides and routes the URIs hosts name; the policy updates are fanned out under.
    pub(super) access: Access,
    pub(super) fanout: Fanout,
    /// Every subscriber's subscriptions (and the cache's).
    pub(super) upstream_subscriptions: Arc<UpstreamSubscriptions>,
    /// What a registering host sees now.
    pub(super) views: Views,
    /// What it sees of the tools and prompts.
    pub(super) tools: Tools,
    /// `server.max_subscriptions_per_session` and `server.max_subscriptions_per_principal`.
    pub(super) caps: Caps,
}

impl Subscriptions {
    /// Register a host's notification outlet (a legacy session or a listen stream).
    pub(crate) fn register_outlet(&self, info: OutletInfo, outlet: Arc<dyn Outlet>) -> SubscriberId {
        // What the host sees now: it hears a list's `list_changed` only once that changes.
        let seen = Seen::of(&info, |listing| match listing {
            Listing::Resources => self.views.view_of(&info.principal),
            listing => self.tools.view_now(&info.principal, listing),
        });
        // `[cluster]`: its sessions another replica owns tell this one of their own lists.
        self.tools.watch_own_lists(&info.principal, info.host_key.get().copied());
        self.fanout.register(info, seen, outlet)
    }

    /// `subscriber` is gone: drop its outlet and everything it subscribed.
    pub(crate) fn deregister(&self, subscriber: SubscriberId) {
        self.fanout.deregister(subscriber);
        self.upstream_subscriptions.unsubscribe_all(subscriber);
    }

    /// Does `subscriber` subscribe anything?
    pub(crate) fn subscribes_anything(&self, subscriber: SubscriberId) -> bool {
        self.upstream_subscriptions.subscribes_anything(subscriber)
    }

    /// `subscriber` subscribes to a namespaced URI, within `server.max_subscriptions_per_session`
    /// for it and `server.max_subscriptions_per_principal` for all of its principal's. Unknown
    /// and forbidden URIs are not found (whatever the caps). `host`: the 2025 host session it
    /// comes on, if any (a per-host upstream subscribes it on that host session's own session).
    pub(crate) fn subscribe(
        &self,
        caller: &Caller,
        subscriber: SubscriberId,
        uri: &str,
        host: Option<HostSession>,
    ) -> Result<(), ProxyError> {
        let route = self.access.route(caller, uri, DenialAction::Subscribe)?;
        let subscribed = self.upstream_subscriptions.subscribe_within(
            subscriber,
            caller.principal(),
            &route.upstream,
            &route.original,
            self.caps,
        );
        subscribed.map_err(|over| match over {
            OverCap::Subscriber(limit) => ProxyError::SubscriptionLimit {
                subscriber: "this session",
                limit,
                setting: "server.max_subscriptions_per_session",
            },
            OverCap::Principal(limit) => ProxyError::SubscriptionLimit {
                subscriber: "this principal",
                limit,
                setting: "server.max_subscriptions_per_principal",
            },
        })?;
        let Some(upstream) = self.access.upstream(&route.upstream) else { return Ok(()) };
        if let Err(error) =
            upstream.session_subscribe(caller.principal(), host, subscriber, &route.original, caller.subject())
        {
            self.upstream_subscriptions.unsubscribe(subscriber, &route.upstream, &route.original);
            return Err(error);
        }
        Ok(())
    }

    /// `[cluster]`, on the replica owning `principal`'s session of `upstream`: subscribe `uri` (the
    /// upstream's own) there for another replica, which asked with `resources/subscribe` on
    /// its connection to this one's session endpoint. Changes the session says of it go to
    /// the returned subscription's queue (the subscriber registered for it may see what its principal may);
    /// dropping the subscription lets go of it.
    pub(crate) async fn subscribe_for_replica(
        &self,
        of: crate::cluster::peers::SessionOf<'_>,
        uri: &str,
    ) -> Result<ReplicaSubscription, ProxyError> {
        let (principal, upstream) = (of.principal, of.upstream);
        let found = self
            .access
            .upstream(upstream)
            .ok_or_else(|| ProxyError::UpstreamDown { upstream: upstream.to_string(), cause: None })?;
        let host = of.host;
        let (changes_in, changes) = tokio::sync::mpsc::channel(REPLICA_SUBSCRIPTION_QUEUE);
        let info = OutletInfo {
            principal: principal.to_string(),
            kind: OutletKind::Session,
            wants_list_changed: false,
            wants_tools_list_changed: false,
            wants_prompts_list_changed: false,
            host_key: Default::default(),
        };
        let subscriber = self.fanout.register(info, Seen::default(), Arc::new(ReplicaOutlet(changes_in)));
        let release = EndReplicaSubscription { subscriptions: self.clone(), upstream: found.clone(), subscriber };
        found.subscribe_for_replica(principal, host, subscriber, uri)?;
        // Answered once the upstream answered (or not in time: subscribed, and told when it is).
        if found.wait_for_replica(principal, host, uri, REPLICA_SUBSCRIPTION_WAIT).await
            == crate::upstream::SubscribeOutcome::Refused
        {
            return Err(ProxyError::InvalidParams("the upstream refused the subscription".into()));
        }
        Ok(ReplicaSubscription { changes, _release: release })
    }

    /// How many more URIs `caller`'s hosts may subscribe, across all their sessions and
    /// listen streams.
    pub(crate) fn room(&self, caller: &Caller) -> usize {
        self.caps.per_principal.saturating_sub(self.upstream_subscriptions.principal_subscriptions(caller.principal()))
    }

    /// `subscriber` lets go of a namespaced URI (a no-op when it did not subscribe it).
    pub(crate) fn unsubscribe(&self, caller: &Caller, subscriber: SubscriberId, uri: &str) -> Result<(), ProxyError> {
        let route = self.access.route(caller, uri, DenialAction::Subscribe)?;
        self.upstream_subscriptions.unsubscribe(subscriber, &route.upstream, &route.original);
        Ok(())
    }

    /// The URI a subscription of `uri` by `caller` is kept under: the namespaced URI as it routes
    /// (normalised), the one [`Self::subscribe`] and [`Self::unsubscribe`] key by and fan-out
    /// names, so every spelling of a URI is one subscription. Unknown and forbidden URIs are not
    /// found, as they are to `subscribe` and `unsubscribe`.
    pub(crate) fn subscription_uri(&self, caller: &Caller, uri: &str) -> Result<String, ProxyError> {
        let route = self.access.route(caller, uri, DenialAction::Subscribe)?;
        namespace::namespaced(&route.upstream, &route.original).ok_or_else(|| ProxyError::not_found(uri))
    }

    /// The subset of `uris` that the caller may subscribe to: known namespaces, allowed.
    pub(crate) fn subscribable(&self, caller: &Caller, uris: &[String]) -> Vec<String> {
        let routable = |uri: &&String| self.access.route(caller, uri, DenialAction::Subscribe).is_ok();
        uris.iter().filter(routable).cloned().collect()
    }

    /// Drop every subscription `policy` forbids to its subscriber's principal.
    pub(crate) fn drop_forbidden(&self, policy: &PolicySet) {
        for (subscriber, info) in self.fanout.outlets() {
            let caller = Caller::new(&info.principal, policy.clone());
            for (upstream, original) in self.upstream_subscriptions.subscribed_by(subscriber) {
                let Some(namespaced) = namespace::namespaced(&upstream, &original) else { continue };
                if !caller.may_see(&namespaced) {
                    tracing::info!(principal = %info.principal, uri = %namespaced, "subscription no longer allowed; dropped");
                    self.upstream_subscriptions.unsubscribe(subscriber, &upstream, &original);
                }
            }
        }
    }

    /// Tell every subscriber of `uri` (or of a parent of it) that it changed. Legacy sessions hear
    /// the URI itself; listen streams hear the URI they asked for, since their filter is exact.
    /// Either way only when the subscriber's principal may see `uri` itself: a change of a denied
    /// sub-resource is not news to a subscriber of its parent (it would reveal that it exists).
    /// Each subscriber queued is a delivery span under `span` (the `updated`'s, when traced).
    pub(crate) fn updated(&self, upstream: &str, uri: &str, span: &Span) {
        self.session_updated(upstream, uri, self.upstream_subscriptions.subscribers_of_update(upstream, uri), span);
    }

    /// Tell each of `subscribers` (with the URIs it subscribes that matched) of the change of `uri`,
    /// as [`Self::updated`] says: also what a per-principal or per-host session of `upstream` said
    /// of `uri`, which its `subscribers` (those that subscribe it, or a parent of it, on that
    /// session) hear, and nobody else.
    pub(crate) fn session_updated(
        &self,
        upstream: &str,
        uri: &str,
        subscribers: impl IntoIterator<Item = (SubscriberId, Vec<String>)>,
        span: &Span,
    ) {
        let policy = self.access.policy();
        let Some(changed) = namespace::namespaced(upstream, uri) else { return };
        for (subscriber, subscribed) in subscribers {
            let Some(info) = self.fanout.info(subscriber) else { continue };
            let caller = Caller::new(&info.principal, policy.clone());
            if !caller.may_see(&changed) {
                continue;
            }
            let uris = match info.kind {
                OutletKind::Session => vec![uri.to_string()],
                OutletKind::ListenStream => subscribed,
            };
            self.deliver_updates(
                Subscriber { id: subscriber, kind: subscriber_kind(info.kind) },
                &caller,
                upstream,
                uris,
                span,
            );
        }
    }

    /// Anything of `upstream` may have changed: every subscriber hears `updated` for each URI of it
    /// that it subscribes and may see.
    pub(crate) fn all_updated(&self, upstream: &str) {
        let policy = self.access.policy();
        for (subscriber, subscribed) in self.upstream_subscriptions.subscribers_in(upstream) {
            let Some(info) = self.fanout.info(subscriber) else { continue };
            let caller = Caller::new(&info.principal, policy.clone());
            let subscriber = Subscriber { id: subscriber, kind: subscriber_kind(info.kind) };
            self.deliver_updates(subscriber, &caller, upstream, subscribed, &Span::default());
        }
    }

    /// Queue `updated` of each of `uris` that `caller` may see for `subscriber`; each one queued
    /// (or dropped) is a delivery span under `span`.
    fn deliver_updates(&self, subscriber: Subscriber, caller: &Caller, upstream: &str, uris: Vec<String>, span: &Span) {
        for original in uris {
            let Some(namespaced) = namespace::namespaced(upstream, &original) else { continue };
            if !caller.may_see(&namespaced) {
                continue;
            }
            if span.is_recorded() {
                let queued = self.fanout.deliver(subscriber.id, Outgoing::Updated(namespaced.clone()));
                span.delivered(subscriber, &namespaced, queued);
            } else {
                self.fanout.deliver(subscriber.id, Outgoing::Updated(namespaced));
            }
        }
    }
}

/// A subscriber's kind as a delivery span names it.
fn subscriber_kind(kind: OutletKind) -> &'static str {
    match kind {
        OutletKind::Session => "session",
        OutletKind::ListenStream => "listen_stream",
    }
}

/// Changes queued for a [`ReplicaSubscription`]; a change that finds it full is dropped (the changes
/// queued already tell the other replica that the subscribed URI changed).
const REPLICA_SUBSCRIPTION_QUEUE: usize = 64;
/// How long a subscription for another replica waits for the upstream's acknowledgement.
const REPLICA_SUBSCRIPTION_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A subscription one replica holds on this one's upstream session (for its own subscriber).
pub(crate) struct ReplicaSubscription {
    /// The upstream's own URIs the session said changed.
    pub(crate) changes: tokio::sync::mpsc::Receiver<String>,
    _release: EndReplicaSubscription,
}

struct EndReplicaSubscription {
    subscriptions: Subscriptions,
    upstream: crate::upstream::Upstream,
    subscriber: SubscriberId,
}

impl Drop for EndReplicaSubscription {
    fn drop(&mut self) {
        self.upstream.session_unsubscribe(self.subscriber, None);
        self.subscriptions.deregister(self.subscriber);
    }
}

/// The outlet of a [`ReplicaSubscription`]: each `updated` becomes the upstream URI it names.
struct ReplicaOutlet(tokio::sync::mpsc::Sender<String>);

impl Outlet for ReplicaOutlet {
    fn send(&self, message: Outgoing) -> crate::fanout::SendFuture<'_> {
        if let Outgoing::Updated(namespaced) = message
            && let Some((_, original)) = namespace::split(&namespaced)
        {
            let _ = self.0.try_send(original.to_string());
        }
        Box::pin(async { Ok(()) })
    }
}
