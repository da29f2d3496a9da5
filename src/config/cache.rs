//! The `[cache]` section: the read cache's bounds and lifetimes.

use std::collections::BTreeMap;
use std::time::Duration;

use figment::value::Value;
use serde::Deserialize;

use super::{Problem, duration, integer, push, report_unknown};

/// The read cache's settings. See docs/cache.md for how lifetimes are chosen.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    /// `false` passes every read through to its upstream.
    pub enabled: bool,
    /// Bound on the summed size of cached contents, in bytes.
    pub max_bytes: u64,
    /// A result larger than this is passed through, not cached.
    pub max_entry_bytes: u64,
    /// The operator's opt-in, for every upstream that sets none of its own
    /// (`[upstreams.cache] unwatched_ttl`): how long a result that came without a `ttlMs` is
    /// kept when no trusted, acknowledged subscription covers it. Zero (the default): such
    /// results are not kept.
    pub unwatched_ttl: Duration,
    /// Upper bound on any entry's lifetime, watched or not.
    pub max_ttl: Duration,
    /// How long past its lifetime an entry may still be served when its upstream is down or
    /// failing; zero turns this off. Never for entries an `updated` invalidated.
    pub stale_if_error: Duration,
    /// At most this many URIs per upstream are kept subscribed for the cache.
    pub max_watched_per_upstream: usize,
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct RawCache {
    enabled: Option<bool>,
    max_bytes: Option<Value>,
    max_entry_bytes: Option<Value>,
    unwatched_ttl: Option<String>,
    max_ttl: Option<String>,
    stale_if_error: Option<String>,
    max_watched_per_upstream: Option<i64>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

pub(super) fn validate_cache(raw: RawCache, problems: &mut Vec<Problem>) -> CacheConfig {
    report_unknown("cache", &raw.unknown, problems);
    let max_bytes = size(raw.max_bytes.as_ref(), 256 << 20, "cache.max_bytes", problems);
    let max_entry_bytes = size(raw.max_entry_bytes.as_ref(), 8 << 20, "cache.max_entry_bytes", problems);
    let max_watched_per_upstream =
        integer(raw.max_watched_per_upstream, 1000, 0..=1_000_000, "cache.max_watched_per_upstream", problems);
    CacheConfig {
        enabled: raw.enabled.unwrap_or(true),
        max_bytes,
        max_entry_bytes,
        unwatched_ttl: duration(raw.unwatched_ttl.as_deref(), "0s", "cache.unwatched_ttl", problems),
        max_ttl: duration(raw.max_ttl.as_deref(), "1h", "cache.max_ttl", problems),
        stale_if_error: duration(raw.stale_if_error.as_deref(), "0s", "cache.stale_if_error", problems),
        max_watched_per_upstream,
    }
}

/// One upstream's cache settings (`[upstreams.cache]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamCache {
    /// `false` passes this upstream's reads through, uncached.
    pub enabled: bool,
    /// This upstream's own bound on entry lifetimes; never above `cache.max_ttl`.
    pub max_ttl: Option<Duration>,
    /// Its `updated` notifications are reliable: an entry whose subscription it acknowledged
    /// lives until invalidated (up to `max_ttl`), past its `ttlMs`. Off by default (many
    /// servers advertise `subscribe` but notify only some changes); on by default for the
    /// built-in folder server, which notifies every change of its files.
    pub trust_notifications: bool,
    /// The operator's opt-in for this upstream: how long a result of it that came without a
    /// `ttlMs` is kept when no trusted, acknowledged subscription covers it; `None` takes
    /// `cache.unwatched_ttl`. Reads may then be that stale.
    pub unwatched_ttl: Option<Duration>,
}

