//! A small bounded memo of [`super::PolicySet::judge`]: (principal, URI as a host sent it) →
//! the normalised URI and the decision, or why the URI is refused. Normalising a URI and
//! deciding on it is a pure function of the policy set, the principal and the URI, and a cache
//! hit asks it again for the same few URIs at every request; the memo answers those from one
//! hash lookup.
//!
//! Invariant: a memo belongs to exactly one compiled policy set (it lives inside it), so a
//! reload, which installs a new set, starts from an empty memo: no decision of one set is ever
//! answered for another. Only URIs up to [`MAX_URI_BYTES`] are kept and the memo holds at most
//! [`MAX_ENTRIES`] answers (it is emptied when full), so hosts naming ever new URIs cost it at
//! most a few hundred KiB.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use foldhash::fast::RandomState;

use super::Decision;
use crate::uri::UriError;

/// The most answers kept; the memo is emptied when a new one would exceed it.
pub const MAX_ENTRIES: usize = 1024;
/// Longer URIs are judged every time, never kept.
pub const MAX_URI_BYTES: usize = 256;

/// A URI judged for one principal: its normal form (the only one forwarded) and the decision.
#[derive(Debug, PartialEq, Eq)]
pub struct Judged {
    pub normalized: String,
    pub decision: Decision,
}

/// What [`super::PolicySet::judge`] answers.
pub type Judgement = Result<Arc<Judged>, UriError>;

/// The memo of one policy set.
#[derive(Default)]
pub(super) struct Memo {
    /// By principal, then by URI as sent.
    answers: Mutex<Answers>,
}

#[derive(Default)]
struct Answers {
    /// foldhash (seeded per map) instead of SipHash: asked on every read.
    by_principal: HashMap<String, HashMap<String, Judgement, RandomState>, RandomState>,
    count: usize,
}

impl Memo {
    /// The memoised answer for (`principal`, `uri`), or `judge()`'s, kept when small enough.
    pub(super) fn get_or(&self, principal: &str, uri: &str, judge: impl FnOnce() -> Judgement) -> Judgement {
        if uri.len() > MAX_URI_BYTES || principal.len() > MAX_URI_BYTES {
            return judge();
        }
        if let Some(known) = self.lock().by_principal.get(principal).and_then(|uris| uris.get(uri)) {
            return known.clone();
        }
        // Judged outside the lock; two requests judging the same URI at once agree anyway.
        let judgement = judge();
        let mut answers = self.lock();
        if answers.count >= MAX_ENTRIES {
            answers.by_principal.clear();
            answers.count = 0;
        }
        let uris = answers.by_principal.entry(principal.to_string()).or_default();
        if uris.insert(uri.to_string(), judgement.clone()).is_none() {
            answers.count += 1;
        }
        judgement
    }

    /// How many answers are kept (for tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().count
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Answers> {
        // A panic while holding the lock leaves nothing half-written that matters: answers
        // are whole values, so a poisoned memo is still a correct one.
        self.answers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
