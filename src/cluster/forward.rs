//! What still crosses replicas as a private request (a call, prompt, read or completion on a
//! session another replica holds goes to it over MCP: `session_pass`, and the upstream's
//! `owners`; so do a subscription on such a session and its own lists): a 2026-07-28 retry of
//! a call parked on another replica, a host's answer, forwarded over HTTP: `POST <owner>/mcp-proxy/forward` with a JSON
//! [`Forwarded`] body (the principal, the host session for a per-host upstream, the upstream, the call with the upstream's own names, the replica it is for, when
//! it was made, a nonce and, sealed, the JWT the host's request came with) and a mark, HMAC-SHA256 of the body with the key derived from the
//! cluster secret for this use. The owner answers with JSON lines: the call's progress as it
//! comes ([`Line::Progress`]), then one answer or error.
//!
//! The forwarding replica decides the request (policy, rate limits) and rewrites the answer for
//! its caller as for a local one; the owner runs it on its own session of that principal.
//! Progress, the upstream's log messages and its sampling and elicitation requests for a call
//! travel back as lines; the host's answer to a request goes to the owner as a
//! [`Call::Reply`]. The owner unreachable (no connection
//! within [`CONNECT_TIMEOUT`], or with `peer_tls` a TLS handshake either side refused): the
//! caller runs it on a session of its own ([`Sent::Unreachable`]). With `peer_tls` every
//! request goes over TLS ([`super::peer_tls`]), and the owner hears only a replica whose
//! certificate the cluster's CA issued.
//! With traces on, a call's hop is a CLIENT span of the caller's (child of its host request's
//! SERVER span) whose context goes in the W3C `traceparent`/`tracestate` headers; the owner's
//! SERVER span continues it, so a forwarded request is one trace across both replicas.
//!
//! The JWT a host's call, prompt, read or completion came with travels in the body sealed
//! (ChaCha20-Poly1305 under the key derived for this use, bound to the request's nonce): the
//! owner opens it and exchanges that JWT for the upstream's token (`upstream::credentials`),
//! never the principal's latest.
//!
//! Invariant: the owner runs only a request whose mark is right, made for it, at most
//! [`FRESH_FOR`] ago, and not seen before (its nonce is kept until it would be stale); anything
//! else is refused without running. The keys never leave the process; a mark is no
//! secret once sent, and the body carries no token in clear.

#![allow(deprecated)] // Sampling and logging are deprecated by SEP-2577 but still in the 2025 era.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use rand::Rng;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, CompleteRequestParams, CompleteResult, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, GetPromptRequestParams, GetPromptResult,
    InputRequiredResult, LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam,
    ReadResourceRequestParams, ReadResourceResult,
};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

pub use super::session_pass::HostOf;
use super::{Cluster, Owner};
use crate::crypto::SealingKey;
use crate::error::ProxyError;
use crate::host::{HostRelay, ProgressOutlet, SubjectToken};
use crate::protocol::method;
use crate::telemetry::{self, Outgoing, Span, Transport};

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
    /// What the host of a call or prompt declared: the owner relays the upstream's requests
    /// and log messages for it back as [`Line::Ask`] and [`Line::Log`] (none: nothing is).
    #[serde(default)]
    pub host: Option<ForwardedHost>,
    /// The JWT the host's request came with, sealed to this request ([`Forwarder::subject_of`]
    /// opens it): the owner's upstream session sends the request with a token exchanged for
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

/// Whose session a forwarded request runs on.
#[derive(Debug, Clone, Copy)]
pub struct SessionOf<'a> {
    pub principal: &'a str,
    pub upstream: &'a str,
    /// A per-host upstream's host session (none: the principal's session).
    pub host: Option<HostOf>,
}

/// What the host of a forwarded call declared.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForwardedHost {
    pub sampling: bool,
    pub elicitation: bool,
    pub log_level: Option<LoggingLevel>,
    /// A 2026-07-28 host: what the upstream asks of it is answered as `input_required`.
    #[serde(default)]
    pub takes_input_required: bool,
    /// The tool's or prompt's name as the host knows it (a call parked for its input is
    /// resumed under it, on whichever replica the retry lands).
    #[serde(default)]
    pub presented: String,
}

