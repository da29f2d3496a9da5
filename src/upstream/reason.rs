//! Why an upstream is down, in plain words: the root cause of a connect error (found by
//! walking its source chain), and the last lines a stdio child wrote to stderr.
//!
//! Invariant: what this module produces is for logs and `/status` only, never for clients,
//! but for [`ChildOutput::cause_for_host`] (why a stdio child could not start or exited: its
//! command, how it ended, its last stderr line with the values of the variables its entry
//! names masked); URLs in it are redacted ([`redact_url`]), and a child's stderr tail is
//! bounded ([`TAIL_LINES`] lines, [`TAIL_BYTES`] bytes).

use std::collections::VecDeque;
use std::error::Error as StdError;
use std::io::ErrorKind;
use std::sync::Mutex;
use std::time::Duration;

use rmcp::service::{ClientInitializeError, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpError;
use tokio::sync::watch;

use crate::config::{redact_url, redact_urls_in};

/// How many of a child's last stderr lines are kept.
pub const TAIL_LINES: usize = 20;
/// How many bytes of them at most (a longer line is cut).
pub const TAIL_BYTES: usize = 4096;

/// The root cause of a failed handshake, in plain words; `url` (redacted here) is named when
/// the cause is a network one.
pub(crate) fn initialize_failure(error: &ClientInitializeError, url: Option<&str>) -> String {
    let root: &(dyn StdError + 'static) = match error {
        // rmcp does not name this field as the error's source: start the walk inside it.
        ClientInitializeError::TransportError { error, .. } => error,
        other => other,
    };
    plain(root, url)
}

/// The root cause of a failed request on a live connection, in plain words.
pub(crate) fn service_failure(error: &ServiceError) -> String {
    match error {
        ServiceError::TransportSend(inner) => plain(inner, None),
        ServiceError::TransportClosed => "the connection closed".into(),
        other => redact_urls_in(&other.to_string()),
    }
}

/// The plainest words for `error`: a network failure by its kind, else the innermost cause.
pub(crate) fn plain(error: &(dyn StdError + 'static), url: Option<&str>) -> String {
    let mut chain = vec![error];
    let mut cause = next_cause(error);
    while let Some(next) = cause {
        chain.push(next);
        cause = next_cause(next);
    }
    let at = |what: &str| match url {
        Some(url) => format!("{what} ({})", redact_url(url)),
        None => what.to_string(),
    };
    for cause in &chain {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && let Some(what) = io_kind(io.kind())
        {
            return at(what);
        }
        if let Some(http) = cause.downcast_ref::<reqwest::Error>() {
            if http.is_timeout() {
                return at("timed out");
            }
            if let Some(status) = http.status() {
                return at(&format!("HTTP status {status}"));
            }
        }
    }
    let innermost = chain.last().map(|e| e.to_string()).unwrap_or_default();
    if let Some(what) = certificate_refused(&innermost) {
        return at(what);
    }
    redact_urls_in(&match url {
        Some(url) if !innermost.contains(url) => format!("{innermost} ({url})"),
        _ => innermost,
    })
}

/// `line` with each of `secrets` (the longest first, so none is left half masked) replaced
/// by `***`; values shorter than [`MASKED_MIN`] are left (they would mask ordinary words).
fn mask(line: &str, secrets: &[String]) -> String {
    let mut secrets: Vec<&String> = secrets.iter().filter(|s| s.len() >= MASKED_MIN).collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let masked = secrets.into_iter().fold(line.to_string(), |line, secret| line.replace(secret.as_str(), "***"));
    redact_urls_in(&masked)
}

/// The shortest variable value masked in a line a host may be told.
const MASKED_MIN: usize = 4;

/// A TLS client's refusal of the server's certificate (rustls' words), said plainly.
fn certificate_refused(error: &str) -> Option<&'static str> {
    let detail = error.strip_prefix("invalid peer certificate: ")?;
    Some(match detail {
        d if d.starts_with("UnknownIssuer") => {
            "TLS: the server's certificate is not signed by a CA the proxy trusts (for a private CA, set `ca_file`)"
        }
        d if d.starts_with("NotValidForName") => "TLS: the server's certificate does not name this host",
        d if d.starts_with("Expired") => "TLS: the server's certificate has expired",
        _ => "TLS: the server's certificate was refused",
    })
}

/// The cause of `error`; rmcp's HTTP client error does not name its inner error as source.
fn next_cause<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a (dyn StdError + 'static)> {
    match error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        Some(StreamableHttpError::Client(inner)) => Some(inner),
        _ => error.source(),
    }
}

