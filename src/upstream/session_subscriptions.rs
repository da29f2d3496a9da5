//! Subscriptions on an upstream's sessions ([`Upstream::session_subscribe`]): a 2025 host's goes
//! on its principal's session (per-host: its host session's), a listen stream's on its
//! principal's; never on the shared connection. Each session keeps its own
//! [`SessionSubscriptions`]; a session with one is not closed as idle. A reload makes every
//! [`SessionSubscription`] again on its successor's sessions ([`Upstream::subscribe_again`]).
//! With `[cluster]`, a subscription is made where its session lives: on the connection to the
//! replica holding it when that is another one (`owners`), which subscribes it there for this
//! one ([`Upstream::subscribe_for_replica`]).
//!
//! Invariant: a subscription is on its subscriber's principal's (host session's) session only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::client::Declared;
use super::pool::SubscribedUris;
use super::{HostSession, SubscribeOutcome, Upstream};
use crate::error::ProxyError;
use crate::host::SubjectToken;
use crate::subscription_table::{SubscriberId, is_same_or_parent};

/// One URI subscribed on a session, for `subscriber` of `principal` (on host session `host` when the
/// session is that host's).
pub struct SessionSubscription {
    pub(super) principal: Arc<str>,
    pub(super) host: Option<HostSession>,
    pub(super) subscriber: SubscriberId,
    pub(super) uri: String,
}

/// The subscriptions on one session: each URI it subscribes upstream, with the subscribers it
/// subscribes it for. Only they hear what the session says of it.
#[derive(Default)]
pub(super) struct SessionSubscriptions {
    subscribed: Mutex<BTreeMap<String, BTreeSet<SubscriberId>>>,
}

impl Upstream {
    /// `subscriber` (a host session or listen stream of `principal`, coming on host session `host`
    /// when it has one) subscribes `uri` (un-namespaced) of this upstream: on a per-principal
    /// or per-host upstream the subscription is made on that principal's (host session's) own
    /// session, opened now if need be, and only its subscribers hear what that session says of it.
    /// A no-op on a shared upstream (the upstream subscriptions subscribe the shared connection). With
    /// `[cluster]`, it is made where that session lives (`owners`). `subject`: the JWT the
    /// subscription request came with; a `token_exchange` session subscribes with a token
    /// exchanged for it (`credentials`).
    pub fn session_subscribe(
        &self,
        principal: &str,
        host: Option<HostSession>,
        subscriber: SubscriberId,
        uri: &str,
        subject: Option<&SubjectToken>,
    ) -> Result<(), ProxyError> {
        if let Some(made) = self.subscribe_at_owner(principal, host, subscriber, uri) {
            return made;
        }
        self.subscribe_here(principal, host, subscriber, uri, subject)
    }

    /// `[cluster]`, the owner's side: subscribe `uri` for `subscriber` (a session of another replica's
    /// connection to this one) on `principal`'s session here (host session `host`'s), never
    /// sent on to another replica.
    pub fn subscribe_for_replica(
        &self,
        principal: &str,
        host: Option<HostSession>,
        subscriber: SubscriberId,
        uri: &str,
    ) -> Result<(), ProxyError> {
        if !self.has_sessions() {
            return Err(ProxyError::InvalidParams("not an upstream with sessions of its own here".into()));
        }
        self.subscribe_here(principal, host, subscriber, uri, None)
    }

    /// Hold `uri` for `subscriber` on this replica's session of `principal` (host session `host`),
    /// for a subscription request that came with `subject`.
    pub(super) fn subscribe_here(
        &self,
        principal: &str,
        host: Option<HostSession>,
        subscriber: SubscriberId,
        uri: &str,
        subject: Option<&SubjectToken>,
    ) -> Result<(), ProxyError> {
        let Some(book) = &self.inner.sessions else { return Ok(()) };
        let (key, declared) = self.key_of(principal, host);
        // With this request's JWT; a subscription is a request: the session counts as used.
        let (session, _lease) = self.open_session(book, &key, declared, subject)?;
        session.subscribe(subscriber, uri);
        Ok(())
    }

