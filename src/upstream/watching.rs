//! Keeping an upstream's subscriptions equal to the proxy's subscribed set for it, on one
//! connection: `resources/subscribe` / `unsubscribe` for 2025 upstreams; one
//! `subscriptions/listen` stream whose filter is the whole set (plus list changes) for
//! 2026-07-28 upstreams, replaced make-before-break when the set changes.
//!
//! Invariant: whenever the upstream may have changed something without telling us — a fresh
//! connection, a listen stream that ended — every subscribed URI is reported as updated, so no
//! update is silently lost. A URI that left the subscribed set and is back is reported as
//! [`Change::Resubscribed`]: what the cache kept of it goes, but no host is told, since none subscribed
//! it meanwhile (a host opening a listen stream hears no `updated` for what did not change).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ServerNotification, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams};
use rmcp::service::{ServiceError, Subscription};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::connection::{Applied, AppliedSet, Connection, SubscribedSet, Uri};
use super::notices::{Notice, NoticeSender};
use super::{Change, Link};
use crate::protocol::Era;

/// Changes to the watch set that arrive within this window go upstream together.
const BATCH: Duration = Duration::from_millis(20);
const RETRY_MIN: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Run on `connection`'s `link` until `stop`; a connection that turns out to be dead is marked
/// broken. `fresh`: no URI was watched before this connection (a session's first), so the set
/// it starts with is not reported as changed.
pub(super) async fn keep(
    connection: Connection,
    link: Link,
    notices: NoticeSender,
    stop: CancellationToken,
    fresh: bool,
) {
    let inner = &connection.inner;
    let (upstream, desired, applied) = (connection.name(), inner.watched.subscribe(), &inner.applied);
    let broken = || inner.broken.notify_one();
    let offers_resources = link.capabilities.resources.is_some();
    let resources = link.capabilities.resources.clone().unwrap_or_default();
    let can_subscribe = resources.subscribe == Some(true);
    let caps = &link.capabilities;
    let offerings_change = caps.tools.as_ref().is_some_and(|t| t.list_changed == Some(true))
        || caps.prompts.as_ref().is_some_and(|p| p.list_changed == Some(true));
    let lists_change = resources.list_changed == Some(true) || offerings_change;
    // An upstream without resources (tools only) holds no URI: there is nothing to say.
    if offers_resources && !can_subscribe {
        tracing::info!(upstream, "upstream does not offer subscriptions: URIs held there are never notified");
    }
    match link.era {
        Era::Legacy if can_subscribe => {
            keep_legacy(upstream, &link, desired, applied, &notices, (&stop, fresh), broken).await
        }
        Era::Legacy => {}
        Era::Modern if can_subscribe || lists_change => {
            let listen = Listen { upstream, link: &link, notices: &notices, applied, can_subscribe, lists_change };
            listen.run(desired, &stop, fresh).await
        }
        Era::Modern => {}
    }
}

/// One URI's fate, published as soon as it is known (a waiting read need not wait for the
/// whole batch). The set is shared with nobody for long, so this does not copy it.
fn publish(applied: &watch::Sender<AppliedSet>, edit: impl FnOnce(&mut Applied)) {
    applied.send_modify(|set| edit(Arc::make_mut(set)));
}

async fn keep_legacy(
    upstream: &str,
    link: &Link,
    mut desired: watch::Receiver<SubscribedSet>,
    applied: &watch::Sender<AppliedSet>,
    notices: &NoticeSender,
    (stop, fresh): (&CancellationToken, bool),
    broken: impl Fn(),
) {
    let mut state = Legacy {
        upstream,
        link,
        applied,
        notices,
        subscribed: BTreeSet::new(),
        refused: BTreeSet::new(),
        dropped: BTreeSet::new(),
    };
    let mut first = !fresh;
    loop {
        // Only the differences are copied out of the wanted set.
        let (to_add, to_drop): (Vec<Uri>, Vec<Uri>) = {
            let wanted = desired.borrow_and_update();
            let new = wanted.iter().filter(|uri| !state.subscribed.contains(*uri) && !state.refused.contains(*uri));
            let gone = state.subscribed.iter().chain(state.refused.iter()).filter(|uri| !wanted.contains(*uri));
            (new.cloned().collect(), gone.cloned().collect())
        };
        let just_dropped = std::mem::take(&mut state.dropped);
        for uri in to_add {
            let again = just_dropped.contains(&uri);
            if state.subscribe(uri, again).await.is_err() {
                return broken();
            }
        }
        for uri in to_drop {
            if state.unsubscribe(uri).await.is_err() {
                return broken();
            }
        }
        let (watched, refused) = (state.subscribed.len(), state.refused.len());
        tracing::debug!(upstream, watched, refused, "upstream subscriptions applied");
        if std::mem::take(&mut first) {
            report_all(state.subscribed.iter().chain(state.refused.iter()), notices);
        }
        tokio::select! {
            changed = desired.changed() => if changed.is_err() { return },
            _ = stop.cancelled() => return,
        }
        tokio::time::sleep(BATCH).await;
    }
}