fn io_kind(kind: ErrorKind) -> Option<&'static str> {
    Some(match kind {
        ErrorKind::ConnectionRefused => "connection refused",
        ErrorKind::ConnectionReset => "connection reset",
        ErrorKind::ConnectionAborted => "connection aborted",
        ErrorKind::TimedOut => "connection timed out",
        ErrorKind::AddrNotAvailable => "address not available",
        ErrorKind::HostUnreachable => "host unreachable",
        ErrorKind::NetworkUnreachable => "network unreachable",
        ErrorKind::NotFound => "not found",
        ErrorKind::PermissionDenied => "permission denied",
        _ => return None,
    })
}

/// What one upstream's stdio children said on stderr, and how the last one ended.
#[derive(Default)]
pub(crate) struct ChildOutput {
    state: Mutex<TailState>,
    /// The generation (child) whose stderr is still open, if any.
    open: watch::Sender<Option<u64>>,
}

#[derive(Default)]
struct TailState {
    lines: VecDeque<String>,
    bytes: usize,
    generation: u64,
    exit: Option<String>,
    /// Why the last child could not be started at all (the proxy's own words).
    not_started: Option<String>,
}

impl ChildOutput {
    /// A new child starts: forget what the last one said. Returns its generation.
    pub fn child_started(&self) -> u64 {
        let mut state = self.state.lock().expect("tail lock");
        state.generation += 1;
        state.lines.clear();
        state.bytes = 0;
        state.exit = None;
        state.not_started = None;
        self.open.send_replace(Some(state.generation));
        state.generation
    }

    /// A child could not be started: `why`, in the proxy's own words (`cannot start `x`: …`).
    pub fn not_started(&self, why: &str) {
        let mut state = self.state.lock().expect("tail lock");
        state.generation += 1;
        state.lines.clear();
        state.bytes = 0;
        state.exit = None;
        state.not_started = Some(why.to_string());
        self.open.send_replace(None);
    }

    /// Why the last child of `program` is not serving, in words a host may be told: it could
    /// not be started, or it exited (with its last stderr line, each of `secrets` in it masked;
    /// the launcher's own `sandbox: cannot start …` said as the proxy says it). `None` while it
    /// runs, or when it did not get as far as starting.
    pub fn cause_for_host(&self, program: &str, secrets: &[String]) -> Option<String> {
        let state = self.state.lock().expect("tail lock");
        if let Some(why) = &state.not_started {
            return Some(why.clone());
        }
        let exit = state.exit.as_ref()?;
        let Some(last) = state.lines.iter().rev().find(|line| !line.trim().is_empty()) else {
            return Some(format!("`{program}` exited ({exit})"));
        };
        let last = mask(last, secrets);
        Some(match last.strip_prefix("sandbox: ") {
            Some(launcher) if launcher.starts_with("cannot start ") => launcher.to_string(),
            _ => format!("`{program}` exited ({exit}): {last}"),
        })
    }

    /// Keep `line` of child `generation` (older children's lines are dropped).
    pub fn push(&self, generation: u64, line: &str) {
        let mut state = self.state.lock().expect("tail lock");
        if state.generation != generation {
            return;
        }
        let mut line = line.trim_end().to_string();
        if line.len() > TAIL_BYTES {
            let mut cut = TAIL_BYTES;
            while !line.is_char_boundary(cut) {
                cut -= 1;
            }
            line.truncate(cut);
        }
        state.bytes += line.len();
        state.lines.push_back(line);
        while state.lines.len() > TAIL_LINES || state.bytes > TAIL_BYTES {
            let Some(old) = state.lines.pop_front() else { break };
            state.bytes -= old.len();
        }
    }

