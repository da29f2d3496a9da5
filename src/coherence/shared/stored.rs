//! An entry as the shared tier stores it: its result and scope with its instants as Unix
//! milliseconds, so another replica reads them against its own clock.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rmcp::model::{CacheScope, ReadResourceResult};
use serde::{Deserialize, Serialize};

use crate::cache::Entry;
use crate::wire::contents_json::contents_json;

/// An entry as stored: instants as Unix milliseconds.
#[derive(Serialize, Deserialize)]
struct Stored {
    result: ReadResourceResult,
    fresh_until: u64,
    told_until: u64,
    keep_until: u64,
    scope: CacheScope,
    bytes: u32,
}

fn unix_ms(at: Instant, now: Instant) -> u64 {
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let ahead = at.saturating_duration_since(now);
    u64::try_from((wall + ahead).as_millis()).unwrap_or(u64::MAX)
}

fn instant(unix_ms: u64, now: Instant) -> Instant {
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    now + Duration::from_millis(unix_ms).saturating_sub(wall)
}

/// `entry` as the shared tier stores it (before sealing).
pub(super) fn encode(entry: &Entry, now: Instant) -> String {
    let stored = Stored {
        result: entry.result.clone(),
        fresh_until: unix_ms(entry.fresh_until, now),
        told_until: unix_ms(entry.told_until, now),
        keep_until: unix_ms(entry.keep_until, now),
        scope: entry.scope,
        bytes: entry.bytes,
    };
    serde_json::to_string(&stored).unwrap_or_default()
}

/// An entry stored by [`encode`], its instants read against this process's clock.
pub(super) fn decode(body: &str) -> Option<Entry> {
    let stored: Stored = serde_json::from_str(body).ok()?;
    let now = Instant::now();
    let contents_json = contents_json(&stored.result.contents);
    Some(Entry {
        fresh_until: instant(stored.fresh_until, now),
        told_until: instant(stored.told_until, now),
        keep_until: instant(stored.keep_until, now),
        scope: stored.scope,
        bytes: stored.bytes,
        result: stored.result,
        contents_json,
    })
}
