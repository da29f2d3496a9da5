//! Per-URI hints that only save work (never decide freshness): whether a URI's results are
//! public (so loads may be shared across principals) and whether they could not be kept (so
//! they are not subscribed again). Each lives until a deadline and the whole map is bounded:
//! losing a hint costs a shared load or a subscription, nothing else.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Above this many hints, the oldest half is forgotten.
const MAX_HINTS: usize = 50_000;

/// upstream → URI → (hint, until).
type ByUri<V> = HashMap<Arc<str>, HashMap<Box<str>, (V, Instant)>>;

pub(super) struct Hints<V> {
    state: Mutex<ByUri<V>>,
}

impl<V: Copy> Hints<V> {
    pub fn new() -> Self {
        Self { state: Mutex::default() }
    }

    pub fn get(&self, upstream: &str, uri: &str) -> Option<V> {
        let state = self.state.lock().expect("hints lock");
        let (value, until) = state.get(upstream)?.get(uri)?;
        (*until > Instant::now()).then_some(*value)
    }

    pub fn set(&self, upstream: &str, uri: &str, value: V, until: Instant) {
        let mut state = self.state.lock().expect("hints lock");
        if state.values().map(HashMap::len).sum::<usize>() >= MAX_HINTS {
            let now = Instant::now();
            let mut deadlines: Vec<Instant> = state.values().flat_map(|m| m.values().map(|(_, t)| *t)).collect();
            let (_, median, _) = deadlines.select_nth_unstable(MAX_HINTS / 2);
            let cut = (*median).max(now);
            prune(&mut state, cut);
        }
        state.entry(upstream.into()).or_default().insert(uri.into(), (value, until));
    }

    pub fn remove(&self, upstream: &str, uri: &str) {
        if let Some(uris) = self.state.lock().expect("hints lock").get_mut(upstream) {
            uris.remove(uri);
        }
    }

    /// Forget hints past their deadline.
    pub fn sweep(&self) {
        prune(&mut self.state.lock().expect("hints lock"), Instant::now());
    }

    pub fn len(&self) -> usize {
        self.state.lock().expect("hints lock").values().map(HashMap::len).sum()
    }
}

fn prune<V>(state: &mut ByUri<V>, cut: Instant) {
    state.retain(|_, uris| {
        uris.retain(|_, (_, until)| *until > cut);
        if uris.capacity() > 64 && uris.len() < uris.capacity() / 4 {
            uris.shrink_to_fit();
        }
        !uris.is_empty()
    });
    if state.capacity() > 64 && state.len() < state.capacity() / 4 {
        state.shrink_to_fit();
    }
}