    /// Wait (at most `timeout`) until the connection holding `principal`'s subscriptions
    /// (host session `host`'s on a per-host upstream) answered the one of `uri`: this upstream
    /// when it is shared, else that session, which must be open already (a subscription opened
    /// it). The shared connection of a per-session upstream never subscribes, so waiting on it
    /// would only time out.
    /// With `[cluster]`, a subscription on the connection to the replica owning the session is
    /// waited on there (that replica answers once its session answered).
    pub async fn wait_session_subscribed(
        &self,
        principal: &str,
        host: Option<HostSession>,
        uri: &str,
        timeout: Duration,
    ) -> SubscribeOutcome {
        if let Some(session) = self.subscribed_at_owner(principal, host, uri) {
            return session.wait_subscribed(uri, timeout).await;
        }
        self.wait_for_replica(principal, host, uri, timeout).await
    }

    /// As [`Upstream::wait_session_subscribed`], on this replica's session only: also the owner's side of a
    /// subscription another replica asked for ([`Upstream::subscribe_for_replica`]).
    pub async fn wait_for_replica(
        &self,
        principal: &str,
        host: Option<HostSession>,
        uri: &str,
        timeout: Duration,
    ) -> SubscribeOutcome {
        let Some(book) = &self.inner.sessions else { return self.wait_subscribed(uri, timeout).await };
        match book.session(&self.key_of(principal, host).0) {
            Some(session) => session.wait_subscribed(uri, timeout).await,
            None => SubscribeOutcome::NotInTime,
        }
    }

    /// Every subscription on its sessions, for whom: a reload that replaces it makes them again on its
    /// successor ([`Upstream::subscribe_again`]).
    pub fn session_subscriptions(&self) -> Vec<SessionSubscription> {
        let Some(book) = &self.inner.sessions else { return Vec::new() };
        let open = book.sessions().into_iter().map(|(_, session)| session).chain(self.inner.at_owners.sessions());
        let mut subscriptions: Vec<_> =
            open.flat_map(|session| session.subscribed(session.subscriptions().snapshot())).collect();
        for (key, declared, subscribed) in book.reclaimed.snapshot() {
            subscriptions.extend(SessionSubscription::each(
                key.principal(),
                host_session(key.host(), declared),
                subscribed,
            ));
        }
        subscriptions
    }

    /// Make `subscriptions` (those of the upstream this one replaces) on this one's sessions, each on
    /// the session its mode gives it now (none when it is shared: the upstream subscriptions subscribe the
    /// shared connection). One that cannot be made (past a session cap) is logged.
    pub fn subscribe_again(&self, subscriptions: Vec<SessionSubscription>) {
        for subscription in subscriptions {
            if let Err(error) = self.session_subscribe(
                &subscription.principal,
                subscription.host,
                subscription.subscriber,
                &subscription.uri,
                None,
            ) {
                tracing::warn!(
                    upstream = self.name(),
                    principal = %subscription.principal,
                    error = %error,
                    "a subscription on an upstream session was not made again after the reload"
                );
            }
        }
    }

    /// `subscriber` lets go of `uri` (everything it subscribed when `None`) on whichever session it
    /// subscribed it: on connections to owners, on this replica's sessions, or waiting for one.
    pub fn session_unsubscribe(&self, subscriber: SubscriberId, uri: Option<&str>) {
        for session in self.inner.at_owners.sessions() {
            session.unsubscribe(subscriber, uri);
        }
        let Some(book) = &self.inner.sessions else { return };
        book.reclaimed.release(subscriber, uri);
        for (_, session) in book.sessions() {
            session.unsubscribe(subscriber, uri);
        }
    }
}

impl SessionSubscription {
    /// Each subscription of `subscribed`, on a session of `principal` (host session `host`).
    pub(super) fn each(
        principal: &str,
        host: Option<HostSession>,
        subscribed: SubscribedUris,
    ) -> impl Iterator<Item = SessionSubscription> + use<> {
        let principal: Arc<str> = principal.into();
        subscribed.into_iter().flat_map(move |(uri, subscribers)| {
            let principal = principal.clone();
            subscribers.into_iter().map(move |subscriber| SessionSubscription {
                principal: principal.clone(),
                host,
                subscriber,
                uri: uri.clone(),
            })
        })
    }
}

