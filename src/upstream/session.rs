//! One session of an upstream, per principal or per host session: a [`Connection`] of its own
//! (a stdio upstream: one child) for one principal's (host session's) requests, supervised as
//! `session:<upstream>`, with no catalog, status, gauges or events of its own: only its
//! `updated` goes on, to the subscribers of what changed on it ([`SessionSubscriptions`]); after a reconnect every
//! URI subscribed on it is reported as changed. Its own `tools/list_changed` (`prompts/…`) makes what
//! it lists its hosts' own. A session whose connection goes to the replica owning it
//! (`owners`) subscribes and lists there alike: what that replica's session says of a URI comes
//! back as `updated`, and what it lists as its own is asked there whenever it connects or says
//! its tools or prompts changed. A per-host session declares upstream only what its host declared;
//! each relays what it sends for a routed call to that call's host (its own relay book), and is
//! passed its hosts' `logging/setLevel` ([`Session::pass_log_level`]).
//!
//! Invariant: what a session says reaches only the subscribers on it and its own hosts.

#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.

use std::sync::{Arc, Mutex};

use rmcp::model::{LoggingLevel, SetLevelRequestParams};
use tokio_util::sync::CancellationToken;

use super::pool::SubscribedUris;
use super::role::Role;
use super::session_subscriptions::{SessionSubscription, SessionSubscriptions, host_session};
use super::supervisor::Supervisor;
use super::{Connection, EventSender, Link, Offered, UpstreamEvent, events};
use crate::protocol::Era;
use crate::spine::Spine;
use crate::subscription_table::SubscriberId;

/// A cheap `Clone` handle on one session: its connection (which it derefs to) and its own state.
#[derive(Clone)]
pub struct Session {
    own: Arc<Own>,
}

struct Own {
    connection: Connection,
    /// Its principal, and its host session when it is one's.
    principal: Arc<str>,
    host: Option<u64>,
    subscriptions: SessionSubscriptions,
    /// What it lists as its own since it said its tools or prompts changed (before: none).
    own_offerings: Mutex<Option<Arc<Offered>>>,
    /// The `logging/setLevel` it was sent last, on which connection.
    log_level: Mutex<Option<(u64, LoggingLevel)>>,
}

impl std::ops::Deref for Session {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.own.connection
    }
}

impl Session {
    /// A session of `principal` (host session `host`'s) on `connection`, not made yet.
    pub(super) fn new(connection: Connection, principal: Arc<str>, host: Option<u64>) -> Self {
        let (subscriptions, own_offerings, log_level) = Default::default();
        Self { own: Arc::new(Own { connection, principal, host, subscriptions, own_offerings, log_level }) }
    }

    /// Start its supervisor on `spine` (`session:<upstream>`) until `stop`, its updates to `events`
    /// (its upstream's). `resumed`: it took over a reclaimed one's subscriptions: it connects as if again.
    pub(super) fn spawn(&self, spine: &Spine, stop: CancellationToken, events: Option<EventSender>, resumed: bool) {
        let events = events.unwrap_or_else(|| events::channel(1).0);
        let supervisor = Supervisor::new(self.clone(), events, stop, spine.clone()).resuming(resumed);
        spine.spawn(format!("session:{}", self.name()), supervisor.run());
    }

    /// Whose session it is.
    pub(super) fn principal(&self) -> &str {
        &self.own.principal
    }

    /// The host session it is for, when it is one's (its key).
    pub(super) fn host(&self) -> Option<u64> {
        self.own.host
    }

    pub(super) fn subscriptions(&self) -> &SessionSubscriptions {
        &self.own.subscriptions
    }

    /// What it lists as its own tools and prompts, once it said they changed.
    pub(super) fn own_offerings(&self) -> Option<Arc<Offered>> {
        self.own.own_offerings.lock().expect("offerings lock").clone()
    }

