//! The subscriptions capability: hosts' notification outlets (legacy sessions, listen
//! streams), what they hold, and fan-out of `updated` to the holders that may see it.
//!
//! The life of an upstream `updated` (the event loop, `events`, calls [`Subscriptions::updated`]):
//! the cache has dropped the URI and everything under it → every holder of the URI (or of a
//! parent) that may see it is queued one `updated` — legacy sessions the URI itself, listen
//! streams the URI their filter named.
//!
//! On an upstream with sessions per principal or per host (`session`), a hold is also made on
//! the holder's own upstream session (its principal's; a 2025 host session's own when per
//! host), and that session's `updated` reaches the holders on it only
//! ([`Subscriptions::session_updated`]): never another principal's (or host session's).
//!
//! When traces are on, the `updated` is a span (the event loop's) and each holder it is queued
//! for a delivery span under it ([`crate::telemetry::Span::delivered`]).
//!
//! Invariant: a holder hears only of URIs its principal may see under the policy in force when
//! the update is fanned out, and of a per-principal (per-host) upstream only what its own
//! session said.

use std::sync::Arc;

use super::access::Access;
use super::caller::Caller;
use super::views::Views;
use crate::coherence::WatchBook;
use crate::error::ProxyError;
use crate::fanout::{Fanout, Listing, Outgoing, Outlet, OutletInfo, OutletKind, Seen};
use crate::metrics::DenialAction;
use crate::namespace;
use crate::policy::PolicySet;
use crate::subscriptions::{Caps, HolderId, OverCap};
use crate::telemetry::{Holder, Span};
use crate::tools::Tools;
use crate::upstream::HostSession;

/// The subscriptions service, with what it uses. A cheap `Clone` handle.
#[derive(Clone)]
pub(crate) struct Subscriptions {
    /// Decides and routes the URIs hosts name; the policy updates are fanned out under.
    pub(super) access: Access,
    pub(super) fanout: Fanout,
    /// Every holder's subscriptions (and the cache's).
    pub(super) watches: Arc<WatchBook>,
    /// What a registering host sees now.
    pub(super) views: Views,
    /// What it sees of the tools and prompts.
    pub(super) tools: Tools,
    /// `server.max_subscriptions_per_session` and `server.max_subscriptions_per_principal`.
    pub(super) caps: Caps,
}

impl Subscriptions {
    /// Register a host's notification outlet (a legacy session or a listen stream).
    pub(crate) fn register_outlet(&self, info: OutletInfo, outlet: Arc<dyn Outlet>) -> HolderId {
        // What the host sees now: it hears a list's `list_changed` only once that changes.
        let seen = Seen::of(&info, |listing| match listing {
            Listing::Resources => self.views.view_of(&info.principal),
            listing => self.tools.view_now(&info.principal, listing),
        });
        // `[cluster]`: its sessions another replica holds tell this one of their own lists.
        self.tools.watch_own_lists(&info.principal, info.host_key.get().copied());
        self.fanout.register(info, seen, outlet)
    }

    /// `holder` is gone: drop its outlet and everything it held.
    pub(crate) fn release(&self, holder: HolderId) {
        self.fanout.deregister(holder);
        self.watches.release_all(holder);
    }

    /// Does `holder` hold any subscription?
    pub(crate) fn holds_anything(&self, holder: HolderId) -> bool {
        self.watches.holds_anything(holder)
    }

    /// `holder` subscribes to a namespaced URI, within `server.max_subscriptions_per_session`
    /// for it and `server.max_subscriptions_per_principal` for all of its principal's. Unknown
    /// and forbidden URIs are not found (whatever the caps). `host`: the 2025 host session it
    /// comes on, if any (a per-host upstream holds it on that host session's own session).
    pub(crate) fn subscribe(
        &self,
        caller: &Caller,
        holder: HolderId,
        uri: &str,
        host: Option<HostSession>,
    ) -> Result<(), ProxyError> {
        let route = self.access.route(caller, uri, DenialAction::Subscribe)?;
        let held = self.watches.hold_within(holder, caller.principal(), &route.upstream, &route.original, self.caps);
        held.map_err(|over| match over {
            OverCap::Holder(limit) => ProxyError::SubscriptionLimit {
                holder: "this session",
                limit,
                setting: "server.max_subscriptions_per_session",
            },
            OverCap::Principal(limit) => ProxyError::SubscriptionLimit {
                holder: "this principal",
                limit,
                setting: "server.max_subscriptions_per_principal",
            },
        })?;
        let Some(upstream) = self.access.upstream(&route.upstream) else { return Ok(()) };
        if let Err(error) = upstream.session_hold(caller.principal(), host, holder, &route.original, caller.subject()) {
            self.watches.release(holder, &route.upstream, &route.original);
            return Err(error);
        }
        Ok(())
    }

