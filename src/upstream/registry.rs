//! The set of configured upstreams, which a config reload may change while requests run.
//!
//! Readers take a snapshot (an `Arc` of the whole map: one short lock, then no lock) or look
//! one upstream up; a reload swaps in a new map. Invariant: a snapshot never changes; an
//! upstream taken from one stays usable (its supervisor may be stopping: requests then fail as
//! "upstream down").

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use super::Upstream;

/// A cheap `Clone` handle.
#[derive(Clone, Default)]
pub struct Registry {
    map: Arc<RwLock<Arc<BTreeMap<String, Upstream>>>>,
}

impl Registry {
    pub fn new(upstreams: impl IntoIterator<Item = Upstream>) -> Self {
        let map = upstreams.into_iter().map(|u| (u.name().to_string(), u)).collect();
        Self { map: Arc::new(RwLock::new(Arc::new(map))) }
    }

    /// Every upstream, as of now.
    pub fn snapshot(&self) -> Arc<BTreeMap<String, Upstream>> {
        self.map.read().expect("registry lock").clone()
    }

    pub fn get(&self, name: &str) -> Option<Upstream> {
        self.map.read().expect("registry lock").get(name).cloned()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.map.read().expect("registry lock").contains_key(name)
    }

    /// Put `upstream` in (replacing one of the same name, which is returned).
    pub fn insert(&self, upstream: Upstream) -> Option<Upstream> {
        let mut map = self.map.write().expect("registry lock");
        Arc::make_mut(&mut map).insert(upstream.name().to_string(), upstream)
    }

    pub fn remove(&self, name: &str) -> Option<Upstream> {
        let mut map = self.map.write().expect("registry lock");
        Arc::make_mut(&mut map).remove(name)
    }
}