    /// What it lists as its own tools and prompts from now on: `now` (it said they changed), or
    /// none (it is closing: its hosts list the shared connection's again). The event telling
    /// its hosts which lists changed, when any did.
    pub(super) fn own_offerings_now(&self, now: Option<Offered>) -> Option<UpstreamEvent> {
        let now = now.map(Arc::new);
        let before = std::mem::replace(&mut *self.own.own_offerings.lock().expect("offerings lock"), now.clone());
        let (tools, prompts) = match (before.as_deref(), now.as_deref()) {
            (Some(before), Some(now)) => (before.tools != now.tools, before.prompts != now.prompts),
            (None, None) => (false, false),
            _ => (true, true),
        };
        let (upstream, principal, host) = (self.name().to_string(), self.own.principal.clone(), self.own.host);
        let changed = UpstreamEvent::SessionOfferingsChanged { upstream, principal, host, tools, prompts };
        (tools || prompts).then_some(changed)
    }

    /// Before a host's call or prompt on it: the host's `logging/setLevel` (`level`), when it
    /// set one, is passed on to a 2025 upstream that declared `logging`, once per connection and
    /// level. A per-host session is told its host's level; a per-principal one only a level more
    /// verbose than it was told (each host's own filter still applies to what it is relayed, so
    /// none gets fewer messages than it asked for).
    pub async fn pass_log_level(&self, level: Option<LoggingLevel>) {
        let Some(level) = level else { return };
        let Ok(link) = self.link() else { return };
        if link.era != Era::Legacy || link.capabilities.logging.is_none() {
            return;
        }
        let per_host = self.inner.declared.is_some();
        let connection = self.connection();
        {
            let mut told = self.own.log_level.lock().expect("log level lock");
            let tell = match *told {
                Some((on, before)) if on == connection => match per_host {
                    true => before != level,
                    // Lower is more verbose: the spec lists the levels in RFC 5424's order.
                    false => (level as u8) < (before as u8),
                },
                _ => true,
            };
            if !tell {
                return;
            }
            *told = Some((connection, level));
        }
        let set = link.peer.set_level(SetLevelRequestParams::new(level));
        if !matches!(tokio::time::timeout(self.inner.config.request_timeout, set).await, Ok(Ok(()))) {
            tracing::debug!(upstream = self.name(), "the upstream session did not take logging/setLevel");
        }
    }

    /// Wait (at most the request timeout) until the upstream answered the subscription of every
    /// URI subscribed on it: a request goes after what its subscribers subscribed before it (a host that
    /// subscribes, then calls a tool that changes it, hears of the change).
    pub(super) async fn subscriptions_settled(&self) {
        let offered = self.link().is_ok_and(|link| {
            link.capabilities.resources.as_ref().is_some_and(|resources| resources.subscribe == Some(true))
        });
        if !offered || !self.own.subscriptions.subscribes_anything() {
            return;
        }
        let (mut watched, mut applied) = (self.inner.watched.subscribe(), self.inner.applied.subscribe());
        let settled = async {
            loop {
                let answered = {
                    let (watched, applied) = (watched.borrow_and_update(), applied.borrow_and_update());
                    watched.iter().all(|uri| applied.acknowledged.contains(uri) || applied.refused.contains(uri))
                };
                if answered {
                    return;
                }
                tokio::select! {
                    changed = watched.changed() => if changed.is_err() { return },
                    changed = applied.changed() => if changed.is_err() { return },
                }
            }
        };
        if tokio::time::timeout(self.inner.config.request_timeout, settled).await.is_err() {
            tracing::debug!(
                upstream = self.name(),
                "session's subscriptions not answered in time; the request goes on"
            );
        }
    }

    /// What it sends on its own goes with a token exchanged for `subject` from now on, if given.
    pub(super) fn stand_for(&self, subject: Option<&crate::host::SubjectToken>) {
        if let (Some(credentials), Some(subject)) = (self.inner.credentials.as_ref(), subject) {
            credentials.stand_for(subject);
        }
    }

