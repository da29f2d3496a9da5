//! Routed calls in flight per principal: each `tools/call`, `prompts/get` and
//! `completion/complete` holds an upstream request (up to the upstream's `request_timeout`), so
//! one principal's hosts may hold at most `server.max_calls_per_principal` of them at once; the
//! next is refused at once, and other principals are not affected.
//!
//! With `[cluster]` the cap holds across the live replicas (`crate::cluster::counts`): a call is
//! counted here first, then admitted by one Redis script that sums every live replica's count.
//! While Redis cannot be reached the cap is this replica's alone.
//!
//! Invariant: a permit is given back when its call ends, however it ends (answer, error, the
//! host cancelling or going away); this replica's count in Redis follows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::cluster::{Admitted, Cluster, counts};

/// Calls in flight, by principal.
pub(super) struct CallsInFlight {
    limit: usize,
    counts: Arc<Counts>,
}

/// This replica's counts, and the cluster they are shared with.
struct Counts {
    here: Mutex<HashMap<String, usize>>,
    cluster: Option<Cluster>,
}

/// One call in flight; dropping it ends it.
pub struct CallPermit {
    counts: Arc<Counts>,
    principal: String,
}

impl CallsInFlight {
    pub fn new(limit: usize, cluster: Option<Cluster>) -> Self {
        CallsInFlight { limit, counts: Arc::new(Counts { here: Mutex::default(), cluster }) }
    }

    /// A permit for one more call of `principal`, unless it has `limit` in flight (across the
    /// cluster, with `[cluster]` and Redis reachable).
    pub async fn admit(&self, principal: &str) -> Option<CallPermit> {
        let here = {
            let mut here = self.counts.here.lock().expect("calls lock");
            let count = here.entry(principal.to_string()).or_default();
            if *count >= self.limit {
                return None;
            }
            *count += 1;
            *count
        };
        let permit = CallPermit { counts: self.counts.clone(), principal: principal.to_string() };
        let Some(cluster) = self.counts.cluster.as_ref() else { return Some(permit) };
        if !cluster.redis_up() {
            self.counts.publish(principal);
            return Some(permit);
        }
        let admitted = cluster.counts().admit(cluster, counts::CALLS, principal, here, self.limit).await;
        self.counts.publish(principal);
        match admitted {
            Ok(Admitted::Yes) => Some(permit),
            Ok(Admitted::OverCap) => None,
            Err(error) => {
                tracing::debug!(error = %error, "cluster: the call cap is this replica's while Redis is unreachable");
                Some(permit)
            }
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

impl Counts {
    /// With `[cluster]`: `principal`'s count here, as it is now, goes to Redis.
    fn publish(&self, principal: &str) {
        let Some(cluster) = &self.cluster else { return };
        let here = self.here.lock().expect("calls lock");
        let count = here.get(principal).copied().unwrap_or(0);
        // Under the lock: counts reach the writer in the order they were.
        cluster.counts().set(cluster, counts::CALLS, principal, count);
    }
}

impl Drop for CallPermit {
    fn drop(&mut self) {
        let mut counts = self.counts.here.lock().expect("calls lock");
        if let Some(count) = counts.get_mut(&self.principal) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.principal);
            }
        }
        drop(counts);
        self.counts.publish(&self.principal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_principal_holds_at_most_the_limit_and_gets_them_back() {
        let calls = CallsInFlight::new(2, None);
        let (first, second) = (calls.admit("bob").await, calls.admit("bob").await);
        assert!(first.is_some() && second.is_some());
        assert!(calls.admit("bob").await.is_none(), "the third is refused");
        assert!(calls.admit("alice").await.is_some(), "others are not affected");
        drop(first);
        let third = calls.admit("bob").await;
        assert!(third.is_some(), "a permit comes back when its call ends");
        drop((second, third));
        assert!(calls.counts.here.lock().unwrap().is_empty());
    }
}
