//! `[upstreams.sandbox]`: the sandbox profile of a `command` upstream (docs/sandbox.md):
//! `read` and `write` (paths, relative to the config file, that exist), `network`, `keep_env`
//! (variable names), `memory` (a size of at least 16MiB), `processes` (1..=100000),
//! `best_effort`, `user` (`"UID:GID"`, for a proxy running as root).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::value::Value;
use serde::Deserialize;

use super::{Problem, parse_size, push, report_unknown, upstream};
use crate::sandbox::{NOBODY, SandboxProfile};

/// The smallest `memory` accepted: less does not start a dynamically linked program.
const MIN_MEMORY: u64 = 16 << 20;

#[derive(Debug, Deserialize, Default, Clone)]
pub(super) struct RawSandbox {
    #[serde(default)]
    read: Vec<PathBuf>,
    #[serde(default)]
    write: Vec<PathBuf>,
    network: Option<bool>,
    #[serde(default)]
    keep_env: Vec<String>,
    memory: Option<String>,
    processes: Option<i64>,
    best_effort: Option<bool>,
    user: Option<String>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

/// The profile of the upstream at `at`; every problem goes to `problems`.
pub(super) fn validate_sandbox(at: &str, raw: RawSandbox, base: &Path, problems: &mut Vec<Problem>) -> SandboxProfile {
    let at = format!("{at}.sandbox");
    report_unknown(&at, &raw.unknown, problems);
    let read = paths(&format!("{at}.read"), raw.read, base, problems);
    let write = paths(&format!("{at}.write"), raw.write, base, problems);
    for name in raw.keep_env.iter().filter(|name| !upstream::is_variable_name(name)) {
        push(problems, &format!("{at}.keep_env"), format!("`{name}` is not a variable name like API_KEY"));
    }
    let memory = raw.memory.and_then(|text| match parse_size(&text) {
        Some(bytes) if bytes >= MIN_MEMORY => Some(bytes),
        Some(_) => {
            push(problems, &format!("{at}.memory"), format!("`{text}` is below 16MiB: no program starts in it"));
            None
        }
        None => {
            push(problems, &format!("{at}.memory"), format!("`{text}` is not a size like 512MiB or 2GiB"));
            None
        }
    });
    let processes = raw.processes.and_then(|n| match n {
        1..=100_000 => Some(n as u64),
        n => {
            push(problems, &format!("{at}.processes"), format!("{n} is outside 1..=100000"));
            None
        }
    });
    let user = raw.user.map_or(NOBODY, |text| {
        parse_user(&text).unwrap_or_else(|| {
            push(problems, &format!("{at}.user"), format!("`{text}` is not numeric `UID:GID` like \"65534:65534\""));
            NOBODY
        })
    });
    if user.0 == 0 {
        push(problems, &format!("{at}.user"), "a sandboxed server never runs as root (uid 0)".into());
    }
    SandboxProfile {
        read,
        write,
        network: raw.network.unwrap_or(false),
        keep_env: raw.keep_env,
        memory,
        processes,
        best_effort: raw.best_effort.unwrap_or(false),
        user,
    }
}

/// Each path made absolute against `base`; one that does not exist is a problem (a rule can
/// only name an existing file or folder).
fn paths(at: &str, raw: Vec<PathBuf>, base: &Path, problems: &mut Vec<Problem>) -> Vec<PathBuf> {
    raw.into_iter()
        .map(|path| std::path::absolute(base.join(&path)).unwrap_or_else(|_| base.join(&path)))
        .filter(|path| {
            let exists = path.exists();
            if !exists {
                push(problems, at, format!("`{}` does not exist", path.display()));
            }
            exists
        })
        .collect()
}

fn parse_user(text: &str) -> Option<(u32, u32)> {
    let (uid, gid) = text.split_once(':')?;
    Some((uid.parse().ok()?, gid.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, UpstreamTransport};
    use crate::sandbox::NOBODY;

    fn load(sandbox: &str, dir: &std::path::Path) -> Result<Config, Vec<String>> {
        let text = format!("[[upstreams]]\nname = \"s\"\ncommand = \"server\"\n[upstreams.sandbox]\n{sandbox}");
        Config::from_toml(&text, dir, &|_| None)
            .map_err(|e| e.problems.into_iter().map(|p| format!("{}: {}", p.at, p.message)).collect())
    }

    #[test]
    fn a_profile_is_read_with_its_defaults() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        let config =
            load("write = [\"data\"]\nmemory = \"512MiB\"\nprocesses = 32\nkeep_env = [\"API_KEY\"]\n", dir.path())
                .unwrap();
        let UpstreamTransport::Command { sandbox: Some(profile), .. } = &config.upstreams[0].transport else {
            panic!("no profile")
        };
        assert_eq!(profile.write, vec![dir.path().join("data")]);
        assert!(profile.read.is_empty());
        assert!(!profile.network, "the network is off unless allowed");
        assert_eq!((profile.memory, profile.processes), (Some(512 << 20), Some(32)));
        assert_eq!(profile.keep_env, vec!["API_KEY".to_string()]);
        assert_eq!(profile.user, NOBODY);
        assert!(!profile.best_effort);
    }

    #[test]
    fn every_bad_value_is_a_problem_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let bad = "read = [\"missing\"]\nnetwork = true\nkeep_env = [\"NOT A NAME\"]\nmemory = \"1MiB\"\n\
                   processes = 0\nuser = \"root\"\nshell = true\n";
        let problems = load(bad, dir.path()).unwrap_err();
        let at = "upstreams[0] (s).sandbox";
        for (key, says) in [
            ("shell", "unknown key"),
            ("read", "does not exist"),
            ("keep_env", "is not a variable name"),
            ("memory", "below 16MiB"),
            ("processes", "outside 1..=100000"),
            ("user", "is not numeric"),
        ] {
            assert!(
                problems.iter().any(|p| p.starts_with(&format!("{at}.{key}: ")) && p.contains(says)),
                "{key}: {says} in {problems:#?}"
            );
        }
        assert_eq!(problems.len(), 6, "{problems:#?}");
    }

    #[test]
    fn a_profile_belongs_to_command_upstreams_only() {
        let dir = tempfile::tempdir().unwrap();
        let text =
            "[[upstreams]]\nname = \"web\"\nurl = \"http://127.0.0.1:1/mcp\"\n[upstreams.sandbox]\nnetwork = true\n";
        let problems = Config::from_toml(text, dir.path(), &|_| None).unwrap_err().problems;
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].at, "upstreams[0] (web).sandbox");
        assert!(problems[0].message.contains("applies only to `command` upstreams"));
    }
}
