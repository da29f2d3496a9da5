//! The supervisor of one upstream: connect, load the catalog, serve until the connection ends,
//! reconnect with capped exponential backoff. One task per upstream, looping over a closed set
//! of events and selecting on its stop token (a child of the process's shutdown, so a config
//! reload can stop one upstream alone). On stop the connection is closed, not dropped: rmcp's
//! service is cancelled (a stdio child's stdin closes, a listen stream ends) within
//! [`CLOSE_GRACE`].

use std::time::Duration;

use rmcp::model::{ClientRequest, DiscoverRequest, DiscoverRequestParams};
use rmcp::service::ServiceError;
use tokio_util::sync::CancellationToken;

use super::connect::{Running, Standing, connect};
use super::notices::{NOTICE_CAPACITY, Notice, NoticeInbox};
use super::{Change, Era, EventSender, Link, LinkState, Lost, Upstream, UpstreamEvent};
use crate::catalog::Catalog;
use crate::config::{UpstreamTransport, redact_urls_in};
use crate::spine::Spine;

const BACKOFF_MIN: Duration = Duration::from_millis(250);
/// How long to wait for a dead child's last stderr lines before reporting it down.
const STDERR_SETTLE: Duration = Duration::from_secs(1);
/// How long a stopping supervisor waits for its connection to close.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

pub(super) struct Supervisor {
    upstream: Upstream,
    /// Whether it has been up before (so the next `Up` is a reconnect).
    was_up: std::sync::Mutex<bool>,
    /// A tools or prompts `list_changed` was taken while draining: fetch them again.
    offerings_stale: std::sync::atomic::AtomicBool,
    catalog: Catalog,
    events: EventSender,
    shutdown: CancellationToken,
    spine: Spine,
}

/// What a catalog load found.
struct Reload {
    /// When the lists must be fetched again, if ever.
    refresh: Option<Duration>,
    /// Whether the catalog differs from what it was.
    changed: bool,
}

/// Why a connection ended.
enum End {
    Shutdown,
    Lost(String),
}

impl Supervisor {
    pub fn new(
        upstream: Upstream,
        catalog: Catalog,
        events: EventSender,
        shutdown: CancellationToken,
        spine: Spine,
    ) -> Self {
        let offerings_stale = Default::default();
        Self { upstream, was_up: std::sync::Mutex::new(false), offerings_stale, catalog, events, shutdown, spine }
    }

    /// Its first connection counts as a reconnect (a session resuming a reclaimed one's holds).
    pub fn resuming(self) -> Self {
        *self.was_up.lock().expect("was_up lock") = true;
        self
    }

    pub async fn run(self) {
        let mut backoff = BACKOFF_MIN;
        let mut remembered = None;
        // One log line per state change: the first failure after being up (or at start) is an
        // error, a retry that fails again is debug.
        let mut reported = false;
        loop {
            self.upstream.update_status(|s| s.state = LinkState::Connecting);
            let connections = self.upstream.connection();
            let end = self.connect_and_serve(&mut remembered, &mut backoff).await;
            self.upstream.set_link(None);
            self.catalog.remove_upstream(self.upstream.name());
            if self.upstream.connection() != connections {
                reported = false;
            }
            if self.shutdown.is_cancelled() {
                self.upstream.update_status(|s| s.state = LinkState::Down);
                return;
            }
            let error = match end {
                End::Shutdown => return,
                // Error texts of HTTP clients quote the URL, which may hold credentials.
                End::Lost(error) => redact_urls_in(&error),
            };
            self.went_down(error, backoff, !std::mem::replace(&mut reported, true)).await;
            tokio::select! {
                _ = tokio::time::sleep(jittered(backoff)) => {}
                _ = self.shutdown.cancelled() => return,
            }
            backoff = (backoff * 2).min(self.upstream.config().reconnect_max.max(BACKOFF_MIN));
        }
    }

