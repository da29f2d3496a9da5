//! `sandbox-exec`: the launcher between the proxy and one stdio server. It becomes the child
//! subreaper, starts the server (the profile applied between fork and exec), and ends with
//! it: when the server exits, whatever it left running is killed and the launcher exits as the
//! server did; when the lifeline closes (the proxy closed the upstream, or died), the whole
//! tree is killed. It runs single-threaded until the server is forked, so the pre-exec hook
//! may allocate.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use super::SandboxProfile;
use super::landlock_rules::Rules;

/// Exit status of a launcher that could not start its server (EX_OSERR; EX_CONFIG when the
/// profile cannot be enforced here).
const CANNOT_START: u8 = 71;
const CANNOT_ENFORCE: u8 = 78;

/// Run the launcher: `lifeline` is its end of the proxy's pipe, `profile` the server's sandbox
/// (none: the server runs unrestricted), `program` and `args` the server. Never returns while
/// the server runs.
pub fn run(lifeline: RawFd, profile: Option<&str>, program: &OsString, args: &[OsString]) -> ExitCode {
    // SAFETY: the proxy passed this descriptor open for this process; it is owned from here on.
    let lifeline = unsafe { std::fs::File::from_raw_fd(lifeline) };
    // The server never inherits the lifeline.
    // SAFETY: F_SETFD on a descriptor this process owns.
    unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&lifeline), libc::F_SETFD, libc::FD_CLOEXEC) };
    let profile: Option<SandboxProfile> = match profile.map(serde_json::from_str).transpose() {
        Ok(profile) => profile,
        Err(error) => {
            eprintln!("sandbox: the profile passed to sandbox-exec is not valid: {error}");
            return ExitCode::from(CANNOT_START);
        }
    };
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let mut command = std::process::Command::new(program);
    command.args(args);
    let confinement = match &profile {
        Some(profile) => match Confinement::prepare(profile, program) {
            Ok(confinement) => Some(confinement),
            Err(error) => {
                eprintln!("sandbox: {error}");
                return ExitCode::from(CANNOT_ENFORCE);
            }
        },
        None => None,
    };
    let launcher = std::process::id() as libc::pid_t;
    let mut confinement = confinement;
    // SAFETY: the launcher has one thread here; the hook makes plain system calls.
    unsafe {
        command.pre_exec(move || {
            // The server dies with the launcher, and not later than it learns of it.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != launcher {
                return Err(std::io::Error::other("the launcher ended before the server started"));
            }
            match confinement.take() {
                Some(confinement) => confinement.apply(),
                None => Ok(()),
            }
        });
    }
    let server = match command.spawn() {
        Ok(server) => server,
        Err(error) => {
            eprintln!("sandbox: cannot start `{}`: {error}", program.to_string_lossy());
            return ExitCode::from(CANNOT_START);
        }
    };
    let server = server.id() as libc::pid_t;
    std::thread::spawn(move || watch_lifeline(lifeline));
    wait_for(server)
}

/// Block until the lifeline closes (the proxy is gone or let go), then end the whole tree.
fn watch_lifeline(mut lifeline: std::fs::File) {
    let mut byte = [0u8; 1];
    while matches!(lifeline.read(&mut byte), Ok(n) if n > 0) {}
    kill_descendants();
    std::process::exit(i32::from(CANNOT_START));
}

/// Reap children until `server` exits; then end what it left and exit as it did.
fn wait_for(server: libc::pid_t) -> ExitCode {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a valid out pointer.
        let reaped = unsafe { libc::waitpid(-1, &mut status, 0) };
        if reaped == server {
            kill_descendants();
            exit_as(status);
        }
        if reaped < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return ExitCode::from(CANNOT_START);
        }
    }
}

/// Exit with the server's status: its code, or the signal that ended it.
fn exit_as(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // SAFETY: restoring the default action and raising a signal to ourselves.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }
    std::process::exit(if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 1 })
}

