//! `[cluster]`: subscriptions on a per-principal upstream follow the principal's one session
//! (on a per-host upstream, the host session's one session). That session lives on one replica
//! (`crate::cluster::owners`), where calls are forwarded; a
//! host's subscription made on another replica (its GET stream's or listen stream's) is held
//! there too, over a [`Call::Hold`](crate::cluster::forward::Call::Hold) reply that stays open
//! while it is held, and each change the owner writes reaches the holder here as its session's
//! `updated` ([`super::UpstreamEvent::SessionUpdated`]).
//!
//! Each hold is kept by a `hold:<upstream>` task that places it where the owner is now: on this
//! replica's own session when it is the owner, else at the owner. It looks again every
//! [`OWNER_CHECK`], and when the reply ends (the owner died, or refused): a hold that moves is
//! made on the new owner's session, and its holder is told once that the URI changed (a change
//! may have come while it moved). Releasing it (unsubscribe, the holder's end, the upstream's
//! stop) stops the task, which lets go where it held.
//!
//! Invariant: a hold of this kind is on at most one session at a time, the owner's as this
//! replica last saw it; the owner never forwards it again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::HostSession;
use super::{Upstream, UpstreamEvent, Watching};
use crate::cluster::forward::{Forwarder, HostOf, Line, Sent, SessionOf};
use crate::config::SessionMode;
use crate::error::ProxyError;
use crate::host::SubjectToken;
use crate::subscriptions::HolderId;

/// How often a hold checks that it is still where the owner is.
const OWNER_CHECK: Duration = Duration::from_secs(1);
/// How long a hold waits before trying an owner again that could not take it.
const RETRY: Duration = Duration::from_secs(1);
/// How long a hold waits for its session's acknowledgement before it counts as placed.
const ACKNOWLEDGE_WAIT: Duration = Duration::from_secs(10);

/// The holds of one upstream that follow their principal's owner, by (holder, URI).
#[derive(Default)]
pub(super) struct FollowingHolds {
    held: Mutex<BTreeMap<(HolderId, String), Following>>,
}

struct Following {
    principal: Arc<str>,
    /// A per-host upstream's: the host session whose session it is on.
    host: Option<HostSession>,
    stop: CancellationToken,
    /// True once the session it is on (here or at the owner) acknowledged it.
    acknowledged: watch::Receiver<bool>,
}

impl From<HostOf> for HostSession {
    fn from(host: HostOf) -> Self {
        HostSession { id: host.key, sampling: host.sampling, elicitation: host.elicitation }
    }
}

impl From<HostSession> for HostOf {
    fn from(host: HostSession) -> Self {
        HostOf { key: host.id, sampling: host.sampling, elicitation: host.elicitation }
    }
}

impl FollowingHolds {
    /// Every hold, as (principal, host session, holder, URI).
    pub(super) fn all(&self) -> Vec<(Arc<str>, Option<HostSession>, HolderId, String)> {
        let held = self.held.lock().expect("following lock");
        let each = |((holder, uri), following): (&(HolderId, String), &Following)| {
            (following.principal.clone(), following.host, *holder, uri.clone())
        };
        held.iter().map(each).collect()
    }

    /// How many holds `principal` has here, wherever they are placed.
    fn of_principal(&self, principal: &str) -> usize {
        self.held.lock().expect("following lock").values().filter(|f| &*f.principal == principal).count()
    }

    /// `holder` lets go of `uri` (every URI when `uri` is `None`).
    pub(super) fn release(&self, holder: HolderId, uri: Option<&str>) {
        let mut held = self.held.lock().expect("following lock");
        held.retain(|(h, u), following| {
            let gone = *h == holder && uri.is_none_or(|uri| uri == u);
            if gone {
                following.stop.cancel();
            }
            !gone
        });
    }

    /// The acknowledgements of the holds of `uri` on `principal`'s session (`host`'s, when it
    /// is a host session's); none when there are none here.
    fn acknowledgements(&self, principal: &str, host: Option<u64>, uri: &str) -> Vec<watch::Receiver<bool>> {
        let held = self.held.lock().expect("following lock");
        let whose = |f: &Following| &*f.principal == principal && f.host.map(|h| h.id) == host;
        let mine = held.iter().filter(|((_, u), f)| u == uri && whose(f));
        mine.map(|(_, following)| following.acknowledged.clone()).collect()
    }
}