    /// The connection ended or could not be made: say why (with what a stdio child said on
    /// stderr) in `/status`, and in the log once per state change.
    async fn went_down(&self, error: String, retry_in: Duration, report: bool) {
        let name = self.upstream.name();
        let output = &self.upstream.inner.child_output;
        output.settle(STDERR_SETTLE).await;
        let stderr_tail = output.tail();
        let stderr = stderr_tail.join("\n");
        match report {
            true if stderr.is_empty() => {
                tracing::error!(upstream = name, error = %error, retry_in = ?retry_in, "upstream down")
            }
            true => tracing::error!(upstream = name, error = %error, stderr, retry_in = ?retry_in, "upstream down"),
            false => {
                tracing::debug!(upstream = name, error = %error, retry_in = ?retry_in, "upstream down; reconnect failed")
            }
        }
        self.upstream.update_status(|s| {
            s.state = LinkState::Down;
            s.last_error = Some(error);
            s.stderr_tail = stderr_tail;
        });
        *self.upstream.inner.cause_for_host.lock().expect("cause lock") = self.cause_for_host();
        self.upstream.inner.settled.send_replace(true);
        let metrics = &self.upstream.inner.metrics;
        if !self.upstream.is_session() {
            metrics.set_upstream_up(name, false);
            metrics.set_catalog_size(name, 0, 0);
        }
        self.emit(UpstreamEvent::Down { upstream: name.to_string() });
    }

    /// Why its stdio child could not start or exited, for a host's error (see
    /// `ChildOutput::cause_for_host`): the values of the variables its entry names (`env`,
    /// `inherit_env`, a sandbox's `keep_env`) are masked. None for other transports.
    fn cause_for_host(&self) -> Option<String> {
        let UpstreamTransport::Command { program, env, inherit_env, sandbox, .. } = &self.upstream.config().transport
        else {
            return None;
        };
        let kept = sandbox.iter().flat_map(|profile| profile.keep_env.iter());
        let inherited = inherit_env.iter().chain(kept).filter_map(std::env::var_os);
        let secrets: Vec<String> =
            env.values().cloned().chain(inherited.filter_map(|value| value.into_string().ok())).collect();
        self.upstream.inner.child_output.cause_for_host(program, &secrets)
    }

    async fn connect_and_serve(&self, remembered: &mut Option<Era>, backoff: &mut Duration) -> End {
        let (notices_tx, mut notices) = super::notices::channel(NOTICE_CAPACITY);
        let progress = super::progress::ProgressRoutes::default();
        let connected = tokio::select! {
            connected = connect(self.upstream.config(), notices_tx.clone(), &progress, *remembered, self.standing()) => connected,
            _ = self.shutdown.cancelled() => return End::Shutdown,
        };
        let (running, era, thin) = match connected {
            Ok(connected) => connected,
            Err(error) => {
                *remembered = None;
                return End::Lost(error);
            }
        };
        *remembered = Some(era);
        let capabilities = running.peer_info().map(|i| i.capabilities.clone()).unwrap_or_default();
        let link = Link { peer: running.peer().clone(), era, capabilities, progress, thin };
        let refresh = match self.load_catalog(&link).await {
            Ok(reload) => reload.refresh,
            Err(error) => return End::Lost(error),
        };
        // Before `Up`, so they are in when the upstream counts as up.
        let offered = match self.upstream.is_session() {
            true => Default::default(),
            false => self.upstream.fetch_offerings(&link).await.unwrap_or_default(),
        };
        *backoff = BACKOFF_MIN;
        self.upstream.set_link(Some(link.clone()));
        *self.upstream.inner.cause_for_host.lock().expect("cause lock") = None;
        self.upstream.update_status(|s| {
            s.state = LinkState::Up;
            s.era = Some(era);
            s.last_error = None;
            s.stderr_tail = Vec::new();
        });
        self.upstream.inner.settled.send_replace(true);
        let name = self.upstream.name();
        let reconnected = std::mem::replace(&mut *self.was_up.lock().expect("was_up lock"), true);
        if self.upstream.is_session() {
            tracing::debug!(upstream = name, era = era.label(), "upstream session up");
        } else {
            tracing::info!(upstream = name, era = era.label(), resources = self.resource_count(), "upstream up");
            self.upstream.inner.metrics.set_upstream_up(self.upstream.name(), true);
        }
        if reconnected && !self.upstream.is_session() {
            self.upstream.update_status(|s| s.reconnects += 1);
            self.upstream.inner.metrics.upstream_reconnected(self.upstream.name());
        }
        let name = self.upstream.name().to_string();
        self.emit(UpstreamEvent::Up { upstream: name.clone(), era, reconnected, offered });
        let watcher = self.shutdown.child_token();
        let upstream = self.upstream.clone();
        // A session's first connection watches only what was held since it opened: nothing
        // can have changed unseen before it, so nothing is reported as such.
        let fresh = self.upstream.is_session() && !reconnected;
        self.spine.spawn(
            format!("watching:{name}"),
            super::watching::keep(
                self.upstream.name().to_string(),
                link.clone(),
                self.upstream.inner.watched.subscribe(),
                self.upstream.inner.applied.clone(),
                notices_tx,
                watcher.clone(),
                fresh,
                move || upstream.inner.broken.notify_one(),
            ),
        );
        let end = self.serve(running, &link, &mut notices, refresh).await;
        watcher.cancel();
        self.upstream.inner.applied.send_replace(Default::default());
        end
    }

