//! The catalog: per upstream, what it contributes to the merged lists (every upstream page,
//! already namespaced): its resources and templates ([`UpstreamCatalog`]), or its tools and
//! prompts (`crate::tools`' part); and the merged view downstream pages are cut from, one
//! catalog type over whichever it lists ([`Part`]).
//!
//! A change to one upstream builds a new immutable [`Snapshot`] that shares every other
//! upstream's lists (`Arc`), so a change costs O(upstreams), not O(entries), and a page costs
//! O(page) — never a re-merge of everything. Pages carry the proxy's sealed cursors
//! ([`Snapshot::page_for`], the one place a list's offset and cursor are made).
//!
//! Invariant: the generation grows with every change; a snapshot never changes once built, so
//! an offset is meaningful only together with the generation it was taken from.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::{Resource, ResourceTemplate};

use crate::cursor::{CursorKey, ListKind};
use crate::error::ProxyError;

/// What one upstream contributes to a catalog: two lists, each of them merged across upstreams.
pub trait Part: Debug + Default + Clone + PartialEq + Send + Sync + 'static {
    /// Add what positions its entries in the merged lists (names, URIs, in order) to `digest`.
    fn fingerprint(&self, digest: &mut Fingerprint);

    /// How many entries each of its two lists holds.
    fn counts(&self) -> (usize, usize);
}

/// What one upstream contributes, with namespaced URIs and templates.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct UpstreamCatalog {
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
}

impl UpstreamCatalog {
    /// Drop repeated resource URIs and template URI templates, the first of each kept (an
    /// upstream that lists a URI twice would otherwise have it listed twice to every host).
    /// Returns how many were dropped.
    pub fn dedupe(&mut self) -> usize {
        let before = self.resources.len() + self.templates.len();
        let mut seen = std::collections::HashSet::new();
        self.resources.retain(|r| seen.insert(r.uri.clone()));
        seen.clear();
        self.templates.retain(|t| seen.insert(t.uri_template.clone()));
        before - self.resources.len() - self.templates.len()
    }
}

impl Part for UpstreamCatalog {
    fn fingerprint(&self, digest: &mut Fingerprint) {
        self.resources.iter().for_each(|resource| digest.add(&resource.uri));
        digest.add("\0templates");
        self.templates.iter().for_each(|template| digest.add(&template.uri_template));
    }

    fn counts(&self) -> (usize, usize) {
        (self.resources.len(), self.templates.len())
    }
}

/// One page of a merged list, and where the next starts (if anything is left).
#[derive(Debug)]
struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<usize>,
}

/// One page of a merged list as a host gets it: the cursor of the next page, if any.
#[derive(Debug)]
pub struct Paged<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// An immutable merged view: the upstreams in name order, each in its own order.
#[derive(Debug, Default)]
pub struct Snapshot<P = UpstreamCatalog> {
    pub generation: u64,
    parts: Vec<(String, Arc<P>)>,
    /// [`Snapshot::fingerprint`], made on first use.
    fingerprint: OnceLock<u64>,
}

/// The live catalog. A cheap `Clone` handle.
#[derive(Debug, Clone, Default)]
pub struct Catalog<P = UpstreamCatalog> {
    inner: Arc<Mutex<State<P>>>,
}

#[derive(Debug, Default)]
struct State<P> {
    generation: u64,
    upstreams: BTreeMap<String, Arc<P>>,
    snapshot: Arc<Snapshot<P>>,
}

