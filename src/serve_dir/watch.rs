//! Watches the folder (recursively, without following symlinks) and turns each burst of
//! file-system events into one round of notifications.
//!
//! Life of a save: notify reports create/modify/close events on its own thread → they queue
//! (at most [`EVENT_QUEUE`]; notify's thread never waits: past that, the events that do not fit
//! become one "rescan" — the whole folder may have changed) → the `serve-dir-watch` task gathers them until the folder has been
//! quiet for [`QUIET`] (at most [`MAX_BURST`]) → one [`Change`] → [`Subscribers::deliveries`] →
//! one spawned send per notification, each bounded by [`SEND_TIMEOUT`], so a stuck peer never
//! holds up the watcher or anyone else. A peer whose send fails is forgotten.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, Flag, ModifyKind};
use notify::{Config, Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::{Notify, mpsc};
use tokio::time::{Instant, timeout, timeout_at};
use tokio_util::sync::CancellationToken;

use super::paths::Root;
use super::subscribers::{Change, Notice, Subscribers, Target};
use crate::spine::Spine;

/// A burst ends after this long without events.
const QUIET: Duration = Duration::from_millis(50);
/// A burst never lasts longer than this, however busy the folder.
const MAX_BURST: Duration = Duration::from_secs(1);
/// How long one notification may take to hand to a peer before it is dropped.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// File-system events that may wait for the watch task; past it, they become one rescan.
const EVENT_QUEUE: usize = 4096;

/// Notify's side of the event queue: never waits.
struct Inlet {
    events: mpsc::Sender<notify::Result<Event>>,
    overflow: Arc<Overflow>,
}

/// The watch task's side: a rescan first when events did not fit, else the next event.
struct Queue {
    events: mpsc::Receiver<notify::Result<Event>>,
    overflow: Arc<Overflow>,
}

#[derive(Default)]
struct Overflow {
    spilled: AtomicBool,
    wake: Notify,
}

fn queue(capacity: usize) -> (Inlet, Queue) {
    let (events, receiver) = mpsc::channel(capacity);
    let overflow = Arc::new(Overflow::default());
    (Inlet { events, overflow: overflow.clone() }, Queue { events: receiver, overflow })
}

impl Inlet {
    fn send(&self, event: notify::Result<Event>) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.events.try_send(event) {
            self.overflow.spilled.store(true, Ordering::SeqCst);
            self.overflow.wake.notify_one();
        }
    }
}

impl Queue {
    /// The next event (a rescan when some did not fit); `None` once the watcher is gone.
    async fn recv(&mut self) -> Option<notify::Result<Event>> {
        loop {
            if self.overflow.spilled.swap(false, Ordering::SeqCst) {
                tracing::debug!("folder event queue full; rescanning the folder");
                return Some(Ok(Event::new(EventKind::Other).set_flag(Flag::Rescan)));
            }
            tokio::select! {
                biased;
                _ = self.overflow.wake.notified() => continue,
                event = self.events.recv() => return event,
            }
        }
    }
}

/// Starts watching `root`; notifications flow until the returned watcher is dropped.
/// Must be called inside a tokio runtime.
pub(super) fn start(root: Arc<Root>, subscribers: Arc<Subscribers>, spine: &Spine) -> io::Result<RecommendedWatcher> {
    let (inlet, queue) = queue(EVENT_QUEUE);
    let handler = move |event: notify::Result<Event>| inlet.send(event);
    let config = Config::default().with_follow_symlinks(false);
    let mut watcher = RecommendedWatcher::new(handler, config).map_err(io::Error::other)?;
    watcher.watch(root.dir(), RecursiveMode::Recursive).map_err(io::Error::other)?;
    spine.spawn("serve-dir-watch", watch_loop(queue, root, subscribers, spine.shutdown()));
    Ok(watcher)
}

/// The `serve-dir-watch` task: one round of notifications per burst, until the watcher goes.
async fn watch_loop(mut queue: Queue, root: Arc<Root>, subscribers: Arc<Subscribers>, shutdown: CancellationToken) {
    tracing::debug!(uri = %root.uri(), "serve-dir-watch started");
    loop {
        let first = tokio::select! {
            first = queue.recv() => first,
            _ = shutdown.cancelled() => None,
        };
        let Some(first) = first else { break };
        let mut change = Change::default();
        absorb(&mut change, &root, first);
        gather_burst(&mut queue, &mut change, &root).await;
        if change.updated.is_empty() && !change.list_changed {
            continue;
        }
        for (target, notice) in subscribers.deliveries(&change) {
            dispatch(subscribers.clone(), target, notice);
        }
    }
    tracing::debug!(uri = %root.uri(), "serve-dir-watch stopped");
}

/// Folds further events into `change` until [`QUIET`] passes without one.
async fn gather_burst(queue: &mut Queue, change: &mut Change, root: &Root) {
    let cap = Instant::now() + MAX_BURST;
    loop {
        let deadline = (Instant::now() + QUIET).min(cap);
        match timeout_at(deadline, queue.recv()).await {
            Ok(Some(event)) => absorb(change, root, event),
            Ok(None) | Err(_) => return,
        }
    }
}

