//! Watches the folder (recursively, without following symlinks) and turns each burst of
//! file-system events into one round of notifications.
//!
//! Life of a save: notify reports create/modify/close events on its own thread → they queue on
//! an unbounded channel → the `serve-dir-watch` task gathers them until the folder has been
//! quiet for [`QUIET`] (at most [`MAX_BURST`]) → one [`Change`] → [`Subscribers::deliveries`] →
//! one spawned send per notification, each bounded by [`SEND_TIMEOUT`], so a stuck peer never
//! holds up the watcher or anyone else. A peer whose send fails is forgotten.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{Config, Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout, timeout_at};

use super::paths::Root;
use super::subscribers::{Change, Notice, Subscribers, Target};

/// A burst ends after this long without events.
const QUIET: Duration = Duration::from_millis(50);
/// A burst never lasts longer than this, however busy the folder.
const MAX_BURST: Duration = Duration::from_secs(1);
/// How long one notification may take to hand to a peer before it is dropped.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts watching `root`; notifications flow until the returned watcher is dropped.
/// Must be called inside a tokio runtime.
pub(super) fn start(root: Arc<Root>, subscribers: Arc<Subscribers>) -> io::Result<RecommendedWatcher> {
    let (events, queue) = mpsc::unbounded_channel();
    let handler = move |event: notify::Result<Event>| {
        let _ = events.send(event);
    };
    let config = Config::default().with_follow_symlinks(false);
    let mut watcher = RecommendedWatcher::new(handler, config).map_err(io::Error::other)?;
    watcher.watch(root.dir(), RecursiveMode::Recursive).map_err(io::Error::other)?;
    tokio::spawn(watch_loop(queue, root, subscribers));
    Ok(watcher)
}

/// The `serve-dir-watch` task: one round of notifications per burst, until the watcher goes.
async fn watch_loop(
    mut queue: mpsc::UnboundedReceiver<notify::Result<Event>>,
    root: Arc<Root>,
    subscribers: Arc<Subscribers>,
) {
    tracing::debug!(uri = %root.uri(), "serve-dir-watch started");
    while let Some(first) = queue.recv().await {
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
async fn gather_burst(queue: &mut mpsc::UnboundedReceiver<notify::Result<Event>>, change: &mut Change, root: &Root) {
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
        let (events, mut queue) = mpsc::unbounded_channel();
        let burst = [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
        ];
        for kind in burst {
            events.send(event(kind, &file)).unwrap();
        }
        events.send(event(EventKind::Any, std::path::Path::new("/elsewhere"))).unwrap();
        let mut change = Change::default();
        let first = queue.recv().await.unwrap();
        absorb(&mut change, &root, first);
        gather_burst(&mut queue, &mut change, &root).await;
        assert_eq!(change.updated.into_iter().collect::<Vec<_>>(), vec![file]);
        assert!(change.list_changed);
        assert!(queue.try_recv().is_err(), "the whole burst was consumed");
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