impl Upstream {
    /// `[cluster]`: how requests and subscriptions reach the replica holding a principal's
    /// session (set once, before it is spawned).
    pub fn set_forwarder(&self, forwarder: crate::cluster::forward::Forwarder) {
        let _ = self.inner.forwarder.set(forwarder);
    }

    /// `[cluster]` on a per-principal or per-host upstream: the forwarder that reaches the
    /// owner of a session. `None` otherwise (every hold is this replica's).
    pub(super) fn follows_owner(&self) -> Option<&Forwarder> {
        self.inner.forwarder.get().filter(|_| self.has_sessions())
    }

    /// Whose session a request of `principal` from host session `host` runs on, as forwarded
    /// requests name it: the host session counts on a per-host upstream only.
    pub fn forwarded_as<'a>(&'a self, principal: &'a str, host: Option<HostOf>) -> SessionOf<'a> {
        let host = host.filter(|_| self.config().sessions.mode == SessionMode::PerHost);
        SessionOf { principal, upstream: self.name(), host }
    }

    /// Hold `uri` for `holder` of `principal` (from host session `host`) where its session is,
    /// and keep it there. A hold already kept is left as it is. Past a session cap here, the
    /// error is returned at once.
    pub(super) fn hold_following(
        &self,
        forwarder: &Forwarder,
        principal: &str,
        host: Option<HostSession>,
        holder: HolderId,
        uri: &str,
        subject: Option<&SubjectToken>,
    ) -> Result<(), ProxyError> {
        let key = (holder, uri.to_string());
        if self.inner.following.held.lock().expect("following lock").contains_key(&key) {
            return Ok(());
        }
        let of = self.forwarded_as(principal, host.map(HostOf::from));
        let owner = forwarder.owner(of);
        let (host, here) = (of.host.map(HostSession::from), owner.is_none());
        match &owner {
            None => self.hold_here(principal, host, holder, uri, subject)?,
            Some(owner) => forwarder.may_hold_at(principal, owner, self.inner.following.of_principal(principal))?,
        }
        let Some((spine, parent_stop)) = self.launch() else { return Ok(()) };
        let stop = parent_stop.child_token();
        let (acknowledged_in, acknowledged) = watch::channel(false);
        let principal: Arc<str> = principal.into();
        let following = Following { principal: principal.clone(), host, stop: stop.clone(), acknowledged };
        self.inner.following.held.lock().expect("following lock").insert(key, following);
        let keeper = Keeper {
            upstream: self.clone(),
            forwarder: forwarder.clone(),
            principal,
            host,
            holder,
            uri: uri.to_string(),
            acknowledged: acknowledged_in,
        };
        spine.spawn(format!("hold:{}", self.name()), keeper.keep(here, stop));
        Ok(())
    }

    /// The owner's side of a [`Call::Hold`](crate::cluster::forward::Call::Hold): hold `uri`
    /// for `holder` (the asking replica's open reply) on `principal`'s session here (host
    /// session `host`'s); never forwarded again.
    pub fn hold_for_replica(
        &self,
        principal: &str,
        host: Option<HostSession>,
        holder: HolderId,
        uri: &str,
    ) -> Result<(), ProxyError> {
        if self.follows_owner().is_none() {
            return Err(ProxyError::InvalidParams("not an upstream with sessions of its own here".into()));
        }
        self.hold_here(principal, host, holder, uri, None)
    }

    /// Wait (at most `timeout`) for a hold of `uri` on `principal`'s session (host session
    /// `host`'s) that follows its owner to be acknowledged; `None` when there is no such hold
    /// here.
    pub(super) async fn wait_following(
        &self,
        principal: &str,
        host: Option<HostSession>,
        uri: &str,
        timeout: Duration,
    ) -> Option<Watching> {
        let host = self.forwarded_as(principal, host.map(HostOf::from)).host.map(|host| host.key);
        let acknowledgements = self.inner.following.acknowledgements(principal, host, uri);
        if acknowledgements.is_empty() {
            return None;
        }
        let any = futures::future::select_all(
            acknowledgements
                .into_iter()
                .map(|mut acknowledged| Box::pin(async move { acknowledged.wait_for(|yes| *yes).await.is_ok() })),
        );
        Some(match tokio::time::timeout(timeout, any).await {
            Ok((true, _, _)) => Watching::Acknowledged,
            _ => Watching::NotInTime,
        })
    }
}