    /// `[cluster]`, on the replica holding `principal`'s session of `upstream`: hold `uri` (the
    /// upstream's own) there for another replica, which asked with `resources/subscribe` on
    /// its connection to this one's session endpoint. Changes the session says of it go to
    /// the returned hold's queue (the holder registered for it may see what its principal may);
    /// dropping the hold lets go of it.
    pub(crate) async fn hold_for_replica(
        &self,
        of: crate::cluster::peers::SessionOf<'_>,
        uri: &str,
    ) -> Result<ReplicaHold, ProxyError> {
        let (principal, upstream) = (of.principal, of.upstream);
        let found = self
            .access
            .upstream(upstream)
            .ok_or_else(|| ProxyError::UpstreamDown { upstream: upstream.to_string(), cause: None })?;
        let host = of.host.map(HostSession::from);
        let (changes_in, changes) = tokio::sync::mpsc::channel(REPLICA_HOLD_QUEUE);
        let info = OutletInfo {
            principal: principal.to_string(),
            kind: OutletKind::Session,
            wants_list_changed: false,
            wants_tools_list_changed: false,
            wants_prompts_list_changed: false,
            host_key: Default::default(),
        };
        let holder = self.fanout.register(info, Seen::default(), Arc::new(ReplicaOutlet(changes_in)));
        let release = ReleaseReplicaHold { subscriptions: self.clone(), upstream: found.clone(), holder };
        found.hold_for_replica(principal, host, holder, uri)?;
        // Answered once the upstream answered (or not in time: held, and told when it is).
        if found.wait_for_replica(principal, host, uri, REPLICA_HOLD_WAIT).await == crate::upstream::Watching::Refused {
            return Err(ProxyError::InvalidParams("the upstream refused the subscription".into()));
        }
        Ok(ReplicaHold { changes, _release: release })
    }

    /// What a per-principal or per-host session of `upstream` said of `uri`: its `holders`
    /// (those that hold it, or a parent of it, on that session) hear it, as for
    /// [`Self::updated`]; nobody else does.
    pub(crate) fn session_updated(
        &self,
        upstream: &str,
        uri: &str,
        holders: Vec<(HolderId, Vec<String>)>,
        span: &Span,
    ) {
        self.tell_holders(upstream, uri, holders, span);
    }

    /// How many more URIs `caller`'s hosts may subscribe, across all their sessions and
    /// listen streams.
    pub(crate) fn room(&self, caller: &Caller) -> usize {
        self.caps.per_principal.saturating_sub(self.watches.principal_holds(caller.principal()))
    }

    /// `holder` lets go of a namespaced URI (a no-op when it did not hold it).
    pub(crate) fn unsubscribe(&self, caller: &Caller, holder: HolderId, uri: &str) -> Result<(), ProxyError> {
        let route = self.access.route(caller, uri, DenialAction::Subscribe)?;
        self.watches.release(holder, &route.upstream, &route.original);
        Ok(())
    }

    /// The subset of `uris` that the caller may subscribe to: known namespaces, allowed.
    pub(crate) fn subscribable(&self, caller: &Caller, uris: &[String]) -> Vec<String> {
        let routable = |uri: &&String| self.access.route(caller, uri, DenialAction::Subscribe).is_ok();
        uris.iter().filter(routable).cloned().collect()
    }

    /// Drop every subscription `policy` forbids to its holder's principal.
    pub(crate) fn drop_forbidden(&self, policy: &PolicySet) {
        for (holder, info) in self.fanout.outlets() {
            let caller = Caller::new(&info.principal, policy.clone());
            for (upstream, original) in self.watches.held_by(holder) {
                let Some(namespaced) = namespace::namespaced(&upstream, &original) else { continue };
                if !caller.may_see(&namespaced) {
                    tracing::info!(principal = %info.principal, uri = %namespaced, "subscription no longer allowed; dropped");
                    self.watches.release(holder, &upstream, &original);
                }
            }
        }
    }

