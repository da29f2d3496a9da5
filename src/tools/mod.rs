//! Tools, prompts and completion: the upstreams' tools and prompts under namespaced names
//! (`<upstream>__<name>`, see [`names`]), merged into one list per kind with cross-upstream
//! pagination (immutable snapshots and the proxy's encrypted cursors, as for resources), and
//! `tools/call`, `prompts/get` and `completion/complete` routed to the owning upstream
//! (`routed`).
//!
//! The lists are fetched by the upstream's supervisor when it comes up (before it counts as
//! up) and again when it says `tools/list_changed` or `prompts/list_changed`, and arrive here
//! with its events; they leave with the upstream. A change
//! reaches hosts as `tools/list_changed` / `prompts/list_changed` after the merged list has
//! it, and only hosts whose principal's visible list changed hear it (the same holds for a
//! policy reload). A per-principal or per-host upstream session that says its own lists
//! changed is listed, to its own hosts only, as it lists itself ([`Tools::list`] and the
//! routing take the caller's view: the catalog with that session's part in place of the
//! shared connection's); its hosts alone are told. With `[cluster]`, such a session another
//! replica holds lists there, and the replica holding one tells the others of its changes over
//! MCP (`session_lists`).
//!
//! One upstream may present its names un-prefixed (`unprefixed = true`; the rules that keep
//! that unambiguous are in [`names`]). Policies decide tools and prompts over pseudo-URIs
//! (`tool://<upstream>/<name>`, `prompt://<upstream>/<name>`, the upstream's own name, prefixed
//! or not) in the same files as resources; deny wins.
//!
//! Invariant: a tool or prompt a principal may not use is invisible to it: not listed, and a
//! call or get answers exactly like an unknown name. Every URI inside what is passed through
//! (resource links, embedded resources, `_meta.ui.resourceUri` and `_meta["ui/resourceUri"]`,
//! icons, `structuredContent`, completion values) is namespaced and checked like a read; one
//! the principal may not see is dropped, decided by policy, never by whether it exists
//! (`rewrite`). Results are never cached.

mod catalog;
mod inflight;
mod kinds;
mod lists;
pub mod names;
pub mod own;
mod parked;
mod progress;
mod rewrite;
mod rounds;
mod routed;
mod sealed;
mod served;
mod session_lists;

use std::sync::{Arc, RwLock};

pub use self::catalog::{Listed, UpstreamOfferings};
pub use self::inflight::CallPermit;
pub use self::kinds::{Call, Routed};
use self::lists::ViewFrom;
use self::names::{Naming, Offering};
pub(crate) use self::rewrite::ListedIcons;
pub use self::routed::{Asker, carry_host_meta};
pub use self::served::Ran;
pub use self::session_lists::OwnListsChanged;
use crate::catalog::{Catalog, Part, Snapshot};
use crate::cluster::peers::PeerClient;
use crate::cursor::CursorKey;
use crate::fanout::{Fanout, Listing, ViewMemo};
pub use crate::host::ProgressOutlet;
use crate::metrics::Metrics;
use crate::policy::PolicySet;
use crate::upstream::{Offered, Registry, UpstreamEvent};

/// A cheap `Clone` handle on the tools-and-prompts service.
#[derive(Clone)]
pub struct Tools {
    inner: Arc<Inner>,
}

struct Inner {
    catalog: Catalog<UpstreamOfferings>,
    /// The resource catalog: completion is offered for the templates it lists.
    resources: Catalog,
    upstreams: Registry,
    fanout: Fanout,
    metrics: Metrics,
    cursor_key: CursorKey,
    page_size: usize,
    /// The policy in force (shared with the rest of the proxy).
    policy: Arc<RwLock<PolicySet>>,
    /// The bridge's tools are offered (`[bridge]`): a principal's view includes them.
    bridge: bool,
    /// Routed calls in flight per principal (`server.max_calls_per_principal`).
    calls: inflight::CallsInFlight,
    /// Calls of 2026-07-28 hosts waiting for their host's input (`parked`).
    parked: parked::ParkedCalls<crate::cluster::peers::Answer>,
    /// Seals upstreams' own `requestState`s to the principal they were handed to (`sealed`).
    state_seal: sealed::StateSeal,
    /// `[cluster]`: this replica's id and the others' (which a `requestState` names), and the
    /// private forward's requests (`served`).
    forwarder: Option<PeerClient>,
    /// Upstream sessions' own lists, namespaced ([`Tools::own_part`]), the latest last.
    own_parts: std::sync::Mutex<Vec<(Arc<Offered>, Arc<UpstreamOfferings>)>>,
    /// What each principal sees of the tools and of the prompts, as digests (`lists`).
    views: ViewMemo<ViewFrom>,
    /// `[cluster]`: sessions' own lists changed, for the session endpoint (`session_lists`).
    own_lists_changed: tokio::sync::broadcast::Sender<OwnListsChanged>,
}

