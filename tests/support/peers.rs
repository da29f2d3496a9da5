//! Third-party MCP peers for the integration tests, installed by `.ci/install-peers.sh` into the
//! ignored `.peers/` (npm `@modelcontextprotocol/server-everything`, a venv with PyPI `mcp`), plus
//! the Python drivers in `tests/py/`. Nothing here skips: a missing peer is a test failure.
//!
//! - [`ensure_installed`]: runs the install script once per test process (it is idempotent, fast when
//!   done, and serialised across processes by a `flock`).
//! - server-everything (2025 era only): [`everything_stdio_command`], [`spawn_everything_http`].
//! - server-memory (stdio, 2025 era; its graph in the file `MEMORY_FILE_PATH`): [`memory_stdio_command`].
//! - tests/py/server.py (both eras): [`py_server_stdio_command`], [`spawn_py_server_http`].
//! - tests/py/conformance_server.py (both eras): [`spawn_py_script_http`].
//! - the official conformance suite's CLI: [`conformance_entry`].
//! - tests/py/client.py: [`py_client`] (a `Command` ready for ops; see the script's docstring).
//!
//! HTTP peers come back as a [`PeerHttp`] guard that kills the child on drop.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::proxy::toml_str;

/// Pinned in `.ci/install-peers.sh`; kept here for messages only.
pub const EVERYTHING_PKG: &str = "@modelcontextprotocol/server-everything";

const STARTUP_DEADLINE: Duration = Duration::from_secs(30);

pub use super::repo_root;

/// Runs `.ci/install-peers.sh` once per test process; panics with its output if it fails.
pub fn ensure_installed() {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    let result = DONE.get_or_init(|| {
        let script = repo_root().join(".ci/install-peers.sh");
        let out = Command::new("bash")
            .arg(&script)
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} failed ({}):\n--- stderr ---\n{}\n--- stdout ---\n{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ))
        }
    });
    if let Err(msg) = result {
        panic!("installing test peers failed: {msg}");
    }
}

/// `node_modules/@modelcontextprotocol/server-everything/dist/index.js` (its package bin
/// `mcp-server-everything` points at this file).
pub fn everything_entry() -> PathBuf {
    ensure_installed();
    repo_root().join(".peers/npm/node_modules").join(EVERYTHING_PKG).join("dist/index.js")
}

/// Program + args that run the installed server-everything over stdio (no `npx` download).
pub fn everything_stdio_command() -> (String, Vec<String>) {
    let entry = everything_entry();
    ("node".to_string(), vec![path_str(&entry), "stdio".to_string()])
}

/// A `[[upstreams]]` entry `name` running the installed server-everything over stdio; `extra`:
/// more keys of the entry (`protocol = "auto"`, …), one per line.
pub fn everything_upstream(name: &str, extra: &str) -> String {
    stdio_upstream(name, everything_stdio_command(), extra)
}

/// Pinned in `.ci/install-peers.sh`; kept here for paths and messages.
pub const MEMORY_PKG: &str = "@modelcontextprotocol/server-memory";

/// Program + args that run the installed server-memory over stdio; its storage file is set with
/// the env `MEMORY_FILE_PATH` (JSON lines: `{"type":"entity","name":…,"entityType":…,"observations":[…]}`).
pub fn memory_stdio_command() -> (String, Vec<String>) {
    ensure_installed();
    let entry = repo_root().join(".peers/npm/node_modules").join(MEMORY_PKG).join("dist/index.js");
    ("node".to_string(), vec![path_str(&entry)])
}

/// A `[[upstreams]]` entry `name` running the installed server-memory over stdio with its graph
/// in `file`; `extra`: more keys of the entry, one per line.
pub fn memory_upstream(name: &str, file: &std::path::Path, extra: &str) -> String {
    let env = format!("env = {{ MEMORY_FILE_PATH = {} }}\n{extra}", toml_str(&file.display().to_string()));
    stdio_upstream(name, memory_stdio_command(), &env)
}

fn stdio_upstream(name: &str, (program, args): (String, Vec<String>), extra: &str) -> String {
    let args: Vec<String> = args.iter().map(|a| toml_str(a)).collect();
    format!(
        "[[upstreams]]\nname = \"{name}\"\ncommand = {}\nargs = [{}]\n{extra}\n\n",
        toml_str(&program),
        args.join(", ")
    )
}

/// Pinned in `.ci/install-peers.sh`; kept here for paths and messages.
pub const FILESYSTEM_PKG: &str = "@modelcontextprotocol/server-filesystem";
/// Pinned in `.ci/install-peers.sh`; kept here for paths and messages.
pub const THINKING_PKG: &str = "@modelcontextprotocol/server-sequential-thinking";

