//! What still crosses replicas as a private request (a call, prompt, read or completion on a
//! session another replica holds, and a 2026-07-28 retry of a call parked on another replica,
//! go to it over MCP: `session_pass`, and the upstream's `owners`): a subscription held on a
//! session another replica holds, a session's own lists, a kept answer, forwarded over HTTP:
//! `POST <owner>/mcp-proxy/forward` with a JSON [`Forwarded`] body (the principal, the host
//! session for a per-host upstream, the upstream, the request, the replica it is for, when it
//! was made and a nonce) and a mark, HMAC-SHA256 of the body with the key derived from the
//! cluster secret for this use. The owner answers with JSON lines.
//!
//! A subscription travels ([`Call::Hold`]): the owner holds it on the principal's session while
//! the reply is open, and writes each change of it as a line. The owner unreachable (no
//! connection within [`CONNECT_TIMEOUT`], or with `peer_tls` a TLS handshake either side
//! refused): the caller does without ([`Sent::Unreachable`]). With `peer_tls` every request goes
//! over TLS ([`super::peer_tls`]), and the owner hears only a replica whose certificate the
//! cluster's CA issued.
//!
//! Invariant: the owner runs only a request whose mark is right, made for it, at most
//! [`FRESH_FOR`] ago, and not seen before (its nonce is kept until it would be stale); anything
//! else is refused without running. The keys never leave the process; a mark is no
//! secret once sent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use rand::Rng;
use rmcp::model::{CallToolResult, CompleteResult, GetPromptResult, InputRequiredResult, ReadResourceResult};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

pub use super::session_pass::HostOf;
use super::{Cluster, Owner};
use crate::error::ProxyError;

/// The owner's route on its MCP listener.
pub const PATH: &str = "/mcp-proxy/forward";
/// The header carrying the mark.
pub const MARK_HEADER: &str = "mcp-proxy-forward-mark";
/// The header carrying the pass: when the request was made and a mark of that and the replica
/// it is for, checked before any of the body is read.
pub const PASS_HEADER: &str = "mcp-proxy-forward-pass";
/// A forwarded request older than this (or this far in the future) is refused.
pub const FRESH_FOR: Duration = Duration::from_secs(30);
/// How long the caller waits for a connection to the owner before running the request itself.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest body either way.
pub const MAX_BODY: usize = 32 * 1024 * 1024;
/// Holds ([`Call::Hold`]) this replica keeps open at one owner for one principal: each is a
/// stream of the one connection to the owner while it lasts (of at most the listener's
/// `MAX_STREAMS`), so one principal's subscriptions cannot take that connection's streams from
/// every other principal. Past it a subscription is refused.
pub const MAX_HOLDS_PER_OWNER: usize = 64;
/// How often the connection to a replica is pinged, and how long an unanswered ping waits
/// before the connection counts as dead (its requests fail; the next one connects anew).
const KEEP_ALIVE: Duration = Duration::from_secs(10);
/// Nonces kept at most (beyond this, after dropping the stale ones, requests are refused).
const MAX_NONCES: usize = 200_000;

/// One forwarded request: the body the mark covers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Forwarded {
    /// The replica it is for.
    pub to: String,
    pub issued_ms: u64,
    pub nonce: String,
    pub principal: String,
    pub upstream: String,
    pub call: Call,
    /// A per-host upstream's request: the host session whose own session it runs on (none: the
    /// principal's).
    #[serde(default)]
    pub session: Option<HostOf>,
}

/// Whose session a forwarded request runs on.
#[derive(Debug, Clone, Copy)]
pub struct SessionOf<'a> {
    pub principal: &'a str,
    pub upstream: &'a str,
    /// A per-host upstream's host session (none: the principal's session).
    pub host: Option<HostOf>,
}

