//! The transport of stdio upstreams: the child process, started with a cleared environment,
//! and a guarded reader of its stdout.
//!
//! Environment: a child gets only [`DEFAULT_INHERITED`] (and every `LC_*`) of the proxy's
//! environment, then the names listed in its `inherit_env`, then its own `env`. So no child
//! sees the principals' tokens (`token_env`) or another upstream's secrets. A sandboxed child's
//! allowlist is its profile's instead (`sandbox::ALWAYS_KEPT`, `LC_*`, `keep_env`).
//!
//! In the proxy binary the child is its `sandbox-exec` launcher (`sandbox::Launch`), which
//! starts the server; the transport holds the launcher's lifeline and lets it go on `close` or
//! drop, which ends the server and everything it started.
//!
//! Replies: rmcp's own stdio reader drops a line over its limit, a line that is not UTF-8 or
//! not JSON, and a response with an unknown id, silently, so the request waits for its
//! timeout. This reader judges each line first: a faulty one becomes a [`Fault`] error for the
//! request it answers — the id found in the line (by a scan that holds nothing of the line
//! when it is too large), or else the one request waiting, when exactly one is, listen streams aside — and a
//! fault it cannot place is logged and shown in `/status`.
//!
//! Invariant: no more than `max_response_bytes` of one line is held in memory; reading is cancellation-safe (all state lives in the struct).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use rmcp::RoleClient;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::faults::Fault;
use super::notices::{Notice, NoticeSender};
use super::reason::ChildOutput;
use super::scan::{TopLevelScan, scan};
use crate::sandbox::{self, SandboxProfile};
use crate::spine::Spine;

/// What a child inherits of the proxy's environment without being told (plus every `LC_*`):
/// enough to find programs, a home, a temporary folder and the locale; on Windows, what
/// processes need to start at all.
pub const DEFAULT_INHERITED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TMP",
    "TEMP",
    "TERM",
    "SYSTEMROOT",
    "SYSTEMDRIVE",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "USERPROFILE",
    "APPDATA",
    "LOCALAPPDATA",
    "PROGRAMDATA",
];

/// How long a child may take to exit after its stdin closed.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The environment of a child: the allowlisted part of `parent`, then `env`. A sandboxed
/// child's allowlist is its profile's (`sandbox::keeps`) instead of [`DEFAULT_INHERITED`].
pub fn child_environment(
    parent: impl Iterator<Item = (OsString, OsString)>,
    inherit: &[String],
    env: &BTreeMap<String, String>,
    sandbox: Option<&SandboxProfile>,
) -> Vec<(OsString, OsString)> {
    let allowed = |name: &str| {
        let by_default = match sandbox {
            Some(profile) => sandbox::keeps(profile, name),
            None => DEFAULT_INHERITED.iter().any(|d| d.eq_ignore_ascii_case(name)) || name.starts_with("LC_"),
        };
        by_default || inherit.iter().any(|i| i == name)
    };
    let mut kept: Vec<(OsString, OsString)> = parent
        .filter(|(name, _)| name.to_str().is_some_and(allowed) && !env.contains_key(name.to_str().unwrap_or_default()))
        .collect();
    kept.extend(env.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))));
    kept
}

/// A stdio child and the guarded ends of its pipes.
pub(crate) struct StdioUpstream {
    /// The proxy's end of the launcher's lifeline (`sandbox::Launch`), when the child is the
    /// launcher: closing it ends the server and everything it started.
    lifeline: Option<OwnedFd>,
    /// Asked to leave (stdin closed) on `close`; killed when the transport is dropped, unless
    /// the lifeline does it.
    child: Arc<tokio::sync::Mutex<Child>>,
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    stdout: BufReader<ChildStdout>,
    /// The line being read; once it is too large, only scanned for its id instead.
    line: Vec<u8>,
    oversized: Option<TopLevelScan>,
    limit: usize,
    /// Requests sent and not yet answered; true for those answered only when they end (a
    /// listen stream), which are never the one a stray fault is blamed on.
    pending: Arc<Mutex<HashMap<RequestId, bool>>>,
    notices: NoticeSender,
    /// Where the child's stderr and exit status go, and which child this is.
    output: Arc<ChildOutput>,
    /// The upstream's name, for log lines.
    upstream: Arc<str>,
    generation: u64,
}

/// One line read: its bytes, or what a scan found in it when it was longer than the limit.
enum Line {
    Whole(Vec<u8>),
    Oversized(Option<RequestId>, bool),
}