/// A request of the upstream to the host of a forwarded call, asked by the owner.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", content = "params", rename_all = "snake_case")]
pub enum Ask {
    Sample(CreateMessageRequestParams),
    Elicit(ElicitRequestParams),
}

/// The host's answer to an [`Ask`], sent back to the owner as [`Call::Reply`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", content = "result", rename_all = "snake_case")]
pub enum Reply {
    Sampled(CreateMessageResult),
    Elicited(ElicitResult),
    Refused(ErrorData),
}

/// What the owner runs on the principal's session (names and URIs are the upstream's own).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", content = "params", rename_all = "snake_case")]
pub enum Call {
    Tool(CallToolRequestParams),
    Prompt(GetPromptRequestParams),
    Read(ReadResourceRequestParams),
    Complete(CompleteRequestParams),
    /// The host's answer to the owner's [`Line::Ask`] `id`.
    Reply {
        id: String,
        reply: Reply,
    },
}

impl Call {
    /// The method and target (a tool's or prompt's name) of a call the owner runs upstream;
    /// `None` for an answer or a collection, which are not traced.
    pub fn traced(&self) -> Option<(&'static str, Option<&str>)> {
        match self {
            Call::Tool(params) => Some((method::TOOLS_CALL, Some(&params.name))),
            Call::Prompt(params) => Some((method::PROMPTS_GET, Some(&params.name))),
            Call::Read(_) => Some((method::RESOURCES_READ, None)),
            Call::Complete(_) => Some((method::COMPLETION_COMPLETE, None)),
            Call::Reply { .. } => None,
        }
    }
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
}

/// One line of the owner's reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    Progress(ProgressNotificationParam),
    Answer(Answer),
    Error(RemoteError),
    /// A log message of the upstream for the call's host.
    Log(LoggingMessageNotificationParam),
    /// A request of the upstream for the call's host: its answer goes back as [`Call::Reply`].
    Ask {
        id: String,
        ask: Ask,
    },
}

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
    /// Seals the JWT a forwarded request came with.
    subject_key: SealingKey,
    http: reqwest::Client,
    /// Nonces seen, with when they become stale (ms since the epoch).
    seen: Mutex<HashMap<String, u64>>,
    /// On the owner: questions to forwarded calls' hosts waiting for their answer.
    asks: Mutex<HashMap<String, tokio::sync::oneshot::Sender<Reply>>>,
}

