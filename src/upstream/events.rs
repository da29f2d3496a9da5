//! The bounded ingress from upstream supervisors to the proxy's event loop.
//!
//! Supervisors never wait on the event loop: [`EventSender::send`] queues without awaiting. When
//! the queue ([`EVENT_CAPACITY`]) is full, the event is not queued; its upstream is marked
//! *overflowed* instead, and the loop's next [`EventInbox::recv`] answers
//! [`Inbound::Overflowed`] for it before anything else, with what was lost ([`Lost`]): the URIs
//! of the dropped `updated` events while they are at most [`LOST_URIS_MAX`], else (or when any
//! other event was dropped) "anything of this upstream may have changed". The loop flushes the
//! upstream's cache and has list views compared again either way, but tells subscribers `updated`
//! only for the lost URIs — for every URI they hold of the upstream only when the set was not
//! kept. A spurious `updated` is safe and a missing one is not, so the fallback is "all".
//!
//! Events that carry an upstream's state (`Up`, `Down`, `OfferingsChanged`: what it offers as
//! tools and prompts) are never dropped: when one does not fit, it waits in a slot per upstream
//! that keeps only the newest, and later state events of that upstream go to the slot too (so
//! none overtakes another); the slot is delivered once the queue is empty.
//!
//! Invariant: no invalidation is lost. Every event sent is either received, or its upstream is
//! reported overflowed after the moment it was dropped; the last state event of an upstream is
//! always received, after every earlier one.

use std::collections::{BTreeMap, BTreeSet};
use std::mem;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, mpsc};

use super::UpstreamEvent;

/// Events that may wait for the event loop before they are coalesced per upstream, by default
/// (`server.event_queue`).
pub const EVENT_CAPACITY: usize = 1024;

/// At most this many URIs of dropped `updated` events are kept per upstream; past it, the
/// overflow counts as [`Lost::Everything`].
pub const LOST_URIS_MAX: usize = 256;

/// What the event loop receives.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    Event(UpstreamEvent),
    /// Events of this upstream were dropped (the queue was full).
    Overflowed(String, Lost),
}

/// What the dropped events of one upstream may have said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// Only `updated` of these (un-namespaced, as the upstream spelt them) URIs.
    Updated(BTreeSet<String>),
    /// Anything of the upstream may have changed.
    Everything,
}

impl Lost {
    /// `self` with `event` (which was dropped) added.
    fn with(self, event: &UpstreamEvent) -> Lost {
        match event {
            UpstreamEvent::ResourceUpdated { uri, .. } => self.and(Lost::Updated(BTreeSet::from([uri.clone()]))),
            _ => Lost::Everything,
        }
    }

    /// What both may have said: the URIs of both while they are at most [`LOST_URIS_MAX`].
    pub(crate) fn and(self, other: Lost) -> Lost {
        match (self, other) {
            (Lost::Updated(mut uris), Lost::Updated(more)) => {
                uris.extend(more);
                if uris.len() > LOST_URIS_MAX { Lost::Everything } else { Lost::Updated(uris) }
            }
            _ => Lost::Everything,
        }
    }
}

/// The supervisors' side: cheap to clone.
#[derive(Clone)]
pub struct EventSender {
    queue: mpsc::Sender<UpstreamEvent>,
    overflow: Arc<Overflow>,
}

/// The event loop's side.
pub struct EventInbox {
    queue: mpsc::Receiver<UpstreamEvent>,
    overflow: Arc<Overflow>,
}

#[derive(Default)]
struct Overflow {
    upstreams: Mutex<BTreeMap<String, Lost>>,
    /// The newest state event per upstream that did not fit (or followed one that did not).
    states: Mutex<BTreeMap<String, UpstreamEvent>>,
    wake: Notify,
}

/// Whether `event` carries state that a later event of its upstream replaces (and that must
/// not be lost).
fn carries_state(event: &UpstreamEvent) -> bool {
    matches!(event, UpstreamEvent::Up { .. } | UpstreamEvent::Down { .. } | UpstreamEvent::OfferingsChanged { .. })
}

