//! The `[audit]` section: where the audit trail goes (see [`crate::audit`]). On by default, to
//! the `audit` log target; `file` sends it to a file of JSON lines instead.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::value::Value;
use serde::Deserialize;

use super::{Problem, push, report_unknown};

/// The audit trail's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// Record the trail at all.
    pub enabled: bool,
    /// Append JSON lines to this file (relative to the config file) instead of the `audit`
    /// log target; reopened on every config reload (SIGHUP), for log rotation.
    pub file: Option<PathBuf>,
    /// Events that may wait for the writer; past it they are dropped and counted
    /// (`mcp_proxy_audit_dropped_total`), never waited for.
    pub queue: usize,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self { enabled: true, file: None, queue: 8192 }
    }
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct RawAudit {
    enabled: Option<bool>,
    file: Option<PathBuf>,
    queue: Option<i64>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

pub(super) fn validate_audit(raw: RawAudit, base: &Path, problems: &mut Vec<Problem>) -> AuditConfig {
    report_unknown("audit", &raw.unknown, problems);
    let defaults = AuditConfig::default();
    let queue = match raw.queue.unwrap_or(defaults.queue as i64) {
        n @ 1..=1_000_000 => n as usize,
        n => {
            push(problems, "audit.queue", format!("{n} is outside 1..=1000000"));
            defaults.queue
        }
    };
    let file = raw.file.map(|file| base.join(file));
    if let Some(file) = &file {
        let parent = file.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if file.file_name().is_none() || file.is_dir() {
            push(problems, "audit.file", format!("{} is not a file name", file.display()));
        } else if !parent.is_dir() {
            push(problems, "audit.file", format!("its folder {} does not exist", parent.display()));
        }
    }
    AuditConfig { enabled: raw.enabled.unwrap_or(defaults.enabled), file, queue }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;

    #[test]
    fn audit_is_on_by_default_and_every_bad_key_is_reported() {
        let config = Config::from_toml("", Path::new("."), &|_| None).expect("valid");
        assert!(config.audit.enabled);
        assert_eq!(config.audit.file, None);
        let dir = tempfile::tempdir().unwrap();
        let text = "[audit]\nfile = \"audit.jsonl\"\nqueue = 16\n";
        let config = Config::from_toml(text, dir.path(), &|_| None).expect("valid");
        assert_eq!(config.audit.file, Some(dir.path().join("audit.jsonl")));
        assert_eq!(config.audit.queue, 16);
        let text = "[audit]\nfile = \"missing/audit.jsonl\"\nqueue = 0\ncolour = 1\n";
        let error = Config::from_toml(text, dir.path(), &|_| None).expect_err("invalid");
        let at: Vec<&str> = error.problems.iter().map(|p| p.at.as_str()).collect();
        assert_eq!(at.len(), 3, "{error}");
        for key in ["audit.file", "audit.queue", "audit.colour"] {
            assert!(at.contains(&key), "{key} in {error}");
        }
    }
}