    async fn serve(
        &self,
        running: Running,
        link: &Link,
        notices: &mut NoticeInbox,
        mut refresh: Option<Duration>,
    ) -> End {
        let closing = running.cancellation_token();
        let mut waiting = std::pin::pin!(running.waiting());
        let far = Duration::from_secs(86_400 * 365);
        let mut refresh_at = tokio::time::Instant::now() + refresh.unwrap_or(far);
        let every = self.upstream.config().health_interval;
        let mut health = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(refresh_at), if refresh.is_some() => {
                    // The upstream's lists ran out of time (`ttlMs`): fetch them again.
                    match self.reload(link).await {
                        Ok(next) => refresh = next,
                        Err(error) => return End::Lost(error),
                    }
                    refresh_at = tokio::time::Instant::now() + refresh.unwrap_or(far);
                }
                _ = health.tick() => {
                    if let Err(error) = self.probe(link).await {
                        return End::Lost(error);
                    }
                }
                quit = &mut waiting => return End::Lost(self.closed(quit)),
                _ = self.upstream.inner.broken.notified() => return End::Lost("transport broken".into()),
                _ = self.shutdown.cancelled() => {
                    closing.cancel();
                    if tokio::time::timeout(CLOSE_GRACE, &mut waiting).await.is_err() {
                        tracing::debug!(upstream = self.upstream.name(), "connection did not close in time; dropped");
                    }
                    return End::Shutdown;
                }
                Some(notice) = notices.recv() => {
                    if let Err(error) = self.on_notice(notice, link, notices).await {
                        return End::Lost(error);
                    }
                }
            }
        }
    }

    async fn on_notice(&self, notice: Notice, link: &Link, notices: &mut NoticeInbox) -> Result<(), String> {
        match notice {
            Notice::Changed(uri, change) => {
                self.forward_update(uri, change);
                Ok(())
            }
            Notice::Fault(fault) => {
                self.upstream.record_fault(fault);
                Ok(())
            }
            Notice::Lost(lost) => {
                self.lost(lost);
                Ok(())
            }
            Notice::OfferingsChanged => {
                // A burst costs one fetch per kind of notice that queued meanwhile.
                while self.drain_list_changes(notices) {
                    self.reloaded(self.load_catalog(link).await?.changed);
                }
                self.refetch_offerings(link).await;
                Ok(())
            }
            Notice::ListChanged => {
                // A burst of list_changed costs one reload (two when more arrive during the
                // first) and one event.
                self.drain_list_changes(notices);
                let mut changed = self.load_catalog(link).await?.changed;
                while self.drain_list_changes(notices) {
                    changed |= self.load_catalog(link).await?.changed;
                }
                self.reloaded(changed);
                if self.offerings_stale.load(std::sync::atomic::Ordering::Relaxed) {
                    self.refetch_offerings(link).await;
                }
                Ok(())
            }
        }
    }

    /// Why a connection that was up closed, in plain words.
    fn closed(&self, quit: Result<rmcp::service::QuitReason, tokio::task::JoinError>) -> String {
        use rmcp::service::QuitReason;
        let exit = self.upstream.inner.child_output.exit();
        match (quit, exit) {
            (_, Some(exit)) => format!("the command exited ({exit})"),
            (Ok(QuitReason::Closed), None) => "the connection closed".into(),
            (Ok(QuitReason::Cancelled), None) => "the connection was cancelled".into(),
            (Ok(QuitReason::JoinError(e)) | Err(e), None) => format!("the connection task failed: {e}"),
            (Ok(_), None) => "the connection closed".into(),
        }
    }

    /// Fetch the lists again (their `ttlMs` ran out); returns when to do so next.
    async fn reload(&self, link: &Link) -> Result<Option<Duration>, String> {
        let reload = self.load_catalog(link).await?;
        self.reloaded(reload.changed);
        Ok(reload.refresh)
    }

    /// Log a reload and, when it changed something, tell the proxy.
    fn reloaded(&self, changed: bool) {
        let name = self.upstream.name();
        match changed {
            true => {
                tracing::info!(upstream = name, resources = self.resource_count(), changed, "upstream catalog reloaded")
            }
            false => tracing::debug!(
                upstream = name,
                resources = self.resource_count(),
                changed,
                "upstream catalog reloaded"
            ),
        }
        if changed {
            self.emit(UpstreamEvent::CatalogChanged { upstream: self.upstream.name().to_string() });
        }
    }

    /// Is the upstream still there? A 2025 connection is asked `ping`; a 2026-07-28 one, which
    /// has no `ping`, `server/discover`. Any answer counts, an error reply included; silence or a
    /// transport error does not. The in-process folder server is not probed: it cannot go
    /// silent without its connection closing.
    async fn probe(&self, link: &Link) -> Result<(), String> {
        if matches!(self.upstream.config().transport, UpstreamTransport::Dir { .. }) {
            return Ok(());
        }
        let request = match link.era {
            Era::Legacy => ClientRequest::PingRequest(Default::default()),
            Era::Modern => ClientRequest::DiscoverRequest(DiscoverRequest::new(DiscoverRequestParams {})),
        };
        match tokio::time::timeout(self.upstream.config().request_timeout, link.peer.send_request(request)).await {
            Ok(Ok(_)) | Ok(Err(ServiceError::McpError(_))) => Ok(()),
            Ok(Err(error)) => Err(format!("health check failed: {}", super::reason::service_failure(&error))),
            Err(_) => Err("health check timed out".into()),
        }
    }

    fn forward_update(&self, uri: String, change: Change) {
        let upstream = self.upstream.name().to_string();
        self.emit(UpstreamEvent::ResourceUpdated { upstream, uri, change });
    }

    /// Send `event` on. A session's own state (up, down, its lists) is nobody's business: of
    /// its events only updates go on, to the holders of what changed on it (none: dropped).
    fn emit(&self, event: UpstreamEvent) {
        if !self.upstream.is_session() {
            return self.events.send(event);
        }
        if let UpstreamEvent::ResourceUpdated { upstream, uri, change } = event {
            // Its reads are never cached, and nobody held a rewatched URI: nothing to do.
            if change == Change::Rewatched {
                return;
            }
            let heard = change == Change::Heard;
            // Held as normalised URIs; the upstream may spell them its own way.
            let uri = crate::namespace::namespaced(&upstream, &uri)
                .and_then(|namespaced| crate::uri::normalize(&namespaced).ok())
                .and_then(|normalized| crate::namespace::split(&normalized).map(|(_, original)| original.to_string()))
                .unwrap_or(uri);
            let holders: Vec<_> = self.upstream.inner.holds.holders_of(&uri).into_iter().collect();
            if !holders.is_empty() {
                self.events.send(UpstreamEvent::SessionUpdated { upstream, uri, heard, holders });
            }
        }
    }

    /// Notices of this upstream that did not fit its queue: every lost URI passes on as updated,
    /// or, when they were too many to keep, the upstream counts as overflowed (the proxy flushes
    /// its cache and tells its holders, as for an overflow of the event queue).
    fn lost(&self, lost: Lost) {
        match lost {
            Lost::Updated(uris) => uris.into_iter().for_each(|uri| self.forward_update(uri, Change::Heard)),
            Lost::Everything if self.upstream.is_session() => {
                // Its holders hear of everything they hold on it, nobody else of anything.
                let upstream = self.upstream.name().to_string();
                for (holder, uris) in self.upstream.inner.holds.all() {
                    for uri in uris {
                        let (upstream, holders) = (upstream.clone(), vec![(holder, vec![uri.clone()])]);
                        self.events.send(UpstreamEvent::SessionUpdated { upstream, uri, heard: false, holders });
                    }
                }
            }
            Lost::Everything => self.events.overflowed(self.upstream.name(), Lost::Everything),
        }
    }

    /// Fetch the tools and prompts again and pass them on (`crate::tools` owns them).
    async fn refetch_offerings(&self, link: &Link) {
        self.offerings_stale.store(false, std::sync::atomic::Ordering::Relaxed);
        if self.upstream.is_session() {
            // Its own from now on, for its own hosts (see `sessions`).
            let kept =
                self.upstream.fetch_offerings(link).await.and_then(|offered| self.upstream.keep_own_offerings(offered));
            if let Some(changed) = kept {
                self.events.send(changed);
            }
            return;
        }
        if let Some(offered) = self.upstream.fetch_offerings(link).await {
            let upstream = self.upstream.name().to_string();
            self.emit(UpstreamEvent::OfferingsChanged { upstream, offered });
        }
    }

    /// Take what queued; true when a list change was among it. Updates pass on in order.
    fn drain_list_changes(&self, notices: &mut NoticeInbox) -> bool {
        let mut changed = false;
        while let Some(next) = notices.try_recv() {
            match next {
                Notice::ListChanged => changed = true,
                Notice::Lost(lost) => self.lost(lost),
                Notice::Changed(uri, change) => self.forward_update(uri, change),
                Notice::Fault(fault) => self.upstream.record_fault(fault),
                // Fetched when the notice is taken (or right after, when drained here).
                Notice::OfferingsChanged => self.offerings_stale.store(true, std::sync::atomic::Ordering::Relaxed),
            }
        }
        changed
    }

    /// What each connection of this upstream is given that outlives it.
    fn standing(&self) -> Standing<'_> {
        let inner = &self.upstream.inner;
        let (output, relays, roots, spine) = (&inner.child_output, &inner.relays, &inner.roots, &self.spine);
        Standing { output, relays, roots, spine, declared: inner.declared, credentials: inner.credentials.as_ref() }
    }

    fn resource_count(&self) -> usize {
        let snapshot = self.catalog.snapshot();
        snapshot.counts().iter().find(|(n, _, _)| n == self.upstream.name()).map_or(0, |(_, r, _)| *r)
    }

    /// Every page of resources and templates, namespaced, into the catalog. Returns when the
    /// lists must be fetched again (the shortest `ttlMs` they came with), if ever.
    async fn load_catalog(&self, link: &Link) -> Result<Reload, String> {
        if self.upstream.is_session() {
            // A session's lists are the shared connection's (see `sessions`).
            return Ok(Reload { refresh: None, changed: false });
        }
        let listing = tokio::select! {
            listing = super::listing::fetch(&self.upstream, link) => listing?,
            _ = self.shutdown.cancelled() => return Err("stopped".into()),
        };
        let name = self.upstream.name();
        let (resources, templates) = (listing.entries.resources.len(), listing.entries.templates.len());
        self.upstream.inner.metrics.set_catalog_size(name, resources, templates);
        let changed = self.catalog.replace_if_changed(name, listing.entries);
        Ok(Reload { refresh: listing.refresh, changed })
    }
}

/// ±20% so that many upstreams that fell together do not come back in lockstep.
fn jittered(delay: Duration) -> Duration {
    delay.mul_f64(0.8 + rand::random::<f64>() * 0.4)
}
