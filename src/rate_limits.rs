//! Rate limits: token buckets (GCRA, `governor`'s keyed limiters) for calls and reads, per
//! principal (`[rate_limits]`) and per principal × upstream (`[upstreams.rate_limits]`). A
//! principal's buckets are keyed by who it is — a static token's principal or a JWT's subject —
//! whatever groups its token carries ([`without_groups`]): one subject presenting tokens with
//! other groups spends from the same buckets.
//!
//! [`RateLimits::check`] takes one token from each bucket that applies — the upstream's first,
//! then the principal's — or says which bucket is empty and when its next token comes. It does
//! no IO and never waits: callers check before any cache or upstream work, so a refused
//! request costs a map lookup.
//!
//! With `[cluster]` each replica keeps its own buckets, each at the configured rate and burst
//! divided by the replicas seen alive ([`RateLimits::share_among`]; the burst rounded up, at
//! least 1): with a balancer spreading requests evenly, a principal gets about the configured
//! rate from the cluster as a whole. It is approximate: a principal whose requests all land on
//! one replica gets that replica's share, and when the number of live replicas changes every
//! bucket is made again, full.
//!
//! Invariants:
//! - off unless configured: with no rate anywhere, [`RateLimits::check`] admits everything
//!   without touching a map;
//! - memory is bounded by the principals active within one refill of their bucket: the
//!   `cache-housekeeping` tick calls [`RateLimits::retain_recent`], which drops every key whose
//!   bucket is full again (indistinguishable from a fresh one);
//! - an upstream's buckets exist only while it is configured with a rate; the keys of a bucket
//!   are principals, so a host cannot mint keys by naming upstreams or tools.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use crate::config::{Bucket, RateLimitsConfig, UpstreamConfig};
use crate::policy::without_groups;

/// What a request spends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `tools/call` (the bridge's tools too), `prompts/get`, `completion/complete`.
    Calls,
    /// `resources/read`.
    Reads,
}

/// Which bucket refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The principal's own (`[rate_limits]`).
    Principal,
    /// The principal's at one upstream (`[upstreams.rate_limits]`).
    Upstream,
}

/// A refusal: which bucket, and how long until it has a token again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limited {
    pub kind: Kind,
    pub scope: Scope,
    /// The upstream whose bucket refused (`Scope::Upstream`), or the one the request was for.
    pub upstream: Option<String>,
    pub retry_after: Duration,
}

/// A cheap `Clone` handle on every bucket.
#[derive(Clone)]
pub struct RateLimits {
    inner: Arc<Inner>,
}

struct Inner {
    /// Any bucket at all: false skips every lookup.
    active: AtomicBool,
    principal: RwLock<Buckets>,
    /// The replicas the rates are shared among (1 without `[cluster]`).
    share: AtomicU32,
    /// Per configured upstream with a rate; keyed by principal inside.
    upstreams: RwLock<HashMap<String, Buckets>>,
    clock: DefaultClock,
}

/// The buckets of one scope, keyed by principal.
struct Buckets {
    /// As configured (before any sharing among replicas).
    config: RateLimitsConfig,
    calls: Option<DefaultKeyedRateLimiter<String>>,
    reads: Option<DefaultKeyedRateLimiter<String>>,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Calls => "calls",
            Kind::Reads => "reads",
        }
    }
}

impl Scope {
    pub fn label(self) -> &'static str {
        match self {
            Scope::Principal => "principal",
            Scope::Upstream => "upstream",
        }
    }
}

impl RateLimits {
    /// The buckets `principal` (every principal's own) and `upstreams` (each with a rate: its
    /// principals' buckets there) describe.
    pub fn new(principal: &RateLimitsConfig, upstreams: &[UpstreamConfig]) -> Self {
        let inner = Inner {
            active: AtomicBool::new(false),
            principal: RwLock::new(Buckets::new(*principal, 1)),
            share: AtomicU32::new(1),
            upstreams: RwLock::default(),
            clock: DefaultClock::default(),
        };
        let limits = RateLimits { inner: Arc::new(inner) };
        limits.configure_upstreams(upstreams);
        limits
    }

    /// Some bucket exists (configured at start or by a reload).
    pub fn is_on(&self) -> bool {
        self.inner.active.load(Ordering::Relaxed)
    }

    /// Take a token for one `kind` request of `principal` (an identity string, its groups not
    /// counted) to `upstream` (when the request names one the principal may use), or say which
    /// bucket is empty.
    pub fn check(&self, kind: Kind, principal: &str, upstream: Option<&str>) -> Result<(), Limited> {
        let inner = &self.inner;
        if !inner.active.load(Ordering::Relaxed) {
            return Ok(());
        }
        let key = without_groups(principal).into_owned();
        if let Some(upstream) = upstream {
            let upstreams = inner.upstreams.read().expect("rate limits lock");
            if let Some(Err(retry_after)) = upstreams.get(upstream).map(|b| b.take(kind, &key, &inner.clock)) {
                return Err(Limited { kind, scope: Scope::Upstream, upstream: Some(upstream.into()), retry_after });
            }
        }
        let principal = inner.principal.read().expect("rate limits lock");
        principal.take(kind, &key, &inner.clock).map_err(|retry_after| Limited {
            kind,
            scope: Scope::Principal,
            upstream: upstream.map(str::to_string),
            retry_after,
        })
    }