/// What the owner does for the replica asking (URIs are the upstream's own).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", content = "params", rename_all = "snake_case")]
pub enum Call {
    /// Hold a subscription of this URI on the principal's session for as long as the reply is
    /// read: the owner answers [`Line::Held`], then [`Line::Updated`] for each change and
    /// [`Line::Alive`] every [`ALIVE_EVERY`], and lets go when the reply is dropped.
    Hold { uri: String },
    /// What the session lists as its own tools and prompts: answered
    /// [`Answer::Offerings`] (none: it lists none of its own, or none is open). Opens nothing.
    Offerings,
    /// Sent by the owner `from` to every other replica when what the session lists as its own
    /// changed (none: it lists none of its own any more, or closed): kept there for its hosts.
    Offered { from: String, lists: Option<OwnLists> },
    /// The answer of the principal's call kept under `key` here (its forwarding replica went
    /// away, or its host's stream served here was cut): answered [`Line::Kept`] then its answer or error, once the call is over; `404`
    /// when none is kept here.
    Collect { key: String },
}

/// A session's own tools and prompts, as it lists them (the upstream's names).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OwnLists {
    pub tools: Vec<rmcp::model::Tool>,
    pub prompts: Vec<rmcp::model::Prompt>,
}

/// The upstream's answer, as the owner got it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", content = "result", rename_all = "snake_case")]
pub enum Answer {
    Tool(CallToolResult),
    Prompt(GetPromptResult),
    Read(ReadResourceResult),
    Complete(CompleteResult),
    InputRequired(InputRequiredResult),
    Offerings(Option<OwnLists>),
}

/// One line of the owner's reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    Answer(Answer),
    Error(RemoteError),
    /// A hold is made; whether the upstream acknowledged it in time.
    Held {
        acknowledged: bool,
    },
    /// The held URI (or one under it: this upstream URI) changed on the session.
    Updated {
        uri: String,
    },
    /// A held reply is still open.
    Alive,
    /// A kept call's upstream, before its answer ([`Call::Collect`]).
    Kept {
        upstream: String,
    },
}

/// How often the owner writes [`Line::Alive`] on a held reply: it notices a gone replica by
/// the failed write, and the replica holding the reply a gone owner by its silence.
pub const ALIVE_EVERY: Duration = Duration::from_secs(10);

/// A [`ProxyError`] of the owner, as it travels (upstream names are the caller's to add).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RemoteError {
    NotFound {
        uri: String,
    },
    UnknownName {
        offering: String,
        name: String,
    },
    InvalidParams {
        message: String,
    },
    /// The owner's session could not be opened; `cause` is why its stdio child could not
    /// start (masked as for a local host), when known.
    UpstreamDown {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<String>,
    },
    UpstreamTimeout {
        timeout_ms: u64,
    },
    UpstreamFailed {
        reason: String,
    },
    SessionLimit {
        limit: usize,
        setting: String,
    },
}

/// Why a forwarded request was not answered by its owner.
#[derive(Debug)]
pub enum Sent {
    /// No connection to the owner within [`CONNECT_TIMEOUT`]: run it here.
    Unreachable,
    /// The owner (or the way to it) failed it; the error says how.
    Failed(ProxyError),
}

/// Why the owner refused a forwarded request (nothing ran).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no valid mark")]
    Mark,
    #[error("not a forwarded request this replica can read")]
    Malformed,
    #[error("made for another replica")]
    Elsewhere,
    #[error("not fresh")]
    Stale,
    #[error("seen before")]
    Replayed,
    #[error("not over TLS from a replica of the cluster's CA")]
    Unverified,
}

impl Refusal {
    /// A bounded label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Mark => "mark",
            Refusal::Malformed => "malformed",
            Refusal::Elsewhere => "elsewhere",
            Refusal::Stale => "stale",
            Refusal::Replayed => "replayed",
            Refusal::Unverified => "unverified",
        }
    }
}

/// A cheap `Clone` handle: sends requests to their owners and opens those sent here.
#[derive(Clone)]
pub struct Forwarder {
    inner: Arc<Inner>,
}

struct Inner {
    cluster: Cluster,
    key: [u8; 32],
    http: reqwest::Client,
    /// Nonces seen, with when they become stale (ms since the epoch).
    seen: Mutex<HashMap<String, u64>>,
    /// Holds open at each owner, by (principal, owner replica).
    holds: Mutex<HashMap<(String, String), usize>>,
}

