//! Generations: what keeps a read begun after an `updated` from being answered by anything
//! loaded before it. A read's key carries the URI's current generation; a notification for a
//! URI records a new, higher one for it and everything under it.
//!
//! Bounded: only notifications leave a record (reads leave none), and a record is dropped once
//! nothing it could hide can still be around — every entry stored under an older generation
//! has expired and every load begun before it has ended (`horizon`). When records pile up
//! anyway (a chatty upstream), the upstream's floor rises instead: every key of it changes,
//! which costs hits, never freshness.
//!
//! Invariant: `current(u, x)` after `bump(u, p)` (p = x or a parent of x) is greater than any
//! value `current(u, x)` returned before the bump, for as long as an older key can matter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::subscription_table::is_same_or_parent;

/// More records than this across all upstreams: the notified upstream's floor rises instead.
const MAX_RECORDS: usize = 100_000;

#[derive(Default)]
pub(super) struct Generations {
    state: Mutex<State>,
}

/// upstream → URI → (generation, when recorded).
/// foldhash (seeded per map) instead of SipHash: a hit looks up every parent of its URI.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type Records = Map<Arc<str>, Map<Box<str>, (u64, Instant)>>;

#[derive(Default)]
struct State {
    /// The last generation handed out.
    last: u64,
    /// upstream → URI → (generation, when).
    records: Records,
    count: usize,
    /// upstream → the lowest generation any of its URIs has.
    floors: Map<Arc<str>, u64>,
}

impl Generations {
    /// The generation of `uri` of `upstream`: the newest record of it or of a parent of it.
    pub fn current(&self, upstream: &str, uri: &str) -> u64 {
        let state = self.state.lock().expect("generations lock");
        let floor = state.floors.get(upstream).copied().unwrap_or(0);
        let Some(records) = state.records.get(upstream) else { return floor };
        parents_of(uri).filter_map(|held| records.get(held).map(|(generation, _)| *generation)).fold(floor, u64::max)
    }

    /// `uri` of `upstream` (and everything under it) changed. True when the upstream's floor
    /// rose instead of a record being kept: all its keys changed.
    pub fn bump(&self, upstream: &str, uri: &str) -> bool {
        let mut state = self.state.lock().expect("generations lock");
        state.last += 1;
        let generation = state.last;
        if state.count >= MAX_RECORDS {
            let dropped = state.records.remove(upstream).map_or(0, |records| records.len());
            state.count -= dropped;
            state.floors.insert(upstream.into(), generation);
            return true;
        }
        let records = state.records.entry(upstream.into()).or_default();
        let fresh = records.insert(uri.into(), (generation, Instant::now())).is_none();
        state.count += usize::from(fresh);
        false
    }

    /// Everything of `upstream` changed: its floor rises above every generation handed out.
    pub fn raise_floor(&self, upstream: &str) {
        let mut state = self.state.lock().expect("generations lock");
        state.last += 1;
        let generation = state.last;
        let dropped = state.records.remove(upstream).map_or(0, |records| records.len());
        state.count -= dropped;
        state.floors.insert(upstream.into(), generation);
    }

    /// Forget records older than `horizon`.
    pub fn prune(&self, horizon: Duration) {
        let now = Instant::now();
        let mut state = self.state.lock().expect("generations lock");
        let mut count = 0;
        state.records.retain(|_, records| {
            records.retain(|_, (_, when)| now.duration_since(*when) < horizon);
            if records.capacity() > 64 && records.len() < records.capacity() / 4 {
                records.shrink_to_fit();
            }
            count += records.len();
            !records.is_empty()
        });
        state.count = count;
    }

    /// Records kept (for `/status` and tests).
    pub fn len(&self) -> usize {
        self.state.lock().expect("generations lock").count
    }
}

/// Every URI a notification for which covers `uri` (see [`is_same_or_parent`]): `uri` itself,
/// each prefix ending before a `/`, `#` or `?`, and each prefix ending with a `/`.
pub(super) fn parents_of(uri: &str) -> impl Iterator<Item = &str> {
    let cuts = uri.char_indices().filter(|(_, c)| matches!(c, '/' | '#' | '?')).flat_map(|(at, c)| {
        let through = (c == '/').then(|| &uri[..=at]);
        std::iter::once(&uri[..at]).chain(through)
    });
    std::iter::once(uri).chain(cuts).inspect(move |held| debug_assert!(is_same_or_parent(held, uri)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_are_exactly_the_uris_whose_updates_cover_it() {
        let uri = "x://d/e/f.md?q#h";
        let found: std::collections::BTreeSet<&str> = parents_of(uri).collect();
        let expected: std::collections::BTreeSet<&str> =
            (0..=uri.len()).map(|end| &uri[..end]).filter(|held| is_same_or_parent(held, uri)).collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn a_bump_raises_the_uri_and_its_children_only() {
        let generations = Generations::default();
        let before = generations.current("u", "x://d/a");
        generations.bump("u", "x://d");
        assert!(generations.current("u", "x://d/a") > before);
        assert_eq!(generations.current("u", "x://dx"), 0);
        assert_eq!(generations.current("w", "x://d/a"), 0);
        assert_eq!(generations.len(), 1);
        generations.prune(Duration::ZERO);
        assert_eq!(generations.len(), 0, "records age out");
    }

    #[test]
    fn too_many_records_raise_the_floor_instead() {
        let generations = Generations::default();
        for i in 0..MAX_RECORDS {
            generations.bump("u", &format!("x://{i}"));
        }
        let before = generations.current("u", "x://other");
        assert!(generations.bump("u", "x://last"));
        assert!(generations.current("u", "x://other") > before, "every key of the upstream changed");
        assert!(generations.current("u", "x://7") >= generations.current("u", "x://last"));
        assert_eq!(generations.len(), 0);
    }
}