/// A bounded event channel holding at most `capacity` events.
pub fn channel(capacity: usize) -> (EventSender, EventInbox) {
    let (queue, receiver) = mpsc::channel(capacity);
    let overflow = Arc::new(Overflow::default());
    (EventSender { queue, overflow: overflow.clone() }, EventInbox { queue: receiver, overflow })
}

impl EventSender {
    /// Queue `event` without waiting; when the queue is full, mark its upstream overflowed.
    pub fn send(&self, event: UpstreamEvent) {
        if carries_state(&event) {
            let mut states = self.overflow.states.lock().expect("overflow lock");
            if states.contains_key(event.upstream()) {
                states.insert(event.upstream().to_string(), event);
                drop(states);
                self.overflow.wake.notify_one();
                return;
            }
        }
        match self.queue.try_send(event) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(event)) if carries_state(&event) => {
                let upstream = event.upstream().to_string();
                tracing::debug!(upstream, "event queue full; its state waits in its slot");
                self.overflow.states.lock().expect("overflow lock").insert(upstream, event);
                self.overflow.wake.notify_one();
            }
            Err(mpsc::error::TrySendError::Full(event)) => {
                let upstream = event.upstream().to_string();
                tracing::debug!(upstream, "event queue full; the lost event is coalesced per upstream");
                let mut upstreams = self.overflow.upstreams.lock().expect("overflow lock");
                let lost = upstreams.entry(upstream).or_insert_with(|| Lost::Updated(BTreeSet::new()));
                *lost = mem::replace(lost, Lost::Everything).with(&event);
                drop(upstreams);
                self.overflow.wake.notify_one();
            }
        }
    }
}

impl EventSender {
    /// Report `upstream` overflowed with `lost` (what its own first hop could not keep): the
    /// loop hands it on like an overflow of this queue.
    pub fn overflowed(&self, upstream: &str, lost: Lost) {
        let mut upstreams = self.overflow.upstreams.lock().expect("overflow lock");
        let before = upstreams.remove(upstream).unwrap_or(Lost::Updated(BTreeSet::new()));
        upstreams.insert(upstream.to_string(), before.and(lost));
        drop(upstreams);
        self.overflow.wake.notify_one();
    }
}

