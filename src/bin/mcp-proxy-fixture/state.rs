//! [`Fixture`]: the one state shared by every connection, session and stateless request — the
//! catalog and its versions, the call counters, the read gate, and who is watching what (legacy
//! peers per URI, modern listen sinks). It also fans notifications out to the watchers.
//!
//! Invariant: std `Mutex`es are held only for short critical sections, never across `.await`;
//! notification sends happen on cloned handles with a timeout, and a watcher whose send fails is
//! dropped.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{InputRequiredResult, ReadResourceResult, ResourceUpdatedNotificationParam},
    service::{Peer, SubscriptionSink},
};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::{
    catalog::{Catalog, Page, Target},
    cli::Settings,
};

/// How long one notification send may take before the watcher is given up on for this fan-out.
const SEND_TIMEOUT: Duration = Duration::from_secs(2);

/// Cheap `Clone` handle over the shared fixture state.
#[derive(Clone)]
pub struct Fixture {
    inner: Arc<Inner>,
}

/// A notification to fan out.
#[derive(Debug, Clone)]
pub enum Notice {
    Updated(String),
    ListChanged,
}

/// Outcome of one fan-out.
#[derive(Debug, Default, Clone, Copy)]
pub struct FanOut {
    pub delivered: u64,
    pub failed: u64,
}

struct Inner {
    settings: Settings,
    catalog: Catalog,
    item_count: AtomicU64,
    read_delay_ms: AtomicU64,
    hold_reads: watch::Sender<bool>,
    next_id: AtomicU64,
    versions: Mutex<HashMap<String, u64>>,
    counters: Mutex<Counters>,
    watchers: Mutex<Watchers>,
}

#[derive(Default)]
struct Counters {
    reads: u64,
    reads_in_flight: u64,
    reads_by_uri: BTreeMap<String, u64>,
    lists: u64,
    template_lists: u64,
    subscribes: u64,
    unsubscribes: u64,
    /// `input_required` answers given (reads of `fx://P/needs-input` by 2026-07-28 clients).
    input_required: u64,
}

#[derive(Default)]
struct Watchers {
    /// Legacy `resources/subscribe` registrations, by registration id.
    subscriptions: BTreeMap<u64, LegacySubscription>,
    /// Legacy sessions seen in `on_initialized`, by connection id.
    sessions: BTreeMap<u64, Peer<RoleServer>>,
    /// Open `subscriptions/listen` streams, by registration id.
    listens: BTreeMap<u64, SubscriptionSink>,
}

struct LegacySubscription {
    connection: u64,
    uri: String,
    peer: Peer<RoleServer>,
}

/// Where one notification goes.
enum Recipient {
    Legacy { connection: u64, peer: Peer<RoleServer> },
    Listen { registration: u64, sink: SubscriptionSink },
}

/// Keeps `reads_in_flight` honest even when a read is cancelled mid-way.
struct InFlight<'a>(&'a Fixture);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.counters().reads_in_flight -= 1;
    }
}

impl Fixture {
    pub fn new(settings: Settings) -> Self {
        let catalog = Catalog::new(&settings.prefix, settings.text_bytes, settings.bad_uri, settings.page_size)
            .with_hostility(settings.faults, settings.duplicate_uris);
        let inner = Inner {
            catalog,
            item_count: AtomicU64::new(settings.initial_items),
            read_delay_ms: AtomicU64::new(u64::try_from(settings.read_delay.as_millis()).unwrap_or(u64::MAX)),
            hold_reads: watch::Sender::new(false),
            next_id: AtomicU64::new(1),
            versions: Mutex::default(),
            counters: Mutex::default(),
            watchers: Mutex::default(),
            settings,
        };
        Self { inner: Arc::new(inner) }
    }

    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// A fresh id for a connection or a registration.
    pub fn next_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn list_resources(&self, cursor: Option<&str>) -> Result<Page<rmcp::model::Resource>, McpError> {
        self.counters().lists += 1;
        let count = self.inner.item_count.load(Ordering::SeqCst);
        self.inner.catalog.resources_page(count, cursor).map_err(|_| invalid_cursor())
    }

    pub fn list_templates(&self, cursor: Option<&str>) -> Result<Page<rmcp::model::ResourceTemplate>, McpError> {
        self.counters().template_lists += 1;
        self.inner.catalog.templates_page(cursor).map_err(|_| invalid_cursor())
    }

    /// Serve one `resources/read`: count it, wait while reads are held, sleep the read delay, answer.
    pub async fn read(&self, uri: &str) -> Result<ReadResourceResult, McpError> {
        let _in_flight = self.begin_read(uri);
        let mut hold = self.inner.hold_reads.subscribe();
        // The sender lives in `Inner`, so the channel cannot close while `self` exists.
        let _ = hold.wait_for(|held| !*held).await;
        let delay = self.inner.read_delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let routed = match self.settings().lenient_uris {
            true => uri.split(['?', '#']).next().unwrap_or(uri),
            false => uri,
        };
        let target =
            self.inner.catalog.resolve(routed).ok_or_else(|| {
                McpError::resource_not_found(format!("no resource {uri}"), Some(json!({ "uri": uri })))
            })?;
        if matches!(&target, Target::Fault(kind) if kind == "hang") {
            std::future::pending::<()>().await;
        }
        let contents = self.inner.catalog.contents(uri, &target, self.version(uri));
        let mut result = ReadResourceResult::new(contents);
        result.ttl_ms = self.settings().ttl_ms;
        result.cache_scope = self.settings().scope;
        Ok(result)
    }