/// How many sessions' own lists are kept namespaced; the oldest goes first.
const OWN_PARTS_KEPT: usize = 256;

/// What [`Tools::new`] needs from the proxy.
pub struct ToolsParts {
    pub resources: Catalog,
    pub upstreams: Registry,
    pub fanout: Fanout,
    pub metrics: Metrics,
    pub cursor_key: CursorKey,
    pub page_size: usize,
    pub policy: Arc<RwLock<PolicySet>>,
    /// `[bridge]` is on: the proxy's own tools ([`own`]) are listed too.
    pub bridge: bool,
    /// `server.max_calls_per_principal`.
    pub max_calls_per_principal: usize,
    /// `[cluster]`: the call cap holds across the live replicas.
    pub cluster: Option<crate::cluster::Cluster>,
    /// The key upstreams' `requestState`s are sealed with: `None` is a random one (one
    /// process); a cluster passes the key derived from its secret.
    pub state_key: Option<[u8; 32]>,
    /// `[cluster]`: sends requests for per-principal sessions to the replica holding them.
    pub forwarder: Option<PeerClient>,
}

impl Tools {
    pub fn new(parts: ToolsParts) -> Tools {
        let inner = Inner {
            catalog: Catalog::default(),
            resources: parts.resources,
            upstreams: parts.upstreams,
            fanout: parts.fanout,
            metrics: parts.metrics,
            cursor_key: parts.cursor_key,
            page_size: parts.page_size,
            policy: parts.policy,
            bridge: parts.bridge,
            calls: inflight::CallsInFlight::new(parts.max_calls_per_principal, parts.cluster),
            parked: parked::ParkedCalls::of_replica(parts.forwarder.as_ref().map(PeerClient::replica_id)),
            state_seal: parts.state_key.map_or_else(sealed::StateSeal::random, sealed::StateSeal::from_bytes),
            forwarder: parts.forwarder,
            own_parts: Default::default(),
            views: ViewMemo::default(),
            own_lists_changed: session_lists::channel(),
        };
        Tools { inner: Arc::new(inner) }
    }

    /// What an upstream event means here: its tools and prompts (fetched by its supervisor)
    /// come, change or go. Never waits.
    pub fn on_upstream_event(&self, event: &UpstreamEvent) {
        let (upstream, offerings) = match event {
            UpstreamEvent::Up { upstream, offered, .. } | UpstreamEvent::OfferingsChanged { upstream, offered } => {
                (upstream, Some(self.namespaced(upstream, offered.clone())))
            }
            UpstreamEvent::Down { upstream } => (upstream, None),
            UpstreamEvent::SessionOfferingsChanged { upstream, principal, host, tools, prompts } => {
                let (principal, host, tools, prompts) = (principal.clone(), *host, *tools, *prompts);
                self.tell_session_hosts(&principal, host, tools, prompts);
                let upstream = upstream.as_str().into();
                return self.own_lists_changed(OwnListsChanged { upstream, principal, host, tools, prompts });
            }
            UpstreamEvent::ResourceUpdated { .. }
            | UpstreamEvent::CatalogChanged { .. }
            | UpstreamEvent::SessionUpdated { .. } => return,
        };
        self.replace(upstream, offerings);
    }

    /// A session of `principal`'s (host session `host`'s) lists other tools or prompts: its
    /// hosts only hear `tools/list_changed` or `prompts/list_changed` (a per-host session's
    /// host; a per-principal one's, every host of the principal here).
    fn tell_session_hosts(&self, principal: &str, host: Option<u64>, tools: bool, prompts: bool) {
        let mut told = 0;
        for (id, info) in self.inner.fanout.outlets() {
            let its_host = match host {
                Some(host) => info.host_key.get() == Some(&host),
                None => info.principal == principal,
            };
            if !its_host {
                continue;
            }
            for (changed, listing) in [(tools, Listing::Tools), (prompts, Listing::Prompts)] {
                if changed && listing.wanted_by(&info) {
                    self.inner.fanout.deliver(id, listing.news());
                }
            }
            told += 1;
        }
        tracing::debug!(tools, prompts, hosts_told = told, "an upstream session's tools or prompts changed");
    }