    /// Tell every holder of `uri` (or of a parent of it) that it changed. Legacy sessions hear
    /// the URI itself; listen streams hear the URI they asked for, since their filter is exact.
    /// Either way only when the holder's principal may see `uri` itself: a change of a denied
    /// sub-resource is not news to a holder of its parent (it would reveal that it exists).
    /// Each holder queued is a delivery span under `span` (the `updated`'s, when traced).
    pub(crate) fn updated(&self, upstream: &str, uri: &str, span: &Span) {
        self.tell_holders(upstream, uri, self.watches.holders_of_update(upstream, uri), span);
    }

    /// Tell each of `holders` (with the URIs it holds that matched) of the change of `uri`,
    /// as [`Self::updated`] says.
    fn tell_holders(
        &self,
        upstream: &str,
        uri: &str,
        holders: impl IntoIterator<Item = (HolderId, Vec<String>)>,
        span: &Span,
    ) {
        let policy = self.access.policy();
        let Some(changed) = namespace::namespaced(upstream, uri) else { return };
        for (holder, held) in holders {
            let Some(info) = self.fanout.info(holder) else { continue };
            let caller = Caller::new(&info.principal, policy.clone());
            if !caller.may_see(&changed) {
                continue;
            }
            let uris = match info.kind {
                OutletKind::Session => vec![uri.to_string()],
                OutletKind::ListenStream => held,
            };
            self.deliver_updates(Holder { id: holder, kind: holder_kind(info.kind) }, &caller, upstream, uris, span);
        }
    }

    /// Anything of `upstream` may have changed: every holder hears `updated` for each URI of it
    /// that it holds and may see.
    pub(crate) fn all_updated(&self, upstream: &str) {
        let policy = self.access.policy();
        for (holder, held) in self.watches.holders_in(upstream) {
            let Some(info) = self.fanout.info(holder) else { continue };
            let caller = Caller::new(&info.principal, policy.clone());
            let holder = Holder { id: holder, kind: holder_kind(info.kind) };
            self.deliver_updates(holder, &caller, upstream, held, &Span::default());
        }
    }

    /// Queue `updated` of each of `uris` that `caller` may see for `holder`; each one queued
    /// (or dropped) is a delivery span under `span`.
    fn deliver_updates(&self, holder: Holder, caller: &Caller, upstream: &str, uris: Vec<String>, span: &Span) {
        for original in uris {
            let Some(namespaced) = namespace::namespaced(upstream, &original) else { continue };
            if !caller.may_see(&namespaced) {
                continue;
            }
            if span.is_recorded() {
                let queued = self.fanout.deliver(holder.id, Outgoing::Updated(namespaced.clone()));
                span.delivered(holder, &namespaced, queued);
            } else {
                self.fanout.deliver(holder.id, Outgoing::Updated(namespaced));
            }
        }
    }
}

/// A holder's kind as a delivery span names it.
fn holder_kind(kind: OutletKind) -> &'static str {
    match kind {
        OutletKind::Session => "session",
        OutletKind::ListenStream => "listen_stream",
    }
}

/// Changes queued for a [`ReplicaHold`]; a change that finds it full is dropped (the changes
/// queued already tell the other replica that the held URI changed).
const REPLICA_HOLD_QUEUE: usize = 64;
/// How long a hold for another replica waits for the upstream's acknowledgement.
const REPLICA_HOLD_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A subscription held for another replica on this one's upstream session.
pub(crate) struct ReplicaHold {
    /// The upstream's own URIs the session said changed.
    pub(crate) changes: tokio::sync::mpsc::Receiver<String>,
    _release: ReleaseReplicaHold,
}

struct ReleaseReplicaHold {
    subscriptions: Subscriptions,
    upstream: crate::upstream::Upstream,
    holder: HolderId,
}

impl Drop for ReleaseReplicaHold {
    fn drop(&mut self) {
        self.upstream.session_release_all(self.holder);
        self.subscriptions.release(self.holder);
    }
}

/// The outlet of a [`ReplicaHold`]: each `updated` becomes the upstream URI it names.
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
