//! The bounded first hop of what an upstream says: from its connection (rmcp's notification
//! callbacks, the stdio reader's faults, the watch keeper) to its supervisor.
//!
//! Senders never wait: [`NoticeSender::send`] queues without awaiting, so an upstream's reader
//! is never held up by its supervisor. When the queue ([`NOTICE_CAPACITY`]) is full, the notice
//! is folded into a spill instead, by the event queue's rule ([`Lost`]): the URIs of the
//! `updated` notices that did not fit while they are at most `LOST_URIS_MAX`, else "anything of
//! this upstream may have changed"; a `list_changed` (of resources, or of tools and prompts) is
//! kept as a flag, a fault as the newest one. [`NoticeInbox::recv`] hands the spill on before
//! anything queued ([`Notice::Lost`], then the flags), and the supervisor tells the proxy:
//! every lost URI as updated, or the upstream overflowed (its cache flushed, its subscribers told).
//!
//! Invariant: no `updated` is lost silently — a notice sent is either received, or is in a
//! [`Notice::Lost`] received after the moment it was spilled.

use std::collections::BTreeSet;
use std::mem;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, mpsc};

use super::Change;
use super::events::Lost;

/// Notices that may wait for the supervisor before they are folded into the spill.
pub(crate) const NOTICE_CAPACITY: usize = 512;

/// What an upstream said, for its supervisor.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Notice {
    ListChanged,
    /// This URI changed, or may have; how it is known.
    Changed(String, Change),
    /// It said `tools/list_changed` or `prompts/list_changed`.
    OfferingsChanged,
    /// The upstream sent something faulty that no request could be failed for (for `/status`).
    Fault(String),
    /// Notices that did not fit in the queue said at most this.
    Lost(Lost),
}

/// The connection's side: cheap to clone.
#[derive(Clone)]
pub(crate) struct NoticeSender {
    queue: mpsc::Sender<Notice>,
    spill: Arc<Spill>,
}

/// The supervisor's side.
pub(crate) struct NoticeInbox {
    queue: mpsc::Receiver<Notice>,
    spill: Arc<Spill>,
}

#[derive(Default)]
struct Spill {
    spilled: Mutex<Spilled>,
    wake: Notify,
}

/// What did not fit, folded.
#[derive(Default)]
struct Spilled {
    lost: Option<Lost>,
    list_changed: bool,
    offerings_changed: bool,
    fault: Option<String>,
}

/// A bounded notice channel holding at most `capacity` notices (and the spill).
pub(crate) fn channel(capacity: usize) -> (NoticeSender, NoticeInbox) {
    let (queue, receiver) = mpsc::channel(capacity);
    let spill = Arc::new(Spill::default());
    (NoticeSender { queue, spill: spill.clone() }, NoticeInbox { queue: receiver, spill })
}

impl NoticeSender {
    /// Queue `notice` without waiting; when the queue is full, fold it into the spill.
    pub fn send(&self, notice: Notice) {
        match self.queue.try_send(notice) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(notice)) => {
                tracing::debug!(notice = ?notice, "upstream notice queue full; the notice is folded into its spill");
                self.spill.spilled.lock().expect("spill lock").fold(notice);
                self.spill.wake.notify_one();
            }
        }
    }
}

impl NoticeInbox {
    /// The spill first, else the next notice; `None` once every sender is gone and nothing is
    /// left.
    pub async fn recv(&mut self) -> Option<Notice> {
        loop {
            if let Some(notice) = self.try_recv() {
                return Some(notice);
            }
            tokio::select! {
                biased;
                _ = self.spill.wake.notified() => continue,
                notice = self.queue.recv() => {
                    return notice.or_else(|| self.spill.spilled.lock().expect("spill lock").take());
                }
            }
        }
    }

    /// The spill first, else a queued notice, if there is one now.
    pub fn try_recv(&mut self) -> Option<Notice> {
        let spilled = self.spill.spilled.lock().expect("spill lock").take();
        spilled.or_else(|| self.queue.try_recv().ok())
    }
}

