//! The `[bridge]` section: resources offered to models as the proxy's own tools (see
//! [`crate::bridge`]). Off by default.

use std::collections::BTreeMap;

use figment::value::Value;
use serde::Deserialize;

use super::{Problem, cache::size, integer, report_unknown};

/// The bridge's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeConfig {
    /// Offer the `proxy_resources_*` tools.
    pub enabled: bool,
    /// A blob up to this many (decoded) bytes is returned as an embedded resource; a larger
    /// one as a summary (URI, mimeType, size).
    pub max_blob_bytes: u64,
    /// The most matches one `proxy_resources_search` returns (a call may ask for fewer).
    pub max_search_results: usize,
    /// The most listed resources one `proxy_resources_search` call examines; past it the
    /// answer says the search was cut and gives a cursor to go on from.
    pub max_search_scan: usize,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        Self { enabled: false, max_blob_bytes: 64 << 10, max_search_results: 50, max_search_scan: 10_000 }
    }
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct RawBridge {
    enabled: Option<bool>,
    max_blob_bytes: Option<Value>,
    max_search_results: Option<i64>,
    max_search_scan: Option<i64>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

pub(super) fn validate_bridge(raw: RawBridge, problems: &mut Vec<Problem>) -> BridgeConfig {
    report_unknown("bridge", &raw.unknown, problems);
    let defaults = BridgeConfig::default();
    let max_blob_bytes = size(raw.max_blob_bytes.as_ref(), defaults.max_blob_bytes, "bridge.max_blob_bytes", problems);
    let max_search_results =
        integer(raw.max_search_results, defaults.max_search_results, 1..=1000, "bridge.max_search_results", problems);
    let max_search_scan =
        integer(raw.max_search_scan, defaults.max_search_scan, 1..=1_000_000, "bridge.max_search_scan", problems);
    BridgeConfig { enabled: raw.enabled.unwrap_or(false), max_blob_bytes, max_search_results, max_search_scan }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;

    #[test]
    fn bridge_is_off_by_default_and_every_bad_key_is_reported() {
        let config = Config::from_toml("", Path::new("."), &|_| None).expect("valid");
        assert!(!config.bridge.enabled);
        assert_eq!(config.bridge.max_blob_bytes, 64 << 10);
        let text = "[bridge]\nenabled = true\nmax_blob_bytes = \"1KiB\"\n";
        let config = Config::from_toml(text, Path::new("."), &|_| None).expect("valid");
        assert!(config.bridge.enabled);
        assert_eq!(config.bridge.max_blob_bytes, 1024);
        // A plain TOML integer is a number of bytes (the same for `[cache]` sizes).
        let text = "[bridge]\nmax_blob_bytes = 16\n[cache]\nmax_entry_bytes = 2048\n";
        let config = Config::from_toml(text, Path::new("."), &|_| None).expect("valid");
        assert_eq!((config.bridge.max_blob_bytes, config.cache.max_entry_bytes), (16, 2048));
        let text = "[bridge]\nmax_blob_bytes = \"lots\"\nmax_search_results = 0\nmax_search_scan = 0\ncolour = 1\n";
        let error = Config::from_toml(text, Path::new("."), &|_| None).expect_err("invalid");
        let at: Vec<&str> = error.problems.iter().map(|p| p.at.as_str()).collect();
        assert_eq!(at.len(), 4, "{error}");
        for key in ["bridge.max_blob_bytes", "bridge.max_search_results", "bridge.max_search_scan", "bridge.colour"] {
            assert!(at.contains(&key), "{key} in {error}");
        }
    }
}