impl StdioUpstream {
    /// Start `command` (its environment already set) with piped stdio; its stderr is kept in
    /// `output` (the last lines) and logged at debug level.
    pub fn spawn(
        mut command: tokio::process::Command,
        lifeline: Option<OwnedFd>,
        limit: usize,
        notices: NoticeSender,
        output: Arc<ChildOutput>,
        upstream: &str,
        spine: &Spine,
    ) -> std::io::Result<Self> {
        let upstream: Arc<str> = Arc::from(upstream);
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(lifeline.is_none());
        let mut child = command.spawn()?;
        let stdin = child.stdin.take().ok_or_else(|| std::io::Error::other("no stdin pipe"))?;
        let stdout = child.stdout.take().ok_or_else(|| std::io::Error::other("no stdout pipe"))?;
        let generation = output.child_started();
        match child.stderr.take() {
            Some(stderr) => {
                let keep = keep_stderr(stderr, output.clone(), generation, upstream.clone(), spine.shutdown());
                spine.spawn(format!("stderr:{upstream}"), keep.in_current_span());
            }
            None => output.closed(generation),
        }
        let transport = Self {
            lifeline,
            child: Arc::new(tokio::sync::Mutex::new(child)),
            stdin: Arc::new(tokio::sync::Mutex::new(Some(stdin))),
            stdout: BufReader::new(stdout),
            line: Vec::new(),
            oversized: None,
            limit,
            pending: Arc::default(),
            notices,
            output,
            generation,
            upstream,
        };
        Ok(transport)
    }

    /// The child closed its stdout: note how it ended, if it does so soon.
    async fn ended(&mut self) {
        note_exit(&self.child, &self.output, self.generation).await;
    }

    /// The next whole line; `None` at the end of the stream or on a read error.
    async fn next_line(&mut self) -> Option<Line> {
        loop {
            let (consumed, complete) = {
                let available = match self.stdout.fill_buf().await {
                    Ok(available) => available,
                    Err(error) => {
                        tracing::warn!(upstream = &*self.upstream, error = %error, "reading the upstream's stdout failed");
                        return None;
                    }
                };
                if available.is_empty() {
                    return None;
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |at| at + 1);
                let content = take - usize::from(newline.is_some());
                if self.oversized.is_none() && self.line.len() + content > self.limit {
                    let mut scan = TopLevelScan::default();
                    scan.feed(&self.line);
                    self.line = Vec::new();
                    self.oversized = Some(scan);
                }
                match self.oversized.as_mut() {
                    Some(scan) => scan.feed(&available[..content]),
                    None => self.line.extend_from_slice(&available[..take]),
                }
                (take, newline.is_some())
            };
            self.stdout.consume(consumed);
            if complete {
                return Some(match self.oversized.take() {
                    Some(scan) => {
                        let (id, has_method) = scan.finish();
                        Line::Oversized(id, has_method)
                    }
                    None => Line::Whole(std::mem::take(&mut self.line)),
                });
            }
        }
    }

    /// A good message passes; a faulty line becomes its request's fault, or nothing.
    fn judge(&self, line: Line) -> Option<ServerJsonRpcMessage> {
        let (fault, (id, has_method)) = match line {
            Line::Oversized(id, has_method) => (Fault::TooLarge(self.limit), (id, has_method)),
            Line::Whole(bytes) => {
                let bytes = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
                let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
                if bytes.iter().all(u8::is_ascii_whitespace) {
                    return None;
                }
                let fault = if std::str::from_utf8(bytes).is_err() {
                    Fault::InvalidUtf8
                } else {
                    match serde_json::from_slice::<ServerJsonRpcMessage>(bytes) {
                        Ok(message) => return self.check_response(message),
                        Err(_) => Fault::Malformed,
                    }
                };
                (fault, scan(bytes))
            }
        };
        if has_method && id.is_none() {
            tracing::debug!(
                upstream = &*self.upstream,
                fault = fault.kind(),
                "dropped an unreadable notification from the upstream"
            );
            return None;
        }
        self.place(fault, id.filter(|id| self.take_pending(id)))
    }

    /// A response must answer a request that waits.
    fn check_response(&self, message: ServerJsonRpcMessage) -> Option<ServerJsonRpcMessage> {
        let id = match &message {
            JsonRpcMessage::Response(response) => Some(response.id.clone()),
            JsonRpcMessage::Error(error) => error.id.clone(),
            _ => return Some(message),
        };
        match id {
            Some(id) if self.take_pending(&id) => Some(message),
            _ => self.place(Fault::WrongId, None),
        }
    }

