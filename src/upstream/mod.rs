//! Upstreams: one supervised connection per configured upstream server.
//!
//! Each [`Upstream`] is a cheap handle; its supervisor task (see `supervisor`) connects (stdio
//! child, streamable HTTP, or the in-process folder server), detects the protocol era, loads the
//! upstream's full catalog, and reconnects with capped exponential backoff when the connection
//! dies. Requests (`read`) go over the current connection with the upstream's timeout; an HTTP
//! upstream's reads go on its thin client (`thin`), without rmcp's peer, when they can.
//! The transports are guarded (`stdio`, `http`): a faulty reply — too large, not UTF-8, not
//! JSON-RPC, the wrong id — fails its own request with a clear error (`faults`), never the
//! connection; a stdio child sees only an allowlisted environment. Sampling, elicitation and
//! log messages an upstream sends for a routed call go to that call's host (`relay`). With
//! traces on, a read or routed call made for a host is a CLIENT span whose context goes
//! upstream in the request's `_meta` (`traced`).
//! An upstream with `session = "per-principal" | "per-host"` also opens, on first use, one
//! connection per principal or per host session for their calls and reads (`sessions`),
//! bounded, closed with the host session or when idle.
//!
//! Invariant: an upstream's entries are in the catalog only while it is connected; an upstream
//! never takes another down, and no upstream error text reaches a client (see `error`). A
//! per-principal (per-host) session carries one principal's (host session's) requests only.

mod client;
mod connect;
mod credentials;
pub mod events;
mod failures;
mod faults;
mod held_elsewhere;
mod http;
mod listing;
mod notices;
mod offered_elsewhere;
mod offerings;
mod pool;
mod progress;
mod reason;
mod registry;
mod relay;
mod roots;
mod scan;
mod sessions;
mod stdio;
mod supervisor;
mod tap;
mod thin;
mod traced;
mod watching;

use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientRequest, GetExtensions, ReadResourceRequest, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerResult,
};
use rmcp::service::{Peer, RoleClient};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use self::credentials::TokenSource;
pub use self::events::{EventInbox, EventSender, Inbound, Lost};
pub use self::registry::Registry;
pub use self::roots::RootsChange;
pub use self::sessions::{Lease, SessionHandle};
use crate::auth::subjects::Subjects;
use crate::catalog::Catalog;
use crate::config::{SessionMode, UpstreamConfig, UpstreamTransport};
use crate::error::ProxyError;
use crate::host::SubjectToken;
// The host session a per-host session is keyed by: plain data of the ground floor (`host`).
pub use crate::host::HostSession;
use crate::metrics::Metrics;
use crate::protocol::{Era, method};
use crate::spine::Spine;
use crate::subscriptions::HolderId;

pub use self::offerings::Offered;

/// What upstreams tell the rest of the proxy.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamEvent {
    /// Connected and its catalog is loaded; `reconnected` when it had been up before.
    /// `offered`: its tools and prompts, fetched before this is sent (none when that failed).
    Up { upstream: String, era: Era, reconnected: bool, offered: Offered },
    /// Lost; its catalog entries are gone until it is back.
    Down { upstream: String },
    /// Its catalog was reloaded after it said `list_changed`.
    CatalogChanged { upstream: String },
    /// This (un-namespaced) URI changed, or may have: `change` says how it is known.
    ResourceUpdated { upstream: String, uri: String, change: Change },
    /// It said `tools/list_changed` or `prompts/list_changed`; its lists fetched again
    /// (see `crate::tools`).
    OfferingsChanged { upstream: String, offered: Offered },
    /// A per-principal or per-host session of it says this (un-namespaced) URI changed (or may
    /// have, `heard` false): for these holders only — those that hold it (or a parent of it,
    /// the URIs they hold matched) on that session. Never cached, so nothing to invalidate.
    SessionUpdated { upstream: String, uri: String, heard: bool, holders: Vec<(HolderId, Vec<String>)> },
    /// A per-principal or per-host session of it (`principal`'s; host session `host`'s when it
    /// is one) said its tools or prompts changed, and lists them now as
    /// [`Upstream::own_offerings`] gives them: that session's hosts only are told (`tools`,
    /// `prompts`: which lists differ from what it listed before).
    SessionOfferingsChanged { upstream: String, principal: Arc<str>, host: Option<u64>, tools: bool, prompts: bool },
}