    /// Subscribe `subscribed` (what a reclaimed session of the same key subscribed) before it connects.
    pub(super) fn subscribe_waiting(&self, subscribed: SubscribedUris) {
        subscribed.keys().for_each(|uri| self.set_subscribed(uri, true));
        self.own.subscriptions.restore(subscribed);
    }
}

impl Role for Session {
    fn supervised(&self) -> &Connection {
        &self.own.connection
    }

    /// Of its events only updates go on, to the subscribers of what changed on it (none: dropped).
    fn emit(&self, events: &EventSender, event: UpstreamEvent) {
        let UpstreamEvent::ResourceUpdated { upstream, uri, change } = event else { return };
        // Its reads are never cached, and nobody subscribed a resubscribed URI: nothing to do.
        if change == super::Change::Resubscribed {
            return;
        }
        // A session at its owner's: the owner counted (and traced) what it heard.
        let heard = change == super::Change::Heard && self.owner().is_none();
        // Held as normalised URIs; the upstream may spell them its own way.
        let uri = crate::namespace::namespaced(&upstream, &uri)
            .and_then(|namespaced| crate::uri::normalize(&namespaced).ok())
            .and_then(|normalized| crate::namespace::split(&normalized).map(|(_, original)| original.to_string()))
            .unwrap_or(uri);
        let subscribers: Vec<_> = self.own.subscriptions.subscribers_of(&uri).into_iter().collect();
        if !subscribers.is_empty() {
            events.send(UpstreamEvent::SessionUpdated { upstream, uri, heard, subscribers });
        }
    }

    /// Its subscribers hear of everything they subscribe on it, nobody else of anything.
    fn lost_everything(&self, events: &EventSender) {
        for (uri, subscribers) in self.own.subscriptions.snapshot() {
            for subscriber in subscribers {
                let (upstream, subscribers) = (self.name().to_string(), vec![(subscriber, vec![uri.clone()])]);
                events.send(UpstreamEvent::SessionUpdated { upstream, uri: uri.clone(), heard: false, subscribers });
            }
        }
    }

    /// Its own from now on, for its own hosts. A session at its owner's lists what that
    /// session lists there as its own (none: the shared connection's lists are its lists).
    async fn refetch_offerings(&self, link: &Link, events: &EventSender) {
        let offered = match self.owner() {
            Some(_) => match self.own_lists_at_owner(link).await {
                Ok(own) => own,
                Err(error) => {
                    tracing::debug!(upstream = self.name(), error = %error, "the owner did not say a session's own lists");
                    return;
                }
            },
            None => match self.fetch_offerings(link).await {
                Some(offered) => Some(offered),
                None => return,
            },
        };
        if let Some(changed) = self.own_offerings_now(offered) {
            events.send(changed);
        }
    }

    /// A session at its owner's asks what that session lists as its own whenever it connects
    /// (it may have changed meanwhile, or before this replica asked).
    async fn listed_at_up(&self, link: &Link, events: &EventSender) {
        if self.owner().is_some() {
            self.refetch_offerings(link, events).await;
        }
    }
}

impl Session {
    /// `subscriber` subscribes `uri` here; the session subscribes it upstream if nobody did.
    pub(super) fn subscribe(&self, subscriber: SubscriberId, uri: &str) {
        if self.subscriptions().subscribe(subscriber, uri) {
            self.set_subscribed(uri, true);
        }
    }

    /// `subscriber` lets go of `uri` here (of everything when `None`); the session unsubscribes
    /// upstream what nobody subscribes now.
    pub(super) fn unsubscribe(&self, subscriber: SubscriberId, uri: Option<&str>) {
        for uri in self.subscriptions().unsubscribe(subscriber, uri) {
            self.set_subscribed(&uri, false);
        }
    }

    /// `subscribed` (this session's, or taken off it) as its subscriptions.
    pub(super) fn subscribed(&self, subscribed: SubscribedUris) -> impl Iterator<Item = SessionSubscription> + use<> {
        SessionSubscription::each(self.principal(), host_session(self.host(), self.inner.declared), subscribed)
    }
}
