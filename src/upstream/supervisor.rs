//! The supervisor of one connection: connect, load the catalog, serve until the connection ends,
//! reconnect with capped exponential backoff. One task per connection, looping over a closed set
//! of events and selecting on its stop token (a child of the process's shutdown, so a config
//! reload can stop one upstream alone). On stop the connection is closed, not dropped: rmcp's
//! service is cancelled (a stdio child's stdin closes, a listen stream ends) within
//! [`CLOSE_GRACE`]. What it supervises is its [`Role`] (`role`): an upstream's shared connection
//! (`shared`: the catalog, status, gauges and events are its own) or a session of it (whose
//! events reach only its subscribers, see `session`).

use std::time::Duration;

use rmcp::model::{ClientRequest, DiscoverRequest, DiscoverRequestParams};
use rmcp::service::ServiceError;
use tokio_util::sync::CancellationToken;

use super::connect::{Running, connect};
use super::notices::{NOTICE_CAPACITY, Notice, NoticeInbox};
use super::role::Role;
use super::{Change, Connection, Era, EventSender, Link, LinkState, Lost, UpstreamEvent};
use crate::config::{UpstreamTransport, redact_urls_in};
use crate::spine::Spine;

const BACKOFF_MIN: Duration = Duration::from_millis(250);
/// How long to wait for a dead child's last stderr lines before reporting it down.
const STDERR_SETTLE: Duration = Duration::from_secs(1);
/// How long a stopping supervisor waits for its connection to close.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

pub(super) struct Supervisor<R> {
    role: R,
    connection: Connection,
    /// Whether it has been up before (so the next `Up` is a reconnect).
    was_up: std::sync::Mutex<bool>,
    /// A tools or prompts `list_changed` was taken while draining: fetch them again.
    offerings_stale: std::sync::atomic::AtomicBool,
    events: EventSender,
    shutdown: CancellationToken,
    spine: Spine,
}

/// Why a connection ended.
enum End {
    Shutdown,
    Lost(String),
}

impl<R: Role> Supervisor<R> {
    pub fn new(role: R, events: EventSender, shutdown: CancellationToken, spine: Spine) -> Self {
        let (connection, was_up, offerings_stale) = (role.supervised().clone(), Default::default(), Default::default());
        Self { role, connection, was_up, offerings_stale, events, shutdown, spine }
    }

    /// `resumed`: its first connection counts as a reconnect (a session resuming a reclaimed
    /// one's subscriptions).
    pub fn resuming(self, resumed: bool) -> Self {
        *self.was_up.lock().expect("was_up lock") = resumed;
        self
    }