/// How a URI of an upstream came to be reported changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The upstream said so.
    Heard,
    /// It may have changed unseen while it was held (a fresh connection, a listen stream that
    /// ended): what was kept of it goes, and its holders are told.
    Unseen,
    /// It left the watch set and is back: a read that saw it acknowledged just before it left
    /// may have missed a change in between, so what was kept of it goes. Nobody held it
    /// meanwhile (else it would not have left), so nobody missed anything: no holder is told.
    Rewatched,
}

impl UpstreamEvent {
    /// The upstream it is about.
    pub fn upstream(&self) -> &str {
        match self {
            UpstreamEvent::Up { upstream, .. }
            | UpstreamEvent::Down { upstream }
            | UpstreamEvent::CatalogChanged { upstream }
            | UpstreamEvent::ResourceUpdated { upstream, .. }
            | UpstreamEvent::OfferingsChanged { upstream, .. }
            | UpstreamEvent::SessionUpdated { upstream, .. }
            | UpstreamEvent::SessionOfferingsChanged { upstream, .. } => upstream,
        }
    }
}

/// What became of a subscription the proxy asked an upstream for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watching {
    /// In place: the upstream will send `updated`.
    Acknowledged,
    /// Refused (error reply, or left out of a listen acknowledgement): never notified.
    Refused,
    /// No answer within the wait.
    NotInTime,
}

/// Connection state, as `/status` and logs show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkState {
    Connecting,
    Up,
    Down,
}

/// A snapshot of an upstream's health.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UpstreamStatus {
    pub name: String,
    pub state: LinkState,
    pub era: Option<Era>,
    /// Why it is (or last was) down, in plain words.
    pub last_error: Option<String>,
    /// The last lines its stdio child wrote to stderr before it went down (bounded: 20 lines,
    /// 4 KiB); empty for other transports and while it is up.
    pub stderr_tail: Vec<String>,
    /// Times it came back after being down.
    pub reconnects: u64,
    /// Per-principal or per-host sessions open besides the shared connection (`session`).
    pub sessions: usize,
}

/// A cheap `Clone` handle on one upstream.
#[derive(Clone)]
pub struct Upstream {
    inner: Arc<Inner>,
}

struct Inner {
    config: UpstreamConfig,
    metrics: Metrics,
    link: Mutex<Option<Link>>,
    status: Mutex<UpstreamStatus>,
    /// The `state` of `status`, watchable.
    state: watch::Sender<LinkState>,
    /// Woken when a request finds the transport broken, so the supervisor reconnects.
    broken: Notify,
    /// The URIs the proxy wants watched on this upstream (host subscriptions and the cache).
    watched: watch::Sender<watching::WatchSet>,
    /// How many connections have been made: the cache keys entries by it.
    connections: std::sync::atomic::AtomicU64,
    /// What the upstream answered for the watched URIs on the current connection.
    applied: watch::Sender<watching::AppliedSet>,
    /// Times a change to `watched` had to copy the whole set (it is shared while read).
    watch_set_copies: std::sync::atomic::AtomicU64,
    /// What its stdio children said on stderr.
    child_output: Arc<reason::ChildOutput>,
    /// Why its stdio child could not start or exited, in words a host may be told (see
    /// `reason::ChildOutput::cause_for_host`); none while it is up.
    cause_for_host: Mutex<Option<String>>,
    /// True once the first connection attempt ended, either way.
    settled: watch::Sender<bool>,
    /// The running supervisor: what stops it, and its task.
    supervisor: Mutex<Option<(CancellationToken, tokio::task::JoinHandle<()>)>>,
    /// Routed calls in flight whose sampling, elicitation and logging go to their host.
    relays: Arc<relay::RelayBook>,
    /// The roots it is given (its config's, until a reload changes them).
    roots: roots::Roots,
    /// Its sessions per principal or per host (none when it is shared; see `sessions`).
    sessions: Option<sessions::SessionBook>,
    /// True for such a session: it has no catalog, status, gauges or events of its own.
    is_session: bool,
    /// A per-host session: what its host declared, which is all it declares upstream.
    declared: Option<client::Declared>,
    /// A session: what hosts hold on it, and for whom (see `sessions`).
    holds: sessions::Holds,
    /// Where its supervisor's events go, once spawned; its sessions' updates go there too.
    events: Mutex<Option<EventSender>>,
    /// A session's principal, and its host session when it is one's.
    whose: Option<(Arc<str>, Option<u64>)>,
    /// A session that said its tools or prompts changed: what it lists since (before, the
    /// shared connection's lists are taken for its own).
    own_offerings: Mutex<Option<Arc<Offered>>>,
    /// `[cluster]`: reaches the replica holding a principal's session (see `held_elsewhere`).
    forwarder: std::sync::OnceLock<crate::cluster::forward::Forwarder>,
    /// `[cluster]`: the subscriptions that follow their principal's session to its owner.
    following: held_elsewhere::FollowingHolds,
    /// `[cluster]`: the own lists of sessions other replicas hold (see `offered_elsewhere`).
    own_elsewhere: offered_elsewhere::OwnListsElsewhere,
    /// A session: the `logging/setLevel` it was sent last, on which connection.
    #[allow(deprecated)]
    log_level: Mutex<Option<(u64, rmcp::model::LoggingLevel)>>,
    /// Where its access tokens come from, if it sends any (see `credentials`).
    credentials: Option<TokenSource>,
    /// The principals' latest JWTs, for a `token_exchange` upstream's sessions.
    subjects: Subjects,
    /// Where its supervisor (and its sessions) run, once spawned.
    spine: Mutex<Option<Spine>>,
}