    /// Child `generation` closed its stderr.
    pub fn closed(&self, generation: u64) {
        self.open.send_if_modified(|open| {
            let mine = *open == Some(generation);
            if mine {
                *open = None;
            }
            mine
        });
    }

    /// Child `generation` exited with `status`.
    pub fn exited(&self, generation: u64, status: std::process::ExitStatus) {
        let mut state = self.state.lock().expect("tail lock");
        if state.generation == generation {
            state.exit = Some(status.to_string());
        }
    }

    /// Wait (at most `timeout`) until the current child's stderr is read to its end.
    pub async fn settle(&self, timeout: Duration) {
        let mut open = self.open.subscribe();
        let _ = tokio::time::timeout(timeout, open.wait_for(Option::is_none)).await;
    }

    /// The kept lines, oldest first.
    pub fn tail(&self) -> Vec<String> {
        self.state.lock().expect("tail lock").lines.iter().cloned().collect()
    }

    /// How the current child ended (`exit status: 1`), if it did.
    pub fn exit(&self) -> Option<String> {
        self.state.lock().expect("tail lock").exit.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_told_how_a_child_ended_without_its_secrets() {
        let secrets = ["s3cr3t-value".to_string(), "ab".to_string()];
        let output = ChildOutput::default();
        assert_eq!(output.cause_for_host("srv", &secrets), None, "no child yet");
        let first = output.child_started();
        output.push(first, "token s3cr3t-value refused; ab");
        assert_eq!(output.cause_for_host("srv", &secrets), None, "still running");
        output.exited(first, exit_status(3));
        let told = output.cause_for_host("srv", &secrets).unwrap();
        assert_eq!(told, "`srv` exited (exit status: 3): token *** refused; ab");
        let second = output.child_started();
        output.push(second, "sandbox: cannot start `srv`: No such file or directory (os error 2)");
        output.exited(second, exit_status(127));
        let told = output.cause_for_host("srv", &secrets).unwrap();
        assert_eq!(told, "cannot start `srv`: No such file or directory (os error 2)");
        output.not_started("cannot start `srv`: permission denied");
        assert_eq!(output.cause_for_host("srv", &secrets).unwrap(), "cannot start `srv`: permission denied");
        output.child_started();
        assert_eq!(output.cause_for_host("srv", &secrets), None, "a new child runs");
    }

    fn exit_status(code: i32) -> std::process::ExitStatus {
        std::os::unix::process::ExitStatusExt::from_raw(code << 8)
    }

    #[test]
    fn a_refused_certificate_is_said_plainly() {
        let says = |error: &str| certificate_refused(error);
        assert!(says("invalid peer certificate: UnknownIssuer").unwrap().contains("ca_file"));
        assert!(says("invalid peer certificate: NotValidForName").unwrap().contains("name this host"));
        assert!(says("invalid peer certificate: Other(x)").unwrap().contains("refused"));
        assert_eq!(says("connection reset"), None);
    }

    #[test]
    fn a_refused_connection_is_named_with_its_redacted_url() {
        let io = std::io::Error::from(ErrorKind::ConnectionRefused);
        let wrapped = std::io::Error::other(io);
        assert_eq!(
            plain(&wrapped, Some("http://user:secret@127.0.0.1:9/mcp?token=x")),
            format!("connection refused ({})", redact_url("http://user:secret@127.0.0.1:9/mcp?token=x"))
        );
    }

    #[test]
    fn the_tail_keeps_the_last_lines_within_its_bounds() {
        let output = ChildOutput::default();
        let generation = output.child_started();
        for n in 0..50 {
            output.push(generation, &format!("line {n}"));
        }
        let tail = output.tail();
        assert_eq!(tail.len(), TAIL_LINES);
        assert_eq!(tail.last().map(String::as_str), Some("line 49"));
        output.push(generation, &"x".repeat(10_000));
        assert_eq!(output.tail(), vec!["x".repeat(TAIL_BYTES)]);
        let next = output.child_started();
        output.push(generation, "from the old child");
        assert!(output.tail().is_empty() && next > generation);
    }
}
