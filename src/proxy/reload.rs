//! Live reload of the configuration (SIGHUP, or a change of the config file): the upstream set
//! changes without a restart, hosts and their other subscriptions untouched.
//!
//! A config with problems changes nothing: every problem is logged (one line each) and shown in
//! `/status` (`config_reload`). Otherwise the upstream sets are compared by name:
//! - new ones join (supervisor started; their entries appear once they are up);
//! - removed ones leave: supervisor stopped (connection closed), every hold of their URIs
//!   released, cache entries dropped, catalog entries removed;
//! - changed ones (any field of their config differs) reconnect: the old supervisor is stopped,
//!   a new one started; holds of their URIs are kept and re-applied, their cache entries
//!   dropped and every subscriber told `updated` (anything may have changed meanwhile);
//! - ones whose `roots` alone changed (from some to others) keep their connection: the new
//!   roots are answered from then on and the upstream is told `notifications/roots/list_changed`
//!   (to or from none, the roots capability declared at connect differs: they reconnect);
//! - the rest is untouched.
//!
//! Then `list_changed` goes to the hosts whose view changed. The policies come with the config
//! and are replaced as a policy reload would (unless their folder changed: that needs a restart). Sections that cannot change live (`[server]`,
//! `[auth]`, `[cache]`, `[bridge]`, `[audit]`, the policies folder) keep their running values; a
//! difference is logged as needing a restart. Every reload is one audit event (`crate::audit`),
//! and the audit file is reopened with it (log rotation by SIGHUP).
//!
//! Invariant: reloads apply one at a time, and a rejected config leaves everything as it was.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::events::Changes;
use super::owner_routes::owner_routes;
use super::policies::Policies;
use super::views::Views;
use crate::admin::ReloadReport;
use crate::audit::{self, Audit};
use crate::auth::subjects::Subjects;
use crate::catalog::Catalog;
use crate::coherence::UpstreamSubscriptions;
use crate::config::{Config, ConfigError, UpstreamConfig};
use crate::metrics::Metrics;
use crate::rate_limits::RateLimits;
use crate::spine::Spine;
use crate::tools::Tools;
use crate::upstream::{EventSender, Registry, RootsChange, Upstream};

/// Loads the configuration again, as at start (file, environment, command line).
pub type ConfigSource = Arc<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>;

/// Quiet time after the last write to the config file before it is reloaded.
const CONFIG_SETTLE: Duration = Duration::from_millis(200);
/// How long a leaving upstream's supervisor may take to close its connection.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How the upstream sets differ.
#[derive(Debug, Default)]
struct UpstreamDiff {
    added: Vec<UpstreamConfig>,
    removed: Vec<String>,
    changed: Vec<UpstreamConfig>,
    /// Only their `roots` differ: given in place (see [`crate::upstream::Connection::set_roots`]).
    rerooted: Vec<UpstreamConfig>,
}

/// The reloader: the owner of the upstream set's lifecycle (start, leave, reconnect) and of
/// config reloads. A cheap `Clone` handle.
#[derive(Clone)]
pub(super) struct Reloader {
    inner: Arc<Inner>,
}

struct Inner {
    parts: ReloaderParts,
    /// Held while a config reload runs: reloads (SIGHUP, file change) apply one at a time.
    reloading: tokio::sync::Mutex<()>,
}

/// What the reloader uses.
pub(super) struct ReloaderParts {
    /// The configuration the proxy started with: what a reload is compared against.
    pub(super) config: Config,
    pub(super) upstreams: Registry,
    pub(super) catalog: Catalog,
    pub(super) upstream_subscriptions: Arc<UpstreamSubscriptions>,
    /// Where supervisors (also those a reload starts) send their events.
    pub(super) events: EventSender,
    pub(super) spine: Spine,
    pub(super) metrics: Metrics,
    /// An upstream replaced: its cache entries go, its subscribers hear `updated`.
    pub(super) changes: Changes,
    pub(super) tools: Tools,
    /// The policies that come with a reloaded config are put in force through these.
    pub(super) policies: Policies,
    pub(super) views: Views,
    /// What the last config reload did, for `/status` (shared with it).
    pub(super) last_reload: Arc<Mutex<Option<ReloadReport>>>,
    /// The upstreams' rate limits follow a reload (`[rate_limits]` itself needs a restart).
    pub(super) rate_limits: RateLimits,
    /// Each reload is audited; the audit file is reopened with it (log rotation).
    pub(super) audit: Audit,
    /// The principals' latest JWTs, for `token_exchange` upstreams.
    pub(super) subjects: Subjects,
}

impl Reloader {
    pub(super) fn new(parts: ReloaderParts) -> Self {
        Self { inner: Arc::new(Inner { parts, reloading: tokio::sync::Mutex::new(()) }) }
    }

