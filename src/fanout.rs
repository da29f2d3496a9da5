//! Fan-out to downstream outlets: legacy sessions and 2026-07-28 listen streams.
//!
//! Each outlet gets its own bounded queue and sender task, so a host that stops reading fills
//! only its own queue: what does not fit is dropped and counted, and nobody else waits. An
//! outlet whose transport is gone is reported on the `gone` channel so its subscriptions are
//! released. That channel is bounded: when it is full, the reporting send task (which is
//! ending anyway) waits for room, so no release is lost and nobody else waits. Send tasks run
//! on the spine as `outlet:<id>` and end when their outlet is deregistered (its queue closes) or
//! at shutdown. Which hosts hear that a list changed is decided here, one way for every list
//! (`views`).
//!
//! rmcp-free: `downstream` implements [`Outlet`] over rmcp peers and subscription sinks.
//! Invariant: `deliver` and `tell_changed` never await a client.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::spine::Spine;
use crate::subscription_table::SubscriberId;

mod views;

pub use self::views::{Listing, Seen, ViewDigest, ViewMemo};

/// Notifications per outlet that may wait for a slow host before new ones are dropped.
pub const QUEUE_CAPACITY: usize = 256;
/// How long one send to one host may take before it is given up (and counted as dropped).
pub const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// What the proxy tells a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    /// `notifications/resources/updated` with this namespaced URI.
    Updated(String),
    /// `notifications/resources/list_changed`.
    ListChanged,
    /// `notifications/tools/list_changed`.
    ToolsListChanged,
    /// `notifications/prompts/list_changed`.
    PromptsListChanged,
}

impl Outgoing {
    pub fn kind(&self) -> &'static str {
        match self {
            Outgoing::Updated(_) => "updated",
            Outgoing::ListChanged => "list_changed",
            Outgoing::ToolsListChanged => "tools_list_changed",
            Outgoing::PromptsListChanged => "prompts_list_changed",
        }
    }
}

/// Why a send failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The host is gone; stop sending to it.
    Closed,
}

pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<(), SendError>> + Send + 'a>>;

/// Something a notification can be sent to.
pub trait Outlet: Send + Sync + 'static {
    fn send(&self, message: Outgoing) -> SendFuture<'_>;
}

/// What the proxy knows of an outlet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutletInfo {
    pub principal: String,
    pub kind: OutletKind,
    /// Legacy sessions always; listen streams when their filter asked for it.
    pub wants_list_changed: bool,
    /// `tools/list_changed` and `prompts/list_changed`: legacy sessions always; listen streams
    /// when their filter asked for them.
    pub wants_tools_list_changed: bool,
    pub wants_prompts_list_changed: bool,
    /// A host session's key for its per-host upstream sessions (see
    /// `crate::host::HostSession`), once known; never set for a listen stream.
    pub host_key: HostKey,
}

/// A host session's key, set once it is known (its subscriber id; with `[cluster]`, from its
/// `Mcp-Session-Id` on its first request here).
pub type HostKey = Arc<OnceLock<u64>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutletKind {
    Session,
    ListenStream,
}

/// A cheap `Clone` handle on the outlet registry.
#[derive(Clone)]
pub struct Fanout {
    inner: Arc<Inner>,
}

struct Inner {
    outlets: Mutex<HashMap<SubscriberId, Registered>>,
    next_id: AtomicU64,
    gone: mpsc::Sender<SubscriberId>,
    hooks: Mutex<Option<DeliveryHook>>,
    spine: Spine,
}

/// Called with every notification's fate.
pub type DeliveryHook = Arc<dyn Fn(Delivery) + Send + Sync>;