impl Forwarder {
    pub fn new(cluster: &Cluster) -> Forwarder {
        // HTTP/2 with prior knowledge: every request to one replica, holds included, is a
        // stream of one connection (the listener speaks both; its `MAX_STREAMS` at once).
        // With `peer_tls`, over TLS: only the cluster's CA is trusted, and this replica's
        // certificate is presented.
        let mut http = crate::crypto::http_client()
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_prior_knowledge()
            .http2_keep_alive_interval(KEEP_ALIVE)
            .http2_keep_alive_timeout(KEEP_ALIVE)
            .http2_keep_alive_while_idle(true)
            .no_proxy();
        if let Some(tls) = cluster.peer_tls() {
            http = http.tls_backend_preconfigured(super::peer_tls::client_config(tls)).https_only(true);
        }
        let http = http.build().expect("the client between replicas builds");
        let inner = Inner {
            cluster: cluster.clone(),
            key: cluster.keys().forward(),
            http,
            seen: Mutex::default(),
            holds: Mutex::default(),
        };
        Forwarder { inner: Arc::new(inner) }
    }

    /// The client between replicas (HTTP/2; with `peer_tls`, over TLS).
    pub fn client(&self) -> reqwest::Client {
        self.inner.http.clone()
    }

    /// What makes the passes of requests to the other replicas' session endpoints.
    pub fn session_passes(&self) -> super::session_pass::Passes {
        let cluster = &self.inner.cluster;
        super::session_pass::Passes::new(cluster.replica_id(), &cluster.keys().session_pass())
    }

    /// This replica's id.
    pub fn replica_id(&self) -> &str {
        self.inner.cluster.replica_id()
    }

    /// Another replica seen alive that can be reached, by its id.
    pub fn replica(&self, id: &str) -> Option<Owner> {
        self.inner.cluster.others().into_iter().find(|other| other.replica == id)
    }

    /// The replica holding `of`, when it is another one.
    pub fn owner(&self, of: SessionOf<'_>) -> Option<Owner> {
        self.inner.cluster.owner_of(of.upstream, of.principal, of.host.map(|host| host.key))
    }

    /// Send `call` to `owner` and wait (at most `timeout`) for its answer.
    pub async fn send(&self, owner: &Owner, of: SessionOf<'_>, call: Call, timeout: Duration) -> Result<Answer, Sent> {
        let upstream = of.upstream;
        let exchange = async {
            let response = self.post(owner, of, call).await?;
            read_answer(response, upstream).await
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(Sent::Failed(ProxyError::UpstreamTimeout { upstream: upstream.to_string(), timeout })),
        }
    }

    /// Hold `uri` (the upstream's own) on session `of` at `owner`, for as long as the returned
    /// reply lives.
    /// Past [`MAX_HOLDS_PER_OWNER`] of `of`'s principal at `owner`, refused without asking.
    pub async fn hold(&self, owner: &Owner, of: SessionOf<'_>, uri: &str) -> Result<HeldReply, Sent> {
        let slot = self.hold_slot(of.principal, &owner.replica).ok_or_else(|| Sent::Failed(holds_limit()))?;
        let call = Call::Hold { uri: uri.to_string() };
        let response = tokio::time::timeout(ALIVE_EVERY, self.post(owner, of, call))
            .await
            .map_err(|_| failed(of.upstream, "the replica holding the session did not answer"))??;
        Ok(HeldReply { response, buffer: Vec::new(), _slot: slot })
    }

    /// Whether `principal`, which keeps `kept` holds on this upstream, may hold one more
    /// subscription at `owner`; the error to give when not.
    pub fn may_hold_at(&self, principal: &str, owner: &Owner, kept: usize) -> Result<(), ProxyError> {
        let holds = self.inner.holds.lock().expect("holds lock");
        let open = holds.get(&(principal.to_string(), owner.replica.clone())).copied().unwrap_or(0);
        if open.max(kept) >= MAX_HOLDS_PER_OWNER { Err(holds_limit()) } else { Ok(()) }
    }

    /// One more open hold of `principal` at `owner`, kept until the slot is dropped; `None` at
    /// the bound.
    fn hold_slot(&self, principal: &str, owner: &str) -> Option<HoldSlot> {
        let key = (principal.to_string(), owner.to_string());
        let mut holds = self.inner.holds.lock().expect("holds lock");
        let open = holds.entry(key.clone()).or_default();
        if *open >= MAX_HOLDS_PER_OWNER {
            return None;
        }
        *open += 1;
        Some(HoldSlot { forwarder: self.clone(), key })
    }

    /// Every other replica seen alive that can be reached.
    pub fn others(&self) -> Vec<Owner> {
        self.inner.cluster.others()
    }

