//! The shared context every capability service holds: the catalog, the upstream registry, the
//! cache and its watch book, the fan-out, access (the policy in force), the view digests, the
//! metrics, the startup config and the runtime spine. A new capability (tools, prompts, …) is a
//! new service over the same `Core`; nothing here knows which services exist.
//!
//! Invariant: `Core` is built once per process and shared by `Arc`; what may change while the
//! proxy runs (the upstream set, the policies) sits behind its own snapshot handle.

use std::sync::{Arc, Mutex};

use crate::catalog::Catalog;
use crate::coherence::{Coherence, WatchBook};
use crate::config::Config;
use crate::cursor::CursorKey;
use crate::fanout::Fanout;
use crate::metrics::Metrics;
use crate::spine::Spine;
use crate::subscriptions::HolderId;
use crate::upstream::{EventSender, Registry, Upstream};

use super::access::Access;
use super::status::ReloadReport;
use super::views::ViewDigests;

pub(crate) struct Core {
    /// The configuration the proxy started with. Upstreams may have changed since (see
    /// `upstreams`); the other sections change only with a restart.
    pub config: Config,
    pub catalog: Catalog,
    pub upstreams: Registry,
    pub cursor_key: CursorKey,
    pub watches: Arc<WatchBook>,
    pub fanout: Fanout,
    /// The read cache and its coherence (generations, watch holds, admission).
    pub cache: Coherence,
    /// The cache's own holder id in the watch book.
    pub cache_holder: HolderId,
    pub access: Access,
    /// Per-principal digests of the visible catalog, for `list_changed`.
    pub views: ViewDigests,
    pub metrics: Metrics,
    pub spine: Spine,
    /// Where supervisors (also those a reload starts) send their events.
    pub events: EventSender,
    /// What the last config reload did, for `/status`.
    pub last_reload: Mutex<Option<ReloadReport>>,
    /// Held while a config reload runs: reloads (SIGHUP, file change) apply one at a time.
    pub reloading: tokio::sync::Mutex<()>,
}

impl Core {
    /// Start `upstream`'s supervisor and make it known.
    pub fn start_upstream(&self, upstream: Upstream) {
        self.upstreams.insert(upstream.clone());
        upstream.spawn(self.catalog.clone(), self.events.clone(), &self.spine);
    }
}
