//! The sandbox of a stdio upstream (docs/sandbox.md), with the proxy binary in front of the
//! fixture's hostile `trespass` tool: under a profile, reading a file outside it, writing
//! outside its folder, connecting to a local TCP port and starting processes past its limit
//! are each refused, while the same server without a profile succeeds at each (so the test
//! proves the sandbox, not the fixture); as root (as CI runs) and as an unprivileged user with
//! no_new_privs (as the shipped unit runs it). And a stdio child outlives no proxy killed with
//! `-9`: neither the server nor a process it started. `check` says what each stdio upstream
//! may touch.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{Value, json};

use crate::support::eventually;
use crate::support::fixture::{DEADLINE, Era, call_json, connect_http};
use crate::support::processes::{command_line, descendants};
use crate::support::proxy::{ProxyProcess, fixture_upstream, toml_str};

/// How many more tasks the hostile server's user may have; it tries [`SPAWN_ATTEMPTS`] children.
const PROCESSES: u64 = 16;
const SPAWN_ATTEMPTS: u64 = 48;

/// The places the hostile server is pointed at, all open to user nobody, so that only the
/// sandbox can refuse it: a secret file, a folder of its own, another folder, a listening port.
struct Ground {
    dir: tempfile::TempDir,
    listener: std::net::TcpListener,
}

