//! The `[audit]` section: where the audit trail goes (see [`crate::audit`]). On by default, to
//! a file of its own: `file`, else [`DEFAULT_FILE`] in the state folder systemd gives a unit
//! (`$STATE_DIRECTORY`, from `StateDirectory=`), else beside the config. `file = "-"` sends it
//! to the `audit` log target (stderr) instead.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::value::Value;
use serde::Deserialize;

use super::{Problem, integer, push, report_unknown};

/// The audit file's name when `file` is not set.
pub const DEFAULT_FILE: &str = "audit.jsonl";

/// The audit trail's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// Record the trail at all.
    pub enabled: bool,
    /// Append JSON lines to this file; reopened on every config reload (SIGHUP), for log
    /// rotation. `None` (`file = "-"`): the `audit` log target.
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

pub(super) fn validate_audit(
    raw: RawAudit,
    base: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> AuditConfig {
    report_unknown("audit", &raw.unknown, problems);
    let defaults = AuditConfig::default();
    let queue = integer(raw.queue, defaults.queue, 1..=1_000_000, "audit.queue", problems);
    let file = match raw.file {
        Some(file) if file.as_os_str() == "-" => None,
        Some(file) => {
            let file = base.join(file);
            check_file(&file, problems);
            Some(file)
        }
        None => Some(default_folder(base, lookup).join(DEFAULT_FILE)),
    };
    AuditConfig { enabled: raw.enabled.unwrap_or(defaults.enabled), file, queue }
}

/// Where the audit file goes when none is named: systemd's state folder for the unit (the
/// first of `$STATE_DIRECTORY`), else the config's folder.
fn default_folder(base: &Path, lookup: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    let state = lookup("STATE_DIRECTORY").and_then(|dirs| dirs.split(':').next().map(PathBuf::from));
    state.filter(|dir| dir.is_absolute()).unwrap_or_else(|| base.to_path_buf())
}

fn check_file(file: &Path, problems: &mut Vec<Problem>) {
    let parent = file.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if file.file_name().is_none() || file.is_dir() {
        push(problems, "audit.file", format!("{} is not a file name", file.display()));
    } else if !parent.is_dir() {
        push(problems, "audit.file", format!("its folder {} does not exist", parent.display()));
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;

    #[test]
    fn audit_is_on_by_default_and_every_bad_key_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::from_toml("", dir.path(), &|_| None).expect("valid");
        assert!(config.audit.enabled);
        assert_eq!(config.audit.file, Some(dir.path().join("audit.jsonl")), "beside the config");
        let state = |name: &str| (name == "STATE_DIRECTORY").then(|| "/var/lib/mcp:/var/lib/other".to_string());
        let config = Config::from_toml("", dir.path(), &state).expect("valid");
        assert_eq!(config.audit.file, Some(Path::new("/var/lib/mcp/audit.jsonl").into()), "in systemd's state folder");
        let config = Config::from_toml("[audit]\nfile = \"-\"\n", dir.path(), &state).expect("valid");
        assert_eq!(config.audit.file, None, "the log target");
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
