//! What a routed call's host offers the upstream side: [`HostRelay`] (the server-to-client
//! requests and log messages an upstream sends for a call) and [`ProgressOutlet`] (its
//! progress), and [`HostSession`] (the host session a request came on, what it declared). A
//! contract on the ground floor: `upstream` calls through these traits, the hosts'
//! side (`downstream`, and `tools` for a call parked between rounds) implements them, and the
//! composition hands the host's implementation to the upstream call — so neither edge
//! implements a trait of the other (checked by the fast tier's `house` test). Also the JWT a
//! host's request came with ([`SubjectToken`]), which an upstream that exchanges tokens
//! exchanges for that request's calls, prompts, reads and completions. Imports nothing of the
//! crate.

#![allow(deprecated)] // Sampling and logging are deprecated by SEP-2577 but still in the 2025 era.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use rmcp::ErrorData;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam,
};

/// The host side of one routed call: where what the upstream sends for it goes. Never waits
/// on a host in `log`; `sample`/`elicit` end when the host answers or the call is over.
pub trait HostRelay: Send + Sync + 'static {
    /// `sampling/createMessage` to the host (an error when it did not declare `sampling`).
    fn sample(&self, params: CreateMessageRequestParams) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>>;
    /// `elicitation/create` to the host (an error when it did not declare `elicitation`).
    fn elicit(&self, params: ElicitRequestParams) -> BoxFuture<'static, Result<ElicitResult, ErrorData>>;
    /// `notifications/message` to the host, if its level lets it through.
    fn log(&self, params: LoggingMessageNotificationParam);
    /// The least level of log messages the host wants, if it said (`logging/setLevel`).
    fn log_level(&self) -> Option<LoggingLevel>;
    /// Whether the host takes an `input_required` result itself (2026-07-28). When it does not
    /// (2025), the proxy asks it each input request through `sample`/`elicit` and retries.
    fn takes_input_required(&self) -> bool {
        true
    }
    /// Whether the host declared `sampling`: it may be asked for a message.
    fn declares_sampling(&self) -> bool {
        true
    }
    /// Whether the host declared `elicitation`: it may be asked for input.
    fn declares_elicitation(&self) -> bool {
        true
    }
    /// Whose call this is (the principal's identity key), when known. A stdio upstream whose
    /// calls have all come from one principal may have its unnamed messages relayed to that
    /// principal's lone call in flight; an unknown tenant counts as another principal.
    fn tenant(&self) -> Option<Arc<str>> {
        None
    }
    /// The host session the call came on (its subscriber id), when it has one (a 2025 session or a
    /// stdio host; a stateless 2026-07-28 request has none): a per-host upstream session is
    /// that host session's own.
    fn host_session(&self) -> Option<u64> {
        None
    }
    /// `[cluster]`: the key under which the call's answer is kept, when its host's stream is
    /// lost, by the replica that runs it for another (the same on every replica; see
    /// `downstream`'s `kept`).
    fn kept_as(&self) -> Option<String> {
        None
    }
    /// The JWT the call's request came with, when it came with one: an upstream that exchanges
    /// tokens sends the call with a token exchanged for this one, never for another of the
    /// principal's.
    fn subject_token(&self) -> Option<SubjectToken> {
        None
    }
}

/// `[cluster]`: the key under which a routed call's answer is kept (see
/// [`HostRelay::kept_as`]), on the extensions of the upstream request made for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptAs(pub String);

/// A JWT the proxy accepted for a request, and the first second (since the epoch) it no longer
/// does; on the request's extensions, and on the upstream requests made for it. Never printed:
/// `Debug` shows neither the token nor a part of it.
#[derive(Clone, PartialEq, Eq)]
pub struct SubjectToken {
    token: Arc<str>,
    until: u64,
}

impl SubjectToken {
    pub fn new(token: &str, until: u64) -> Self {
        SubjectToken { token: token.into(), until }
    }

    /// The token (sensitive).
    pub fn token(&self) -> &Arc<str> {
        &self.token
    }

    /// The first second (since the epoch) it is no longer accepted.
    pub fn until(&self) -> u64 {
        self.until
    }

    /// How long it is still accepted (whole seconds, at least one), unless it no longer is.
    pub fn rest(&self) -> Option<Duration> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs());
        (self.until > now).then(|| Duration::from_secs(self.until - now))
    }
}

impl fmt::Debug for SubjectToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubjectToken").field("until", &self.until).finish_non_exhaustive()
    }
}

/// The host session a request came on, and what that host declared: a per-host upstream
/// session is opened declaring to the upstream only what its host did. Plain data: the hosts'
/// side names its sessions with it, the upstream side keys per-host sessions by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostSession {
    /// Its key, whose per-host sessions it names: its subscriber id; with `[cluster]` a digest of
    /// its `Mcp-Session-Id`, the same on every replica (what a session pass names it by).
    #[serde(rename = "key")]
    pub id: u64,
    pub sampling: bool,
    pub elicitation: bool,
}

/// Where one call's progress goes (a host's request); never waits.
pub trait ProgressOutlet: Send + Sync + 'static {
    /// Pass on progress (with the upstream request's token; the outlet puts the host's own in).
    fn send(&self, progress: ProgressNotificationParam);
}
