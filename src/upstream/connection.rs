//! One connection to an upstream, of any transport: what the shared [`super::Upstream`] and
//! each of its sessions (`session`) hold alike. Its live link (set by its supervisor), status,
//! watched URIs and what the upstream answered for them, its stdio child's output, relays,
//! roots and tokens. Requests go over it with the upstream's timeout (`read` here; calls,
//! prompts, completion in `offerings`), an HTTP one's reads on its thin client when they can.
//!
//! Invariant: a request finds the link its supervisor set, or fails at once as down; each
//! connection made gets a higher number ([`Connection::connection`]), which keys the cache.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientRequest, GetExtensions, ReadResourceRequest, ReadResourceRequestParams, ReadResourceResponse, ServerResult,
};
use rmcp::service::{Peer, RoleClient};
use tokio::sync::{Notify, watch};

use super::client::Declared;
use super::credentials::TokenSource;
use super::{Link, RootsChange, SubscribeOutcome, UpstreamStatus};
use super::{reason, relay, roots, thin, traced};
use crate::config::{UpstreamConfig, UpstreamTransport};
use crate::error::ProxyError;
use crate::host::SubjectToken;
use crate::metrics::{self, Hop, Metrics};
use crate::protocol::{Era, MODERN_VERSION, method};
use crate::telemetry::{self, Outgoing, Span, Transport};

/// A subscribed URI: one allocation, shared by the subscribed set, `watching`'s own sets and the
/// published [`Applied`] sets (each a pointer), not one copy of the URI in each.
pub(super) type Uri = Arc<str>;

/// The URIs subscribed on one connection (what the upstream is asked to keep subscribed).
pub(super) type SubscribedSet = Arc<BTreeSet<Uri>>;

/// What the upstream answered for the URIs of the subscribed set, on the current connection.
#[derive(Debug, Default, Clone)]
pub(crate) struct Applied {
    /// Subscribed, acknowledged: an `updated` will come.
    pub acknowledged: BTreeSet<Uri>,
    /// Refused (an error reply, or left out of a listen acknowledgement): never notified.
    pub refused: BTreeSet<Uri>,
}

pub(super) type AppliedSet = Arc<Applied>;

/// A cheap `Clone` handle on one connection to an upstream.
#[derive(Clone)]
pub struct Connection {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) config: UpstreamConfig,
    pub(super) metrics: Metrics,
    link: Mutex<Option<Link>>,
    pub(super) status: Mutex<UpstreamStatus>,
    /// Woken when a request finds the transport broken, so the supervisor reconnects.
    pub(super) broken: Notify,
    /// The URIs the proxy wants watched on it (host subscriptions and the cache).
    pub(super) watched: watch::Sender<SubscribedSet>,
    /// How many connections have been made: the cache keys entries by it.
    connections: AtomicU64,
    /// What the upstream answered for the watched URIs on the current connection.
    pub(super) applied: watch::Sender<AppliedSet>,
    /// Times a change to `watched` had to copy the whole set (it is shared while read).
    subscribed_set_copies: AtomicU64,
    /// What its stdio children said on stderr.
    pub(super) child_output: Arc<reason::ChildOutput>,
    /// Why its stdio child could not start or exited, in words a host may be told (see
    /// `reason::ChildOutput::cause_for_host`); none while it is up.
    pub(super) cause_for_host: Mutex<Option<String>>,
    /// True once the first connection attempt ended, either way.
    pub(super) settled: watch::Sender<bool>,
    /// Routed calls in flight whose sampling, elicitation and logging go to their host.
    pub(super) relays: Arc<relay::RelayBook>,
    /// The roots it is given (its config's, until a reload changes them).
    pub(super) roots: roots::Roots,
    /// A per-host session's: what its host declared, which is all it declares upstream.
    pub(super) declared: Option<Declared>,
    /// Where its access tokens come from, if it sends any (see `credentials`).
    pub(super) credentials: Option<TokenSource>,
    /// `[cluster]`: a connection to the replica holding its session (see `owners`).
    pub(super) owner: Option<super::owner_link::OwnerLink>,
}