impl Ground {
    fn new() -> anyhow::Result<Ground> {
        let dir = tempfile::tempdir()?;
        for folder in ["own", "elsewhere", "secrets"] {
            std::fs::create_dir(dir.path().join(folder))?;
            std::fs::set_permissions(dir.path().join(folder), std::fs::Permissions::from_mode(0o777))?;
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        std::fs::write(dir.path().join("secrets/key.txt"), "not for servers\n")?;
        std::fs::set_permissions(dir.path().join("secrets/key.txt"), std::fs::Permissions::from_mode(0o644))?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        Ok(Ground { dir, listener })
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    /// The fixture with its `trespass` tool, under a profile that may write only its own folder,
    /// has no network and at most [`PROCESSES`] more tasks; or without a profile.
    fn config(&self, sandboxed: bool) -> String {
        let mut config = fixture_upstream("fx", &["--trespass-tool"]);
        if sandboxed {
            config.push_str(&format!(
                "[upstreams.sandbox]\nwrite = [{}]\nnetwork = false\nprocesses = {PROCESSES}\nmemory = \"1GiB\"\n",
                toml_str(self.path("own").to_str().expect("UTF-8 path"))
            ));
        }
        config
    }

    /// Call `fx__trespass` through `proxy`: its report of each attempt.
    async fn trespass(&self, proxy: &ProxyProcess) -> anyhow::Result<Value> {
        proxy.wait_offerings("fx").await?;
        let client = connect_http(&proxy.url, Era::Legacy).await?;
        let arguments = json!({
            "read": self.path("secrets/key.txt"),
            "write": self.path("elsewhere/planted.txt"),
            "connect": self.listener.local_addr()?.port(),
            "spawn": SPAWN_ATTEMPTS,
        });
        let report = call_json(client.0.peer(), "fx__trespass", arguments).await?;
        client.0.cancel().await?;
        Ok(report)
    }
}

/// Each attempt in `report` refused (`refused` true) or succeeded.
fn assert_each(report: &Value, refused: bool) {
    for attempt in ["read", "write", "connect", "spawn"] {
        let outcome = report[attempt].as_str().unwrap_or_default();
        assert_eq!(outcome.starts_with("refused"), refused, "{attempt}: {outcome} in {report}");
    }
    let spawned = report["spawned"].as_u64().unwrap_or_default();
    match refused {
        true => assert!(spawned < PROCESSES, "started {spawned} processes, over its limit: {report}"),
        false => assert_eq!(spawned, SPAWN_ATTEMPTS, "{report}"),
    }
}

async fn trespass_as(unprivileged: bool, sandboxed: bool) -> anyhow::Result<Value> {
    let ground = Ground::new()?;
    let config = ground.config(sandboxed);
    let proxy = match unprivileged {
        true => ProxyProcess::start_unprivileged(&config).await?,
        false => ProxyProcess::start(&config).await?,
    };
    let report = ground.trespass(&proxy).await?;
    let planted = ground.path("elsewhere/planted.txt").exists();
    assert_eq!(planted, !sandboxed, "a file written outside the server's folder: {report}");
    Ok(report)
}

#[tokio::test]
async fn a_sandboxed_server_is_refused_each_trespass_under_a_root_proxy() -> anyhow::Result<()> {
    assert_each(&trespass_as(false, true).await?, true);
    assert_each(&trespass_as(false, false).await?, false);
    Ok(())
}

#[tokio::test]
async fn a_sandboxed_server_is_refused_each_trespass_under_an_unprivileged_proxy() -> anyhow::Result<()> {
    assert_each(&trespass_as(true, true).await?, true);
    assert_each(&trespass_as(true, false).await?, false);
    Ok(())
}

#[tokio::test]
async fn no_child_or_grandchild_outlives_a_proxy_killed_with_kill_9() -> anyhow::Result<()> {
    let grandchild = "sleep 3600";
    let fixture = crate::support::fixture::fixture_bin().to_str().context("UTF-8 path")?.to_string();
    let script = format!("{grandchild} & exec \"$0\"");
    let config = format!(
        "[[upstreams]]\nname = \"fx\"\ncommand = \"sh\"\nargs = [\"-c\", {}, {}]\n",
        toml_str(&script),
        toml_str(&fixture)
    );
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("fx", 1).await?;
    let pid = proxy.pid().context("the proxy's pid")?;
    let tree = eventually(DEADLINE, "the server and its own child run", || async {
        let tree = descendants(pid);
        match tree.iter().any(|(_, command)| command.starts_with(grandchild)) {
            true => Ok(tree),
            false => Err(format!("{tree:?}")),
        }
    })
    .await?;
    let status = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status()?;
    anyhow::ensure!(status.success(), "kill -9 {pid}");
    eventually(DEADLINE, "every process the proxy started is gone", || async {
        let running: Vec<&(u32, String)> = tree.iter().filter(|(pid, command)| runs(*pid, command)).collect();
        match running.is_empty() {
            true => Ok(()),
            false => Err(format!("still running: {running:?}")),
        }
    })
    .await?;
    drop(proxy);
    Ok(())
}

#[test]
fn check_says_what_each_stdio_upstream_may_touch() -> anyhow::Result<()> {
    let ground = Ground::new()?;
    let config = format!("{}[[upstreams]]\nname = \"plain\"\ncommand = \"true\"\n", ground.config(true));
    let path = crate::support::proxy::write_config(ground.dir.path(), &config)?;
    let out = std::process::Command::new(crate::support::PROXY_BIN).arg("check").arg("--config").arg(&path).output()?;
    let stdout = String::from_utf8(out.stdout)?;
    assert!(out.status.success(), "{stdout}");
    let own = ground.path("own");
    let sandboxed = format!(
        "upstream fx: sandboxed: reads the system (/usr /bin /sbin /lib /lib32 /lib64 /etc /proc) and nothing more; writes {}; network refused (TCP connect and bind); environment PATH, HOME, LANG, TZ and LC_*; memory 1024 MiB (RLIMIT_DATA); {PROCESSES} more processes and threads (RLIMIT_NPROC)",
        own.display()
    );
    assert!(stdout.contains(&sandboxed), "{stdout}");
    assert!(
        stdout.contains("upstream plain: unsandboxed: runs as the proxy's user, with its files and network"),
        "{stdout}"
    );
    Ok(())
}

/// Whether `pid` still runs `command` (a zombie runs nothing; a reused pid runs another).
fn runs(pid: u32, command: &str) -> bool {
    stat_field(pid, 0).is_some_and(|state| state != "Z") && command_line(pid) == command
}

/// The field `index` after the command name in `/proc/PID/stat` (0: state, 1: parent).
fn stat_field(pid: u32, index: usize) -> Option<String> {
    let stat = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(index).map(str::to_string)
}