/// What a connection or a session has of its own, besides its config.
struct Own {
    sessions: Option<sessions::SessionBook>,
    is_session: bool,
    /// A session's principal, and its host session when it is one's.
    whose: Option<(Arc<str>, Option<u64>)>,
    declared: Option<client::Declared>,
    credentials: Option<TokenSource>,
}

/// The live connection: what requests need.
#[derive(Clone)]
pub(crate) struct Link {
    pub peer: Peer<RoleClient>,
    pub era: Era,
    pub capabilities: ServerCapabilities,
    /// Where this connection's progress goes (see `progress`).
    pub progress: progress::ProgressRoutes,
    /// Streamable HTTP: reads go here first, without rmcp's peer (see `thin`).
    pub thin: Option<thin::ThinReader>,
}

impl Upstream {
    pub fn new(config: UpstreamConfig, metrics: Metrics) -> Self {
        Self::with_subjects(config, metrics, Subjects::default())
    }

    /// As [`Upstream::new`]; a `token_exchange` upstream exchanges the principals' JWTs kept
    /// in `subjects` (see `credentials`).
    pub fn with_subjects(config: UpstreamConfig, metrics: Metrics, subjects: Subjects) -> Self {
        metrics.upstream_configured(&config.name);
        let sessions = (config.sessions.mode != SessionMode::Shared).then(sessions::SessionBook::default);
        let credentials = credentials::shared_source(&config);
        let own = Own { sessions, is_session: false, whose: None, declared: None, credentials };
        Self::build(config, metrics, own, subjects)
    }

    /// A session of `parent`'s own (per principal or per host): the same config, its own
    /// connection and relays, its tokens from `credentials`.
    fn session_of(
        parent: &Upstream,
        whose: (Arc<str>, Option<u64>),
        declared: Option<client::Declared>,
        credentials: Option<TokenSource>,
    ) -> Self {
        let own = Own { sessions: None, is_session: true, whose: Some(whose), declared, credentials };
        Self::build(parent.inner.config.clone(), parent.inner.metrics.clone(), own, parent.inner.subjects.clone())
    }