impl<P: Part> Catalog<P> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replace what `upstream` contributes. Returns the new generation.
    pub fn set_upstream(&self, upstream: &str, entries: P) -> u64 {
        self.change(|upstreams| {
            upstreams.insert(upstream.to_string(), Arc::new(entries));
        })
    }

    /// Replace what `upstream` contributes when it differs from what is there; true when it did
    /// (a new generation).
    pub fn replace_if_changed(&self, upstream: &str, entries: P) -> bool {
        self.replace(upstream, Some(entries)).is_some()
    }

    /// Replace what `upstream` contributes (`None`: it left) when it differs from what is
    /// there. Returns the new snapshot, or `None` when nothing changed.
    pub fn replace(&self, upstream: &str, entries: Option<P>) -> Option<Arc<Snapshot<P>>> {
        let mut state = self.inner.lock().expect("catalog lock");
        if state.upstreams.get(upstream).map(|current| &**current) == entries.as_ref() {
            return None;
        }
        match entries {
            Some(entries) => state.upstreams.insert(upstream.to_string(), Arc::new(entries)),
            None => state.upstreams.remove(upstream),
        };
        Some(state.next_snapshot())
    }

    /// Drop what `upstream` contributes (it left or went down). Returns the new generation.
    pub fn remove_upstream(&self, upstream: &str) -> u64 {
        self.change(|upstreams| {
            upstreams.remove(upstream);
        })
    }

    /// The current merged view.
    pub fn snapshot(&self) -> Arc<Snapshot<P>> {
        self.inner.lock().expect("catalog lock").snapshot.clone()
    }

    fn change(&self, edit: impl FnOnce(&mut BTreeMap<String, Arc<P>>)) -> u64 {
        let mut state = self.inner.lock().expect("catalog lock");
        edit(&mut state.upstreams);
        state.next_snapshot().generation
    }
}

impl<P> State<P> {
    /// The next generation's snapshot of what the upstreams contribute now, made current.
    fn next_snapshot(&mut self) -> Arc<Snapshot<P>> {
        self.generation += 1;
        let parts = self.upstreams.iter().map(|(name, part)| (name.clone(), part.clone())).collect();
        self.snapshot = Arc::new(Snapshot { generation: self.generation, parts, fingerprint: OnceLock::new() });
        self.snapshot.clone()
    }
}

impl<P: Part> Snapshot<P> {
    /// A digest of what positions entries in the merged lists (each upstream's name and what
    /// its part adds, in order): equal on every replica that lists the same, whatever its
    /// generation. Computed once per snapshot.
    pub fn fingerprint(&self) -> u64 {
        *self.fingerprint.get_or_init(|| {
            let mut digest = Fingerprint::default();
            for (name, part) in &self.parts {
                digest.add(name);
                part.fingerprint(&mut digest);
            }
            digest.finish()
        })
    }

    /// Counts per upstream: `(name, first list, second list)`.
    pub fn counts(&self) -> Vec<(String, usize, usize)> {
        self.parts.iter().map(|(name, part)| (name.clone(), part.counts().0, part.counts().1)).collect()
    }

    /// What `upstream` contributes, if anything.
    pub fn part(&self, upstream: &str) -> Option<&P> {
        let at = self.parts.binary_search_by(|(name, _)| name.as_str().cmp(upstream)).ok()?;
        Some(&self.parts[at].1)
    }

    /// Every upstream's part, in name order.
    pub fn parts(&self) -> impl Iterator<Item = (&str, &P)> {
        self.parts.iter().map(|(name, part)| (name.as_str(), &**part))
    }

    /// This view with `own` parts in place of (or besides) the upstreams' shared ones: what a
    /// caller whose upstream sessions list their own entries sees. Its generation is its own
    /// (a cursor of one view is no cursor of another).
    pub fn with_own(&self, own: Vec<(String, Arc<P>)>) -> Snapshot<P> {
        let mut parts: BTreeMap<String, Arc<P>> = self.parts.iter().cloned().collect();
        let mut digest = Fingerprint::default();
        digest.add(&self.generation.to_string());
        for (name, part) in own {
            digest.add(&name);
            part.fingerprint(&mut digest);
            parts.insert(name, part);
        }
        // The top bit set: never the generation of a shared view.
        let generation = digest.finish() | 1 << 63;
        Snapshot { generation, parts: parts.into_iter().collect(), fingerprint: OnceLock::new() }
    }

