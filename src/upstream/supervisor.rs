//! The supervisor of one upstream: connect, load the catalog, serve until the connection ends,
//! reconnect with capped exponential backoff. One task per upstream, looping over a closed set
//! of events and selecting on shutdown.

use std::time::Duration;

use rmcp::model::ClientRequest;
use rmcp::service::{Peer, RoleClient, ServiceError};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::client::Notice;
use super::connect::{Running, connect};
use super::{Era, Link, LinkState, Upstream, UpstreamEvent};
use crate::catalog::Catalog;
use crate::config::redact_urls_in;

const BACKOFF_MIN: Duration = Duration::from_millis(250);

pub(super) struct Supervisor {
    upstream: Upstream,
    /// Whether it has been up before (so the next `Up` is a reconnect).
    was_up: std::sync::Mutex<bool>,
    catalog: Catalog,
    events: mpsc::UnboundedSender<UpstreamEvent>,
    shutdown: CancellationToken,
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
        events: mpsc::UnboundedSender<UpstreamEvent>,
        shutdown: CancellationToken,
    ) -> Self {
        Self { upstream, was_up: std::sync::Mutex::new(false), catalog, events, shutdown }
    }

    pub async fn run(self) {
        let mut backoff = BACKOFF_MIN;
        let mut remembered = None;
        loop {
            self.upstream.update_status(|s| s.state = LinkState::Connecting);
            let end = self.connect_and_serve(&mut remembered, &mut backoff).await;
            self.upstream.set_link(None);
            self.catalog.remove_upstream(self.upstream.name());
            let error = match end {
                End::Shutdown => return,
                // Error texts of HTTP clients quote the URL, which may hold credentials.
                End::Lost(error) => redact_urls_in(&error),
            };
            tracing::warn!(error = %error, retry_in = ?backoff, "upstream down");
            self.upstream.update_status(|s| {
                s.state = LinkState::Down;
                s.last_error = Some(error);
            });
            let metrics = &self.upstream.inner.metrics;
            metrics.set_upstream_up(self.upstream.name(), false);
            metrics.set_catalog_size(self.upstream.name(), 0, 0);
            let _ = self.events.send(UpstreamEvent::Down { upstream: self.upstream.name().to_string() });
            tokio::select! {
                _ = tokio::time::sleep(jittered(backoff)) => {}
                _ = self.shutdown.cancelled() => return,
            }
            backoff = (backoff * 2).min(self.upstream.config().reconnect_max.max(BACKOFF_MIN));
        }
    }

    async fn connect_and_serve(&self, remembered: &mut Option<Era>, backoff: &mut Duration) -> End {
        let (notices_tx, mut notices) = mpsc::unbounded_channel();
        let connected = tokio::select! {
            connected = connect(self.upstream.config(), notices_tx.clone(), *remembered) => connected,
            _ = self.shutdown.cancelled() => return End::Shutdown,
        };
        let (running, era) = match connected {
            Ok(connected) => connected,
            Err(error) => {
                *remembered = None;
                return End::Lost(error);
            }
        };
        *remembered = Some(era);
        let capabilities = running.peer_info().map(|i| i.capabilities.clone()).unwrap_or_default();
        let link = Link { peer: running.peer().clone(), era, capabilities };
        let refresh = match self.load_catalog(&link.peer).await {
            Ok(reload) => reload.refresh,
            Err(error) => return End::Lost(error),
        };
        *backoff = BACKOFF_MIN;
        self.upstream.set_link(Some(link.clone()));
        self.upstream.update_status(|s| {
            s.state = LinkState::Up;
            s.era = Some(era);
            s.last_error = None;
        });
        tracing::info!(era = era.label(), resources = self.resource_count(), "upstream up");
        self.upstream.inner.metrics.set_upstream_up(self.upstream.name(), true);
        let reconnected = std::mem::replace(&mut *self.was_up.lock().expect("was_up lock"), true);
        if reconnected {
            self.upstream.update_status(|s| s.reconnects += 1);
            self.upstream.inner.metrics.upstream_reconnected(self.upstream.name());
        }
        let _ = self.events.send(UpstreamEvent::Up { upstream: self.upstream.name().to_string(), era, reconnected });
        let watcher = CancellationToken::new();
        let upstream = self.upstream.clone();
        tokio::spawn(super::watching::keep(
            self.upstream.name().to_string(),
            link.clone(),
            self.upstream.inner.watched.subscribe(),
            self.upstream.inner.applied.clone(),
            notices_tx,
            watcher.clone(),
            move || upstream.inner.broken.notify_one(),
        ));
        let end = self.serve(running, &link, &mut notices, refresh).await;
        watcher.cancel();
        self.upstream.inner.applied.send_replace(Default::default());
        end
    }

    async fn serve(
        &self,
        running: Running,
        link: &Link,
        notices: &mut mpsc::UnboundedReceiver<Notice>,
        mut refresh: Option<Duration>,
    ) -> End {
        let mut running = std::pin::pin!(running.waiting());
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
                quit = &mut running => return End::Lost(format!("connection closed ({quit:?})")),
                _ = self.upstream.inner.broken.notified() => return End::Lost("transport broken".into()),
                _ = self.shutdown.cancelled() => return End::Shutdown,
                Some(notice) = notices.recv() => {
                    if let Err(error) = self.on_notice(notice, link, notices).await {
                        return End::Lost(error);
                    }
                }
            }
        }
    }

    async fn on_notice(
        &self,
        notice: Notice,
        link: &Link,
        notices: &mut mpsc::UnboundedReceiver<Notice>,
    ) -> Result<(), String> {
        match notice {
            Notice::Updated(uri) => {
                self.forward_update(uri, true);
                Ok(())
            }
            Notice::MayHaveChanged(uri) => {
                self.forward_update(uri, false);
                Ok(())
            }
            Notice::Fault(fault) => {
                self.upstream.record_fault(fault);
                Ok(())
            }
            Notice::ListChanged => {
                // A burst of list_changed costs one reload (two when more arrive during the
                // first) and one event.
                self.drain_list_changes(notices);
                let mut changed = self.load_catalog(&link.peer).await?.changed;
                while self.drain_list_changes(notices) {
                    changed |= self.load_catalog(&link.peer).await?.changed;
                }
                self.reloaded(changed);
                Ok(())
            }
        }
    }

    /// Fetch the lists again (their `ttlMs` ran out); returns when to do so next.
    async fn reload(&self, link: &Link) -> Result<Option<Duration>, String> {
        let reload = self.load_catalog(&link.peer).await?;
        self.reloaded(reload.changed);
        Ok(reload.refresh)
    }

    /// Log a reload and, when it changed something, tell the proxy.
    fn reloaded(&self, changed: bool) {
        tracing::info!(resources = self.resource_count(), changed, "upstream catalog reloaded");
        if changed {
            let _ = self.events.send(UpstreamEvent::CatalogChanged { upstream: self.upstream.name().to_string() });
        }
    }

    /// Is the upstream still there? Any answer counts — a 2026-07-28 server answers `ping` with
    /// method-not-found, which proves it alive just as well; silence or a transport error does not.
    async fn probe(&self, link: &Link) -> Result<(), String> {
        let ping = link.peer.send_request(ClientRequest::PingRequest(Default::default()));
        match tokio::time::timeout(self.upstream.config().request_timeout, ping).await {
            Ok(Ok(_)) | Ok(Err(ServiceError::McpError(_))) => Ok(()),
            Ok(Err(error)) => Err(format!("health check failed: {error}")),
            Err(_) => Err("health check timed out".into()),
        }
    }

    fn forward_update(&self, uri: String, heard: bool) {
        let _ =
            self.events.send(UpstreamEvent::ResourceUpdated { upstream: self.upstream.name().to_string(), uri, heard });
    }

    /// Take what queued; true when a list change was among it. Updates pass on in order.
    fn drain_list_changes(&self, notices: &mut mpsc::UnboundedReceiver<Notice>) -> bool {
        let mut changed = false;
        while let Ok(next) = notices.try_recv() {
            match next {
                Notice::ListChanged => changed = true,
                Notice::Updated(uri) => self.forward_update(uri, true),
                Notice::MayHaveChanged(uri) => self.forward_update(uri, false),
                Notice::Fault(fault) => self.upstream.record_fault(fault),
            }
        }
        changed
    }

    fn resource_count(&self) -> usize {
        let snapshot = self.catalog.snapshot();
        snapshot.counts().iter().find(|(n, _, _)| n == self.upstream.name()).map_or(0, |(_, r, _)| *r)
    }

    /// Every page of resources and templates, namespaced, into the catalog. Returns when the
    /// lists must be fetched again (the shortest `ttlMs` they came with), if ever.
    async fn load_catalog(&self, peer: &Peer<RoleClient>) -> Result<Reload, String> {
        let listing = super::listing::fetch(&self.upstream, peer).await?;
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