    /// The answer of `principal`'s call kept under `key` at `at` (its upstream, and the answer
    /// or error as kept there), once the call ends (waiting at most `wait`); `None`
    /// when `at` keeps none, or does not say so within [`CONNECT_TIMEOUT`].
    pub async fn collect(
        &self,
        at: &Owner,
        principal: &str,
        key: &str,
        wait: Duration,
    ) -> Option<(String, Result<Answer, RemoteError>)> {
        let of = SessionOf { principal, upstream: "", host: None };
        let call = Call::Collect { key: key.to_string() };
        let asked = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let mut response = self.post(at, of, call).await.ok()?;
            let mut buffer = Vec::new();
            match next_line(&mut response, &mut buffer).await? {
                Line::Kept { upstream } => Some((upstream, response, buffer)),
                _ => None,
            }
        });
        let (upstream, mut response, mut buffer) = asked.await.ok()??;
        match tokio::time::timeout(wait, next_line(&mut response, &mut buffer)).await.ok()?? {
            Line::Answer(answer) => Some((upstream, Ok(answer))),
            Line::Error(error) => Some((upstream, Err(error))),
            _ => None,
        }
    }

    /// Tell every other replica that can be reached what session `of` lists as its own now
    /// (`lists`); one that cannot be told keeps what it had until it asks ([`Call::Offerings`]).
    pub async fn tell_others(&self, of: SessionOf<'_>, lists: Option<OwnLists>) {
        let from = self.inner.cluster.replica_id().to_string();
        let told = self.inner.cluster.others().into_iter().map(|other| {
            let call = Call::Offered { from: from.clone(), lists: lists.clone() };
            async move {
                let posted = tokio::time::timeout(ALIVE_EVERY, self.post(&other, of, call)).await;
                if !matches!(posted, Ok(Ok(_))) {
                    tracing::debug!(upstream = of.upstream, replica = %other.replica, "cluster: a replica was not told of a session's own lists");
                }
            }
        });
        futures::future::join_all(told).await;
    }

    /// Post `call` to `owner`, marked; its reply once its status is a success.
    async fn post(&self, owner: &Owner, of: SessionOf<'_>, call: Call) -> Result<reqwest::Response, Sent> {
        let upstream = of.upstream;
        let request = Forwarded {
            to: owner.replica.clone(),
            issued_ms: now_ms(),
            nonce: nonce(),
            principal: of.principal.to_string(),
            upstream: upstream.to_string(),
            call,
            session: of.host,
        };
        let body = serde_json::to_vec(&request).map_err(|e| failed(upstream, format!("not sendable: {e}")))?;
        let post = self
            .inner
            .http
            .post(format!("{}{PATH}", owner.url))
            .header(MARK_HEADER, mark_with(&self.inner.key, &body))
            .header(PASS_HEADER, pass_with(&self.inner.key, &owner.replica, request.issued_ms))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body);
        let response = post.send().await.map_err(|e| {
            if e.is_connect() || refused_by_tls(&e) {
                Sent::Unreachable
            } else {
                let error = causes(&e);
                tracing::debug!(replica = %owner.replica, error, "cluster: a request could not be sent to another replica");
                failed(upstream, "the request could not be sent")
            }
        })?;
        if !response.status().is_success() {
            return Err(failed(upstream, format!("the replica holding the session answered {}", response.status())));
        }
        Ok(response)
    }

    /// Whether a request's head carries a right `pass`, made for this replica at most
    /// [`FRESH_FOR`] ago: checked before its body is read, so that nobody without the
    /// cluster's key makes a replica read a byte of one.
    pub fn admits(&self, pass: Option<&str>) -> Result<(), Refusal> {
        let (issued, mark) = pass.and_then(|pass| pass.split_once('.')).ok_or(Refusal::Mark)?;
        let issued_ms: u64 = issued.parse().map_err(|_| Refusal::Mark)?;
        let mark = URL_SAFE_NO_PAD.decode(mark).map_err(|_| Refusal::Mark)?;
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.inner.key).expect("any key length");
        mac.update(&pass_text(self.inner.cluster.replica_id(), issued_ms));
        mac.verify_slice(&mark).map_err(|_| Refusal::Mark)?;
        if issued_ms.abs_diff(now_ms()) > FRESH_FOR.as_millis() as u64 {
            return Err(Refusal::Stale);
        }
        Ok(())
    }

    /// The request in `body`, when `mark` is right for it, it is for this replica, fresh and
    /// not seen before.
    pub fn open(&self, mark: Option<&str>, body: &[u8]) -> Result<Forwarded, Refusal> {
        let mark = mark.and_then(|mark| URL_SAFE_NO_PAD.decode(mark).ok()).ok_or(Refusal::Mark)?;
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.inner.key).expect("any key length");
        mac.update(body);
        mac.verify_slice(&mark).map_err(|_| Refusal::Mark)?;
        let request: Forwarded = serde_json::from_slice(body).map_err(|_| Refusal::Malformed)?;
        if request.to != self.inner.cluster.replica_id() {
            return Err(Refusal::Elsewhere);
        }
        let (now, fresh) = (now_ms(), FRESH_FOR.as_millis() as u64);
        if request.issued_ms.abs_diff(now) > fresh {
            return Err(Refusal::Stale);
        }
        let mut seen = self.inner.seen.lock().expect("nonces lock");
        if seen.len() >= MAX_NONCES {
            seen.retain(|_, stale_at| *stale_at > now);
        }
        if seen.len() >= MAX_NONCES || seen.contains_key(&request.nonce) {
            return Err(Refusal::Replayed);
        }
        seen.insert(request.nonce.clone(), request.issued_ms + fresh);
        Ok(request)
    }
}

