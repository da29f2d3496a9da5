//! Routed calls in flight per principal: each `tools/call`, `prompts/get` and
//! `completion/complete` holds an upstream request (up to the upstream's `request_timeout`), so
//! one principal's hosts may hold at most `server.max_calls_per_principal` of them at once; the
//! next is refused at once, and other principals are not affected.
//!
//! Invariant: a permit is given back when its call ends, however it ends (answer, error, the
//! host cancelling or going away).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Calls in flight, by principal.
pub(super) struct CallsInFlight {
    limit: usize,
    counts: Arc<Mutex<HashMap<String, usize>>>,
}

/// One call in flight; dropping it ends it.
pub struct CallPermit {
    counts: Arc<Mutex<HashMap<String, usize>>>,
    principal: String,
}

impl CallsInFlight {
    pub fn new(limit: usize) -> Self {
        CallsInFlight { limit, counts: Default::default() }
    }

    /// A permit for one more call of `principal`, unless it has `limit` in flight.
    pub fn admit(&self, principal: &str) -> Option<CallPermit> {
        let mut counts = self.counts.lock().expect("calls lock");
        let count = counts.entry(principal.to_string()).or_default();
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(CallPermit { counts: self.counts.clone(), principal: principal.to_string() })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

impl Drop for CallPermit {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().expect("calls lock");
        if let Some(count) = counts.get_mut(&self.principal) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.principal);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_holds_at_most_the_limit_and_gets_them_back() {
        let calls = CallsInFlight::new(2);
        let (first, second) = (calls.admit("bob"), calls.admit("bob"));
        assert!(first.is_some() && second.is_some());
        assert!(calls.admit("bob").is_none(), "the third is refused");
        assert!(calls.admit("alice").is_some(), "others are not affected");
        drop(first);
        let third = calls.admit("bob");
        assert!(third.is_some(), "a permit comes back when its call ends");
        drop((second, third));
        assert!(calls.counts.lock().unwrap().is_empty());
    }
}