impl Spilled {
    fn fold(&mut self, notice: Notice) {
        match notice {
            Notice::Changed(uri, _) => self.lose(Lost::Updated(BTreeSet::from([uri]))),
            Notice::Lost(lost) => self.lose(lost),
            Notice::ListChanged => self.list_changed = true,
            Notice::OfferingsChanged => self.offerings_changed = true,
            Notice::Fault(fault) => self.fault = Some(fault),
        }
    }

    fn lose(&mut self, lost: Lost) {
        self.lost = Some(match self.lost.take() {
            Some(before) => before.and(lost),
            None => lost,
        });
    }

    fn take(&mut self) -> Option<Notice> {
        if let Some(lost) = self.lost.take() {
            return Some(Notice::Lost(lost));
        }
        if mem::take(&mut self.list_changed) {
            return Some(Notice::ListChanged);
        }
        if mem::take(&mut self.offerings_changed) {
            return Some(Notice::OfferingsChanged);
        }
        self.fault.take().map(Notice::Fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn updated(uri: String) -> Notice {
        Notice::Changed(uri, Change::Heard)
    }

    fn lost(uris: &[&str]) -> Notice {
        Notice::Lost(Lost::Updated(uris.iter().map(|uri| uri.to_string()).collect()))
    }

    /// Into a queue of one: the first notice arrives as sent; the `updated` that did not fit
    /// arrive as one `Lost` naming their URIs, before anything queued; the flags follow.
    #[tokio::test]
    async fn a_full_queue_folds_what_did_not_fit_and_hands_it_on_first() {
        let (sender, mut inbox) = channel(1);
        sender.send(updated("x://1".into()));
        sender.send(updated("x://2".into()));
        sender.send(Notice::ListChanged);
        sender.send(Notice::Changed("x://3".into(), Change::Unseen));
        sender.send(Notice::Fault("old".into()));
        sender.send(Notice::Fault("new".into()));
        assert_eq!(inbox.recv().await, Some(lost(&["x://2", "x://3"])));
        assert_eq!(inbox.recv().await, Some(Notice::ListChanged));
        assert_eq!(inbox.recv().await, Some(Notice::Fault("new".into())));
        assert_eq!(inbox.recv().await, Some(updated("x://1".into())));
        sender.send(Notice::OfferingsChanged);
        assert_eq!(inbox.recv().await, Some(Notice::OfferingsChanged));
        drop(sender);
        assert_eq!(inbox.recv().await, None);
    }

    /// Past `LOST_URIS_MAX` lost URIs, the spill says anything may have changed.
    #[tokio::test]
    async fn too_many_lost_updates_become_everything() {
        let (sender, mut inbox) = channel(1);
        for n in 0..=super::super::events::LOST_URIS_MAX + 1 {
            sender.send(updated(format!("x://{n}")));
        }
        assert_eq!(inbox.recv().await, Some(Notice::Lost(Lost::Everything)));
        assert_eq!(inbox.recv().await, Some(updated("x://0".into())));
    }

    /// A spill that happens while the supervisor waits wakes it.
    #[tokio::test]
    async fn a_spill_wakes_a_waiting_inbox() {
        let (sender, mut inbox) = channel(1);
        sender.send(updated("x://1".into()));
        assert_eq!(inbox.recv().await, Some(updated("x://1".into())));
        let waiting = tokio::spawn(async move { (inbox.recv().await, inbox.recv().await) });
        sender.send(updated("x://2".into()));
        sender.send(updated("x://3".into()));
        let (first, second) = tokio::time::timeout(std::time::Duration::from_secs(10), waiting).await.unwrap().unwrap();
        let got = [first, second];
        assert!(got.contains(&Some(updated("x://2".into()))), "{got:?}");
        assert!(got.contains(&Some(lost(&["x://3"]))) || got.contains(&Some(updated("x://3".into()))), "{got:?}");
    }
}
