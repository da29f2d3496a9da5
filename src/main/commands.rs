//! The one-shot commands (`check`, `policy explain`, `import`) and where `serve` takes its
//! configuration from (a config file or a host's servers file).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::{CliOverrides, Config, ConfigError, UpstreamTransport};
use crate::mcp_json;
use crate::policy::PolicySet;
use rustix::fs::{Mode, OFlags};

use super::EXIT_CONFIG;

/// Where `serve` takes its configuration from: a config file, or a host's servers file.
#[derive(Clone)]
pub(crate) enum Loaded {
    ConfigFile(PathBuf),
    McpJson(PathBuf),
}

impl Loaded {
    pub(crate) fn of(config: PathBuf, mcp_json: Option<PathBuf>) -> Loaded {
        mcp_json.map_or(Loaded::ConfigFile(config), Loaded::McpJson)
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            Loaded::ConfigFile(path) | Loaded::McpJson(path) => path,
        }
    }

    /// The configuration; with `report`, what an import changed is logged.
    pub(crate) fn load(&self, cli: &CliOverrides, report: bool) -> Result<Config, ConfigError> {
        match self {
            Loaded::ConfigFile(path) => Config::load(path, cli),
            Loaded::McpJson(path) => mcp_json::load_config(path, cli).map(|(config, notes)| {
                for note in notes.iter().filter(|_| report) {
                    tracing::warn!(entry = %note.entry, "{}", note.message);
                }
                config
            }),
        }
    }
}

/// `import FILE [--output OUT]`: the config on stdout or in OUT, the notes on stderr.
pub(crate) fn import(file: &Path, output: Option<&Path>, force: bool) -> ExitCode {
    let shown = mcp_json::printable(&file.display().to_string());
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("{shown}: cannot read: {error}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let print_notes = |notes: &[mcp_json::Note]| {
        for note in notes {
            eprintln!("{shown}: `{}`: {}", note.entry, note.message);
        }
    };
    let mut imported = match mcp_json::import(&text, &mcp_json::Origin::of_file(file)) {
        Ok(imported) => imported,
        Err(error) => {
            print_notes(&error.notes);
            eprint!("{shown}: {error}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    imported.suggest_sandboxes(&mcp_json::Host::real());
    print_notes(&imported.notes);
    let text = imported.to_toml();
    let written = match output {
        None => {
            print!("{text}");
            Ok(())
        }
        Some(out) => write_config(out, &text, force),
    };
    if let Err(error) = written {
        eprintln!("{error}");
        return ExitCode::FAILURE;
    }
    let names: Vec<&str> = imported.variables.iter().map(String::as_str).collect();
    if !names.is_empty() {
        eprintln!("set in the proxy's environment before `check` or `serve`: {}", names.join(", "));
    }
    ExitCode::SUCCESS
}

/// Write the imported config at `out`: a new file, or (with `force`) over an existing one; never
/// through a symbolic link (refused, also when one appears between the look and the write), so
/// a link planted at `out` cannot aim the write at another file.
fn write_config(out: &Path, text: &str, force: bool) -> Result<(), String> {
    let shown = mcp_json::printable(&out.display().to_string());
    let symlink = || format!("{shown} is a symbolic link: not written through it (name the file itself)");
    if std::fs::symlink_metadata(out).is_ok_and(|meta| meta.file_type().is_symlink()) {
        return Err(symlink());
    }
    let replace = if force { OFlags::TRUNC } else { OFlags::EXCL };
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC | replace;
    let file = rustix::fs::open(out, flags, Mode::from_raw_mode(0o666)).map_err(|error| match error {
        rustix::io::Errno::EXIST => format!("{shown} exists (--force to overwrite)"),
        rustix::io::Errno::LOOP => symlink(),
        error => format!("cannot write {shown}: {error}"),
    })?;
    std::fs::File::from(file).write_all(text.as_bytes()).map_err(|e| format!("cannot write {shown}: {e}"))
}

pub(crate) fn check(path: &Path) -> ExitCode {
    let loaded = Config::load(path, &CliOverrides::default()).and_then(|config| {
        let missing = config.missing_folders();
        if missing.is_empty() { Ok(config) } else { Err(ConfigError { problems: missing }) }
    });
    match loaded {
        Ok(config) => {
            let policies = match config.policy_set().files() {
                [] => "no policies: everything is allowed".to_string(),
                files => format!("policy files {}", files.join(", ")),
            };
            for warning in config.warnings() {
                println!("warning: {warning}");
            }
            println!("{}: valid ({} upstreams; {policies})", path.display(), config.upstreams.len());
            println!("{}", config.telemetry.describe());
            for upstream in &config.upstreams {
                let stdio = matches!(upstream.transport, UpstreamTransport::Command { .. });
                if !matches!(upstream.transport, UpstreamTransport::Dir { .. }) {
                    println!("upstream {}: {}", upstream.name, upstream.sessions.describe(stdio));
                }
                if let UpstreamTransport::Command { sandbox, .. } = &upstream.transport {
                    match sandbox {
                        Some(profile) => println!("upstream {}: sandboxed: {}", upstream.name, profile.describe()),
                        None => println!(
                            "upstream {}: unsandboxed: runs as the proxy's user, with its files and network",
                            upstream.name
                        ),
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            print!("{}: {error}", path.display());
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

pub(crate) fn explain(path: &Path, principal: &str, uris: &[String]) -> ExitCode {
    // Deciding needs the policies only: token variables may be unset where this runs.
    let config = match Config::load_without_secrets(path) {
        Ok(config) => config,
        Err(error) => {
            print!("{}: {error}", path.display());
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    for uri in uris {
        println!("{uri}\n{}", explain_one(config.policy_set(), principal, uri));
    }
    ExitCode::SUCCESS
}

fn explain_one(policies: &PolicySet, principal: &str, uri: &str) -> String {
    let (normal, decision) = match policies.normalize_and_decide(principal, uri) {
        Ok(decided) => decided,
        Err(error) => return format!("  refused ({error}): answered as not found"),
    };
    let verdict = match (&decision.file, &decision.pattern, decision.allowed) {
        (Some(file), Some(pattern), true) => format!("allowed by {file}: {pattern}"),
        (Some(file), Some(pattern), false) => format!("denied by {file}: {pattern}"),
        (_, _, true) => "allowed: no policies are configured".to_string(),
        (_, _, false) => "denied: no rule allows it".to_string(),
    };
    format!("  normalised: {normal}\n  {verdict}")
}