/// A 2025 upstream's subscriptions on one connection.
struct Legacy<'a> {
    upstream: &'a str,
    link: &'a Link,
    applied: &'a watch::Sender<AppliedSet>,
    notices: &'a NoticeSender,
    subscribed: BTreeSet<Uri>,
    refused: BTreeSet<Uri>,
    /// Unsubscribed in the last batch: a read may have seen them acknowledged just before.
    dropped: BTreeSet<Uri>,
}

/// The connection broke.
struct Broken;

impl Legacy<'_> {
    /// Subscribe `uri`; `again` when it was dropped in the batch before: a read that saw it
    /// acknowledged then may have missed a change in between, so it is reported as changed.
    async fn subscribe(&mut self, uri: Uri, again: bool) -> Result<(), Broken> {
        let (link, applied) = (self.link, self.applied);
        #[allow(deprecated)]
        let result = link.peer.subscribe(SubscribeRequestParams::new(uri.to_string())).await;
        match result {
            Ok(()) => {
                publish(applied, |set| {
                    set.acknowledged.insert(uri.clone());
                });
                if again {
                    self.notices.send(Notice::Changed(uri.to_string(), Change::Resubscribed));
                }
                self.subscribed.insert(uri);
            }
            Err(ServiceError::McpError(e)) => {
                let upstream = self.upstream;
                tracing::warn!(upstream, uri = &*uri, error = %e.message, "upstream refused a subscription: never notified");
                publish(applied, |set| {
                    set.refused.insert(uri.clone());
                });
                self.refused.insert(uri);
            }
            Err(_) => return Err(Broken),
        }
        Ok(())
    }

    /// Unsubscribe `uri`; no longer acknowledged from before the request goes out.
    async fn unsubscribe(&mut self, uri: Uri) -> Result<(), Broken> {
        let applied = self.applied;
        if self.refused.remove(&uri) {
            publish(applied, |set| {
                set.refused.remove(&uri);
            });
            return Ok(());
        }
        publish(applied, |set| {
            set.acknowledged.remove(&uri);
        });
        self.subscribed.remove(&uri);
        #[allow(deprecated)]
        let result = self.link.peer.unsubscribe(UnsubscribeRequestParams::new(uri.to_string())).await;
        self.dropped.insert(uri);
        match result {
            Err(ref e) if !matches!(e, ServiceError::McpError(_)) => Err(Broken),
            _ => Ok(()),
        }
    }
}

struct Listen<'a> {
    upstream: &'a str,
    link: &'a Link,
    notices: &'a NoticeSender,
    applied: &'a watch::Sender<AppliedSet>,
    can_subscribe: bool,
    lists_change: bool,
}