    /// Put the upstreams' buckets in line with `upstreams` (a config reload): an upstream
    /// whose rates are unchanged keeps its buckets (and what its principals spent); a changed
    /// one starts full; one without rates has none.
    pub fn configure_upstreams(&self, upstreams: &[UpstreamConfig]) {
        let inner = &self.inner;
        let share = inner.share.load(Ordering::Relaxed);
        let mut current = inner.upstreams.write().expect("rate limits lock");
        current.retain(|name, buckets| upstreams.iter().any(|u| u.name == *name && u.rate_limits == buckets.config));
        for upstream in upstreams.iter().filter(|u| !u.rate_limits.is_off()) {
            current.entry(upstream.name.clone()).or_insert_with(|| Buckets::new(upstream.rate_limits, share));
        }
        let active = !inner.principal.read().expect("rate limits lock").config.is_off() || !current.is_empty();
        inner.active.store(active, Ordering::Relaxed);
    }

    /// `[cluster]`: `replicas` are alive and share the rates; when that number changes every
    /// bucket is made again (full) at its share.
    pub fn share_among(&self, replicas: usize) {
        let inner = &self.inner;
        let replicas = u32::try_from(replicas.max(1)).unwrap_or(u32::MAX);
        if inner.share.swap(replicas, Ordering::Relaxed) == replicas {
            return;
        }
        let mut principal = inner.principal.write().expect("rate limits lock");
        *principal = Buckets::new(principal.config, replicas);
        drop(principal);
        for buckets in inner.upstreams.write().expect("rate limits lock").values_mut() {
            *buckets = Buckets::new(buckets.config, replicas);
        }
    }

    /// Forget every principal whose buckets are full again (housekeeping).
    pub fn retain_recent(&self) {
        self.inner.principal.read().expect("rate limits lock").retain_recent();
        for buckets in self.inner.upstreams.read().expect("rate limits lock").values() {
            buckets.retain_recent();
        }
    }

    /// How many keys the buckets hold (a principal counts once per bucket it spent from).
    pub fn keys(&self) -> usize {
        let upstreams = self.inner.upstreams.read().expect("rate limits lock");
        self.inner.principal.read().expect("rate limits lock").keys()
            + upstreams.values().map(Buckets::keys).sum::<usize>()
    }
}

impl Buckets {
    /// `config`'s buckets, each at its rate and burst divided by `share`.
    fn new(config: RateLimitsConfig, share: u32) -> Self {
        let limiter = |bucket: Bucket| limiter(shared(bucket, share));
        Buckets { config, calls: config.calls.map(limiter), reads: config.reads.map(limiter) }
    }

    /// A token of `kind` for `key`, or how long until there is one.
    fn take(&self, kind: Kind, key: &String, clock: &DefaultClock) -> Result<(), Duration> {
        let bucket = match kind {
            Kind::Calls => &self.calls,
            Kind::Reads => &self.reads,
        };
        let Some(bucket) = bucket else { return Ok(()) };
        bucket.check_key(key).map_err(|not_until| not_until.wait_time_from(clock.now()))
    }

    fn retain_recent(&self) {
        for bucket in [&self.calls, &self.reads].into_iter().flatten() {
            bucket.retain_recent();
            bucket.shrink_to_fit();
        }
    }

    fn keys(&self) -> usize {
        [&self.calls, &self.reads].into_iter().flatten().map(|bucket| bucket.len()).sum()
    }
}

/// One of `share` equal parts of `bucket`: a token every `share × every`, the burst divided
/// (rounded up, at least 1).
fn shared(bucket: Bucket, share: u32) -> Bucket {
    let burst = bucket.burst.get().div_ceil(share.max(1));
    Bucket { every: bucket.every * share.max(1), burst: NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN) }
}

