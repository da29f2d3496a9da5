//! The latest validated JWT of each principal, for RFC 8693 token exchange: an upstream with
//! `[upstreams.auth] kind = "token_exchange"` gets, for a principal's own upstream session, a
//! token the authorization server issued in exchange for that principal's JWT (see
//! `upstream::credentials`). [`Authenticator`](super::Authenticator) records every JWT it
//! accepts; a principal authenticated by a static token has none here.
//!
//! Kept in memory only, at most [`MAX_SUBJECTS`] principals: an expired token is dropped when
//! it is looked up, and when the book is full the token expiring first makes room.
//!
//! Invariant: a token is handed out only before the instant the proxy stops accepting it (and
//! with how long that is: a token exchanged for it is not used past it); it is never logged,
//! and `Debug` shows only how many are kept.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The most principals whose token is kept.
pub const MAX_SUBJECTS: usize = 10_000;

/// The principals' latest JWTs: a cheap `Clone` handle.
#[derive(Clone, Default)]
pub struct Subjects {
    inner: Arc<Mutex<HashMap<Arc<str>, Subject>>>,
}

struct Subject {
    token: Arc<str>,
    /// The first second (since the epoch) the token is no longer accepted.
    until: u64,
}

impl fmt::Debug for Subjects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subjects").field("kept", &self.len()).finish()
    }
}

impl Subjects {
    /// `principal` was just authenticated by `token`, a JWT accepted until `until`.
    pub fn record(&self, principal: &str, token: &str, until: u64) {
        let mut book = self.inner.lock().expect("subjects lock");
        if let Some(subject) = book.get_mut(principal) {
            if &*subject.token != token && until >= subject.until {
                *subject = Subject { token: token.into(), until };
            }
            return;
        }
        if book.len() >= MAX_SUBJECTS {
            make_room(&mut book, now());
        }
        book.insert(principal.into(), Subject { token: token.into(), until });
    }

    /// `principal`'s latest JWT, while it is still accepted.
    pub fn latest(&self, principal: &str) -> Option<Arc<str>> {
        self.latest_with_rest(principal).map(|(token, _)| token)
    }

    /// `principal`'s latest JWT while it is still accepted, with how long it still is (whole
    /// seconds, at least one).
    pub fn latest_with_rest(&self, principal: &str) -> Option<(Arc<str>, Duration)> {
        let mut book = self.inner.lock().expect("subjects lock");
        let subject = book.get(principal)?;
        let now = now();
        if subject.until <= now {
            book.remove(principal);
            return None;
        }
        Some((subject.token.clone(), Duration::from_secs(subject.until - now)))
    }

    /// How many principals' tokens are kept.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("subjects lock").len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Drop the expired tokens; if none was, the one expiring first.
fn make_room(book: &mut HashMap<Arc<str>, Subject>, now: u64) {
    book.retain(|_, subject| subject.until > now);
    if book.len() < MAX_SUBJECTS {
        return;
    }
    let first = book.iter().min_by_key(|(_, subject)| subject.until).map(|(principal, _)| principal.clone());
    if let Some(principal) = first {
        book.remove(&principal);
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_token_is_kept_until_it_expires() {
        let subjects = Subjects::default();
        let later = now() + 600;
        subjects.record("alice", "a.1.x", later);
        subjects.record("alice", "a.2.x", later + 1);
        subjects.record("gone", "g.1.x", now());
        assert_eq!(subjects.latest("alice").as_deref(), Some("a.2.x"));
        assert_eq!(subjects.latest("bob"), None);
        assert_eq!(subjects.latest("gone"), None, "an expired token is not handed out");
        assert_eq!(subjects.len(), 1, "and is dropped");
        assert!(!format!("{subjects:?}").contains("a.2.x"));
    }

    #[test]
    fn a_full_book_drops_the_token_expiring_first() {
        let mut book = HashMap::new();
        let at = now() + 600;
        for n in 0..MAX_SUBJECTS as u64 {
            book.insert(Arc::from(format!("p{n}")), Subject { token: "t.t.t".into(), until: at + n });
        }
        make_room(&mut book, now());
        assert_eq!(book.len(), MAX_SUBJECTS - 1);
        assert!(!book.contains_key("p0"));
    }
}