impl Connection {
    /// A connection not made yet, for `config`: its supervisor makes it. With `owner`, to the
    /// session endpoint of the replica it names (`config`'s transport is that endpoint).
    pub(super) fn new(
        config: UpstreamConfig,
        metrics: Metrics,
        declared: Option<Declared>,
        credentials: Option<TokenSource>,
        owner: Option<super::owner_link::OwnerLink>,
    ) -> Self {
        let relays = {
            let (metrics, name) = (metrics.clone(), config.name.clone());
            relay::RelayBook::counted(move |kind| metrics.relay_unattributed(&name, kind))
        };
        let status = UpstreamStatus { name: config.name.clone(), ..Default::default() };
        let roots = roots::Roots::new(&config.roots);
        let inner = Inner {
            config,
            metrics,
            link: Mutex::new(None),
            status: Mutex::new(status),
            broken: Notify::new(),
            watched: watch::Sender::new(Default::default()),
            applied: watch::Sender::new(Default::default()),
            connections: AtomicU64::new(0),
            subscribed_set_copies: AtomicU64::new(0),
            child_output: Arc::default(),
            cause_for_host: Mutex::new(None),
            settled: watch::Sender::new(false),
            relays: Arc::new(relays),
            roots,
            declared,
            credentials,
            owner,
        };
        Self { inner: Arc::new(inner) }
    }

    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// Is it the built-in folder server (in process, the proxy's own code)?
    pub(super) fn is_folder(&self) -> bool {
        matches!(self.inner.config.transport, UpstreamTransport::Dir { .. })
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

    /// Read `uri` (un-namespaced) for a host's request that came with the JWT `subject` (if any):
    /// an upstream that exchanges tokens gets the read with a token exchanged for that one.
    pub async fn read_as(&self, uri: &str, subject: Option<&SubjectToken>) -> Result<ReadResourceResponse, ProxyError> {
        let started = std::time::Instant::now();
        let result = self.read_once(uri, subject).await;
        let elapsed = started.elapsed();
        self.count_hop(result.is_ok());
        if self.owner().is_none() {
            let outcome = crate::metrics::outcome(&result);
            self.inner.metrics.upstream_request(self.name(), method::RESOURCES_READ, outcome, elapsed, self.hop());
        }
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

    /// The CLIENT span of a `method` request to this upstream (`target`: the upstream's own tool
    /// or prompt name); nothing when traces are off or no host request's span is current.
    pub(crate) fn client_span(&self, method: &'static str, target: Option<&str>) -> Span {
        if !telemetry::on() {
            return Span::default();
        }
        let url = match &self.config().transport {
            UpstreamTransport::Http { url, .. } => url.parse::<http::Uri>().ok(),
            _ => None,
        };
        let server = url.as_ref().and_then(|url| {
            let port = url.port_u16().unwrap_or(if url.scheme_str() == Some("https") { 443 } else { 80 });
            Some((url.host()?, port))
        });
        let transport = if url.is_some() { Transport::Tcp } else { Transport::Pipe };
        let span = telemetry::client_span(Outgoing { method, target, upstream: self.name(), server, transport });
        if let Some(owner) = self.owner() {
            span.note("mcp_proxy.replica", owner.replica.to_string());
        }
        span
    }

    /// The protocol version its connection negotiated (`other` while there is none) and its
    /// transport (`pipe` for a child or the folder server, `tcp` for HTTP), for the metrics.
    pub(crate) fn hop(&self) -> Hop {
        let link = self.inner.link.lock().expect("link lock");
        self.hop_over(link.as_ref())
    }

    /// [`Connection::hop`] over `link` (a connection being set up, not yet the current one).
    pub(crate) fn hop_over(&self, link: Option<&Link>) -> Hop {
        let transport = match &self.config().transport {
            UpstreamTransport::Http { .. } => metrics::Transport::Http,
            _ => metrics::Transport::Stdio,
        };
        let Some(link) = link else { return Hop::new(None, transport) };
        match (link.era, link.peer.peer_info()) {
            (Era::Modern, _) => Hop::new(Some(MODERN_VERSION), transport),
            (Era::Legacy, info) => Hop::new(info.as_ref().map(|info| info.protocol_version.as_str()), transport),
        }
    }

    pub(super) fn failed(&self, reason: String) -> ProxyError {
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

    pub(super) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    pub(super) fn credentials(&self) -> Option<&TokenSource> {
        self.inner.credentials.as_ref()
    }

    /// The number of the current (or last) connection; a new one gets a higher number.
    pub fn connection(&self) -> u64 {
        self.inner.connections.load(Ordering::Acquire)
    }

    pub(super) fn set_link(&self, link: Option<Link>) {
        if link.is_some() {
            self.inner.connections.fetch_add(1, Ordering::AcqRel);
        }
        *self.inner.link.lock().expect("link lock") = link;
    }

    /// Start (`true`) or stop keeping `uri` subscribed upstream. A delta: the set is copied
    /// only when a reader still holds the previous one (counted in [`Self::subscribed_set_copies`]).
    pub fn set_subscribed(&self, uri: &str, watched: bool) {
        self.inner.watched.send_if_modified(|set| {
            if set.contains(uri) == watched {
                return false;
            }
            if Arc::strong_count(set) > 1 {
                self.inner.subscribed_set_copies.fetch_add(1, Ordering::Relaxed);
            }
            let set = Arc::make_mut(set);
            match watched {
                true => set.insert(uri.into()),
                false => set.remove(uri),
            }
        });
    }

    /// How many changes to the watch set had to copy it whole.
    pub fn subscribed_set_copies(&self) -> u64 {
        self.inner.subscribed_set_copies.load(Ordering::Relaxed)
    }

    /// Does the proxy want `uri` watched on this upstream (for a host or for the cache)?
    pub fn wants_subscribed(&self, uri: &str) -> bool {
        self.inner.watched.borrow().contains(uri)
    }

    /// The URIs the proxy wants watched on this upstream.
    pub fn subscribed_set_len(&self) -> usize {
        self.inner.watched.borrow().len()
    }

    /// Can this upstream notify of changes (is it connected and does it offer subscriptions)?
    pub fn can_notify(&self) -> bool {
        self.link().is_ok_and(|link| link.capabilities.resources.as_ref().is_some_and(|r| r.subscribe == Some(true)))
    }

    /// Wait (at most `timeout`) until the upstream answered the subscription for `uri`: true
    /// only when it acknowledged it. A refusal answers false at once.
    pub async fn wait_subscribed(&self, uri: &str, timeout: std::time::Duration) -> SubscribeOutcome {
        let mut applied = self.inner.applied.subscribe();
        let answered = applied.wait_for(|set| set.acknowledged.contains(uri) || set.refused.contains(uri));
        match tokio::time::timeout(timeout, answered).await {
            Ok(Ok(set)) if set.acknowledged.contains(uri) => SubscribeOutcome::Acknowledged,
            Ok(Ok(_)) => SubscribeOutcome::Refused,
            Ok(Err(_)) | Err(_) => SubscribeOutcome::NotInTime,
        }
    }

    /// Wait until the first connection attempt has ended: up, or failed.
    pub async fn wait_settled(&self) {
        let mut settled = self.inner.settled.subscribe();
        let _ = settled.wait_for(|settled| *settled).await;
    }

    pub(super) fn update_status(&self, edit: impl FnOnce(&mut UpstreamStatus)) {
        edit(&mut self.inner.status.lock().expect("status lock"));
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