    pub async fn run(self) {
        let mut backoff = BACKOFF_MIN;
        let mut remembered = None;
        // One log line per state change: the first failure after being up (or at start) is an
        // error, a retry that fails again is debug.
        let mut reported = false;
        loop {
            self.connection.update_status(|s| s.state = LinkState::Connecting);
            let connections = self.connection.connection();
            let end = self.connect_and_serve(&mut remembered, &mut backoff).await;
            self.connection.set_link(None);
            self.role.ended(matches!(end, End::Lost(_)) && !self.shutdown.is_cancelled());
            if self.connection.connection() != connections {
                reported = false;
            }
            if self.shutdown.is_cancelled() {
                self.connection.update_status(|s| s.state = LinkState::Down);
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
            backoff = (backoff * 2).min(self.connection.config().reconnect_max.max(BACKOFF_MIN));
        }
    }

    /// The connection ended or could not be made: say why (with what a stdio child said on
    /// stderr) in `/status`, and in the log once per state change.
    async fn went_down(&self, error: String, retry_in: Duration, report: bool) {
        let name = self.connection.name();
        let output = &self.connection.inner.child_output;
        output.settle(STDERR_SETTLE).await;
        let stderr_tail = output.tail();
        let stderr = stderr_tail.join("\n");
        match report {
            true if stderr.is_empty() => tracing::error!(upstream = name, %error, ?retry_in, "upstream down"),
            true => tracing::error!(upstream = name, %error, stderr, ?retry_in, "upstream down"),
            false => tracing::debug!(upstream = name, %error, ?retry_in, "upstream down; reconnect failed"),
        }
        self.connection.update_status(|s| {
            s.state = LinkState::Down;
            s.last_error = Some(error);
            s.stderr_tail = stderr_tail;
        });
        *self.connection.inner.cause_for_host.lock().expect("cause lock") = self.cause_for_host();
        self.connection.inner.settled.send_replace(true);
        self.emit(UpstreamEvent::Down { upstream: name.to_string() });
    }

    /// Why its stdio child could not start or exited, for a host's error (see
    /// `ChildOutput::cause_for_host`): the values of the variables its entry names (`env`,
    /// `inherit_env`, a sandbox's `keep_env`) are masked. None for other transports.
    fn cause_for_host(&self) -> Option<String> {
        let UpstreamTransport::Command { program, env, inherit_env, sandbox, .. } = &self.connection.config().transport
        else {
            return None;
        };
        let kept = sandbox.iter().flat_map(|profile| profile.keep_env.iter());
        let inherited = inherit_env.iter().chain(kept).filter_map(std::env::var_os);
        let secrets: Vec<String> =
            env.values().cloned().chain(inherited.filter_map(|value| value.into_string().ok())).collect();
        self.connection.inner.child_output.cause_for_host(program, &secrets)
    }

    async fn connect_and_serve(&self, remembered: &mut Option<Era>, backoff: &mut Duration) -> End {
        let (notices_tx, mut notices) = super::notices::channel(NOTICE_CAPACITY);
        let progress = super::progress::ProgressRoutes::default();
        let connected = tokio::select! {
            connected = connect(&self.connection, notices_tx.clone(), &progress, *remembered, &self.spine) => connected,
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
        let refresh = match self.role.load_catalog(&link, &self.shutdown).await {
            Ok(reload) => reload.refresh,
            Err(error) => return End::Lost(error),
        };
        // Before `Up`, so they are in when the upstream counts as up.
        let offered = self.role.offered_at_up(&link).await;
        *backoff = BACKOFF_MIN;
        self.connection.set_link(Some(link.clone()));
        *self.connection.inner.cause_for_host.lock().expect("cause lock") = None;
        self.connection.update_status(|s| {
            s.state = LinkState::Up;
            s.era = Some(era);
            s.last_error = None;
            s.stderr_tail = Vec::new();
        });
        self.connection.inner.settled.send_replace(true);
        let reconnected = std::mem::replace(&mut *self.was_up.lock().expect("was_up lock"), true);
        let fresh = self.role.came_up(era, reconnected);
        let name = self.connection.name().to_string();
        self.emit(UpstreamEvent::Up { upstream: name.clone(), era, reconnected, offered });
        self.role.listed_at_up(&link, &self.events).await;
        let watcher = self.shutdown.child_token();
        let keep = super::watching::keep(self.connection.clone(), link.clone(), notices_tx, watcher.clone(), fresh);
        self.spine.spawn(format!("watching:{name}"), keep);
        let end = self.serve(running, &link, &mut notices, refresh).await;
        watcher.cancel();
        self.connection.inner.applied.send_replace(Default::default());
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
        let every = self.connection.config().health_interval;
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
                _ = self.connection.inner.broken.notified() => return End::Lost("transport broken".into()),
                _ = self.shutdown.cancelled() => {
                    closing.cancel();
                    if tokio::time::timeout(CLOSE_GRACE, &mut waiting).await.is_err() {
                        tracing::debug!(upstream = self.connection.name(), "connection did not close in time; dropped");
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
                self.connection.record_fault(fault);
                Ok(())
            }
            Notice::Lost(lost) => {
                self.lost(lost);
                Ok(())
            }
            Notice::OfferingsChanged => {
                // A burst costs one fetch per kind of notice that queued meanwhile.
                while self.drain_list_changes(notices) {
                    self.reloaded(self.role.load_catalog(link, &self.shutdown).await?.changed);
                }
                self.refetch_offerings(link).await;
                Ok(())
            }
            Notice::ListChanged => {
                // A burst of list_changed costs one reload (two when more arrive during the
                // first) and one event.
                self.drain_list_changes(notices);
                let mut changed = self.role.load_catalog(link, &self.shutdown).await?.changed;
                while self.drain_list_changes(notices) {
                    changed |= self.role.load_catalog(link, &self.shutdown).await?.changed;
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
        let exit = self.connection.inner.child_output.exit();
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
        let reload = self.role.load_catalog(link, &self.shutdown).await?;
        self.reloaded(reload.changed);
        Ok(reload.refresh)
    }

    /// Log a reload and, when it changed something, tell the proxy.
    fn reloaded(&self, changed: bool) {
        let (name, resources) = (self.connection.name(), self.role.resources());
        match changed {
            true => tracing::info!(upstream = name, resources, changed, "upstream catalog reloaded"),
            false => tracing::debug!(upstream = name, resources, changed, "upstream catalog reloaded"),
        }
        if changed {
            self.emit(UpstreamEvent::CatalogChanged { upstream: name.to_string() });
        }
    }

    /// Is the upstream still there? A 2025 connection is asked `ping`; a 2026-07-28 one, which
    /// has no `ping`, `server/discover`. Any answer counts, an error reply included; silence or a
    /// transport error does not. The in-process folder server is not probed: it cannot go
    /// silent without its connection closing.
    async fn probe(&self, link: &Link) -> Result<(), String> {
        if matches!(self.connection.config().transport, UpstreamTransport::Dir { .. }) {
            return Ok(());
        }
        let request = match link.era {
            Era::Legacy => ClientRequest::PingRequest(Default::default()),
            Era::Modern => ClientRequest::DiscoverRequest(DiscoverRequest::new(DiscoverRequestParams {})),
        };
        match tokio::time::timeout(self.connection.config().request_timeout, link.peer.send_request(request)).await {
            Ok(Ok(_)) | Ok(Err(ServiceError::McpError(_))) => Ok(()),
            Ok(Err(error)) => Err(format!("health check failed: {}", super::reason::service_failure(&error))),
            Err(_) => Err("health check timed out".into()),
        }
    }

    fn forward_update(&self, uri: String, change: Change) {
        let upstream = self.connection.name().to_string();
        self.emit(UpstreamEvent::ResourceUpdated { upstream, uri, change });
    }

    /// Send `event` on, as its role does.
    fn emit(&self, event: UpstreamEvent) {
        self.role.emit(&self.events, event)
    }

    /// Notices of this upstream that did not fit its queue: every lost URI passes on as updated,
    /// or, when they were too many to keep, the upstream counts as overflowed (the proxy flushes
    /// its cache and tells its subscribers, as for an overflow of the event queue).
    fn lost(&self, lost: Lost) {
        match lost {
            Lost::Updated(uris) => uris.into_iter().for_each(|uri| self.forward_update(uri, Change::Heard)),
            Lost::Everything => self.role.lost_everything(&self.events),
        }
    }

    /// Fetch the tools and prompts again and pass them on (`crate::tools` owns them).
    async fn refetch_offerings(&self, link: &Link) {
        self.offerings_stale.store(false, std::sync::atomic::Ordering::Relaxed);
        self.role.refetch_offerings(link, &self.events).await;
    }

    /// Take what queued; true when a list change was among it. Updates pass on in order.
    fn drain_list_changes(&self, notices: &mut NoticeInbox) -> bool {
        let mut changed = false;
        while let Some(next) = notices.try_recv() {
            match next {
                Notice::ListChanged => changed = true,
                Notice::Lost(lost) => self.lost(lost),
                Notice::Changed(uri, change) => self.forward_update(uri, change),
                Notice::Fault(fault) => self.connection.record_fault(fault),
                // Fetched when the notice is taken (or right after, when drained here).
                Notice::OfferingsChanged => self.offerings_stale.store(true, std::sync::atomic::Ordering::Relaxed),
            }
        }
        changed
    }
}

/// ±20% so that many upstreams that fell together do not come back in lockstep.
fn jittered(delay: Duration) -> Duration {
    delay.mul_f64(0.8 + rand::random::<f64>() * 0.4)
}