    fn build(config: UpstreamConfig, metrics: Metrics, own: Own, subjects: Subjects) -> Self {
        let Own { sessions, is_session, whose, declared, credentials } = own;
        let relays = {
            let (metrics, name) = (metrics.clone(), config.name.clone());
            relay::RelayBook::counted(move |kind| metrics.relay_unattributed(&name, kind))
        };
        let status = UpstreamStatus {
            name: config.name.clone(),
            state: LinkState::Connecting,
            era: None,
            last_error: None,
            stderr_tail: Vec::new(),
            reconnects: 0,
            sessions: 0,
        };
        let roots = roots::Roots::new(&config.roots);
        let inner = Inner {
            config,
            metrics,
            link: Mutex::new(None),
            status: Mutex::new(status),
            state: watch::Sender::new(LinkState::Connecting),
            broken: Notify::new(),
            watched: watch::Sender::new(Default::default()),
            applied: watch::Sender::new(Default::default()),
            connections: std::sync::atomic::AtomicU64::new(0),
            watch_set_copies: std::sync::atomic::AtomicU64::new(0),
            child_output: Arc::default(),
            cause_for_host: Mutex::new(None),
            settled: watch::Sender::new(false),
            supervisor: Mutex::new(None),
            relays: Arc::new(relays),
            roots,
            sessions,
            is_session,
            declared,
            holds: Default::default(),
            events: Mutex::new(None),
            whose,
            own_offerings: Mutex::new(None),
            forwarder: std::sync::OnceLock::new(),
            own_elsewhere: Default::default(),
            following: Default::default(),
            log_level: Mutex::new(None),
            credentials,
            subjects,
            spine: Mutex::new(None),
        };
        Self { inner: Arc::new(inner) }
    }

    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// Is it the built-in folder server (in process, the proxy's own code)?
    fn is_folder(&self) -> bool {
        matches!(self.inner.config.transport, UpstreamTransport::Dir { .. })
    }

    pub fn status(&self) -> UpstreamStatus {
        let mut status = self.inner.status.lock().expect("status lock").clone();
        status.sessions = self.sessions_open();
        status
    }

    /// Is it a per-principal or per-host session of an upstream (not the upstream itself)?
    pub(crate) fn is_session(&self) -> bool {
        self.inner.is_session
    }

    /// Start the supervisor task on `spine` (`supervisor:<name>`): connect, load the catalog,
    /// keep it connected, until the spine shuts down or [`Self::stop`].
    pub fn spawn(&self, catalog: Catalog, events: EventSender, spine: &Spine) {
        let stop = spine.shutdown().child_token();
        *self.inner.events.lock().expect("events lock") = Some(events.clone());
        let supervisor = supervisor::Supervisor::new(self.clone(), catalog, events, stop.clone(), spine.clone());
        let task = spine.spawn(format!("supervisor:{}", self.name()), supervisor.run());
        *self.inner.spine.lock().expect("spine lock") = Some(spine.clone());
        *self.inner.supervisor.lock().expect("supervisor lock") = Some((stop.clone(), task));
        if let Some(book) = &self.inner.sessions {
            book.close_all();
            spine.spawn(format!("sessions:{}", self.name()), sessions::sweep(self.clone(), stop));
        }
    }

    /// Start a session's supervisor on `spine` (`session:<name>`) until `stop`: no catalog of
    /// its own is kept; of its events only the updates of what its holders hold go to `events`
    /// (its upstream's), as [`UpstreamEvent::SessionUpdated`] (see `sessions`).
    fn spawn_session(&self, spine: &Spine, stop: CancellationToken, events: Option<EventSender>, resumed: bool) {
        let events = events.unwrap_or_else(|| events::channel(1).0);
        let supervisor = supervisor::Supervisor::new(self.clone(), Catalog::new(), events, stop.clone(), spine.clone());
        // A session taking over a reclaimed one's holds connects as if again: what it holds
        // may have changed unheard, so all of it is reported as changed.
        let supervisor = if resumed { supervisor.resuming() } else { supervisor };
        let task = spine.spawn(format!("session:{}", self.name()), supervisor.run());
        *self.inner.supervisor.lock().expect("supervisor lock") = Some((stop, task));
    }

    /// Stop the supervisor: its connection is closed (a stdio child ends, a listen stream is
    /// cancelled) and its catalog entries removed. True when it ended within `grace`.
    pub async fn stop(&self, grace: std::time::Duration) -> bool {
        let Some((stop, task)) = self.inner.supervisor.lock().expect("supervisor lock").take() else { return true };
        stop.cancel();
        if let Some(book) = &self.inner.sessions {
            book.close_all();
            self.inner.metrics.set_upstream_sessions(self.name(), 0);
        }
        tokio::time::timeout(grace, task).await.is_ok()
    }