/// What one notify event means for subscribers.
fn absorb(change: &mut Change, root: &Root, event: notify::Result<Event>) {
    let event = match event {
        Ok(event) => event,
        Err(e) => {
            tracing::warn!(uri = %root.uri(), error = %e, "folder watch error; assuming everything changed");
            change.updated.insert(root.dir().to_path_buf());
            change.list_changed = true;
            return;
        }
    };
    if event.need_rescan() {
        change.updated.insert(root.dir().to_path_buf());
        change.list_changed = true;
    }
    let (content, listing) = meaning(&event.kind);
    change.list_changed |= listing;
    if content || listing {
        let inside = event.paths.into_iter().filter(|p| root.contains(p));
        change.updated.extend(inside);
    }
}

/// (content may have changed, the set of files may have changed) for an event kind.
fn meaning(kind: &EventKind) -> (bool, bool) {
    match kind {
        EventKind::Create(_) | EventKind::Remove(_) => (true, true),
        EventKind::Modify(ModifyKind::Name(_)) => (true, true),
        EventKind::Modify(ModifyKind::Metadata(_)) => (false, false),
        EventKind::Modify(_) => (true, false),
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => (true, false),
        EventKind::Access(_) => (false, false),
        EventKind::Any | EventKind::Other => (true, true),
    }
}

/// Sends one notification off the watcher's path; forgets the target if its peer is gone.
fn dispatch(subscribers: Arc<Subscribers>, target: Target, notice: Notice) {
    tokio::spawn(async move {
        match timeout(SEND_TIMEOUT, send(&target, &notice)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::debug!(notice = ?notice, error = %e, "peer gone; dropping its registrations");
                subscribers.forget(&target);
            }
            Err(_) => tracing::warn!(notice = ?notice, "peer too slow; notification dropped"),
        }
    });
}

async fn send(target: &Target, notice: &Notice) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use rmcp::model::ResourceUpdatedNotificationParam as Updated;
    match (target, notice) {
        (Target::Session(_, peer), Notice::Updated(uri)) => {
            peer.notify_resource_updated(Updated::new(uri.clone())).await?
        }
        (Target::Session(_, peer), Notice::ListChanged) => peer.notify_resource_list_changed().await?,
        (Target::Stream(_, sink), Notice::Updated(uri)) => sink.notify_resource_updated(uri.clone()).await?,
        (Target::Stream(_, sink), Notice::ListChanged) => sink.notify_resource_list_changed().await?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, DataChange, MetadataKind, RemoveKind, RenameMode};

    fn event(kind: EventKind, path: &std::path::Path) -> notify::Result<Event> {
        Ok(Event::new(kind).add_path(path.to_path_buf()))
    }

    #[tokio::test]
    async fn a_burst_of_events_becomes_one_change() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path(), crate::serve_dir::UriBase::Absolute).unwrap();
        let file = root.dir().join("a.txt");
        let (events, mut queue) = queue(16);
        let burst = [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
        ];
        for kind in burst {
            events.send(event(kind, &file));
        }
        events.send(event(EventKind::Any, std::path::Path::new("/elsewhere")));
        let mut change = Change::default();
        let first = queue.recv().await.unwrap();
        absorb(&mut change, &root, first);
        gather_burst(&mut queue, &mut change, &root).await;
        assert_eq!(change.updated.into_iter().collect::<Vec<_>>(), vec![file]);
        assert!(change.list_changed);
        assert!(queue.events.try_recv().is_err(), "the whole burst was consumed");
    }

    /// Events that do not fit the queue are not lost: they become one rescan of the folder.
    #[tokio::test]
    async fn events_past_the_queue_become_a_rescan_of_the_whole_folder() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path(), crate::serve_dir::UriBase::Absolute).unwrap();
        let (a, b) = (root.dir().join("a.txt"), root.dir().join("b.txt"));
        let (events, mut queue) = queue(1);
        events.send(event(EventKind::Modify(ModifyKind::Data(DataChange::Any)), &a));
        events.send(event(EventKind::Modify(ModifyKind::Data(DataChange::Any)), &b));
        let mut change = Change::default();
        let first = queue.recv().await.unwrap();
        absorb(&mut change, &root, first);
        gather_burst(&mut queue, &mut change, &root).await;
        assert!(change.list_changed, "a rescan may have changed the listing");
        let updated: Vec<_> = change.updated.into_iter().collect();
        assert!(updated.contains(&root.dir().to_path_buf()) && updated.contains(&a), "{updated:?}");
    }

    #[test]
    fn event_kinds_map_to_content_and_listing_changes() {
        let cases = [
            (EventKind::Create(CreateKind::File), (true, true)),
            (EventKind::Remove(RemoveKind::File), (true, true)),
            (EventKind::Modify(ModifyKind::Name(RenameMode::Both)), (true, true)),
            (EventKind::Modify(ModifyKind::Data(DataChange::Content)), (true, false)),
            (EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)), (false, false)),
            (EventKind::Access(AccessKind::Close(AccessMode::Write)), (true, false)),
            (EventKind::Access(AccessKind::Read), (false, false)),
            (EventKind::Any, (true, true)),
        ];
        for (kind, expected) in cases {
            assert_eq!(meaning(&kind), expected, "{kind:?}");
        }
    }
}