fn limiter(bucket: Bucket) -> DefaultKeyedRateLimiter<String> {
    let quota = Quota::with_period(bucket.every).expect("a validated bucket refills").allow_burst(bucket.burst);
    DefaultKeyedRateLimiter::keyed(quota)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;

    fn limits(text: &str) -> RateLimits {
        let config = Config::from_toml(text, Path::new("/nonexistent-base"), &|_| None).expect("valid");
        RateLimits::new(&config.rate_limits, &config.upstreams)
    }

    const UPSTREAMS: &str = "[[upstreams]]\nname = \"docs\"\nurl = \"http://127.0.0.1:1/mcp\"\n\
                             [upstreams.rate_limits]\nreads_per_minute = 2\n\
                             [[upstreams]]\nname = \"mem\"\nurl = \"http://127.0.0.1:2/mcp\"\n";

    #[test]
    fn without_rates_everything_is_admitted_and_nothing_is_kept() {
        let limits = limits("");
        for _ in 0..1000 {
            assert_eq!(limits.check(Kind::Calls, "alice", Some("docs")), Ok(()));
        }
        assert_eq!(limits.keys(), 0);
    }

    #[test]
    fn a_principal_past_its_burst_is_refused_and_others_are_not() {
        let limits = limits("[rate_limits]\ncalls_per_minute = 3\n");
        for _ in 0..3 {
            assert_eq!(limits.check(Kind::Calls, "alice", None), Ok(()));
        }
        let refused = limits.check(Kind::Calls, "alice", Some("docs")).expect_err("over the burst");
        assert_eq!(
            (refused.kind, refused.scope, refused.upstream.as_deref()),
            (Kind::Calls, Scope::Principal, Some("docs"))
        );
        assert!(refused.retry_after > Duration::from_secs(10) && refused.retry_after <= Duration::from_secs(20));
        assert_eq!(limits.check(Kind::Calls, "bob", None), Ok(()), "bob has his own bucket");
        assert_eq!(limits.check(Kind::Reads, "alice", None), Ok(()), "reads are not limited here");
    }

    #[test]
    fn one_subject_has_one_bucket_whatever_groups_its_tokens_carry() {
        let limits = limits("[rate_limits]\ncalls_per_minute = 3\n");
        for identity in ["alice[a]{jwt}", "alice[b]{jwt}", "alice{jwt}"] {
            assert_eq!(limits.check(Kind::Calls, identity, None), Ok(()), "{identity}");
        }
        assert!(limits.check(Kind::Calls, "alice[c]{jwt}", None).is_err(), "one bucket, spent");
        assert_eq!(limits.check(Kind::Calls, "alice[a]", None), Ok(()), "the static alice is another principal");
        assert_eq!(limits.keys(), 2);
    }

    #[test]
    fn an_upstream_limit_applies_to_that_upstream_alone() {
        let limits = limits(UPSTREAMS);
        assert_eq!(limits.check(Kind::Reads, "alice", Some("docs")), Ok(()));
        assert_eq!(limits.check(Kind::Reads, "alice", Some("docs")), Ok(()));
        let refused = limits.check(Kind::Reads, "alice", Some("docs")).expect_err("docs is spent");
        assert_eq!((refused.scope, refused.upstream.as_deref()), (Scope::Upstream, Some("docs")));
        assert_eq!(limits.check(Kind::Reads, "alice", Some("mem")), Ok(()));
        assert_eq!(limits.check(Kind::Reads, "alice", None), Ok(()));
        assert_eq!(limits.check(Kind::Calls, "alice", Some("docs")), Ok(()));
        assert_eq!(limits.check(Kind::Reads, "bob", Some("docs")), Ok(()));
    }

    #[test]
    fn a_reload_keeps_unchanged_buckets_and_drops_removed_ones() {
        let limits = limits(UPSTREAMS);
        for _ in 0..2 {
            limits.check(Kind::Reads, "alice", Some("docs")).expect("burst");
        }
        let same = Config::from_toml(UPSTREAMS, Path::new("/b"), &|_| None).expect("valid");
        limits.configure_upstreams(&same.upstreams);
        assert!(limits.check(Kind::Reads, "alice", Some("docs")).is_err(), "what alice spent is kept");
        limits.configure_upstreams(&[]);
        assert_eq!(limits.check(Kind::Reads, "alice", Some("docs")), Ok(()));
        assert_eq!(limits.keys(), 0, "no bucket is left");
    }

    #[test]
    fn a_cluster_shares_each_rate_among_its_live_replicas() {
        let limits = limits(
            "[rate_limits]\ncalls_per_minute = 6\n[[upstreams]]\nname = \"docs\"\n\
                             url = \"http://127.0.0.1:1/mcp\"\n[upstreams.rate_limits]\nreads_per_minute = 5\n",
        );
        limits.share_among(3);
        for _ in 0..2 {
            limits.check(Kind::Calls, "alice", None).expect("a third of the burst");
            limits.check(Kind::Reads, "alice", Some("docs")).expect("5 / 3, rounded up");
        }
        let refused = limits.check(Kind::Calls, "alice", None).expect_err("this replica's share is spent");
        assert!(refused.retry_after > Duration::from_secs(20), "a token every 30 s: {refused:?}");
        assert!(limits.check(Kind::Reads, "alice", Some("docs")).is_err());
        limits.share_among(3);
        assert!(limits.check(Kind::Calls, "alice", None).is_err(), "the same share keeps what was spent");
        limits.share_among(1);
        for _ in 0..6 {
            limits.check(Kind::Calls, "alice", None).expect("alone again: the whole burst, full");
        }
    }

    #[test]
    fn full_buckets_are_forgotten_by_housekeeping() {
        let limits = limits("[rate_limits]\nreads_per_second = 1000\nreads_burst = 1\n");
        limits.check(Kind::Reads, "alice", None).expect("first");
        assert_eq!(limits.keys(), 1);
        // One token comes back every millisecond: wait until the bucket is full again.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while limits.keys() > 0 {
            assert!(std::time::Instant::now() < deadline, "the key was never dropped");
            std::thread::yield_now();
            limits.retain_recent();
        }
    }
}