impl EventInbox {
    /// The next overflowed upstream, else the next event; `None` once every sender is gone
    /// and nothing is left.
    pub async fn recv(&mut self) -> Option<Inbound> {
        loop {
            if let Some((upstream, lost)) = self.overflow.upstreams.lock().expect("overflow lock").pop_first() {
                return Some(Inbound::Overflowed(upstream, lost));
            }
            match self.queue.try_recv() {
                Ok(event) => return Some(Inbound::Event(event)),
                Err(mpsc::error::TryRecvError::Empty) => {
                    if let Some((_, event)) = self.overflow.states.lock().expect("overflow lock").pop_first() {
                        return Some(Inbound::Event(event));
                    }
                }
                Err(mpsc::error::TryRecvError::Disconnected) => {}
            }
            tokio::select! {
                biased;
                _ = self.overflow.wake.notified() => continue,
                event = self.queue.recv() => match event {
                    Some(event) => return Some(Inbound::Event(event)),
                    None => {
                        let last = self.overflow.upstreams.lock().expect("overflow lock").pop_first();
                        if let Some((upstream, lost)) = last {
                            return Some(Inbound::Overflowed(upstream, lost));
                        }
                        let state = self.overflow.states.lock().expect("overflow lock").pop_first();
                        return state.map(|(_, event)| Inbound::Event(event));
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn updated(upstream: &str, uri: &str) -> UpstreamEvent {
        UpstreamEvent::ResourceUpdated {
            upstream: upstream.into(),
            uri: uri.into(),
            change: crate::upstream::Change::Heard,
        }
    }

    fn lost(uris: &[&str]) -> Lost {
        Lost::Updated(uris.iter().map(|uri| uri.to_string()).collect())
    }

    /// Updates into a queue of one: the first arrives as sent, those that did not fit arrive
    /// as an overflow of their upstream naming their URIs — before anything queued later.
    #[tokio::test]
    async fn a_full_queue_turns_lost_events_into_an_overflow_of_their_upstream() {
        let (sender, mut inbox) = channel(1);
        sender.send(updated("a", "x://1"));
        sender.send(updated("a", "x://2"));
        sender.send(updated("a", "x://5"));
        sender.send(updated("a", "x://2"));
        sender.send(updated("b", "x://3"));
        assert_eq!(inbox.recv().await, Some(Inbound::Overflowed("a".into(), lost(&["x://2", "x://5"]))));
        assert_eq!(inbox.recv().await, Some(Inbound::Overflowed("b".into(), lost(&["x://3"]))));
        assert_eq!(inbox.recv().await, Some(Inbound::Event(updated("a", "x://1"))));
        sender.send(updated("a", "x://4"));
        assert_eq!(inbox.recv().await, Some(Inbound::Event(updated("a", "x://4"))));
        drop(sender);
        assert_eq!(inbox.recv().await, None);
    }

    /// Past [`LOST_URIS_MAX`] URIs, or with any other event lost, the overflow is "everything".
    #[tokio::test]
    async fn an_overflow_past_the_bound_or_of_other_events_is_everything() {
        let (sender, mut inbox) = channel(1);
        sender.send(updated("a", "x://0"));
        for n in 1..=LOST_URIS_MAX + 1 {
            sender.send(updated("a", &format!("x://{n}")));
        }
        sender.send(updated("b", "x://1"));
        sender.send(UpstreamEvent::CatalogChanged { upstream: "b".into() });
        sender.send(updated("b", "x://2"));
        assert_eq!(inbox.recv().await, Some(Inbound::Overflowed("a".into(), Lost::Everything)));
        assert_eq!(inbox.recv().await, Some(Inbound::Overflowed("b".into(), Lost::Everything)));
        assert_eq!(inbox.recv().await, Some(Inbound::Event(updated("a", "x://0"))));
    }

    fn down(upstream: &str) -> UpstreamEvent {
        UpstreamEvent::Down { upstream: upstream.into() }
    }

    /// State events that do not fit are never lost, and none overtakes another: the newest
    /// waits in its upstream's slot and arrives after everything queued before it.
    #[tokio::test]
    async fn state_events_that_do_not_fit_arrive_last_and_newest() {
        let (sender, mut inbox) = channel(1);
        sender.send(updated("a", "x://1"));
        sender.send(down("a"));
        let changed = UpstreamEvent::CatalogChanged { upstream: "a".into() };
        assert!(!carries_state(&changed));
        assert_eq!(inbox.recv().await, Some(Inbound::Event(updated("a", "x://1"))));
        // The slot of `a` is taken: its next state event joins it even though there is room.
        sender.send(down("a"));
        sender.send(updated("a", "x://2"));
        assert_eq!(inbox.recv().await, Some(Inbound::Event(updated("a", "x://2"))));
        assert_eq!(inbox.recv().await, Some(Inbound::Event(down("a"))));
        sender.send(down("b"));
        assert_eq!(inbox.recv().await, Some(Inbound::Event(down("b"))));
        drop(sender);
        assert_eq!(inbox.recv().await, None);
    }

    /// A loop already waiting on an empty queue wakes for an overflow.
    #[tokio::test]
    async fn a_waiting_loop_wakes_for_an_overflow() {
        let (sender, mut inbox) = channel(1);
        let waiting = tokio::spawn(async move { (inbox.recv().await, inbox.recv().await) });
        sender.send(updated("a", "x://1"));
        sender.send(updated("a", "x://2"));
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.unwrap().unwrap();
        let expected = [Inbound::Event(updated("a", "x://1")), Inbound::Overflowed("a".into(), lost(&["x://2"]))];
        let got = [got.0.unwrap(), got.1.unwrap()];
        assert!(got == expected || got == [expected[1].clone(), expected[0].clone()], "{got:?}");
    }
}