    /// One page of `principal`'s merged list `list` from `cursor` (none: the first): up to
    /// `limit` visible entries of `entries`, and the cursor of the next page, bound to the
    /// principal, the list and this snapshot (its generation, or with `[cluster]` its content).
    pub fn page_for<T: Clone>(
        &self,
        key: &CursorKey,
        (principal, list): (&str, ListKind),
        (cursor, limit): (Option<&str>, usize),
        entries: impl Fn(&P) -> &Vec<T>,
        visible: impl Fn(&T) -> bool,
    ) -> Result<Paged<T>, ProxyError> {
        let version = key.list_version(self.generation, || self.fingerprint());
        let offset = key.page_start(principal, list, version, cursor).map_err(|_| ProxyError::InvalidCursor)?;
        let page = page(&self.parts, offset, limit, entries, visible);
        let next_cursor = page.next.map(|next| key.page_cursor(principal, list, version, next));
        Ok(Paged { items: page.items, next_cursor })
    }
}

impl Snapshot {
    /// Does any template satisfy `test`?
    pub fn any_template(&self, test: impl Fn(&ResourceTemplate) -> bool) -> bool {
        self.parts.iter().any(|(_, p)| p.templates.iter().any(&test))
    }

    /// The URI schemes (lowercase) of `upstream`'s own resources and templates: what it serves.
    pub fn schemes_of(&self, upstream: &str) -> BTreeSet<String> {
        let Some((_, part)) = self.parts.iter().find(|(name, _)| name == upstream) else { return BTreeSet::new() };
        let uris = part.resources.iter().map(|r| r.uri.as_str());
        let templates = part.templates.iter().map(|t| t.uri_template.as_str());
        uris.chain(templates)
            .filter_map(|namespaced| namespaced.strip_prefix(upstream)?.strip_prefix('+'))
            .filter_map(|original| original.split_once(':'))
            .map(|(scheme, _)| scheme.to_ascii_lowercase())
            .collect()
    }
}

/// Scan from `offset`, keep visible items, stop at `limit` of them — or after scanning a bounded
/// number of hidden ones, so a page stays cheap under a restrictive policy (a short page with a
/// cursor is a valid page).
/// Generic over what each upstream contributes, so every merged list (resources, templates,
/// tools, prompts) pages the same way.
fn page<P, T: Clone>(
    parts: &[(String, Arc<P>)],
    offset: usize,
    limit: usize,
    list: impl Fn(&P) -> &Vec<T>,
    visible: impl Fn(&T) -> bool,
) -> Page<T> {
    let max_scanned = limit.saturating_mul(64).max(4096);
    let mut items = Vec::with_capacity(limit.min(1024));
    let mut skip = offset;
    let mut position = offset;
    let mut scanned = 0;
    for (_, part) in parts {
        let entries = list(part);
        if skip >= entries.len() {
            skip -= entries.len();
            continue;
        }
        for entry in &entries[skip..] {
            if items.len() == limit || scanned == max_scanned {
                return Page { items, next: Some(position) };
            }
            scanned += 1;
            position += 1;
            if visible(entry) {
                items.push(entry.clone());
            }
        }
        skip = 0;
    }
    Page { items, next: None }
}

/// A stable digest of a sequence of strings (SHA-256, each length-prefixed, the first 8 bytes):
/// the same on every replica and every build, unlike a `Hasher`.
#[derive(Default)]
pub struct Fingerprint(sha2::Sha256);

impl Fingerprint {
    pub fn add(&mut self, part: &str) {
        use sha2::Digest;
        self.0.update((part.len() as u64).to_be_bytes());
        self.0.update(part.as_bytes());
    }

    pub fn finish(self) -> u64 {
        use sha2::Digest;
        u64::from_be_bytes(self.0.finalize()[..8].try_into().expect("8 bytes"))
    }
}

#[cfg(test)]
mod tests;
