//! Upstreams: one supervised connection per configured upstream server.
//!
//! A [`Connection`] (`connection`) is one connection of any transport (stdio child, streamable
//! HTTP, or the in-process folder server); its supervisor task (see `supervisor`) connects,
//! detects the protocol era and reconnects with capped exponential backoff when it dies.
//! Requests (`read`, calls) go over it with the upstream's timeout; an HTTP connection's reads go
//! on its thin client (`thin`), without rmcp's peer, when they can. Each [`Upstream`] is a cheap
//! handle on its shared connection, which loads the upstream's full catalog and holds the
//! proxy's subscriptions. The transports are guarded (`stdio`, `http`): a faulty reply — too
//! large, not UTF-8, not JSON-RPC, the wrong id — fails its own request with a clear error
//! (`faults`), never the connection; a stdio child sees only an allowlisted environment.
//! Sampling, elicitation and log messages an upstream sends for a routed call go to that call's
//! host (`relay`). With traces on, a read or routed call made for a host is a CLIENT span whose
//! context goes upstream in the request's `_meta` (`traced`).
//! An upstream with `session = "per-principal" | "per-host"` also opens, on first use, one
//! `session::Session` (a connection of its own) per principal or per host session (`sessions`,
//! `session_subscriptions`), bounded, closed with the host session or when idle. With `[cluster]`, a session
//! another replica holds is that replica's, reached over MCP with the HTTP upstream code
//! (`owners`, `owner_link`, `owner_calls`; what crosses replicas is handed in, this module knows no cluster).
//!
//! Invariant: an upstream's entries are in the catalog only while it is connected; an upstream
//! never takes another down, and no upstream error text reaches a client (see `error`). A
//! per-principal (per-host) session carries one principal's (host session's) requests only.

mod client;
mod connect;
mod connection;
mod credentials;
pub mod events;
mod failures;
mod faults;
mod http;
mod listing;
mod notices;
mod offerings;
mod open_sessions;
mod owner_calls;
mod owner_link;
mod owners;
mod pool;
mod progress;
mod reason;
mod registry;
mod relay;
mod role;
mod roots;
mod scan;
mod session;
mod session_subscriptions;
mod sessions;
mod shared;
mod stdio;
mod supervisor;
mod tap;
mod thin;
mod traced;
mod watching;

use std::sync::{Arc, Mutex};

use rmcp::model::ServerCapabilities;
use rmcp::service::{Peer, RoleClient};
use tokio_util::sync::CancellationToken;

pub use self::connection::Connection;
pub use self::events::{EventInbox, EventSender, Inbound, Lost};
pub use self::open_sessions::Lease;
pub use self::registry::Registry;
pub use self::roots::RootsChange;
pub use self::sessions::SessionHandle;
use crate::auth::subjects::Subjects;
use crate::catalog::Catalog;
use crate::config::{SessionMode, UpstreamConfig};
// The host session a per-host session is keyed by: plain data of the ground floor (`host`).
pub use crate::host::HostSession;
use crate::metrics::Metrics;
use crate::protocol::Era;
use crate::spine::Spine;
use crate::subscription_table::SubscriberId;

pub use self::offerings::Offered;
pub use self::owner_link::{Carried, OwnerAt, OwnerRoutes, Whose};
pub use self::owners::{MAX_SUBSCRIPTIONS_PER_OWNER, Unreached};

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
    /// have, `heard` false): for these subscribers only — those that hold it (or a parent of it,
    /// the URIs they hold matched) on that session. Never cached, so nothing to invalidate.
    SessionUpdated { upstream: String, uri: String, heard: bool, subscribers: Vec<(SubscriberId, Vec<String>)> },
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
    /// ended): what was kept of it goes, and its subscribers are told.
    Unseen,
    /// It left the watch set and is back: a read that saw it acknowledged just before it left
    /// may have missed a change in between, so what was kept of it goes. Nobody held it
    /// meanwhile (else it would not have left), so nobody missed anything: no subscriber is told.
    Resubscribed,
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
pub enum SubscribeOutcome {
    /// In place: the upstream will send `updated`.
    Acknowledged,
    /// Refused (error reply, or left out of a listen acknowledgement): never notified.
    Refused,
    /// No answer within the wait.
    NotInTime,
}

/// Connection state, as `/status` and logs show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkState {
    #[default]
    Connecting,
    Up,
    Down,
}