/// Reported to the delivery hook (metrics) for every notification's fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    Delivered(&'static str),
    DroppedFull(&'static str),
    DroppedTimeout(&'static str),
}

struct Registered {
    info: OutletInfo,
    queue: mpsc::Sender<Outgoing>,
    /// The digests of the visible lists this outlet has heard of: at registration, then at
    /// each `list_changed` it was sent (see `views`).
    seen: Seen,
}

impl Fanout {
    /// `gone` receives the id of every outlet whose host disappeared; send tasks run on `spine`.
    pub fn new(gone: mpsc::Sender<SubscriberId>, spine: Spine) -> Self {
        let inner = Inner {
            outlets: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            gone,
            hooks: Mutex::new(None),
            spine,
        };
        Self { inner: Arc::new(inner) }
    }

    /// Called for every notification's fate (for metrics).
    pub fn set_delivery_hook(&self, hook: DeliveryHook) {
        *self.inner.hooks.lock().expect("hooks lock") = Some(hook);
    }

    /// A fresh subscriber id (for subscribers that are not outlets, such as the cache).
    pub fn next_subscriber_id(&self) -> SubscriberId {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Register an outlet, whose host has seen the lists whose digests are `seen`, and start
    /// its sender task.
    pub fn register(&self, info: OutletInfo, seen: Seen, outlet: Arc<dyn Outlet>) -> SubscriberId {
        let id = self.next_subscriber_id();
        let (queue, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let registered = Registered { info, queue, seen };
        self.inner.outlets.lock().expect("outlets lock").insert(id, registered);
        let shutdown = self.inner.spine.shutdown();
        self.inner.spine.spawn(format!("outlet:{id}"), send_loop(id, outlet, receiver, self.clone(), shutdown));
        id
    }

    /// Forget an outlet; its sender task ends once its queue is drained.
    pub fn deregister(&self, id: SubscriberId) -> Option<OutletInfo> {
        self.inner.outlets.lock().expect("outlets lock").remove(&id).map(|r| r.info)
    }

    pub fn info(&self, id: SubscriberId) -> Option<OutletInfo> {
        self.inner.outlets.lock().expect("outlets lock").get(&id).map(|r| r.info.clone())
    }

    /// Every registered outlet.
    pub fn outlets(&self) -> Vec<(SubscriberId, OutletInfo)> {
        self.inner.outlets.lock().expect("outlets lock").iter().map(|(id, r)| (*id, r.info.clone())).collect()
    }

    /// Queue `message` for outlet `id` without waiting. False when it was dropped (queue full)
    /// or the outlet is unknown.
    pub fn deliver(&self, id: SubscriberId, message: Outgoing) -> bool {
        let queue = match self.inner.outlets.lock().expect("outlets lock").get(&id) {
            Some(registered) => registered.queue.clone(),
            None => return false,
        };
        let kind = message.kind();
        match queue.try_send(message) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.report(Delivery::DroppedFull(kind));
                tracing::warn!(session = id, kind, "host is not reading its notifications; dropped one");
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Tell the hosts whose view of `listing` changed, and only those: the one place this is
    /// decided, for every list (see `views`). `view` gives a principal's digest of the list,
    /// asked once per principal among the outlets that hear of it; an outlet whose last heard
    /// digest differs is queued the list's `list_changed` and has heard of this one. An outlet
    /// registered meanwhile is left be. Returns how many notifications were queued.
    pub fn tell_changed(&self, listing: Listing, mut view: impl FnMut(&str) -> u64) -> usize {
        let principals: BTreeSet<String> = self
            .outlets()
            .into_iter()
            .filter(|(_, info)| listing.wanted_by(info))
            .map(|(_, info)| info.principal)
            .collect();
        let views: HashMap<String, u64> = principals
            .into_iter()
            .map(|principal| {
                let digest = view(&principal);
                (principal, digest)
            })
            .collect();
        let changed: Vec<SubscriberId> = {
            let mut outlets = self.inner.outlets.lock().expect("outlets lock");
            let mut changed = Vec::new();
            for (id, registered) in outlets.iter_mut().filter(|(_, r)| listing.wanted_by(&r.info)) {
                let Some(view) = views.get(&registered.info.principal) else { continue };
                let seen = registered.seen.get_mut(listing);
                if seen != view {
                    *seen = *view;
                    changed.push(*id);
                }
            }
            changed
        };
        changed.into_iter().map(|id| self.deliver(id, listing.news())).filter(|queued| *queued).count()
    }

    fn report(&self, delivery: Delivery) {
        let hook = self.inner.hooks.lock().expect("hooks lock").clone();
        if let Some(hook) = hook {
            hook(delivery);
        }
    }
}

async fn send_loop(
    id: SubscriberId,
    outlet: Arc<dyn Outlet>,
    mut queue: mpsc::Receiver<Outgoing>,
    fanout: Fanout,
    shutdown: tokio_util::sync::CancellationToken,
) {
    loop {
        // A closed queue (the outlet was deregistered) must end the task: a `Some(..)` pattern
        // would only disable that branch and leave the task waiting on shutdown, holding the
        // host's peer, for the life of the process.
        let message = tokio::select! {
            message = queue.recv() => match message {
                Some(message) => message,
                None => return,
            },
            _ = shutdown.cancelled() => return,
        };
        let kind = message.kind();
        let sent = tokio::select! {
            sent = tokio::time::timeout(SEND_TIMEOUT, outlet.send(message)) => sent,
            _ = shutdown.cancelled() => return,
        };
        match sent {
            Ok(Ok(())) => fanout.report(Delivery::Delivered(kind)),
            Ok(Err(SendError::Closed)) => {
                tracing::debug!(session = id, "host gone; releasing its subscriptions");
                // Bounded: wait for room rather than lose the release.
                let _ = fanout.inner.gone.send(id).await;
                return;
            }
            Err(_) => {
                fanout.report(Delivery::DroppedTimeout(kind));
                tracing::warn!(session = id, kind, timeout = ?SEND_TIMEOUT, "send to host timed out; dropped");
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An outlet that hands every message to a channel (also used by the proxy's tests).
    pub(crate) struct Recorder(pub mpsc::UnboundedSender<Outgoing>);

    impl Outlet for Recorder {
        fn send(&self, message: Outgoing) -> SendFuture<'_> {
            let sent = self.0.send(message).map_err(|_| SendError::Closed);
            Box::pin(async move { sent })
        }
    }

    /// Never completes a send: a host that stopped reading.
    struct Stuck;

    impl Outlet for Stuck {
        fn send(&self, _: Outgoing) -> SendFuture<'_> {
            Box::pin(std::future::pending())
        }
    }

    fn info(wants_list_changed: bool) -> OutletInfo {
        OutletInfo {
            principal: "p".into(),
            kind: OutletKind::Session,
            wants_list_changed,
            wants_tools_list_changed: false,
            wants_prompts_list_changed: false,
            host_key: HostKey::default(),
        }
    }

    #[tokio::test]
    async fn a_stuck_host_fills_only_its_own_queue() {
        let (gone, _) = mpsc::channel(1);
        let fanout = Fanout::new(gone, Spine::new());
        let dropped = Arc::new(AtomicU64::new(0));
        let counted = dropped.clone();
        fanout.set_delivery_hook(Arc::new(move |delivery| {
            if matches!(delivery, Delivery::DroppedFull(_)) {
                counted.fetch_add(1, Ordering::Relaxed);
            }
        }));
        let stuck = fanout.register(info(true), seen(0), Arc::new(Stuck));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let healthy = fanout.register(info(true), seen(0), Arc::new(Recorder(tx)));
        for i in 0..QUEUE_CAPACITY + 10 {
            fanout.deliver(stuck, Outgoing::Updated(format!("a+x://{i}")));
        }
        assert!(dropped.load(Ordering::Relaxed) >= 9);
        assert!(fanout.deliver(healthy, Outgoing::Updated("a+x://1".into())));
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap();
        assert_eq!(got, Some(Outgoing::Updated("a+x://1".into())));
    }

    #[tokio::test]
    async fn list_changed_goes_to_those_who_want_it_and_whose_view_changed() {
        let (gone, _) = mpsc::channel(1);
        let fanout = Fanout::new(gone, Spine::new());
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (tx2, mut rx2) = mpsc::unbounded_channel();
        let (tx3, mut rx3) = mpsc::unbounded_channel();
        let (tx4, mut rx4) = mpsc::unbounded_channel();
        fanout.register(info(true), seen(1), Arc::new(Recorder(tx)));
        fanout.register(info(false), seen(1), Arc::new(Recorder(tx2)));
        fanout.register(info(true), seen(2), Arc::new(Recorder(tx3)));
        let other = OutletInfo { principal: "q".into(), ..info(true) };
        fanout.register(other, seen(1), Arc::new(Recorder(tx4)));
        let views = |principal: &str| if principal == "p" { 2 } else { 1 };
        assert_eq!(broadcast(&fanout, views), 1);
        assert_eq!(broadcast(&fanout, views), 0, "once per change");
        assert_eq!(rx.recv().await, Some(Outgoing::ListChanged));
        assert!(rx2.try_recv().is_err(), "did not ask for it");
        assert!(rx3.try_recv().is_err(), "registered after the change");
        assert!(rx4.try_recv().is_err(), "its view did not change");
        assert_eq!(broadcast(&fanout, |_| 3), 3, "everyone who wants it, once views change");
    }

    /// `list_changed` of resources: to outlets that want it whose principal's digest differs
    /// from the one they heard of.
    fn broadcast(fanout: &Fanout, view: impl Fn(&str) -> u64) -> usize {
        fanout.tell_changed(Listing::Resources, view)
    }

    /// What a host registers with: digest `digest` of the resources.
    fn seen(digest: u64) -> Seen {
        Seen::of(&info(true), |_| digest)
    }

    #[tokio::test]
    async fn a_closed_host_is_reported_gone() {
        let (gone, mut gone_rx) = mpsc::channel(1);
        let fanout = Fanout::new(gone, Spine::new());
        let (tx, rx) = mpsc::unbounded_channel();
        drop(rx);
        let id = fanout.register(info(true), seen(0), Arc::new(Recorder(tx)));
        fanout.deliver(id, Outgoing::ListChanged);
        let reported = tokio::time::timeout(Duration::from_secs(5), gone_rx.recv()).await.unwrap();
        assert_eq!(reported, Some(id));
    }
}