/// SIGKILL every descendant of this process (as the subreaper, orphans come back to it), and
/// reap them, until none is left.
fn kill_descendants() {
    let me = std::process::id();
    for _ in 0..1000 {
        let descendants = descendants_of(me);
        if descendants.is_empty() {
            break;
        }
        for pid in &descendants {
            // SAFETY: kill with a pid read from /proc; a pid reused meanwhile would be ours to
            // reap only if it is our descendant again.
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
        }
        // SAFETY: waitpid with a null status pointer reaps any child.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        std::thread::yield_now();
    }
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
}

/// Every process whose chain of parents reaches `root`, from /proc.
fn descendants_of(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    let mut found = vec![root];
    let mut index = 0;
    while index < found.len() {
        let parent = found[index];
        found.extend(parents.iter().filter(|(_, p)| *p == parent).map(|(pid, _)| *pid));
        index += 1;
    }
    found.remove(0);
    found
}

/// A process's parent, from `/proc/PID/stat` (the field after the parenthesised name).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// A profile made ready before the fork: the Landlock ruleset built, the limits computed.
struct Confinement {
    rules: Rules,
    memory: Option<u64>,
    processes: Option<u64>,
    user: Option<(u32, u32)>,
}

impl Confinement {
    fn prepare(profile: &SandboxProfile, program: &OsString) -> Result<Confinement, String> {
        // SAFETY: getuid cannot fail.
        let root = unsafe { libc::getuid() } == 0;
        let user = root.then_some(profile.user);
        let uid = user.map_or_else(|| unsafe { libc::getuid() }, |(uid, _)| uid);
        let rules = Rules::build(profile, &resolve(program))?;
        let processes = profile.processes.map(|more| tasks_of(uid) + more);
        Ok(Confinement { rules, memory: profile.memory, processes, user })
    }

    /// In the forked child: limits, user, no new privileges, Landlock.
    fn apply(self) -> std::io::Result<()> {
        // SAFETY: setrlimit with a valid pointer.
        if let Some(memory) = self.memory
            && unsafe { libc::setrlimit(libc::RLIMIT_DATA, &limit(memory)) } != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        if let Some(processes) = self.processes
            && unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &limit(processes)) } != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        if let Some((uid, gid)) = self.user {
            // SAFETY: plain system calls; the order drops groups before the uid.
            let dropped = unsafe {
                libc::setgroups(0, std::ptr::null()) == 0
                    && libc::setresgid(gid, gid, gid) == 0
                    && libc::setresuid(uid, uid, uid) == 0
            };
            if !dropped {
                return Err(std::io::Error::last_os_error());
            }
        }
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.rules.restrict_self()
    }
}

/// A soft and hard limit of `value`.
fn limit(value: u64) -> libc::rlimit {
    libc::rlimit { rlim_cur: value, rlim_max: value }
}

/// The program's file as `exec` will find it (through `PATH` when it has no `/`).
fn resolve(program: &OsString) -> Option<std::path::PathBuf> {
    let program = std::path::Path::new(program);
    if program.components().count() > 1 {
        return std::fs::canonicalize(program).ok();
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|candidate| candidate.is_file())
}

/// How many tasks (processes and threads) `uid` runs now, as `RLIMIT_NPROC` counts them.
fn tasks_of(uid: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .flatten()
        .filter(|entry| entry.file_name().to_str().is_some_and(|name| name.bytes().all(|b| b.is_ascii_digit())))
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("status")).ok())
        .filter_map(|status| {
            let field = |name: &str| status.lines().find_map(|line| line.strip_prefix(name)).map(str::trim);
            let real_uid: u32 = field("Uid:")?.split_whitespace().next()?.parse().ok()?;
            let threads: u64 = field("Threads:")?.parse().ok()?;
            (real_uid == uid).then_some(threads)
        })
        .sum()
}
