//! The cache's hold on upstream subscriptions: one hold per watched (upstream, URI) in the
//! watch book, kept while a load is waiting on it or a watched entry may still be served.
//!
//! A load gets a [`WatchTicket`]; keeping a watched entry extends the hold to the entry's
//! `keep_until`; a ticket dropped otherwise (load failed, not kept, subscription not in place)
//! lets the hold go unless something else still needs it. Expired holds go on the sweep.
//! Invariant: the book holds (cache holder, URI) exactly while this map has the URI.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::watches::WatchBook;
use crate::subscriptions::HolderId;

pub(super) struct Holds {
    book: Arc<WatchBook>,
    holder: HolderId,
    cap: usize,
    /// upstream → URI → hold.
    state: Mutex<HashMap<Arc<str>, Held>>,
}

type Held = HashMap<Arc<str>, Hold>;

#[derive(Default)]
struct Hold {
    /// Loads holding a ticket.
    pending: u32,
    /// The last `keep_until` of a watched entry.
    until: Option<Instant>,
}

impl Hold {
    fn needed(&self, now: Instant) -> bool {
        self.pending > 0 || self.until.is_some_and(|until| until > now)
    }
}

/// A load's claim on the upstream subscription of its URI.
pub struct WatchTicket {
    holds: Arc<Holds>,
    upstream: Arc<str>,
    uri: Arc<str>,
    done: bool,
}

impl WatchTicket {
    /// The load's entry is kept, watched, until `until`.
    pub(super) fn keep_until(mut self, until: Instant) {
        self.done = true;
        self.holds.finish(&self.upstream, &self.uri, Some(until));
    }
}

impl Drop for WatchTicket {
    fn drop(&mut self) {
        if !self.done {
            self.holds.finish(&self.upstream, &self.uri, None);
        }
    }
}

impl Holds {
    pub fn new(book: Arc<WatchBook>, holder: HolderId, cap: usize) -> Self {
        Self { book, holder, cap, state: Mutex::default() }
    }

    /// Hold `uri` for a load: yes when it is held already or `upstream` is below the cap.
    pub fn ticket(self: &Arc<Self>, upstream: &str, uri: &str) -> Option<WatchTicket> {
        let mut state = self.state.lock().expect("holds lock");
        let held = state.entry(upstream.into()).or_default();
        let (upstream, uri): (Arc<str>, Arc<str>) = match held.get_key_value(uri) {
            Some((uri, _)) => (upstream.into(), uri.clone()),
            None if held.len() < self.cap => {
                self.book.hold(self.holder, upstream, uri);
                (upstream.into(), uri.into())
            }
            None => return None,
        };
        held.entry(uri.clone()).or_default().pending += 1;
        Some(WatchTicket { holds: self.clone(), upstream, uri, done: false })
    }

    fn finish(&self, upstream: &str, uri: &str, until: Option<Instant>) {
        let mut state = self.state.lock().expect("holds lock");
        let Some(held) = state.get_mut(upstream) else { return };
        let Some(hold) = held.get_mut(uri) else { return };
        hold.pending -= 1;
        hold.until = hold.until.max(until);
        if !hold.needed(Instant::now()) {
            held.remove(uri);
            self.book.release(self.holder, upstream, uri);
        }
    }

    /// Let go of holds no load and no live entry needs.
    pub fn sweep(&self) {
        let now = Instant::now();
        let mut state = self.state.lock().expect("holds lock");
        for (upstream, held) in state.iter_mut() {
            held.retain(|uri, hold| {
                let keep = hold.needed(now);
                if !keep {
                    self.book.release(self.holder, upstream, uri);
                }
                keep
            });
            if held.capacity() > 64 && held.len() < held.capacity() / 4 {
                held.shrink_to_fit();
            }
        }
        state.retain(|_, held| !held.is_empty());
    }

    /// URIs held (all upstreams).
    pub fn len(&self) -> usize {
        self.state.lock().expect("holds lock").values().map(HashMap::len).sum()
    }
}