impl Default for UpstreamCache {
    fn default() -> Self {
        Self { enabled: true, max_ttl: None, trust_notifications: false, unwatched_ttl: None }
    }
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct RawUpstreamCache {
    enabled: Option<bool>,
    max_ttl: Option<String>,
    trust_notifications: Option<bool>,
    unwatched_ttl: Option<String>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

/// `[upstreams.cache]`, plus the older `[[upstreams]] trust_notifications` (still accepted;
/// giving both is an error, so no setting silently loses). `folder`: the upstream is the
/// built-in folder server, trusted unless told otherwise.
pub(super) fn validate_upstream_cache(
    at: &str,
    folder: bool,
    legacy_trust: Option<bool>,
    raw: Option<&RawUpstreamCache>,
    problems: &mut Vec<Problem>,
) -> UpstreamCache {
    let default = RawUpstreamCache::default();
    let raw = raw.unwrap_or(&default);
    let at = format!("{at}.cache");
    report_unknown(&at, &raw.unknown, problems);
    if legacy_trust.is_some() && raw.trust_notifications.is_some() {
        push(
            problems,
            &format!("{at}.trust_notifications"),
            "also set as `trust_notifications` of the upstream itself: keep only `[upstreams.cache] trust_notifications`"
                .into(),
        );
    }
    let max_ttl = raw.max_ttl.as_deref().map(|text| duration(Some(text), "1h", &format!("{at}.max_ttl"), problems));
    let unwatched_ttl =
        raw.unwatched_ttl.as_deref().map(|text| duration(Some(text), "0s", &format!("{at}.unwatched_ttl"), problems));
    UpstreamCache {
        enabled: raw.enabled.unwrap_or(true),
        max_ttl,
        trust_notifications: raw.trust_notifications.or(legacy_trust).unwrap_or(folder),
        unwatched_ttl,
    }
}

pub(super) fn size(value: Option<&Value>, default: u64, at: &str, problems: &mut Vec<Problem>) -> u64 {
    let Some(value) = value else { return default };
    bytes(value).unwrap_or_else(|| {
        push(problems, at, "not a size like 256MiB, 512KiB, 1GiB or a number of bytes".into());
        default
    })
}

/// A size setting's bytes: a number (a TOML integer is signed: `max_bytes = 1024` counts too)
/// or a text [`parse_size`] reads.
pub(super) fn bytes(value: &Value) -> Option<u64> {
    match value {
        Value::Num(_, n) => n.to_u128_lossy().and_then(|n| u64::try_from(n).ok()),
        Value::String(_, text) => parse_size(text),
        _ => None,
    }
}

/// `"256MiB"`, `"512KiB"`, `"1GiB"`, `"100"` (bytes); also `KB`/`MB`/`GB` as powers of 1000.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    number.checked_mul(factor)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::super::{Config, UpstreamCache};

    fn upstream_cache(body: &str) -> Result<UpstreamCache, Vec<String>> {
        let text = format!("[[upstreams]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\n{body}");
        Config::from_toml(&text, Path::new("/"), &|_| None)
            .map(|config| config.upstreams[0].cache.clone())
            .map_err(|error| error.problems.into_iter().map(|p| format!("{}: {}", p.at, p.message)).collect())
    }

    #[test]
    fn upstream_cache_settings_default_to_untrusted_and_on() {
        assert_eq!(upstream_cache("").unwrap(), UpstreamCache::default());
        assert!(!UpstreamCache::default().trust_notifications, "safe by default");
        assert_eq!(UpstreamCache::default().unwatched_ttl, None, "no lifetime the upstream did not give");
    }

    #[test]
    fn nothing_is_kept_without_a_word_unless_the_operator_opts_in() {
        let global = |body: &str| {
            let text = format!("{body}\n[[upstreams]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\n");
            Config::from_toml(&text, Path::new("/"), &|_| None).map(|config| config.cache.unwatched_ttl)
        };
        assert_eq!(global("").unwrap(), Duration::ZERO, "not kept by default");
        assert_eq!(
            global("[cache]\nunwatched_ttl = \"5s\"").unwrap(),
            Duration::from_secs(5),
            "older configs keep theirs"
        );
        let own = upstream_cache("[upstreams.cache]\nunwatched_ttl = \"30s\"").unwrap();
        assert_eq!(own.unwatched_ttl, Some(Duration::from_secs(30)));
        let problems = upstream_cache("[upstreams.cache]\nunwatched_ttl = \"a while\"").unwrap_err();
        assert!(
            problems[0].starts_with("upstreams[0] (a).cache.unwatched_ttl: `a while` is not a duration"),
            "{problems:?}"
        );
    }

    #[test]
    fn the_folder_server_is_trusted_unless_told_otherwise() {
        let folder = |body: &str| {
            let dir = tempfile::tempdir().unwrap();
            let text = format!("[[upstreams]]\nname = \"f\"\ndir = \".\"\n{body}");
            Config::from_toml(&text, dir.path(), &|_| None).unwrap().upstreams[0].cache.trust_notifications
        };
        assert!(folder(""), "its notifications cover every change of its files");
        assert!(!folder("[upstreams.cache]\ntrust_notifications = false"));
    }

    #[test]
    fn upstream_cache_table_and_the_older_key_both_work() {
        let table = "[upstreams.cache]\nenabled = false\nmax_ttl = \"10m\"\ntrust_notifications = true";
        let expected = UpstreamCache {
            enabled: false,
            max_ttl: Some(Duration::from_secs(600)),
            trust_notifications: true,
            unwatched_ttl: None,
        };
        assert_eq!(upstream_cache(table).unwrap(), expected);
        assert!(upstream_cache("trust_notifications = true").unwrap().trust_notifications);
    }

    #[test]
    fn upstream_cache_problems_are_reported_together() {
        let body =
            "trust_notifications = true\n[upstreams.cache]\ntrust_notifications = false\nmax_ttl = \"soon\"\nttl = 1";
        let problems = upstream_cache(body).unwrap_err();
        for expected in [
            "upstreams[0] (a).cache.trust_notifications: also set",
            "upstreams[0] (a).cache.max_ttl: `soon` is not a duration",
            "upstreams[0] (a).cache.ttl: unknown key",
        ] {
            assert!(problems.iter().any(|p| p.starts_with(expected)), "{expected:?} not in {problems:?}");
        }
    }
}