impl Listen<'_> {
    async fn run(&self, mut desired: watch::Receiver<SubscribedSet>, stop: &CancellationToken, fresh: bool) {
        let mut current: Option<(Subscription, BTreeSet<Uri>)> = None;
        let mut dropped = BTreeSet::new();
        let mut resumed = !fresh;
        let mut retry = RETRY_MIN;
        loop {
            // One copy per batch: the listen filter names the whole set anyway.
            let wanted =
                if self.can_subscribe { desired.borrow_and_update().as_ref().clone() } else { BTreeSet::new() };
            if current.as_ref().is_none_or(|(_, set)| *set != wanted) {
                match self.apply(&mut current, &wanted, &mut dropped, &mut resumed).await {
                    Ok(()) => retry = RETRY_MIN,
                    // Shutting down closes the connection under the listen: nothing to say.
                    Err(_) if stop.is_cancelled() => return,
                    Err(error) => {
                        tracing::warn!(upstream = self.upstream, error = %error, "listen failed; retrying");
                        if !pause(&mut retry, stop).await {
                            return;
                        }
                        continue;
                    }
                }
            }
            tokio::select! {
                next = next_of(&mut current) => match next {
                    Some(notice) => self.notices.send(notice),
                    None => {
                        let (_, lost) = current.take().expect("a stream ended");
                        self.applied.send_replace(AppliedSet::default());
                        tracing::debug!(upstream = self.upstream, "listen stream ended; everything it covered may have changed");
                        report_all(lost.iter(), self.notices);
                        self.notices.send(Notice::ListChanged);
                        resumed = true;
                        if !pause(&mut retry, stop).await {
                            return;
                        }
                    }
                },
                changed = desired.changed() => {
                    if changed.is_err() { return }
                    tokio::time::sleep(BATCH).await;
                }
                _ = stop.cancelled() => {
                    if let Some((mut subscription, _)) = current.take() {
                        let _ = subscription.cancel().await;
                    }
                    return;
                }
            }
        }
    }

    /// Listen for `wanted` instead and publish what the upstream acknowledged.
    async fn apply(
        &self,
        current: &mut Option<(Subscription, BTreeSet<Uri>)>,
        wanted: &BTreeSet<Uri>,
        dropped: &mut BTreeSet<Uri>,
        resumed: &mut bool,
    ) -> Result<(), ServiceError> {
        // What leaves the set is no longer acknowledged from before the old stream ends.
        let left = self.withdraw(wanted);
        self.replace(current, wanted).await?;
        tracing::debug!(upstream = self.upstream, watched = wanted.len(), "upstream subscriptions applied");
        let acknowledged = current.as_ref().map(|(s, _)| acknowledged_uris(s, wanted)).unwrap_or_default();
        let refused = wanted.difference(&acknowledged).cloned().collect();
        if std::mem::take(resumed) {
            report_all(wanted.iter(), self.notices);
        } else {
            // Left in the last change and back now: a read may have seen it acknowledged just
            // before it left, and missed a change in between.
            for uri in acknowledged.intersection(dropped) {
                self.notices.send(Notice::Changed(uri.to_string(), Change::Resubscribed));
            }
        }
        *dropped = left;
        self.applied.send_replace(Arc::new(Applied { acknowledged, refused }));
        Ok(())
    }

    /// Take what is not `wanted` out of the acknowledged set; returns it.
    fn withdraw(&self, wanted: &BTreeSet<Uri>) -> BTreeSet<Uri> {
        let mut left = BTreeSet::new();
        self.applied.send_if_modified(|set| {
            left = set.acknowledged.difference(wanted).cloned().collect();
            let set = Arc::make_mut(set);
            set.acknowledged.retain(|uri| wanted.contains(uri));
            !left.is_empty()
        });
        left
    }

    /// Open a stream for `wanted`, then cancel the old one (make-before-break). With nothing
    /// to listen for, just close the old one.
    async fn replace(
        &self,
        current: &mut Option<(Subscription, BTreeSet<Uri>)>,
        wanted: &BTreeSet<Uri>,
    ) -> Result<(), ServiceError> {
        let mut builder = SubscriptionFilter::builder();
        let caps = &self.link.capabilities;
        if caps.resources.as_ref().is_some_and(|r| r.list_changed == Some(true)) {
            builder = builder.resources_list_changed();
        }
        if caps.tools.as_ref().is_some_and(|t| t.list_changed == Some(true)) {
            builder = builder.tools_list_changed();
        }
        if caps.prompts.as_ref().is_some_and(|p| p.list_changed == Some(true)) {
            builder = builder.prompts_list_changed();
        }
        if !wanted.is_empty() {
            builder = builder.resource_subscriptions(wanted.iter().map(|uri| uri.to_string()));
        }
        let next = match self.lists_change || !wanted.is_empty() {
            true => Some((self.link.peer.listen(builder.build()).await?, wanted.clone())),
            false => None,
        };
        if let Some((mut old, _)) = std::mem::replace(current, next) {
            let _ = old.cancel().await;
        }
        Ok(())
    }
}

/// The next notice of the current stream; `None` when it ended. Pending while there is none.
async fn next_of(current: &mut Option<(Subscription, BTreeSet<Uri>)>) -> Option<Notice> {
    let Some((subscription, _)) = current.as_mut() else { return std::future::pending().await };
    loop {
        match subscription.next().await {
            Ok(Some(ServerNotification::ResourceUpdatedNotification(n))) => {
                return Some(Notice::Changed(n.params.uri, Change::Heard));
            }
            Ok(Some(ServerNotification::ResourceListChangedNotification(_))) => return Some(Notice::ListChanged),
            Ok(Some(
                ServerNotification::ToolListChangedNotification(_)
                | ServerNotification::PromptListChangedNotification(_),
            )) => return Some(Notice::OfferingsChanged),
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => return None,
        }
    }
}

/// The URIs the stream's acknowledgement names, each the `wanted` set's own when it has it.
fn acknowledged_uris(subscription: &Subscription, wanted: &BTreeSet<Uri>) -> BTreeSet<Uri> {
    let named = subscription.acknowledged().resource_subscriptions.iter().flatten();
    named.map(|uri| wanted.get(uri.as_str()).cloned().unwrap_or_else(|| uri.as_str().into())).collect()
}

fn report_all<'a>(uris: impl Iterator<Item = &'a Uri>, notices: &NoticeSender) {
    for uri in uris {
        notices.send(Notice::Changed(uri.to_string(), Change::Unseen));
    }
}

/// Back off before a retry; false when stopped meanwhile.
async fn pause(retry: &mut Duration, stop: &CancellationToken) -> bool {
    let delay = *retry;
    *retry = (*retry * 2).min(RETRY_MAX);
    tokio::select! {
        _ = tokio::time::sleep(delay) => true,
        _ = stop.cancelled() => false,
    }
}