/// A `[[upstreams]]` entry `name` running the installed server-filesystem over stdio with no
/// directory arguments (it serves the roots it is given); `extra`: more keys (`roots = […]`).
pub fn filesystem_upstream(name: &str, extra: &str) -> String {
    ensure_installed();
    let entry = repo_root().join(".peers/servers/node_modules").join(FILESYSTEM_PKG).join("dist/index.js");
    stdio_upstream(name, ("node".to_string(), vec![path_str(&entry)]), extra)
}

/// A `[[upstreams]]` entry `name` running the installed server-sequential-thinking over stdio.
pub fn thinking_upstream(name: &str, extra: &str) -> String {
    ensure_installed();
    let entry = repo_root().join(".peers/servers/node_modules").join(THINKING_PKG).join("dist/index.js");
    stdio_upstream(name, ("node".to_string(), vec![path_str(&entry)]), extra)
}

/// Pinned in `.ci/install-peers.sh`; kept here for paths and messages.
pub const APP_PKG: &str = "@modelcontextprotocol/server-basic-vanillajs";

/// A `[[upstreams]]` entry `name` running the installed MCP App server-basic-vanillajs over stdio
/// (its `get-time` tool names `ui://get-time/mcp-app.html` under both `_meta` keys).
pub fn app_upstream(name: &str, extra: &str) -> String {
    ensure_installed();
    let entry = repo_root().join(".peers/apps/node_modules").join(APP_PKG).join("dist/index.js");
    stdio_upstream(name, ("node".to_string(), vec![path_str(&entry), "--stdio".to_string()]), extra)
}

/// A `[[upstreams]]` entry `name` running `tests/py/one_kind_server.py KIND` (`prompts` or
/// `resources`: it declares that kind alone) over stdio.
pub fn one_kind_upstream(name: &str, kind: &str, extra: &str) -> String {
    let command = (path_str(&python()), vec![path_str(&py_script("one_kind_server.py")), kind.to_string()]);
    stdio_upstream(name, command, extra)
}

/// Pinned in `.ci/install-peers.sh`; kept here for paths and messages.
pub const CONFORMANCE_PKG: &str = "@modelcontextprotocol/conformance";

/// The installed conformance suite's CLI (`node <it> server --url … -o …`).
pub fn conformance_entry() -> PathBuf {
    ensure_installed();
    repo_root().join(".peers/conformance/node_modules").join(CONFORMANCE_PKG).join("dist/index.js")
}

/// The venv interpreter that has PyPI `mcp` installed.
pub fn python() -> PathBuf {
    ensure_installed();
    repo_root().join(".peers/venv/bin/python")
}

/// `tests/py/<name>`.
pub fn py_script(name: &str) -> PathBuf {
    repo_root().join("tests/py").join(name)
}

/// Program + args that run `tests/py/server.py` (dual-era notes server) over stdio.
/// `extra` is appended (e.g. `["--notes", "5"]`).
pub fn py_server_stdio_command(extra: &[&str]) -> (String, Vec<String>) {
    let mut args = vec![path_str(&py_script("server.py"))];
    args.extend(extra.iter().map(|s| s.to_string()));
    (path_str(&python()), args)
}

/// A `Command` for `tests/py/client.py ARGS…` (stdout/stderr/stdin left for the caller to set).
/// Example args: `["--url", url, "--mode", "2026-07-28", "list_all", "read:py://note/1"]`.
pub fn py_client<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Command {
    let mut cmd = Command::new(python());
    cmd.arg(py_script("client.py")).args(args).current_dir(repo_root());
    cmd
}

/// Parses client.py's stdout: one JSON value per line.
pub fn parse_json_lines(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("client.py printed non-JSON line {l:?}: {e}")))
        .collect()
}

/// A client's JSON answer's error as a host can tell it apart: its code and its message with
/// `name` written `NAME` (a denied name must answer exactly like an unknown one).
pub fn error_but_name(answer: &serde_json::Value, name: &str) -> (serde_json::Value, String) {
    let error = &answer["error"];
    (error["code"].clone(), error["message"].as_str().unwrap_or_default().replace(name, "NAME"))
}

/// An HTTP peer process; killed (and reaped) on drop.
pub struct PeerHttp {
    pub child: Child,
    /// e.g. `http://127.0.0.1:43125/mcp`
    pub url: String,
    pub port: u16,
}

impl Drop for PeerHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub type EverythingHttp = PeerHttp;