/// The mark of `body` under `key` (base64url, no padding).
pub fn mark_with(key: &[u8; 32], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(body);
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

/// The pass of a request for replica `to` made at `issued_ms`, under `key`.
pub fn pass_with(key: &[u8; 32], to: &str, issued_ms: u64) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(&pass_text(to, issued_ms));
    format!("{issued_ms}.{}", URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()))
}

/// What a pass marks (kept apart from any body's mark by its prefix).
fn pass_text(to: &str, issued_ms: u64) -> Vec<u8> {
    format!("forward-pass\n{to}\n{issued_ms}").into_bytes()
}

impl RemoteError {
    /// How `error` travels.
    pub fn of(error: &ProxyError) -> RemoteError {
        match error {
            ProxyError::NotFound { uri } => RemoteError::NotFound { uri: uri.clone() },
            ProxyError::UnknownName { offering, name } => {
                RemoteError::UnknownName { offering: offering.to_string(), name: name.clone() }
            }
            ProxyError::InvalidParams(message) => RemoteError::InvalidParams { message: message.clone() },
            ProxyError::UpstreamDown { cause, .. } => RemoteError::UpstreamDown { cause: cause.clone() },
            ProxyError::UpstreamTimeout { timeout, .. } => {
                RemoteError::UpstreamTimeout { timeout_ms: timeout.as_millis() as u64 }
            }
            ProxyError::SessionLimit { limit, setting, .. } => {
                RemoteError::SessionLimit { limit: *limit, setting: setting.to_string() }
            }
            other => RemoteError::UpstreamFailed { reason: other.kind().to_string() },
        }
    }

    /// The error a caller of `upstream` gets.
    pub fn into_error(self, upstream: &str) -> ProxyError {
        let upstream = upstream.to_string();
        match self {
            RemoteError::NotFound { uri } => ProxyError::NotFound { uri },
            RemoteError::UnknownName { offering, name } => {
                let offering = if offering == "prompt" { "prompt" } else { "tool" };
                ProxyError::UnknownName { offering, name }
            }
            RemoteError::InvalidParams { message } => ProxyError::InvalidParams(message),
            RemoteError::UpstreamDown { cause } => ProxyError::UpstreamDown { upstream, cause },
            RemoteError::UpstreamTimeout { timeout_ms } => {
                ProxyError::UpstreamTimeout { upstream, timeout: Duration::from_millis(timeout_ms) }
            }
            RemoteError::UpstreamFailed { reason } => ProxyError::UpstreamFailed { upstream, reason },
            RemoteError::SessionLimit { limit, setting } => {
                let setting =
                    if setting == "max_sessions_per_principal" { "max_sessions_per_principal" } else { "max_sessions" };
                ProxyError::SessionLimit { upstream, limit, setting }
            }
        }
    }
}