    /// The roots it is given now.
    pub fn roots(&self) -> Arc<Vec<String>> {
        self.inner.roots.uris()
    }

    /// Give it `next` as its roots. A change between some roots and others is made in place
    /// and the connected upstream told `notifications/roots/list_changed` (it asks
    /// `roots/list` again); a change to or from none needs a reconnect (the capability is
    /// declared at connect), which the caller makes.
    pub async fn set_roots(&self, next: &[String]) -> RootsChange {
        let change = self.inner.roots.replace(next);
        if change == RootsChange::Changed
            && let Ok(link) = self.link()
            && let Err(error) = link.peer.notify_roots_list_changed().await
        {
            tracing::warn!(upstream = self.name(), error = %error, "roots/list_changed not sent");
        }
        change
    }

    /// Read `uri` (un-namespaced) from this upstream.
    pub async fn read(&self, uri: &str) -> Result<ReadResourceResponse, ProxyError> {
        self.read_as(uri, None).await
    }

    /// Read `uri` for a host's request that came with the JWT `subject` (if any): an upstream
    /// that exchanges tokens gets the read with a token exchanged for that one.
    pub async fn read_as(&self, uri: &str, subject: Option<&SubjectToken>) -> Result<ReadResourceResponse, ProxyError> {
        let started = std::time::Instant::now();
        let result = self.read_once(uri, subject).await;
        let elapsed = started.elapsed();
        self.inner.metrics.upstream_request(
            self.name(),
            method::RESOURCES_READ,
            crate::metrics::outcome(&result),
            elapsed,
            self.hop(),
        );
        result
    }

    /// One read within the request timeout: on the thin client of an HTTP connection when it
    /// can, else (or when it hands the read back) on rmcp's peer.
    async fn read_once(&self, uri: &str, subject: Option<&SubjectToken>) -> Result<ReadResourceResponse, ProxyError> {
        let link = self.link()?;
        if link.capabilities.resources.is_none() {
            // It has no resources (it did not declare them): not asked.
            return Err(ProxyError::not_found(uri));
        }
        let span = self.client_span(method::RESOURCES_READ, None);
        span.note_uri(uri);
        let trace = span.injected();
        let read = async {
            if let Some(thin) = link.thin.as_ref().filter(|_| !link.peer.is_transport_closed()) {
                match thin.read(uri, subject, trace.as_ref()).await {
                    thin::ThinRead::Done(Ok(response)) => return Ok(response),
                    thin::ThinRead::Done(Err(error)) => return Err(self.read_error(uri, error, false)),
                    thin::ThinRead::Fallback(why) => {
                        tracing::debug!(upstream = self.name(), uri, why, "read sent on rmcp's path")
                    }
                    thin::ThinRead::Resend(why) => {
                        tracing::debug!(upstream = self.name(), uri, why, "read sent again on rmcp's path");
                        span.retried(why);
                    }
                }
            }
            let mut params = ReadResourceRequestParams::new(uri);
            params.meta = traced::with_trace(params.meta, &span);
            let request = match subject {
                None => link.peer.read_resource_once(params).await,
                Some(subject) => read_with_subject(&link.peer, params, subject).await,
            };
            request.map_err(|error| self.read_error(uri, error, !link.peer.is_transport_closed()))
        };
        let answer = tokio::time::timeout(self.inner.config.request_timeout, read).await.unwrap_or_else(|_| {
            Err(ProxyError::UpstreamTimeout {
                upstream: self.name().to_string(),
                timeout: self.inner.config.request_timeout,
            })
        });
        if let Err(error) = &answer {
            traced::note_failure(&span, error);
        }
        answer
    }

    fn failed(&self, reason: String) -> ProxyError {
        ProxyError::UpstreamFailed { upstream: self.name().to_string(), reason }
    }

    pub(crate) fn link(&self) -> Result<Link, ProxyError> {
        self.inner.link.lock().expect("link lock").clone().ok_or_else(|| self.down())
    }

    /// The error of a request that finds it not connected: with why its child could not
    /// start, when that is known.
    pub(crate) fn down(&self) -> ProxyError {
        let cause = self.inner.cause_for_host.lock().expect("cause lock").clone();
        ProxyError::UpstreamDown { upstream: self.name().to_string(), cause }
    }