    /// Fail request `id` (or the only request waiting) with `fault`; else log and report it.
    fn place(&self, fault: Fault, id: Option<RequestId>) -> Option<ServerJsonRpcMessage> {
        let id = id.or_else(|| {
            let mut pending = self.pending.lock().expect("pending lock");
            let mut waiting = pending.iter().filter(|(_, long_lived)| !**long_lived).map(|(id, _)| id);
            let only = waiting.next().cloned().filter(|_| waiting.next().is_none())?;
            pending.remove(&only);
            Some(only)
        });
        match id {
            Some(id) => {
                tracing::warn!(
                    upstream = &*self.upstream,
                    fault = fault.kind(),
                    "faulty upstream reply; failing its request"
                );
                Some(fault.reply(id))
            }
            None => {
                tracing::warn!(
                    upstream = &*self.upstream,
                    fault = fault.kind(),
                    "faulty upstream message; no request to fail"
                );
                self.notices.send(Notice::Fault(fault.describe()));
                None
            }
        }
    }

    fn take_pending(&self, id: &RequestId) -> bool {
        self.pending.lock().expect("pending lock").remove(id).is_some()
    }
}

impl Transport<RoleClient> for StdioUpstream {
    type Error = std::io::Error;

    fn send(&mut self, item: ClientJsonRpcMessage) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        match &item {
            JsonRpcMessage::Request(request) => {
                let long_lived = matches!(request.request, ClientRequest::SubscriptionsListenRequest(_));
                self.pending.lock().expect("pending lock").insert(request.id.clone(), long_lived);
            }
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) = &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.pending.lock().expect("pending lock").remove(id);
                }
            }
            _ => {}
        }
        let stdin = self.stdin.clone();
        let (child, output, generation) = (self.child.clone(), self.output.clone(), self.generation);
        let line = serde_json::to_vec(&item).map(|mut line| {
            line.push(b'\n');
            line
        });
        async move {
            let line = line.map_err(std::io::Error::other)?;
            let mut stdin = stdin.lock().await;
            let pipe = stdin.as_mut().ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotConnected))?;
            let written = async { pipe.write_all(&line).await.and(pipe.flush().await) }.await;
            if written.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
                // The child is gone: how it ended says more than the broken pipe.
                note_exit(&child, &output, generation).await;
            }
            written
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            let Some(line) = self.next_line().await else {
                self.ended().await;
                return None;
            };
            if let Some(message) = self.judge(line) {
                return Some(message);
            }
        }
    }

    /// Close stdin and give the child a moment to exit by itself, as MCP's stdio shutdown asks;
    /// then kill it.
    async fn close(&mut self) -> Result<(), Self::Error> {
        drop(self.stdin.lock().await.take());
        let mut child = self.child.lock().await;
        if tokio::time::timeout(EXIT_GRACE, child.wait()).await.is_err() {
            // The launcher ends the whole tree when its lifeline closes; a child without one
            // is killed alone.
            if self.lifeline.take().is_none() || tokio::time::timeout(EXIT_GRACE, child.wait()).await.is_err() {
                child.start_kill()?;
            }
        }
        Ok(())
    }
}

/// Wait (at most [`EXIT_GRACE`]) for `child` to exit and note its status in `output`.
async fn note_exit(child: &tokio::sync::Mutex<Child>, output: &ChildOutput, generation: u64) {
    let mut child = child.lock().await;
    if let Ok(Ok(status)) = tokio::time::timeout(EXIT_GRACE, child.wait()).await {
        output.exited(generation, status);
    }
}

/// A child's stderr goes to the debug log line by line (never to our stdout), and its last
/// lines to `output`.
async fn keep_stderr(
    stderr: tokio::process::ChildStderr,
    output: Arc<ChildOutput>,
    generation: u64,
    upstream: Arc<str>,
    shutdown: CancellationToken,
) {
    let mut lines = BufReader::new(stderr).lines();
    loop {
        // A child's own child may hold stderr open past the child: shutdown does not wait for it.
        let line = tokio::select! {
            line = lines.next_line() => line,
            _ = shutdown.cancelled() => break,
        };
        let Ok(Some(line)) = line else { break };
        tracing::debug!(upstream = &*upstream, line, "upstream stderr");
        output.push(generation, &line);
    }
    output.closed(generation);
}

#[cfg(test)]
mod tests;