/// The owner's reply to a [`Call::Hold`]; dropping it lets the hold go.
pub struct HeldReply {
    response: reqwest::Response,
    buffer: Vec<u8>,
    _slot: HoldSlot,
}

/// One open hold of a principal at an owner, counted while it lives.
struct HoldSlot {
    forwarder: Forwarder,
    key: (String, String),
}

impl Drop for HoldSlot {
    fn drop(&mut self) {
        let mut holds = self.forwarder.inner.holds.lock().expect("holds lock");
        if let Some(open) = holds.get_mut(&self.key) {
            *open -= 1;
            if *open == 0 {
                holds.remove(&self.key);
            }
        }
    }
}

/// The error of a subscription past [`MAX_HOLDS_PER_OWNER`].
fn holds_limit() -> ProxyError {
    ProxyError::SubscriptionLimit {
        holder: "this principal, on a replica that does not hold its upstream session,",
        limit: MAX_HOLDS_PER_OWNER,
        setting: "the bound on subscriptions held at another replica",
    }
}

impl HeldReply {
    /// The next line: `None` once the reply ended, broke, said something unreadable, or was
    /// silent for three [`ALIVE_EVERY`] (the owner is gone).
    pub async fn next(&mut self) -> Option<Line> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return serde_json::from_slice::<Line>(&line[..end]).ok();
            }
            let chunk = tokio::time::timeout(ALIVE_EVERY * 3, self.response.chunk()).await;
            match chunk {
                Ok(Ok(Some(chunk))) if self.buffer.len() + chunk.len() <= MAX_BODY => {
                    self.buffer.extend_from_slice(&chunk)
                }
                _ => return None,
            }
        }
    }
}

/// The next line of `response` (what was read past it stays in `buffer`); `None` at its end, on
/// a break or an unreadable line.
async fn next_line(response: &mut reqwest::Response, buffer: &mut Vec<u8>) -> Option<Line> {
    loop {
        if let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            return serde_json::from_slice(&line[..end]).ok();
        }
        let chunk = response.chunk().await.ok()??;
        if buffer.len() + chunk.len() > MAX_BODY {
            return None;
        }
        buffer.extend_from_slice(&chunk);
    }
}

/// Read the owner's reply until its answer or error.
async fn read_answer(mut response: reqwest::Response, upstream: &str) -> Result<Answer, Sent> {
    let mut buffer = Vec::new();
    match next_line(&mut response, &mut buffer).await {
        Some(Line::Answer(answer)) => Ok(answer),
        Some(Line::Error(error)) => Err(Sent::Failed(error.into_error(upstream))),
        Some(_) => Err(failed(upstream, "the replica holding the session sent an unreadable line")),
        None => Err(failed(upstream, "the replica holding the session stopped answering")),
    }
}

/// How rustls words an alert the peer sent (`rustls::Error::AlertReceived`).
const ALERT: &str = "received fatal alert";

/// Whether `error` says the request never reached the owner: TLS between replicas refused the
/// connection (the owner did not take this replica's certificate, which TLS 1.3 tells only once
/// the handshake is over, so hyper reports the request as canceled: its connection was not
/// ready, or closed while the request was still queued), or the refusal itself is at hand.
fn refused_by_tls(error: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = source {
        let inner = error.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
        if error.is::<rustls::Error>() || inner.is_some_and(|inner| inner.is::<rustls::Error>()) {
            return true;
        }
        // HTTP/2 keeps a connection's I/O error as its kind and text only (h2 clones it to every
        // stream), so a TLS alert from the owner is known there by rustls's words.
        if error.downcast_ref::<std::io::Error>().is_some_and(|io| io.to_string().starts_with(ALERT)) {
            return true;
        }
        // hyper cancels only a request its connection never started ("connection was not
        // ready", "connection closed" while it was queued), and hands it back unsent.
        if error.downcast_ref::<hyper::Error>().is_some_and(hyper::Error::is_canceled) {
            return true;
        }
        source = error.source();
    }
    false
}

/// `error` and each of its causes, `: `-separated.
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

fn failed(upstream: &str, reason: impl Into<String>) -> Sent {
    Sent::Failed(ProxyError::UpstreamFailed { upstream: upstream.to_string(), reason: reason.into() })
}

fn nonce() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