    /// Start `config`'s supervisor and make it known.
    pub(super) fn start_upstream(&self, config: UpstreamConfig) {
        let parts = &self.inner.parts;
        let upstream = Upstream::with_subjects(config, parts.metrics.clone(), parts.subjects.clone());
        if let Some(forwarder) = parts.tools.forwarder() {
            upstream.set_owner_routes(owner_routes(forwarder));
        }
        parts.upstreams.insert(upstream.clone());
        upstream.spawn(parts.catalog.clone(), parts.events.clone(), &parts.spine);
    }

    /// Apply a freshly loaded configuration (or report why it cannot be).
    pub(super) async fn reload_config(&self, loaded: Result<Config, ConfigError>) -> ReloadReport {
        let _one_at_a_time = self.inner.reloading.lock().await;
        let report = match loaded {
            Err(error) => rejected(&error),
            Ok(next) => self.apply(next).await,
        };
        *self.inner.parts.last_reload.lock().expect("reload lock") = Some(report.clone());
        let audit = &self.inner.parts.audit;
        let mut event = audit::Event::new(audit::Kind::Reload, report.outcome);
        event.changes = Some(serde_json::json!({ "what": "config", "report": report }));
        audit.record_reopening(event);
        report
    }

    /// Reload whenever the config file at `path` changes (bursts coalesced): the
    /// `config-watch` task.
    pub(super) fn watch_config(&self, path: &Path, source: ConfigSource) {
        let (Some(dir), Some(file)) = (path.parent(), path.file_name()) else { return };
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        let Some(mut changes) = super::watch::FileChanges::watch(dir, Some(file.to_owned()), "config file") else {
            return;
        };
        let reloader = self.clone();
        let spine = &self.inner.parts.spine;
        let shutdown = spine.shutdown();
        spine.spawn("config-watch", async move {
            while changes.next_burst(CONFIG_SETTLE, &shutdown).await {
                tracing::info!("config file changed: reloading");
                reloader.reload_config(source()).await;
            }
        });
    }

    async fn apply(&self, next: Config) -> ReloadReport {
        let parts = &self.inner.parts;
        let restart_needed = restart_needed(&parts.config, &next);
        for section in &restart_needed {
            tracing::warn!(section, "changed in the configuration; takes effect only after a restart");
        }
        let diff = diff(&parts.upstreams.snapshot(), &next.upstreams);
        for name in &diff.removed {
            self.leave(name).await;
            tracing::info!(upstream = %name, "upstream removed");
        }
        parts.rate_limits.configure_upstreams(&next.upstreams);
        let (roots_changed, mut changed_configs) = self.reroot(&diff.rerooted).await;
        changed_configs.extend(diff.changed);
        for config in &changed_configs {
            self.reconnect(config.clone()).await;
            tracing::info!(upstream = %config.name, "upstream changed; reconnecting");
        }
        for config in &diff.added {
            self.start_upstream(config.clone());
            tracing::info!(upstream = %config.name, "upstream added");
        }
        let longest = longest_request(&parts.config);
        for config in diff.added.iter().chain(&changed_configs).filter(|c| c.request_timeout > longest) {
            tracing::warn!(upstream = %config.name, cut_to = ?longest, "request_timeout longer than any at start: reads are cut to the longest until a restart");
        }
        // From another folder, they would not be the ones the policies watch follows.
        if next.policies.dir == parts.config.policies.dir {
            parts.policies.install(next.policies.set.clone());
        }
        // One list_changed per host whose view changed; with upstreams reconnecting, their
        // `Up` (or `Down`) compares views once they settled, covering all of the above.
        if changed_configs.is_empty() {
            parts.views.announce();
        }
        let names = |configs: &[UpstreamConfig]| configs.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        let (added, changed) = (names(&diff.added), names(&changed_configs));
        let unchanged = added.is_empty() && changed.is_empty() && diff.removed.is_empty() && restart_needed.is_empty();
        let unchanged = unchanged && roots_changed.is_empty();
        tracing::info!(?added, removed = ?diff.removed, ?changed, ?roots_changed, "configuration reloaded");
        ReloadReport {
            outcome: if unchanged { "unchanged" } else { "applied" },
            at_unix: now_unix(),
            problems: Vec::new(),
            added,
            removed: diff.removed,
            changed,
            roots_changed,
            restart_needed,
        }
    }

    /// Give each upstream whose roots alone changed its new roots in place: the names of those
    /// told, and the configs of those that must reconnect instead (roots to or from none, or
    /// not running).
    async fn reroot(&self, rerooted: &[UpstreamConfig]) -> (Vec<String>, Vec<UpstreamConfig>) {
        let (mut told, mut reconnect) = (Vec::new(), Vec::new());
        for config in rerooted {
            match self.inner.parts.upstreams.get(&config.name) {
                Some(upstream) if upstream.set_roots(&config.roots).await == RootsChange::Changed => {
                    tracing::info!(upstream = %config.name, roots = config.roots.len(), "upstream roots changed; told it");
                    told.push(config.name.clone());
                }
                _ => reconnect.push(config.clone()),
            }
        }
        (told, reconnect)
    }