    /// The merged view as `principal`'s host session `host` sees it: an upstream whose session
    /// of theirs lists its own tools and prompts (it said they changed) is listed as that
    /// session lists it; every other as its shared connection does.
    fn snapshot_for(&self, principal: &str, host: Option<u64>) -> Arc<Snapshot<UpstreamOfferings>> {
        let shared = self.inner.catalog.snapshot();
        let upstreams = self.inner.upstreams.snapshot();
        let mut own = Vec::new();
        for upstream in upstreams.values().filter(|upstream| upstream.has_sessions()) {
            if let Some(offered) = upstream.own_offerings(principal, host) {
                own.push((upstream.name().to_string(), self.own_part(upstream.name(), offered)));
            }
        }
        if own.is_empty() { shared } else { Arc::new(shared.with_own(own)) }
    }

    /// A session's own offerings of `upstream`, namespaced once per list it gave.
    fn own_part(&self, upstream: &str, offered: Arc<Offered>) -> Arc<UpstreamOfferings> {
        let mut parts = self.inner.own_parts.lock().expect("own parts lock");
        if let Some((_, part)) = parts.iter().find(|(listed, _)| Arc::ptr_eq(listed, &offered)) {
            return part.clone();
        }
        let part = Arc::new(self.namespaced(upstream, (*offered).clone()));
        if parts.len() >= OWN_PARTS_KEPT {
            parts.remove(0);
        }
        parts.push((offered, part.clone()));
        part
    }

    /// `upstream` left the configuration: its tools and prompts go (hosts whose view changed
    /// are told).
    pub fn upstream_left(&self, upstream: &str) {
        self.replace(upstream, None);
    }

    /// Swap in what `upstream` offers, then tell hosts whose view changed.
    fn replace(&self, upstream: &str, offerings: Option<UpstreamOfferings>) {
        let Some(after) = self.inner.catalog.replace(upstream, offerings) else { return };
        let told = self.announce();
        let (tools, prompts) = after.part(upstream).map_or((0, 0), Part::counts);
        // The upstream's own up/down line is the one state-change line; this is detail.
        tracing::debug!(upstream, tools, prompts, hosts_told = told, "tools and prompts changed");
    }

    /// A permit for one more routed call of `principal` (held until the call ends), or the
    /// limit it has reached (with `[cluster]`, across the live replicas).
    pub async fn admit_call(&self, principal: &str) -> Result<CallPermit, usize> {
        self.inner.calls.admit(principal).await.ok_or(self.inner.calls.limit())
    }

    /// The upstream of a tool (or prompt, `prompt = true`) a presented name names, when
    /// `principal` may use it; `None` for unknown, unlisted and denied names alike. Decides
    /// without counting (the rate limits ask this before the call decides and counts).
    pub fn upstream_of(&self, policy: &PolicySet, principal: &str, prompt: bool, presented: &str) -> Option<String> {
        let offering = if prompt { Offering::Prompt } else { Offering::Tool };
        let snapshot = self.snapshot_for(principal, None);
        let naming = snapshot.naming();
        let (upstream, _) = naming.origin(presented)?;
        let allowed = snapshot.offers(offering, upstream, presented)
            && self.allowed(policy, principal, naming, offering, presented, None);
        allowed.then(|| upstream.to_string())
    }

    /// The merged snapshot (for `/status` and tests).
    pub fn snapshot(&self) -> Arc<Snapshot<UpstreamOfferings>> {
        self.inner.catalog.snapshot()
    }

    fn policy(&self) -> PolicySet {
        self.inner.policy.read().expect("policy lock").clone()
    }

    /// Namespace every name (skipping, logging and counting those outside the spec's rules)
    /// and every MCP Apps resource URI of `_meta` (`ui.resourceUri`, `ui/resourceUri`).
    fn namespaced(&self, upstream: &str, offered: Offered) -> UpstreamOfferings {
        let unprefixed = self.inner.upstreams.get(upstream).is_some_and(|u| u.config().unprefixed);
        let naming = Naming { unprefixed: unprefixed.then_some(upstream) };
        let tools = self.namespaced_entries(naming, upstream, offered.tools);
        UpstreamOfferings { tools, prompts: self.namespaced_entries(naming, upstream, offered.prompts), unprefixed }
    }

    fn namespaced_entries<T: Listed>(&self, naming: Naming, upstream: &str, entries: Vec<T>) -> Vec<T> {
        let mut seen = std::collections::HashSet::new();
        let namespaced = |mut entry: T| match naming.present(upstream, entry.name()) {
            Ok(name) if seen.insert(name.clone()) => {
                entry.rename(name);
                *entry.meta() = entry.meta().take().map(|meta| rewrite::meta_from_upstream(upstream, meta));
                Some(entry)
            }
            Ok(_) => None,
            Err(error) => {
                let (kind, name) = (T::OFFERING.label(), entry.name());
                tracing::warn!(upstream, kind, name, error = %error, "not offered: its name breaks the spec's rules");
                self.inner.metrics.catalog_entry_unlisted(upstream);
                None
            }
        };
        entries.into_iter().filter_map(namespaced).collect()
    }
}
