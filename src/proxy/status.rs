//! The `/status` report, typed: what each upstream, the cache and the subscriptions look like
//! now, and what the last config and policy reloads did. No JSON is built here; the admin
//! listener serialises [`StatusReport`].

use std::sync::{Arc, Mutex};

use super::access::Access;
use crate::admin::{CacheReport, ReloadReport, StatusReport, SubscriptionReport, UpstreamReport};
use crate::catalog::Catalog;
use crate::cluster::Cluster;
use crate::coherence::{Coherence, UpstreamSubscriptions};
use crate::config::CacheConfig;
use crate::fanout::Fanout;
use crate::tools::Tools;
use crate::upstream::{Registry, Upstream, UpstreamStatus};

/// The status service, with what it reads.
pub(super) struct Status {
    pub(super) catalog: Catalog,
    pub(super) tools: Tools,
    pub(super) upstreams: Registry,
    pub(super) cache: Coherence,
    /// `[cache]` as at start.
    pub(super) cache_config: CacheConfig,
    pub(super) upstream_subscriptions: Arc<UpstreamSubscriptions>,
    pub(super) fanout: Fanout,
    /// What the last config reload did (written by the reloader).
    pub(super) last_reload: Arc<Mutex<Option<ReloadReport>>>,
    /// What the last policy reload did.
    pub(super) access: Access,
    /// `[cluster]`: this replica and Redis.
    pub(super) cluster: Option<Cluster>,
}

impl Status {
    /// What `/status` and `/readyz` show.
    pub(super) fn report(&self) -> StatusReport {
        let counts = self.catalog.snapshot().counts();
        let offered = self.tools.snapshot().counts();
        let upstreams = self
            .upstreams
            .snapshot()
            .values()
            .map(|upstream| {
                let (resources, templates) =
                    counts.iter().find(|(n, _, _)| n == upstream.name()).map_or((0, 0), |(_, r, t)| (*r, *t));
                let (tools, prompts) =
                    offered.iter().find(|(n, _, _)| n == upstream.name()).map_or((0, 0), |(_, t, p)| (*t, *p));
                UpstreamReport::new(upstream.status(), upstream.config().required, resources, templates)
                    .with_offerings(tools, prompts)
            })
            .collect();
        let (entries, weighted_bytes) = self.cache.size();
        let (upstream_uris, held) = self.upstream_subscriptions.counts();
        StatusReport {
            upstreams,
            cache: CacheReport {
                enabled: self.cache_config.enabled,
                entries,
                weighted_bytes,
                max_bytes: self.cache_config.max_bytes,
                tracked: self.cache.tracked(),
            },
            subscriptions: SubscriptionReport { hosts: self.fanout.outlets().len(), held, upstream_uris },
            config_reload: self.last_reload.lock().expect("reload lock").clone(),
            policy_reload: self.access.last_reload(),
            cluster: self.cluster.as_ref().map(Cluster::report),
        }
    }

    /// Every upstream's health, as of now.
    pub(super) fn statuses(&self) -> Vec<UpstreamStatus> {
        self.upstreams.snapshot().values().map(Upstream::status).collect()
    }
}
