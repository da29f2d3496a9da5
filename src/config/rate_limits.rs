//! `[rate_limits]` (per principal) and `[upstreams.rate_limits]` (per principal × that
//! upstream): token buckets for calls and reads. Off unless a rate is given.
//!
//! A bucket is a rate (`*_per_second` or `*_per_minute`, one of them) and a burst (`*_burst`,
//! by default the rate's number: `calls_per_minute = 60` lets 60 calls through at once, then
//! one a second). Calls are `tools/call` (the bridge's tools included), `prompts/get` and
//! `completion/complete`; reads are `resources/read`. Lists are not limited: they are answered
//! from the proxy's own catalog and never reach an upstream.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use figment::value::Value;
use serde::Deserialize;

use super::{Problem, push, report_unknown};

/// The buckets of one scope (the principal's own, or a principal's at one upstream).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateLimitsConfig {
    /// `tools/call`, `prompts/get`, `completion/complete`.
    pub calls: Option<Bucket>,
    /// `resources/read`.
    pub reads: Option<Bucket>,
}

/// One token bucket: a token comes back every `every`; at most `burst` are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub every: Duration,
    pub burst: NonZeroU32,
}

impl RateLimitsConfig {
    /// Neither calls nor reads are limited.
    pub fn is_off(&self) -> bool {
        self.calls.is_none() && self.reads.is_none()
    }
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct RawRateLimits {
    calls_per_second: Option<i64>,
    calls_per_minute: Option<i64>,
    calls_burst: Option<i64>,
    reads_per_second: Option<i64>,
    reads_per_minute: Option<i64>,
    reads_burst: Option<i64>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

/// Validate one `rate_limits` table found at `at` (`rate_limits`, or
/// `upstreams[0] (docs).rate_limits`), every problem reported.
pub(super) fn validate_rate_limits(at: &str, raw: &RawRateLimits, problems: &mut Vec<Problem>) -> RateLimitsConfig {
    report_unknown(at, &raw.unknown, problems);
    let calls = Rates { per_second: raw.calls_per_second, per_minute: raw.calls_per_minute, burst: raw.calls_burst };
    let reads = Rates { per_second: raw.reads_per_second, per_minute: raw.reads_per_minute, burst: raw.reads_burst };
    RateLimitsConfig { calls: calls.bucket(at, "calls", problems), reads: reads.bucket(at, "reads", problems) }
}

/// The keys of one bucket as written.
struct Rates {
    per_second: Option<i64>,
    per_minute: Option<i64>,
    burst: Option<i64>,
}

/// The largest rate or burst accepted (a million a second is no limit at all).
const MAX_COUNT: i64 = 1_000_000;

impl Rates {
    fn bucket(&self, at: &str, what: &str, problems: &mut Vec<Problem>) -> Option<Bucket> {
        let key = |suffix: &str| format!("{at}.{what}_{suffix}");
        let rate = match (self.per_second, self.per_minute) {
            (Some(_), Some(_)) => {
                let message = format!("give {what}_per_second or {what}_per_minute, not both");
                push(problems, &key("per_minute"), message);
                None
            }
            (Some(n), None) => count(n, &key("per_second"), problems).map(|n| (n, Duration::from_secs(1))),
            (None, Some(n)) => count(n, &key("per_minute"), problems).map(|n| (n, Duration::from_secs(60))),
            (None, None) => {
                if self.burst.is_some() {
                    let message = format!("a burst needs a rate: {what}_per_second or {what}_per_minute");
                    push(problems, &key("burst"), message);
                }
                return None;
            }
        };
        let burst = self.burst.map(|n| count(n, &key("burst"), problems));
        let (per_period, period) = rate?;
        let burst = match burst {
            Some(burst) => burst?,
            None => per_period,
        };
        Some(Bucket { every: period / per_period.get(), burst })
    }
}

fn count(n: i64, at: &str, problems: &mut Vec<Problem>) -> Option<NonZeroU32> {
    match n {
        1..=MAX_COUNT => NonZeroU32::new(n as u32),
        _ => {
            push(problems, at, format!("{n} is outside 1..={MAX_COUNT}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;

    fn config(text: &str) -> Config {
        Config::from_toml(text, Path::new("/nonexistent-base"), &|_| None).expect("valid")
    }

    #[test]
    fn rate_limits_are_off_unless_a_rate_is_given() {
        let plain = config("[[upstreams]]\nname = \"docs\"\nurl = \"http://127.0.0.1:1/mcp\"\n");
        assert!(plain.rate_limits.is_off());
        assert!(plain.upstreams[0].rate_limits.is_off());
    }

    #[test]
    fn a_rate_gives_a_bucket_whose_burst_defaults_to_the_rate() {
        let text = "[rate_limits]\ncalls_per_minute = 60\nreads_per_second = 50\nreads_burst = 10\n\
                    [[upstreams]]\nname = \"docs\"\nurl = \"http://127.0.0.1:1/mcp\"\n\
                    [upstreams.rate_limits]\ncalls_per_second = 2\n";
        let config = config(text);
        let nz = |n| NonZeroU32::new(n).expect("non-zero");
        assert_eq!(config.rate_limits.calls, Some(Bucket { every: Duration::from_secs(1), burst: nz(60) }));
        assert_eq!(config.rate_limits.reads, Some(Bucket { every: Duration::from_millis(20), burst: nz(10) }));
        let upstream = config.upstreams[0].rate_limits;
        assert_eq!(upstream.calls, Some(Bucket { every: Duration::from_millis(500), burst: nz(2) }));
        assert_eq!(upstream.reads, None);
    }

    #[test]
    fn every_bad_rate_limit_is_reported_at_once() {
        let text = "[rate_limits]\ncalls_per_second = 1\ncalls_per_minute = 1\nreads_burst = 5\nwrites = 1\n\
                    [[upstreams]]\nname = \"docs\"\nurl = \"http://127.0.0.1:1/mcp\"\n\
                    [upstreams.rate_limits]\nreads_per_second = 0\ncalls_per_minute = 5\ncalls_burst = -1\n";
        let error = Config::from_toml(text, Path::new("/b"), &|_| None).expect_err("invalid");
        let mut at: Vec<&str> = error.problems.iter().map(|p| p.at.as_str()).collect();
        at.sort_unstable();
        let expected = [
            "rate_limits.calls_per_minute",
            "rate_limits.reads_burst",
            "rate_limits.writes",
            "upstreams[0] (docs).rate_limits.calls_burst",
            "upstreams[0] (docs).rate_limits.reads_per_second",
        ];
        assert_eq!(at, expected, "{error}");
    }
}
