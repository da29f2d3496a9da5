//! The sandbox of a stdio upstream: its profile (what it may read and write, network on or off,
//! the environment it keeps, its memory and process limits), and how a child is started under
//! it. Unprivileged kernel features only (no user namespaces): Landlock for files and TCP,
//! `PR_SET_NO_NEW_PRIVS`, rlimits; a proxy running as root starts a sandboxed child as
//! `user` (nobody by default), since the kernel exempts root from `RLIMIT_NPROC`.
//!
//! Every stdio child of the proxy binary is started through its own `sandbox-exec` launcher
//! ([`launcher`] names it; [`Launch`] builds the command): a small process that becomes the
//! child subreaper of the server and everything it starts, applies the profile between fork
//! and exec (a child without a profile is left as it is), and kills the whole tree when the
//! proxy closes the upstream or dies, even with `-9` (it watches a pipe, the lifeline, whose
//! other end only the proxy holds). A process that is not the proxy binary (the library used
//! in process) has no launcher: its unsandboxed children start directly, as before, and a
//! sandboxed one refuses to start.
//!
//! Invariant: a child with a profile never starts without it being enforced, unless the
//! profile says `best_effort`; the environment passed to a sandboxed child holds only
//! [`ALWAYS_KEPT`], `LC_*`, what the profile keeps, `inherit_env` and the upstream's `env`.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

mod exec;
mod landlock_rules;

pub use self::exec::run as sandbox_exec;

/// The name of the launcher's subcommand of the proxy binary.
pub const SUBCOMMAND: &str = "sandbox-exec";

/// What a sandboxed child keeps of the proxy's environment without being told (and `LC_*`).
pub const ALWAYS_KEPT: &[&str] = &["PATH", "HOME", "LANG", "TZ"];

/// The user a root proxy runs a sandboxed child as, unless its profile names one: nobody.
pub const NOBODY: (u32, u32) = (65534, 65534);

/// Paths every sandboxed child may read (and execute) that exist: the system's programs,
/// libraries and settings, and `/proc`.
pub const SYSTEM_READABLE: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/proc"];

/// Devices every sandboxed child may read, and write where it makes sense (`/dev/null`).
pub const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// One upstream's sandbox, validated: absolute paths, sizes in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxProfile {
    /// Folders and files it may read (and execute), besides [`SYSTEM_READABLE`].
    pub read: Vec<PathBuf>,
    /// Folders and files it may read and write (create, remove, truncate).
    pub write: Vec<PathBuf>,
    /// Whether it may connect and bind TCP ports.
    pub network: bool,
    /// Variables of the proxy's environment it keeps besides [`ALWAYS_KEPT`] and `inherit_env`.
    pub keep_env: Vec<String>,
    /// `RLIMIT_DATA` in bytes: its private writable memory (heap, anonymous maps).
    pub memory: Option<u64>,
    /// How many more tasks (processes and threads) its user may have than at its start:
    /// `RLIMIT_NPROC` is set to the user's count then plus this.
    pub processes: Option<u64>,
    /// Start it with what the kernel enforces when Landlock (or a part the profile needs) is
    /// missing, instead of refusing to start it.
    pub best_effort: bool,
    /// The user and group a root proxy runs it as.
    pub user: (u32, u32),
}

impl SandboxProfile {
    /// What the child may touch, in one line (for `check` and the logs).
    pub fn describe(&self) -> String {
        let paths = |paths: &[PathBuf]| match paths {
            [] => "nothing more".to_string(),
            paths => paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
        };
        let mut kept: Vec<&str> = ALWAYS_KEPT.to_vec();
        kept.extend(self.keep_env.iter().map(String::as_str));
        let mut text = format!(
            "reads the system ({}) and {}; writes {}; network {}; environment {} and LC_*",
            SYSTEM_READABLE.join(" "),
            paths(&self.read),
            paths(&self.write),
            if self.network { "allowed (TCP)" } else { "refused (TCP connect and bind)" },
            kept.join(", "),
        );
        if let Some(memory) = self.memory {
            text.push_str(&format!("; memory {} MiB (RLIMIT_DATA)", memory >> 20));
        }
        if let Some(processes) = self.processes {
            text.push_str(&format!("; {processes} more processes and threads (RLIMIT_NPROC)"));
        }
        if self.best_effort {
            text.push_str("; best effort: starts even where the kernel cannot enforce it");
        }
        text.push_str(&format!("; as uid {}:{} when the proxy runs as root", self.user.0, self.user.1));
        text
    }
}

/// Whether `name` is kept for a sandboxed child of the proxy's environment.
pub fn keeps(profile: &SandboxProfile, name: &str) -> bool {
    ALWAYS_KEPT.contains(&name) || name.starts_with("LC_") || profile.keep_env.iter().any(|k| k == name)
}

/// The launcher of stdio children: the proxy binary itself, once [`set_launcher`] named it.
pub fn launcher() -> Option<&'static Path> {
    LAUNCHER.get().map(PathBuf::as_path)
}

/// Name the proxy binary (`std::env::current_exe`) as the launcher of stdio children.
pub fn set_launcher(binary: PathBuf) {
    let _ = LAUNCHER.set(binary);
}

static LAUNCHER: OnceLock<PathBuf> = OnceLock::new();

/// A child to start through the launcher: `sandbox-exec --lifeline FD [--profile JSON] --
/// PROGRAM ARGS…`. The proxy keeps [`Launch::lifeline`]; the launcher kills the child's tree
/// when it closes.
pub struct Launch {
    /// The command to spawn (its environment, directory and pipes still to be set).
    pub command: tokio::process::Command,
    /// The proxy's end of the lifeline: dropping it ends the child and all it started.
    pub lifeline: OwnedFd,
    /// The launcher's end, which the proxy drops once the command is spawned.
    pub launcher_end: OwnedFd,
}

impl Launch {
    /// The launch of `program args` by `launcher`, under `profile` if any.
    pub fn new(
        launcher: &Path,
        program: &str,
        args: &[String],
        profile: Option<&SandboxProfile>,
    ) -> std::io::Result<Launch> {
        let (launcher_end, lifeline) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let mut command = tokio::process::Command::new(launcher);
        command.arg(SUBCOMMAND).arg("--lifeline").arg(launcher_end.as_raw_fd().to_string());
        if let Some(profile) = profile {
            command.arg("--profile").arg(serde_json::to_string(profile).map_err(std::io::Error::other)?);
        }
        command.arg("--").arg(program).args(args.iter().map(OsString::from));
        let raw = launcher_end.as_raw_fd();
        // SAFETY: between fork and exec only `fcntl` runs (async-signal-safe, no allocation):
        // the launcher's copy of its end of the lifeline stays open across exec; `raw` is open
        // until the spawn returns (`launcher_end` is dropped after it).
        unsafe {
            command.pre_exec(move || {
                let fd = rustix::fd::BorrowedFd::borrow_raw(raw);
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).map_err(std::io::Error::from)
            });
        }
        Ok(Launch { command, lifeline, launcher_end })
    }
}
