//! The audit trail: one structured event per decision that matters — each routed
//! `tools/call`, `prompts/get`, `completion/complete` and `resources/read` (cache hits
//! included, marked), each subscribe, unsubscribe and listen stream, each request refused by
//! policy, each refused bearer token, each config or policy reload — written as JSON lines to
//! `[audit] file` (by default `audit.jsonl` in systemd's state folder or beside the config), or
//! with `file = "-"` to the `audit` log target.
//!
//! The hosts' side (`downstream`, both the rmcp handler and the fast path) makes a request's
//! event when its answer is known, from what it knows (principal, method, name or URI, era,
//! session, outcome, duration) and what the core noted while deciding it ([`scope`]: the
//! upstream it was routed to, the denials). A request refused by policy is audited as its
//! [`Kind::Denial`] alone; a request that went on although part of it was refused (a listen
//! stream holding fewer URIs than asked for, a bridge call whose read was refused) is audited
//! as itself and one denial per refused part. A list leaving entries out is not a denial.
//! A request turned away before it was served — over a rate limit, over the in-flight call
//! cap, a session over the session caps, on another principal's session, with MCP headers that
//! disagree with its body — is audited as [`Kind::Refused`] alone; one that
//! failed later (an upstream session cap, a token that could not be had) as itself, with the
//! error's kind as its outcome.
//!
//! [`Audit::record`] never waits: events go through a bounded queue to the `audit-writer` task
//! on the spine (`writer`); a full queue drops the event, counted in
//! `mcp_proxy_audit_dropped_total` and logged once per burst.
//!
//! Invariant: no event carries a token, a part of one, or a session id (a session is named by a
//! digest of its id); a refused token is recorded by why it was refused, never by what it was.

pub mod scope;
mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::config::AuditConfig;
use crate::metrics::{DenialKind, Metrics};
use crate::protocol::Era;
use crate::spine::Spine;

/// What an event records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A `tools/call` (an upstream's tool or a bridge tool).
    #[default]
    Call,
    /// A `prompts/get`.
    Prompt,
    /// A `completion/complete`.
    Complete,
    /// A `resources/read` (`cache` says whether the cache answered).
    Read,
    Subscribe,
    Unsubscribe,
    /// A 2026-07-28 `subscriptions/listen` stream, when it is acknowledged.
    Listen,
    /// A request (or a part of one) refused by policy; `denied` says what it asked for.
    Denial,
    /// An HTTP request refused with 401; `reason` says why.
    AuthRefused,
    /// A request turned away before it was served, by no policy: `reason` says why — over a
    /// rate limit (`rate_limited`), over the in-flight call cap (`call_limit`), a new session
    /// over `server.max_sessions[_per_principal]` (`session_limit`), on a session another
    /// principal opened (`wrong_principal`), or with MCP headers that disagree with its body
    /// (`header_mismatch`, answered 400).
    Refused,
    /// A config or policy reload; `outcome` and `changes` say what it did.
    Reload,
}

/// One audit event: a JSON object per line, absent fields left out.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Event {
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    pub event: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// A tool or prompt, as the host named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A resource URI (namespaced, as the host named it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// The URIs a listen stream holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uris: Option<Vec<String>>,
    /// `ok`, `denied`, `refused`, `tool_error`, `input_required`, an error kind, or a reload's
    /// outcome.
    pub outcome: &'static str,
    /// A denial's kind (`read`, `subscribe`, `call`, `prompt`, `template`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denied: Option<&'static str>,
    /// Why a token was refused (`missing`, `expired`, `bad_signature`…).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// A read's cache outcome: `hit`, `stale`, `miss`, `bypass`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub era: Option<&'static str>,
    /// A digest of the session's id (the same for every request of one session).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The JSON-RPC request id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The trace of the request's span, when traces are on (see [`crate::telemetry`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The request's span, when traces are on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
    /// What a reload changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<serde_json::Value>,
    /// The writer reopens the audit file just before writing this event (a reload's).
    #[serde(skip)]
    reopen_first: bool,
}

impl Event {
    /// An event of `kind` with `outcome`, stamped now.
    pub fn new(kind: Kind, outcome: &'static str) -> Event {
        Event { time: rfc3339(SystemTime::now()), event: kind, outcome, ..Default::default() }
    }

    /// A [`Kind::Refused`] event, for `reason` (a bounded label), stamped now.
    pub fn refused(reason: &'static str) -> Event {
        let mut event = Event::new(Kind::Refused, "refused");
        event.reason = Some(reason);
        event
    }

    pub fn principal(mut self, principal: &str) -> Self {
        self.principal = Some(principal.to_string());
        self
    }

    pub fn method(mut self, method: &'static str) -> Self {
        self.method = Some(method);
        self
    }