/// The host session `host` a session is for (a per-host one's), with what it declared.
pub(super) fn host_session(host: Option<u64>, declared: Option<Declared>) -> Option<HostSession> {
    let id = host?;
    let (sampling, elicitation) = declared.map_or((false, false), |d| (d.sampling, d.elicitation));
    Some(HostSession { id, sampling, elicitation })
}

impl SessionSubscriptions {
    /// `subscriber` subscribes `uri`; true when nobody did before (the session is to subscribe it).
    pub(super) fn subscribe(&self, subscriber: SubscriberId, uri: &str) -> bool {
        let mut subscribed = self.subscribed.lock().expect("session subscriptions lock");
        let subscribers = subscribed.entry(uri.to_string()).or_default();
        subscribers.insert(subscriber) && subscribers.len() == 1
    }

    /// `subscriber` lets go of `uri` (of everything when `None`); the URIs nobody subscribes now (the
    /// session is to unsubscribe them).
    pub(super) fn unsubscribe(&self, subscriber: SubscriberId, uri: Option<&str>) -> Vec<String> {
        let mut subscribed = self.subscribed.lock().expect("session subscriptions lock");
        let mut unsubscribed = Vec::new();
        let mut keeps = |uri: &str, subscribers: &mut BTreeSet<SubscriberId>| {
            if subscribers.remove(&subscriber) && subscribers.is_empty() {
                unsubscribed.push(uri.to_string());
                return false;
            }
            true
        };
        match uri {
            Some(uri) if subscribed.get_mut(uri).is_some_and(|subscribers| !keeps(uri, subscribers)) => {
                drop(subscribed.remove(uri))
            }
            Some(_) => {}
            None => subscribed.retain(|uri, subscribers| keeps(uri, subscribers)),
        }
        unsubscribed
    }

    /// Everything subscribed here, taken away (the session is reclaimed).
    pub(super) fn take_all(&self) -> SubscribedUris {
        std::mem::take(&mut *self.subscribed.lock().expect("session subscriptions lock"))
    }

    pub(super) fn restore(&self, subscribed: SubscribedUris) {
        let mut mine = self.subscribed.lock().expect("session subscriptions lock");
        for (uri, subscribers) in subscribed {
            mine.entry(uri).or_default().extend(subscribers);
        }
    }

    pub(super) fn subscribes_anything(&self) -> bool {
        !self.subscribed.lock().expect("session subscriptions lock").is_empty()
    }

    /// Is `uri` subscribed here (by anyone)?
    pub(super) fn subscribes_uri(&self, uri: &str) -> bool {
        self.subscribed.lock().expect("session subscriptions lock").contains_key(uri)
    }

    /// How many URIs are subscribed here.
    pub(super) fn len(&self) -> usize {
        self.subscribed.lock().expect("session subscriptions lock").len()
    }

    /// Everything subscribed here: each URI with its subscribers.
    pub(super) fn snapshot(&self) -> SubscribedUris {
        self.subscribed.lock().expect("session subscriptions lock").clone()
    }

    /// Who must hear of an update of `uri`: subscribers of it or of a URI it is a sub-resource
    /// of, each with the subscribed URIs that matched.
    pub(super) fn subscribers_of(&self, uri: &str) -> BTreeMap<SubscriberId, Vec<String>> {
        let mut found: BTreeMap<SubscriberId, Vec<String>> = BTreeMap::new();
        let subscribed = self.subscribed.lock().expect("session subscriptions lock");
        for (subscribed, subscribers) in subscribed.iter().filter(|(subscribed, _)| is_same_or_parent(subscribed, uri))
        {
            subscribers.iter().for_each(|subscriber| found.entry(*subscriber).or_default().push(subscribed.clone()));
        }
        found
    }
}