    /// `name` leaves: stop it, release what was held of it, forget its entries.
    async fn leave(&self, name: &str) {
        let parts = &self.inner.parts;
        self.stop(name).await;
        parts.upstream_subscriptions.unsubscribe_upstream(name);
        parts.catalog.remove_upstream(name);
        parts.tools.upstream_left(name);
        parts.changes.cache.invalidate_upstream_everywhere(name).await;
        parts.metrics.upstream_removed(name);
    }

    /// `config.name` reconnects with `config`: holds stay and are re-applied to the new
    /// connection and its sessions; anything of it may have changed meanwhile.
    async fn reconnect(&self, config: UpstreamConfig) {
        let parts = &self.inner.parts;
        let name = config.name.clone();
        // What hosts held on its own upstream sessions is held again on the new ones.
        let session_subscriptions =
            parts.upstreams.get(&name).map(|old| old.session_subscriptions()).unwrap_or_default();
        self.stop(&name).await;
        parts.catalog.remove_upstream(&name);
        parts.tools.upstream_left(&name);
        self.start_upstream(config);
        parts.upstream_subscriptions.attach(&name);
        if let Some(new) = parts.upstreams.get(&name) {
            new.subscribe_again(session_subscriptions);
        }
        parts.changes.everything_changed(&name).await;
    }

    /// Forget `name` and stop its supervisor (its connection closed).
    async fn stop(&self, name: &str) {
        if let Some(old) = self.inner.parts.upstreams.remove(name)
            && !old.stop(STOP_GRACE).await
        {
            tracing::warn!(upstream = name, "supervisor did not stop in time");
        }
    }
}

/// What changed between the running upstreams and the configured ones.
fn diff(running: &BTreeMap<String, Upstream>, next: &[UpstreamConfig]) -> UpstreamDiff {
    let mut diff = UpstreamDiff::default();
    for config in next {
        match running.get(&config.name) {
            None => diff.added.push(config.clone()),
            // Every field counts; the derived `Debug` shows every field. Roots are compared
            // with the ones it has now (a reload may have changed them in place).
            Some(upstream)
                if format!("{:?}", without_roots(upstream.config())) != format!("{:?}", without_roots(config)) =>
            {
                diff.changed.push(config.clone())
            }
            Some(upstream) if upstream.roots().as_slice() != config.roots.as_slice() => {
                diff.rerooted.push(config.clone())
            }
            Some(_) => {}
        }
    }
    let names: std::collections::BTreeSet<&str> = next.iter().map(|c| c.name.as_str()).collect();
    diff.removed = running.keys().filter(|name| !names.contains(name.as_str())).cloned().collect();
    diff
}

fn without_roots(config: &UpstreamConfig) -> UpstreamConfig {
    UpstreamConfig { roots: Vec::new(), ..config.clone() }
}

/// The sections that differ but cannot change while the proxy runs.
fn restart_needed(running: &Config, next: &Config) -> Vec<String> {
    let differs = |a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| format!("{a:?}") != format!("{b:?}");
    let sections = [
        ("server", differs(&running.server, &next.server)),
        ("auth", differs(&running.auth, &next.auth)),
        ("cache", differs(&running.cache, &next.cache)),
        ("policies.dir", running.policies.dir != next.policies.dir),
        ("rate_limits", running.rate_limits != next.rate_limits),
        // The bridge's tools are offered (or not) from the start: its settings are read once.
        ("bridge", running.bridge != next.bridge),
        ("cluster", running.cluster != next.cluster),
        // The audit trail's writer is started once (its file is reopened on every reload).
        ("audit", running.audit != next.audit),
    ];
    sections.into_iter().filter(|(_, differs)| *differs).map(|(section, _)| section.to_string()).collect()
}

fn rejected(error: &ConfigError) -> ReloadReport {
    for problem in &error.problems {
        tracing::error!(at = %problem.at, problem = %problem.message, "config reload refused");
    }
    tracing::warn!(count = error.problems.len(), "configuration unchanged: the new one has problems");
    ReloadReport {
        outcome: "rejected",
        at_unix: now_unix(),
        problems: error.problems.iter().map(|p| format!("{}: {}", p.at, p.message)).collect(),
        ..Default::default()
    }
}

fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The longest upstream request the cache lets a load take (with the subscription wait): the
/// longest `request_timeout` at start (the default when none is configured yet, for the
/// upstreams a reload adds). A longer one added later is cut to it until a restart.
pub(super) fn longest_request(config: &Config) -> Duration {
    config.upstreams.iter().map(|u| u.request_timeout).max().unwrap_or(DEFAULT_REQUEST_TIMEOUT)
}

/// `request_timeout`'s default.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests;