/// What a `hold:<upstream>` task keeps.
struct Keeper {
    upstream: Upstream,
    forwarder: Forwarder,
    principal: Arc<str>,
    /// A per-host upstream's host session (none: the principal's session).
    host: Option<HostSession>,
    holder: HolderId,
    uri: String,
    acknowledged: watch::Sender<bool>,
}

impl Keeper {
    /// Whose session the hold is on.
    fn of(&self) -> SessionOf<'_> {
        self.upstream.forwarded_as(&self.principal, self.host.map(HostOf::from))
    }

    /// Keep the hold where the owner is until `stop`; `here`: it is held here now.
    async fn keep(self, mut here: bool, stop: CancellationToken) {
        // A hold placed once and then moved tells its holder once (a change may have been missed).
        let mut placed = here;
        loop {
            match self.forwarder.owner(self.of()) {
                None => {
                    if !here {
                        if let Err(error) =
                            self.upstream.hold_here(&self.principal, self.host, self.holder, &self.uri, None)
                        {
                            tracing::warn!(upstream = self.upstream.name(), error = %error, "cluster: a subscription could not be held on this replica's session");
                            if pause(&stop, RETRY).await {
                                return;
                            }
                            continue;
                        }
                        self.moved(&mut placed);
                    }
                    let released = self.here_until_moved(&stop).await;
                    self.upstream.release_here(self.holder, Some(&self.uri));
                    if released {
                        return;
                    }
                    here = false;
                }
                Some(owner) => {
                    if here {
                        self.upstream.release_here(self.holder, Some(&self.uri));
                        here = false;
                    }
                    let name = self.upstream.name();
                    match self.forwarder.hold(&owner, self.of(), &self.uri).await {
                        Ok(mut reply) => loop {
                            tokio::select! {
                                _ = stop.cancelled() => return,
                                line = reply.next() => match line {
                                    Some(Line::Held { acknowledged }) => {
                                        self.acknowledged.send_replace(acknowledged);
                                        self.moved(&mut placed);
                                    }
                                    Some(Line::Updated { uri }) => self.tell(uri),
                                    Some(Line::Alive) => {}
                                    _ => break,
                                },
                                _ = tokio::time::sleep(OWNER_CHECK) => {
                                    if self.forwarder.owner(self.of()).as_ref() != Some(&owner) {
                                        break;
                                    }
                                }
                            }
                        },
                        Err(Sent::Unreachable | Sent::Failed(_)) => {
                            tracing::debug!(upstream = name, replica = %owner.replica, "cluster: the owner did not take a subscription; trying again");
                        }
                    }
                    self.acknowledged.send_replace(false);
                    if pause(&stop, RETRY).await {
                        return;
                    }
                }
            }
        }
    }

    /// Held here: wait for the session's acknowledgement, then until this replica is no longer
    /// the owner (false) or the hold is released (true).
    async fn here_until_moved(&self, stop: &CancellationToken) -> bool {
        let acknowledged = self.upstream.wait_for_replica(&self.principal, self.host, &self.uri, ACKNOWLEDGE_WAIT);
        tokio::select! {
            _ = stop.cancelled() => return true,
            watching = acknowledged => { self.acknowledged.send_replace(matches!(watching, Watching::Acknowledged)); }
        }
        loop {
            if pause(stop, OWNER_CHECK).await {
                return true;
            }
            if self.forwarder.owner(self.of()).is_some() {
                self.acknowledged.send_replace(false);
                return false;
            }
        }
    }

    /// Placed again: the holder hears once of the URI, unless this is its first placement.
    fn moved(&self, placed: &mut bool) {
        if std::mem::replace(placed, true) {
            self.tell(self.uri.clone());
        }
    }

    /// `changed` (the held URI or one under it) changed on the principal's session (the owner
    /// counted the notification it heard).
    fn tell(&self, changed: String) {
        let Some(events) = self.upstream.inner.events.lock().expect("events lock").clone() else { return };
        let upstream = self.upstream.name().to_string();
        let holders = vec![(self.holder, vec![self.uri.clone()])];
        events.send(UpstreamEvent::SessionUpdated { upstream, uri: changed, heard: false, holders });
    }
}

/// Wait `period`; true when `stop` came first.
async fn pause(stop: &CancellationToken, period: Duration) -> bool {
    tokio::select! {
        _ = stop.cancelled() => true,
        _ = tokio::time::sleep(period) => false,
    }
}
