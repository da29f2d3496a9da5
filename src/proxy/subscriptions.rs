//! The subscriptions capability: hosts' notification outlets (legacy sessions, listen
//! streams), what they hold, and fan-out of `updated` to the holders that may see it.
//!
//! The life of an upstream `updated` (the event loop, `events`, calls [`Subscriptions::updated`]):
//! the cache has dropped the URI and everything under it → every holder of the URI (or of a
//! parent) that may see it is queued one `updated` — legacy sessions the URI itself, listen
//! streams the URI their filter named.
//!
//! Invariant: a holder hears only of URIs its principal may see under the policy in force when
//! the update is fanned out.

use std::sync::Arc;

use super::caller::Caller;
use super::core::Core;
use crate::error::ProxyError;
use crate::fanout::{Outgoing, Outlet, OutletInfo, OutletKind};
use crate::metrics::DenialAction;
use crate::namespace;
use crate::policy::PolicySet;
use crate::subscriptions::{Caps, HolderId, OverCap};

/// The subscriptions service.
#[derive(Clone)]
pub struct Subscriptions {
    core: Arc<Core>,
}

impl Subscriptions {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        Self { core }
    }

    /// Register a host's notification outlet (a legacy session or a listen stream).
    pub fn register_outlet(&self, info: OutletInfo, outlet: Arc<dyn Outlet>) -> HolderId {
        // What the host sees now: it hears `list_changed` only once that changes.
        let view = if info.wants_list_changed { self.core.view_of(&info.principal) } else { 0 };
        self.core.fanout.register(info, view, outlet)
    }

    /// `holder` is gone: drop its outlet and everything it held.
    pub fn release(&self, holder: HolderId) {
        self.core.fanout.deregister(holder);
        self.core.watches.release_all(holder);
    }

    /// Does `holder` hold any subscription?
    pub fn holds_anything(&self, holder: HolderId) -> bool {
        self.core.watches.holds_anything(holder)
    }

    /// `holder` subscribes to a namespaced URI, within `server.max_subscriptions_per_session`
    /// for it and `server.max_subscriptions_per_principal` for all of its principal's. Unknown
    /// and forbidden URIs are not found (whatever the caps).
    pub fn subscribe(&self, caller: &Caller, holder: HolderId, uri: &str) -> Result<(), ProxyError> {
        let route = self.core.access.route(caller, uri, DenialAction::Subscribe)?;
        let server = &self.core.config.server;
        let caps = Caps {
            per_holder: server.max_subscriptions_per_session,
            per_principal: server.max_subscriptions_per_principal,
        };
        let held = self.core.watches.hold_within(holder, caller.principal(), &route.upstream, &route.original, caps);
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
        })
    }

    /// How many more URIs `caller`'s hosts may subscribe, across all their sessions and
    /// listen streams.
    pub fn room(&self, caller: &Caller) -> usize {
        let cap = self.core.config.server.max_subscriptions_per_principal;
        cap.saturating_sub(self.core.watches.principal_holds(caller.principal()))
    }

    /// `holder` lets go of a namespaced URI (a no-op when it did not hold it).
    pub fn unsubscribe(&self, caller: &Caller, holder: HolderId, uri: &str) -> Result<(), ProxyError> {
        let route = self.core.access.route(caller, uri, DenialAction::Subscribe)?;
        self.core.watches.release(holder, &route.upstream, &route.original);
        Ok(())
    }

    /// The subset of `uris` that the caller may subscribe to: known namespaces, allowed.
    pub fn subscribable(&self, caller: &Caller, uris: &[String]) -> Vec<String> {
        let routable = |uri: &&String| self.core.access.route(caller, uri, DenialAction::Subscribe).is_ok();
        uris.iter().filter(routable).cloned().collect()
    }

    /// Drop every subscription `policy` forbids to its holder's principal.
    pub(crate) fn drop_forbidden(&self, policy: &PolicySet) {
        for (holder, info) in self.core.fanout.outlets() {
            let caller = Caller::new(&info.principal, policy.clone());
            for (upstream, original) in self.core.watches.held_by(holder) {
                let Some(namespaced) = namespace::namespaced(&upstream, &original) else { continue };
                if !caller.may_see(&namespaced) {
                    tracing::info!(principal = %info.principal, uri = %namespaced, "subscription no longer allowed; dropped");
                    self.core.watches.release(holder, &upstream, &original);
                }
            }
        }
    }

    /// Tell every holder of `uri` (or of a parent of it) that it changed. Legacy sessions hear
    /// the URI itself; listen streams hear the URI they asked for, since their filter is exact.
    /// Either way only when the holder's principal may see `uri` itself: a change of a denied
    /// sub-resource is not news to a holder of its parent (it would reveal that it exists).
    pub(crate) fn updated(&self, upstream: &str, uri: &str) {
        let policy = self.core.access.policy();
        let Some(changed) = namespace::namespaced(upstream, uri) else { return };
        for (holder, held) in self.core.watches.holders_of_update(upstream, uri) {
            let Some(info) = self.core.fanout.info(holder) else { continue };
            let caller = Caller::new(&info.principal, policy.clone());
            if !caller.may_see(&changed) {
                continue;
            }
            let uris = match info.kind {
                OutletKind::Session => vec![uri.to_string()],
                OutletKind::ListenStream => held,
            };
            self.deliver_updates(holder, &caller, upstream, uris);
        }
    }

    /// Anything of `upstream` may have changed: every holder hears `updated` for each URI of it
    /// that it holds and may see.
    pub(crate) fn all_updated(&self, upstream: &str) {
        let policy = self.core.access.policy();
        for (holder, held) in self.core.watches.holders_in(upstream) {
            let Some(info) = self.core.fanout.info(holder) else { continue };
            let caller = Caller::new(&info.principal, policy.clone());
            self.deliver_updates(holder, &caller, upstream, held);
        }
    }

    fn deliver_updates(&self, holder: HolderId, caller: &Caller, upstream: &str, uris: Vec<String>) {
        for original in uris {
            let Some(namespaced) = namespace::namespaced(upstream, &original) else { continue };
            if caller.may_see(&namespaced) {
                self.core.fanout.deliver(holder, Outgoing::Updated(namespaced));
            }
        }
    }
}