    pub fn upstream(mut self, upstream: Option<String>) -> Self {
        self.upstream = upstream;
        self
    }

    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    pub fn uri(mut self, uri: &str) -> Self {
        self.uri = Some(uri.to_string());
        self
    }

    pub fn took(mut self, elapsed: Duration) -> Self {
        self.duration_ms = Some((elapsed.as_secs_f64() * 1e6).round() / 1e3);
        self
    }

    pub fn era(mut self, era: Option<Era>) -> Self {
        self.era = era.map(Era::label);
        self
    }

    /// The session, by a digest of its id (never the id itself).
    pub fn session(mut self, session: Option<&str>) -> Self {
        self.session = session.map(session_digest);
        self
    }

    pub fn request(mut self, id: Option<String>) -> Self {
        self.request = id;
        self
    }
}

/// Where the trail goes; a cheap `Clone` handle.
#[derive(Clone)]
pub struct Audit {
    inner: Arc<Inner>,
}

struct Inner {
    /// `None` when the trail is off.
    queue: Option<mpsc::Sender<Event>>,
    metrics: Metrics,
    /// Set while events are being dropped, so a burst of drops is logged once.
    dropping: AtomicBool,
}

impl Audit {
    /// Start the `audit-writer` task on `spine` (when `config.enabled`).
    pub fn start(config: &AuditConfig, metrics: Metrics, spine: &Spine) -> Audit {
        let queue = config.enabled.then(|| {
            let (queue, events) = mpsc::channel(config.queue);
            let writer = writer::Writer::new(config.file.clone(), events);
            spine.spawn("audit-writer", writer.run(spine.shutdown()));
            queue
        });
        Audit { inner: Arc::new(Inner { queue, metrics, dropping: AtomicBool::new(false) }) }
    }

    pub fn enabled(&self) -> bool {
        self.inner.queue.is_some()
    }

    /// Queue `event` for the writer; never waits. A full queue drops it (counted, logged once
    /// per burst).
    pub fn record(&self, mut event: Event) {
        let Some(queue) = &self.inner.queue else { return };
        if event.trace_id.is_none()
            && let Some((trace, span)) = crate::telemetry::current_ids()
        {
            (event.trace_id, event.span_id) = (Some(trace), Some(span));
        }
        match queue.try_send(event) {
            Ok(()) => {
                if self.inner.dropping.load(Ordering::Relaxed) {
                    self.inner.dropping.store(false, Ordering::Relaxed);
                }
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.inner.metrics.audit_dropped();
                if !self.inner.dropping.swap(true, Ordering::Relaxed) {
                    tracing::warn!("audit queue full: events are being dropped (mcp_proxy_audit_dropped_total)");
                }
            }
            // The writer ended (shutdown): nothing more is written.
            Err(mpsc::error::TrySendError::Closed(_)) => self.inner.metrics.audit_dropped(),
        }
    }

    /// Queue a reload's `event`; the audit file is reopened just before it is written (log
    /// rotation: a config reload or SIGHUP after the file was moved away starts a new one).
    pub fn record_reopening(&self, mut event: Event) {
        event.reopen_first = true;
        self.record(event);
    }

    /// The events of one request: its own (`event`, made only when the trail is on; left out
    /// when the request was refused by policy, see the module doc) and one per denial noted
    /// while it was decided.
    pub fn request(&self, notes: scope::Notes, event: impl FnOnce() -> Event) {
        if !self.enabled() {
            return;
        }
        let mut event = event();
        // A denial answers "not found" (the proxy does not reveal what exists): a request that
        // got that answer after a denial was refused by it.
        let refused = event.outcome == "not_found" && !notes.denials.is_empty();
        // A listen stream may hold URIs of several upstreams: it names none.
        if event.upstream.is_none() && event.event != Kind::Listen {
            event.upstream = notes.upstream;
        }
        for denial in notes.denials {
            let mut denied = event.clone();
            denied.event = Kind::Denial;
            denied.outcome = "denied";
            denied.denied = Some(denial.kind.label());
            denied.upstream = denial.upstream;
            denied.cache = None;
            denied.uris = None;
            match denial.kind {
                DenialKind::Call | DenialKind::Prompt => {
                    denied.name = Some(denial.target);
                    denied.uri = None;
                }
                _ => denied.uri = Some(denial.target),
            }
            self.record(denied);
        }
        if !refused {
            self.record(event);
        }
    }
}

/// The first 16 hex digits of the SHA-256 of a session id.
/// The digest that names a session in the audit trail and on spans (never the id itself).
pub fn session_digest(session: &str) -> String {
    let digest = Sha256::digest(session.as_bytes());
    digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect()
}

/// `time` as RFC 3339 in UTC with milliseconds (`2026-07-28T12:00:00.000Z`).
fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (days, seconds) = ((since.as_secs() / 86_400) as i64, since.as_secs() % 86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (hour, minute, second) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    let millis = since.subsec_millis();
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z")
}

#[cfg(test)]
mod tests;