    pub(crate) fn config(&self) -> &UpstreamConfig {
        &self.inner.config
    }

    /// The number of the current (or last) connection; a new one gets a higher number.
    pub fn connection(&self) -> u64 {
        self.inner.connections.load(std::sync::atomic::Ordering::Acquire)
    }

    fn set_link(&self, link: Option<Link>) {
        if link.is_some() {
            self.inner.connections.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        *self.inner.link.lock().expect("link lock") = link;
    }

    /// Start (`true`) or stop keeping `uri` subscribed upstream. A delta: the set is copied
    /// only when a reader still holds the previous one (counted in [`Self::watch_set_copies`]).
    pub fn set_watching(&self, uri: &str, watched: bool) {
        self.inner.watched.send_if_modified(|set| {
            if set.contains(uri) == watched {
                return false;
            }
            if Arc::strong_count(set) > 1 {
                self.inner.watch_set_copies.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let set = Arc::make_mut(set);
            match watched {
                true => set.insert(uri.into()),
                false => set.remove(uri),
            }
        });
    }

    /// How many changes to the watch set had to copy it whole.
    pub fn watch_set_copies(&self) -> u64 {
        self.inner.watch_set_copies.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Does the proxy want `uri` watched on this upstream (for a host or for the cache)?
    pub fn wants_watched(&self, uri: &str) -> bool {
        self.inner.watched.borrow().contains(uri)
    }

    /// The URIs the proxy wants watched on this upstream.
    pub fn watch_set_len(&self) -> usize {
        self.inner.watched.borrow().len()
    }

    /// Can this upstream notify of changes (is it connected and does it offer subscriptions)?
    pub fn can_notify(&self) -> bool {
        self.link().is_ok_and(|link| link.capabilities.resources.as_ref().is_some_and(|r| r.subscribe == Some(true)))
    }

    /// Wait (at most `timeout`) until the upstream answered the subscription for `uri`: true
    /// only when it acknowledged it. A refusal answers false at once.
    pub async fn wait_watching(&self, uri: &str, timeout: std::time::Duration) -> Watching {
        let mut applied = self.inner.applied.subscribe();
        let answered = applied.wait_for(|set| set.acknowledged.contains(uri) || set.refused.contains(uri));
        match tokio::time::timeout(timeout, answered).await {
            Ok(Ok(set)) if set.acknowledged.contains(uri) => Watching::Acknowledged,
            Ok(Ok(_)) => Watching::Refused,
            Ok(Err(_)) | Err(_) => Watching::NotInTime,
        }
    }

    /// Wait until the first connection attempt has ended: up, or failed.
    pub async fn wait_settled(&self) {
        let mut settled = self.inner.settled.subscribe();
        let _ = settled.wait_for(|settled| *settled).await;
    }

    /// Wait until this upstream's state satisfies `ready`.
    pub async fn wait_state(&self, ready: impl FnMut(&LinkState) -> bool) {
        let mut state = self.inner.state.subscribe();
        let _ = state.wait_for(ready).await;
    }

    fn update_status(&self, edit: impl FnOnce(&mut UpstreamStatus)) {
        let mut status = self.inner.status.lock().expect("status lock");
        edit(&mut status);
        self.inner.state.send_if_modified(|state| std::mem::replace(state, status.state) != status.state);
    }
}

/// One `resources/read` carrying `subject` (the JWT of the host's request) in its extensions,
/// for the HTTP client to send it with a token exchanged for that JWT. Not kept in rmcp's
/// response cache: a session's reads are never cached.
async fn read_with_subject(
    peer: &Peer<RoleClient>,
    params: ReadResourceRequestParams,
    subject: &SubjectToken,
) -> Result<ReadResourceResponse, rmcp::ServiceError> {
    let mut request = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params));
    request.extensions_mut().insert(subject.clone());
    match peer.send_request(request).await? {
        ServerResult::ReadResourceResult(result) => Ok(ReadResourceResponse::Complete(result)),
        ServerResult::InputRequiredResult(needs) => Ok(ReadResourceResponse::InputRequired(needs)),
        _ => Err(rmcp::ServiceError::UnexpectedResponse),
    }
}