    /// Whether `uri` is the MRTR resource `fx://P/needs-input` (see [`Self::read_needs_input`]).
    pub fn is_needs_input(&self, uri: &str) -> bool {
        uri == self.inner.catalog.needs_input_uri()
    }

    /// Serve one read of `fx://P/needs-input`: counted like any read (`reads`, `reads_by_uri`);
    /// a 2026-07-28 reader (`modern`) is asked for input, a legacy one gets -32600.
    pub fn read_needs_input(&self, modern: bool) -> Result<InputRequiredResult, McpError> {
        let uri = self.inner.catalog.needs_input_uri();
        let _in_flight = self.begin_read(&uri);
        if !modern {
            let message = format!("{uri} needs input, which only 2026-07-28 clients can give");
            return Err(McpError::invalid_request(message, Some(json!({ "uri": uri }))));
        }
        let result = self.inner.catalog.input_required().map_err(|e| McpError::internal_error(e, None))?;
        self.counters().input_required += 1;
        Ok(result)
    }

    pub fn set_read_delay(&self, ms: u64) {
        self.inner.read_delay_ms.store(ms, Ordering::Relaxed);
    }

    pub fn hold_reads(&self, on: bool) {
        self.inner.hold_reads.send_replace(on);
    }

    /// Bump `uri`'s version and tell its watchers. Returns the new version and the fan-out.
    pub async fn touch(&self, uri: &str) -> (u64, FanOut) {
        let version = {
            let mut versions = self.inner.versions.lock().expect("versions lock");
            let version = versions.entry(uri.to_owned()).or_insert(1);
            *version += 1;
            *version
        };
        let recipients = self.update_recipients(uri);
        (version, self.fan_out(recipients, Notice::Updated(uri.to_owned())).await)
    }

    /// Append `count` items, then announce one list change. Returns the new item count.
    pub async fn add_items(&self, count: u64) -> (u64, FanOut) {
        let total = self.inner.item_count.fetch_add(count, Ordering::SeqCst) + count;
        (total, self.announce_list_changed().await)
    }

    pub async fn announce_list_changed(&self) -> FanOut {
        let recipients = self.list_changed_recipients();
        self.fan_out(recipients, Notice::ListChanged).await
    }

    pub fn register_session(&self, connection: u64, peer: Peer<RoleServer>) {
        self.watchers().sessions.insert(connection, peer);
    }

    /// Legacy `resources/subscribe`; idempotent per (connection, uri).
    pub fn subscribe(&self, connection: u64, uri: &str, peer: Peer<RoleServer>) {
        self.counters().subscribes += 1;
        let mut watchers = self.watchers();
        let exists = watchers.subscriptions.values().any(|s| s.connection == connection && s.uri == uri);
        if !exists {
            let registration = self.next_id();
            let subscription = LegacySubscription { connection, uri: uri.to_owned(), peer };
            watchers.subscriptions.insert(registration, subscription);
        }
    }

    pub fn unsubscribe(&self, connection: u64, uri: &str) {
        self.counters().unsubscribes += 1;
        self.watchers().subscriptions.retain(|_, s| !(s.connection == connection && s.uri == uri));
    }

    pub fn register_listen(&self, sink: SubscriptionSink) -> u64 {
        let registration = self.next_id();
        self.watchers().listens.insert(registration, sink);
        registration
    }

    pub fn deregister_listen(&self, registration: u64) {
        self.watchers().listens.remove(&registration);
    }

    /// The `stats` tool's JSON.
    pub fn stats(&self) -> Value {
        self.prune_closed();
        let counters = self.counters();
        let watchers = self.watchers();
        let mut subscribed: Vec<&str> = watchers.subscriptions.values().map(|s| s.uri.as_str()).collect();
        subscribed.sort_unstable();
        let mut listen_uris: Vec<&str> = watchers
            .listens
            .values()
            .flat_map(|sink| sink.accepted().resource_subscriptions.iter().flatten())
            .map(String::as_str)
            .collect();
        listen_uris.sort_unstable();
        json!({
            "pid": std::process::id(),
            "items": self.inner.item_count.load(Ordering::SeqCst),
            "reads": counters.reads,
            "reads_in_flight": counters.reads_in_flight,
            "reads_by_uri": counters.reads_by_uri,
            "lists": counters.lists,
            "template_lists": counters.template_lists,
            "subscribes": counters.subscribes,
            "unsubscribes": counters.unsubscribes,
            "input_required": counters.input_required,
            "subscribed": subscribed,
            "legacy_sessions": watchers.sessions.len(),
            "listens_open": watchers.listens.len(),
            "listen_uris": listen_uris,
            "read_delay_ms": self.inner.read_delay_ms.load(Ordering::Relaxed),
            "reads_held": *self.inner.hold_reads.borrow(),
        })
    }