impl Forwarder {
    pub fn new(cluster: &Cluster) -> Forwarder {
        // HTTP/2 with prior knowledge: every request to one replica (the session endpoint's
        // MCP sessions' included) is a stream of one connection (the listener speaks both; its `MAX_STREAMS` at once).
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
            subject_key: SealingKey::new(&cluster.keys().forward_subject()),
            http,
            seen: Mutex::default(),
            asks: Mutex::default(),
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

    /// Send `call` to `owner` and wait (at most `timeout`) for its answer; progress on the way
    /// goes to the host's `progress`, the upstream's log messages and requests for the call to
    /// its `relay` (the host's answers go back to the owner).
    pub async fn send(
        &self,
        owner: &Owner,
        of: SessionOf<'_>,
        call: Call,
        host: ForwardingHost<'_>,
        timeout: Duration,
    ) -> Result<Answer, Sent> {
        let upstream = of.upstream;
        let span = hop_span(owner, upstream, &call);
        let exchange = async {
            let declared = host.relay.as_ref().map(|relay| ForwardedHost {
                sampling: relay.declares_sampling(),
                elicitation: relay.declares_elicitation(),
                log_level: relay.log_level(),
                takes_input_required: relay.takes_input_required(),
                presented: host.presented.to_string(),
            });
            // The JWT of a read or completion, else the one of the call's or prompt's host.
            let subject = host.subject.cloned().or_else(|| host.relay.as_ref()?.subject_token());
            let response = self.post(owner, of, call, declared, span.injected(), subject.as_ref()).await?;
            let relay = host.relay.as_deref();
            let asked = |id, ask| self.answer(owner, of, relay, id, ask);
            read_lines(response, upstream, host.progress, relay, asked).await
        };
        let answer = match tokio::time::timeout(timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(Sent::Failed(ProxyError::UpstreamTimeout { upstream: upstream.to_string(), timeout })),
        };
        match &answer {
            Err(Sent::Unreachable) => span.failed("unreachable".to_string()),
            Err(Sent::Failed(error)) => span.failed(error.kind().to_string()),
            Ok(_) => {}
        }
        answer
    }

    /// Ask the host of a call through `relay` what the owner asked (`id`), and post its answer
    /// back to the owner (no host: a refusal).
    async fn answer(&self, owner: &Owner, of: SessionOf<'_>, relay: Option<&dyn HostRelay>, id: String, ask: Ask) {
        let no_host = || ErrorData::invalid_request("the call's host cannot be asked", None);
        let reply = match (relay, ask) {
            (None, _) => Reply::Refused(no_host()),
            (Some(relay), Ask::Sample(params)) => {
                relay.sample(params).await.map_or_else(Reply::Refused, Reply::Sampled)
            }
            (Some(relay), Ask::Elicit(params)) => {
                relay.elicit(params).await.map_or_else(Reply::Refused, Reply::Elicited)
            }
        };
        if self.post(owner, of, Call::Reply { id, reply }, None, None, None).await.is_err() {
            tracing::debug!(upstream = of.upstream, replica = %owner.replica, "cluster: a host's answer did not reach the owner");
        }
    }

    /// On the owner: ask the forwarded call's host `ask` through the reply being written (its
    /// `lines`), and wait for its answer ([`Forwarder::replied`]); an error when the reply is
    /// gone. Dropping the wait forgets the question.
    pub async fn ask(&self, lines: &tokio::sync::mpsc::Sender<Line>, ask: Ask) -> Result<Reply, ErrorData> {
        let id = nonce();
        let (answer_in, answer) = tokio::sync::oneshot::channel();
        self.inner.asks.lock().expect("asks lock").insert(id.clone(), answer_in);
        let _forget = Forget { forwarder: self, id: id.clone() };
        let gone = || ErrorData::internal_error("the call's host went away", None);
        lines.send(Line::Ask { id, ask }).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())
    }

    /// On the owner: the host's answer to the question `id`; false when none is waiting for it.
    pub fn replied(&self, id: &str, reply: Reply) -> bool {
        let waiting = self.inner.asks.lock().expect("asks lock").remove(id);
        waiting.is_some_and(|waiting| waiting.send(reply).is_ok())
    }