/// Starts server-everything in `streamableHttp` mode on a free loopback port and waits until it
/// listens (its "listening on port N" line, then a TCP connect). Retries with a fresh port if the
/// picked one was taken in between.
pub fn spawn_everything_http() -> EverythingHttp {
    let entry = everything_entry();
    let mut last_err = String::new();
    for _ in 0..3 {
        let port = free_port();
        let mut child = Command::new("node")
            .arg(&entry)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .current_dir(repo_root())
            .stdin(Stdio::null())
            // It logs every request on stdout and its "listening on port N" line on stderr: both
            // are drained by threads into one channel.
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn node {}: {e}", entry.display()));
        let (tx, lines) = mpsc::channel();
        drain_lines(child.stdout.take().unwrap(), "server-everything", tx.clone());
        drain_lines(child.stderr.take().unwrap(), "server-everything", tx);
        let wanted = format!("listening on port {port}");
        match wait_ready(&mut child, &lines, |l| l.contains(&wanted), port) {
            Ok(()) => return PeerHttp { child, url: format!("http://127.0.0.1:{port}/mcp"), port },
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                last_err = e;
            }
        }
    }
    panic!("server-everything (streamableHttp) did not come up: {last_err}");
}

/// Starts `tests/py/server.py --http 0` (it binds a free port itself and prints
/// `LISTENING http://127.0.0.1:<port>/mcp` once the socket listens). `extra` is appended.
pub fn spawn_py_server_http(extra: &[&str]) -> PeerHttp {
    spawn_py_script_http("server.py", extra)
}

/// Starts `tests/py/<script> --http 0`, a script that announces itself as server.py does.
pub fn spawn_py_script_http(script: &str, extra: &[&str]) -> PeerHttp {
    let mut child = Command::new(python())
        .arg(py_script(script))
        .args(["--http", "0"])
        .args(extra)
        .current_dir(repo_root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn tests/py/{script}: {e}"));
    let (tx, lines) = mpsc::channel();
    drain_lines(child.stdout.take().unwrap(), "py-server", tx);
    let deadline = Instant::now() + STARTUP_DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left.min(Duration::from_millis(200))) {
            Ok(line) => {
                if let Some(url) = line.strip_prefix("LISTENING ") {
                    let url = url.trim().to_string();
                    let port: u16 = url
                        .trim_start_matches("http://127.0.0.1:")
                        .trim_end_matches("/mcp")
                        .parse()
                        .unwrap_or_else(|e| panic!("bad LISTENING line {line:?}: {e}"));
                    return PeerHttp { child, url, port };
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait();
                panic!("tests/py/{script} exited before listening: {status:?}");
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("tests/py/{script} exited before listening: {status}");
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tests/py/{script} did not print LISTENING within {STARTUP_DEADLINE:?}");
        }
    }
}

fn path_str(p: &std::path::Path) -> String {
    p.to_str().expect("non-UTF-8 path").to_string()
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

/// Reads `r` line by line on a thread, forwarding lines to `tx` (and echoing them to stderr with a
/// tag when `PEERS_VERBOSE` is set) until EOF; keeps draining after the receiver is gone so the
/// child never blocks on a full pipe.
fn drain_lines(r: impl std::io::Read + Send + 'static, tag: &'static str, tx: mpsc::Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if std::env::var_os("PEERS_VERBOSE").is_some() {
                eprintln!("[{tag}] {line}");
            }
            let _ = tx.send(line);
        }
    });
}

fn wait_ready(
    child: &mut Child,
    lines: &mpsc::Receiver<String>,
    is_ready_line: impl Fn(&str) -> bool,
    port: u16,
) -> Result<(), String> {
    let deadline = Instant::now() + STARTUP_DEADLINE;
    let mut saw_line = false;
    let mut seen: Vec<String> = Vec::new();
    while !saw_line {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no readiness line within {STARTUP_DEADLINE:?}; output: {seen:?}"));
        }
        match lines.recv_timeout(left.min(Duration::from_millis(200))) {
            Ok(line) => {
                saw_line = is_ready_line(&line);
                seen.push(line);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(format!("exited before listening: {:?}; output: {seen:?}", child.wait()));
            }
        }
        if !saw_line && let Ok(Some(status)) = child.try_wait() {
            // Collect what it printed before dying (EADDRINUSE, say).
            while let Ok(line) = lines.recv_timeout(Duration::from_millis(200)) {
                seen.push(line);
            }
            return Err(format!("exited before listening: {status}; output: {seen:?}"));
        }
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("{addr} refuses connections"));
        }
        std::thread::sleep(Duration::from_millis(50)); // poll interval; the loop ends at its deadline
    }
}