    fn begin_read(&self, uri: &str) -> InFlight<'_> {
        let mut counters = self.counters();
        counters.reads += 1;
        counters.reads_in_flight += 1;
        *counters.reads_by_uri.entry(uri.to_owned()).or_default() += 1;
        InFlight(self)
    }

    fn version(&self, uri: &str) -> u64 {
        let versions = self.inner.versions.lock().expect("versions lock");
        versions.get(uri).copied().unwrap_or(1)
    }

    /// Legacy subscribers of `uri` or of a parent of it (`uri` is a sub-resource), one per
    /// connection; listen streams whose accepted filter names `uri` exactly.
    fn update_recipients(&self, uri: &str) -> Vec<Recipient> {
        let watchers = self.watchers();
        let mut legacy: BTreeMap<u64, Peer<RoleServer>> = BTreeMap::new();
        for subscription in watchers.subscriptions.values() {
            let covers = uri == subscription.uri
                || uri.strip_prefix(subscription.uri.as_str()).is_some_and(|rest| rest.starts_with('/'));
            if covers {
                legacy.entry(subscription.connection).or_insert_with(|| subscription.peer.clone());
            }
        }
        let listens = watchers.listens.iter().filter(|(_, sink)| {
            let accepted = sink.accepted().resource_subscriptions.as_ref();
            accepted.is_some_and(|uris| uris.iter().any(|u| u == uri))
        });
        collect_recipients(legacy, listens)
    }

    fn list_changed_recipients(&self) -> Vec<Recipient> {
        let watchers = self.watchers();
        let legacy = watchers.sessions.iter().map(|(c, p)| (*c, p.clone())).collect();
        let listens = watchers.listens.iter().filter(|(_, sink)| sink.accepted().resources_list_changed == Some(true));
        collect_recipients(legacy, listens)
    }

    async fn fan_out(&self, recipients: Vec<Recipient>, notice: Notice) -> FanOut {
        let sends = recipients.into_iter().map(|recipient| {
            let notice = notice.clone();
            async move {
                let sent = tokio::time::timeout(SEND_TIMEOUT, send(&recipient, notice)).await;
                (recipient, sent)
            }
        });
        let mut outcome = FanOut::default();
        for (recipient, sent) in futures::future::join_all(sends).await {
            match sent {
                Ok(Ok(())) => outcome.delivered += 1,
                Ok(Err(error)) => {
                    outcome.failed += 1;
                    tracing::info!(error = %error, "dropping a watcher whose send failed");
                    self.drop_recipient(&recipient);
                }
                Err(_) => {
                    outcome.failed += 1;
                    tracing::warn!("a notification send timed out; watcher kept");
                }
            }
        }
        outcome
    }

    fn drop_recipient(&self, recipient: &Recipient) {
        let mut watchers = self.watchers();
        match recipient {
            Recipient::Legacy { connection, .. } => {
                watchers.sessions.remove(connection);
                watchers.subscriptions.retain(|_, s| s.connection != *connection);
            }
            Recipient::Listen { registration, .. } => {
                watchers.listens.remove(registration);
            }
        }
    }

    fn prune_closed(&self) {
        let mut watchers = self.watchers();
        watchers.sessions.retain(|_, peer| !peer.is_transport_closed());
        watchers.subscriptions.retain(|_, s| !s.peer.is_transport_closed());
    }

    fn counters(&self) -> MutexGuard<'_, Counters> {
        self.inner.counters.lock().expect("counters lock")
    }

    fn watchers(&self) -> MutexGuard<'_, Watchers> {
        self.inner.watchers.lock().expect("watchers lock")
    }
}

fn collect_recipients<'a>(
    legacy: BTreeMap<u64, Peer<RoleServer>>,
    listens: impl Iterator<Item = (&'a u64, &'a SubscriptionSink)>,
) -> Vec<Recipient> {
    let legacy = legacy
        .into_iter()
        .filter(|(_, peer)| !peer.is_transport_closed())
        .map(|(connection, peer)| Recipient::Legacy { connection, peer });
    let listens =
        listens.map(|(registration, sink)| Recipient::Listen { registration: *registration, sink: sink.clone() });
    legacy.chain(listens).collect()
}

async fn send(recipient: &Recipient, notice: Notice) -> Result<(), String> {
    match (recipient, notice) {
        (Recipient::Legacy { peer, .. }, Notice::Updated(uri)) => {
            peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await.map_err(|e| e.to_string())
        }
        (Recipient::Legacy { peer, .. }, Notice::ListChanged) => {
            peer.notify_resource_list_changed().await.map_err(|e| e.to_string())
        }
        (Recipient::Listen { sink, .. }, Notice::Updated(uri)) => {
            sink.notify_resource_updated(uri).await.map_err(|e| e.to_string())
        }
        (Recipient::Listen { sink, .. }, Notice::ListChanged) => {
            sink.notify_resource_list_changed().await.map_err(|e| e.to_string())
        }
    }
}

fn invalid_cursor() -> McpError {
    McpError::invalid_params("invalid cursor", None)
}