    /// Post `call` to `owner`, marked, with the trace context of its hop (`traceparent`,
    /// `tracestate`) in the W3C headers and the JWT its host's request came with (`subject`)
    /// sealed; its reply once its status is a success.
    async fn post(
        &self,
        owner: &Owner,
        of: SessionOf<'_>,
        call: Call,
        host: Option<ForwardedHost>,
        trace: Option<(String, String)>,
        subject: Option<&SubjectToken>,
    ) -> Result<reqwest::Response, Sent> {
        let upstream = of.upstream;
        let nonce = nonce();
        let request = Forwarded {
            to: owner.replica.clone(),
            issued_ms: now_ms(),
            subject: subject.map(|subject| self.seal_subject(&nonce, subject)),
            nonce,
            principal: of.principal.to_string(),
            upstream: upstream.to_string(),
            call,
            session: of.host,
            host,
        };
        let body = serde_json::to_vec(&request).map_err(|e| failed(upstream, format!("not sendable: {e}")))?;
        let mut post = self
            .inner
            .http
            .post(format!("{}{PATH}", owner.url))
            .header(MARK_HEADER, mark_with(&self.inner.key, &body))
            .header(PASS_HEADER, pass_with(&self.inner.key, &owner.replica, request.issued_ms))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some((traceparent, tracestate)) = trace {
            post = post.header("traceparent", traceparent);
            if !tracestate.is_empty() {
                post = post.header("tracestate", tracestate);
            }
        }
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

    /// `subject` sealed to the request of `nonce`: its expiry and the token, under the key
    /// derived for this use.
    fn seal_subject(&self, nonce: &str, subject: &SubjectToken) -> String {
        let mut plain = subject.until().to_be_bytes().to_vec();
        plain.extend_from_slice(subject.token().as_bytes());
        URL_SAFE_NO_PAD.encode(self.inner.subject_key.seal(&subject_bound_to(nonce), &plain))
    }

    /// The JWT `request` (opened, its mark checked) came with, if any; `None` as well when
    /// what it carries does not open (it was sealed to another request).
    pub fn subject_of(&self, request: &Forwarded) -> Option<SubjectToken> {
        let sealed = URL_SAFE_NO_PAD.decode(request.subject.as_deref()?).ok()?;
        let plain = self.inner.subject_key.open(&subject_bound_to(&request.nonce), &sealed)?;
        let (until, token) = plain.split_at_checked(8)?;
        let until = u64::from_be_bytes(until.try_into().ok()?);
        Some(SubjectToken::new(std::str::from_utf8(token).ok()?, until))
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

/// What a sealed subject is bound to: the request of `nonce`.
fn subject_bound_to(nonce: &str) -> Vec<u8> {
    format!("forward-subject\n{nonce}").into_bytes()
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

/// The host of a forwarded request: where its progress, and the upstream's log messages and
/// requests for it, go.
#[derive(Default)]
pub struct ForwardingHost<'a> {
    pub progress: Option<&'a dyn ProgressOutlet>,
    pub relay: Option<Arc<dyn HostRelay>>,
    /// The tool's or prompt's name as the host knows it.
    pub presented: &'a str,
    /// The JWT the host's request came with (sealed on its way).
    pub subject: Option<&'a SubjectToken>,
}

/// Forgets an unanswered question when its wait ends.
struct Forget<'a> {
    forwarder: &'a Forwarder,
    id: String,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.forwarder.inner.asks.lock().expect("asks lock").remove(&self.id);
    }
}

/// Read the owner's lines until its answer or error; each question is answered (`asked`)
/// before the next line is read (the call waits on it).
async fn read_lines<F: Future<Output = ()>>(
    mut response: reqwest::Response,
    upstream: &str,
    progress: Option<&dyn ProgressOutlet>,
    relay: Option<&dyn HostRelay>,
    asked: impl Fn(String, Ask) -> F,
) -> Result<Answer, Sent> {
    let cut = || failed(upstream, "the replica holding the session stopped answering");
    let mut buffer: Vec<u8> = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|_| cut())? {
        buffer.extend_from_slice(&chunk);
        if buffer.len() > MAX_BODY {
            return Err(failed(upstream, "the replica holding the session answered too much"));
        }
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            match serde_json::from_slice::<Line>(&line[..end]) {
                Ok(Line::Progress(step)) => {
                    if let Some(outlet) = progress {
                        outlet.send(step);
                    }
                }
                Ok(Line::Log(message)) => {
                    if let Some(relay) = relay {
                        relay.log(message);
                    }
                }
                Ok(Line::Ask { id, ask }) => asked(id, ask).await,
                Ok(Line::Answer(answer)) => return Ok(answer),
                Ok(Line::Error(error)) => return Err(Sent::Failed(error.into_error(upstream))),
                Err(_) => {
                    return Err(failed(upstream, "the replica holding the session sent an unreadable line"));
                }
            }
        }
    }
    Err(cut())
}

/// The CLIENT span of `call`'s hop to `owner` (child of the host request's span current on this
/// task; `mcp_proxy.replica` names the owner); nothing when traces are off or the call is not
/// traced. Its context goes to the owner in the request's headers, where the owner's SERVER
/// span continues it.
fn hop_span(owner: &Owner, upstream: &str, call: &Call) -> Span {
    if !telemetry::on() {
        return Span::default();
    }
    let Some((method, target)) = call.traced() else { return Span::default() };
    let url = owner.url.parse::<http::Uri>().ok();
    let server = url.as_ref().and_then(|url| Some((url.host()?, url.port_u16().unwrap_or(80))));
    let span = telemetry::client_span(Outgoing { method, target, upstream, server, transport: Transport::Tcp });
    span.note("mcp_proxy.replica", owner.replica.clone());
    span
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
