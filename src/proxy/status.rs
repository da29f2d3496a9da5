//! The `/status` report, typed: what each upstream, the cache and the subscriptions look like
//! now, and what the last config reload did. No JSON is built here; the admin listener
//! serialises [`StatusReport`].

pub use crate::admin::{CacheReport, ReloadReport, StatusReport, SubscriptionReport, UpstreamReport};

use super::Proxy;
use crate::upstream::{Upstream, UpstreamStatus};

impl Proxy {
    /// What `/status` and `/readyz` show.
    pub fn status_report(&self) -> StatusReport {
        let core = &self.core;
        let counts = core.catalog.snapshot().counts();
        let offered = self.tools.snapshot().counts();
        let upstreams = core
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
        let (entries, weighted_bytes) = core.cache.size();
        let (upstream_uris, held) = core.watches.counts();
        StatusReport {
            upstreams,
            cache: CacheReport {
                enabled: core.config.cache.enabled,
                entries,
                weighted_bytes,
                max_bytes: core.config.cache.max_bytes,
                tracked: core.cache.tracked(),
            },
            subscriptions: SubscriptionReport { hosts: core.fanout.outlets().len(), held, upstream_uris },
            config_reload: core.last_reload.lock().expect("reload lock").clone(),
            policy_reload: core.access.last_reload(),
        }
    }

    /// Every upstream's health, as of now.
    pub fn statuses(&self) -> Vec<UpstreamStatus> {
        self.core.upstreams.snapshot().values().map(Upstream::status).collect()
    }
}