/// A snapshot of an upstream's health.
#[derive(Debug, Clone, Default, serde::Serialize)]
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

/// A cheap `Clone` handle on one upstream: its shared connection (which it derefs to), the
/// supervisor keeping it, and its sessions per principal or per host when it has them.
#[derive(Clone)]
pub struct Upstream {
    inner: Arc<Inner>,
}

struct Inner {
    /// The shared connection: it loads the catalog and holds the proxy's subscriptions.
    connection: Connection,
    /// The running supervisor: what stops it, and its task.
    supervisor: Mutex<Option<(CancellationToken, tokio::task::JoinHandle<()>)>>,
    /// Its sessions per principal or per host (none when it is shared; see `sessions`).
    sessions: Option<open_sessions::OpenSessions>,
    /// Where its supervisor's events go, once spawned; its sessions' updates go there too.
    events: Mutex<Option<EventSender>>,
    /// `[cluster]`: how other replicas' sessions are reached, and the connections to them
    /// (see `owners`).
    owner_routes: std::sync::OnceLock<owner_link::OwnerRoutes>,
    at_owners: owners::AtOwners,
    /// The principals' latest JWTs, for a `token_exchange` upstream's sessions.
    subjects: Subjects,
    /// Where its supervisor (and its sessions) run, once spawned.
    spine: Mutex<Option<Spine>>,
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

impl std::ops::Deref for Upstream {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.inner.connection
    }
}

impl Upstream {
    pub fn new(config: UpstreamConfig, metrics: Metrics) -> Self {
        Self::with_subjects(config, metrics, Subjects::default())
    }

    /// As [`Upstream::new`]; a `token_exchange` upstream exchanges the principals' JWTs kept
    /// in `subjects` (see `credentials`).
    pub fn with_subjects(config: UpstreamConfig, metrics: Metrics, subjects: Subjects) -> Self {
        metrics.upstream_configured(&config.name);
        let sessions = (config.sessions.mode != SessionMode::Shared).then(open_sessions::OpenSessions::default);
        let credentials = credentials::shared_source(&config);
        let inner = Inner {
            connection: Connection::new(config, metrics, None, credentials, None),
            supervisor: Mutex::new(None),
            sessions,
            events: Mutex::new(None),
            owner_routes: std::sync::OnceLock::new(),
            at_owners: Default::default(),
            subjects,
            spine: Mutex::new(None),
        };
        Self { inner: Arc::new(inner) }
    }

    pub fn status(&self) -> UpstreamStatus {
        let status = self.inner.connection.inner.status.lock().expect("status lock").clone();
        UpstreamStatus { sessions: self.sessions_open(), ..status }
    }

    /// Start the supervisor task on `spine` (`supervisor:<name>`): connect, load the catalog,
    /// keep it connected, until the spine shuts down or [`Self::stop`].
    pub fn spawn(&self, catalog: Catalog, events: EventSender, spine: &Spine) {
        let stop = spine.shutdown().child_token();
        *self.inner.events.lock().expect("events lock") = Some(events.clone());
        let shared = shared::Shared { connection: self.inner.connection.clone(), catalog };
        let supervisor = supervisor::Supervisor::new(shared, events, stop.clone(), spine.clone());
        let task = spine.spawn(format!("supervisor:{}", self.name()), supervisor.run());
        *self.inner.spine.lock().expect("spine lock") = Some(spine.clone());
        *self.inner.supervisor.lock().expect("supervisor lock") = Some((stop.clone(), task));
        if let Some(book) = &self.inner.sessions {
            book.close_all();
            spine.spawn(format!("sessions:{}", self.name()), sessions::sweep(self.clone(), stop));
        }
    }

    /// Stop the supervisor: its connection is closed (a stdio child ends, a listen stream is
    /// cancelled) and its catalog entries removed. True when it ended within `grace`.
    pub async fn stop(&self, grace: std::time::Duration) -> bool {
        let Some((stop, task)) = self.inner.supervisor.lock().expect("supervisor lock").take() else { return true };
        stop.cancel();
        if let Some(book) = &self.inner.sessions {
            book.close_all();
            self.inner.connection.inner.metrics.set_upstream_sessions(self.name(), 0);
        }
        tokio::time::timeout(grace, task).await.is_ok()
    }
}
