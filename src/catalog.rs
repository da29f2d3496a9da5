//! The catalog: per upstream, its full list of resources and templates (every upstream page,
//! already namespaced), and the merged view downstream pages are cut from.
//!
//! A change to one upstream builds a new immutable [`Snapshot`] that shares every other
//! upstream's lists (`Arc`), so a change costs O(upstreams), not O(resources), and a page costs
//! O(page) — never a re-merge of everything.
//!
//! Invariant: the generation grows with every change; a snapshot never changes once built, so
//! an offset is meaningful only together with the generation it was taken from.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::{Resource, ResourceTemplate};

/// What one upstream contributes, with namespaced URIs and templates.
#[derive(Debug, Default, PartialEq)]
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

/// One page of a merged list, and where the next starts (if anything is left).
#[derive(Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<usize>,
}

/// An immutable merged view: the upstreams in name order, each in its own order.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub generation: u64,
    parts: Vec<(String, Arc<UpstreamCatalog>)>,
    /// [`Snapshot::fingerprint`], made on first use.
    fingerprint: OnceLock<u64>,
}

/// The live catalog. A cheap `Clone` handle.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    generation: u64,
    upstreams: BTreeMap<String, Arc<UpstreamCatalog>>,
    snapshot: Arc<Snapshot>,
}

impl Catalog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replace what `upstream` contributes. Returns the new generation.
    pub fn set_upstream(&self, upstream: &str, entries: UpstreamCatalog) -> u64 {
        self.change(|upstreams| {
            upstreams.insert(upstream.to_string(), Arc::new(entries));
        })
    }

    /// Replace what `upstream` contributes when it differs from what is there; true when it did
    /// (a new generation).
    pub fn replace_if_changed(&self, upstream: &str, entries: UpstreamCatalog) -> bool {
        let current = self.inner.lock().expect("catalog lock").upstreams.get(upstream).cloned();
        if current.is_some_and(|current| *current == entries) {
            return false;
        }
        self.set_upstream(upstream, entries);
        true
    }

    /// Drop what `upstream` contributes (it left or went down). Returns the new generation.
    pub fn remove_upstream(&self, upstream: &str) -> u64 {
        self.change(|upstreams| {
            upstreams.remove(upstream);
        })
    }

    /// The current merged view.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.lock().expect("catalog lock").snapshot.clone()
    }

    fn change(&self, edit: impl FnOnce(&mut BTreeMap<String, Arc<UpstreamCatalog>>)) -> u64 {
        let mut state = self.inner.lock().expect("catalog lock");
        edit(&mut state.upstreams);
        state.generation += 1;
        let parts = state.upstreams.iter().map(|(name, part)| (name.clone(), part.clone())).collect();
        state.snapshot = Arc::new(Snapshot { generation: state.generation, parts, fingerprint: OnceLock::new() });
        state.generation
    }
}

impl Snapshot {
    /// A digest of what positions entries in the merged lists (each upstream's name, its
    /// resources' URIs and its templates' URI templates, in order): equal on every replica
    /// that lists the same, whatever its generation. Computed once per snapshot.
    pub fn fingerprint(&self) -> u64 {
        *self.fingerprint.get_or_init(|| {
            let mut digest = Fingerprint::default();
            for (name, part) in &self.parts {
                digest.add(name);
                part.resources.iter().for_each(|resource| digest.add(&resource.uri));
                digest.add("\0templates");
                part.templates.iter().for_each(|template| digest.add(&template.uri_template));
            }
            digest.finish()
        })
    }

    pub fn resource_count(&self) -> usize {
        self.parts.iter().map(|(_, p)| p.resources.len()).sum()
    }

    pub fn template_count(&self) -> usize {
        self.parts.iter().map(|(_, p)| p.templates.len()).sum()
    }

    /// Counts per upstream: `(name, resources, templates)`.
    pub fn counts(&self) -> Vec<(String, usize, usize)> {
        self.parts.iter().map(|(n, p)| (n.clone(), p.resources.len(), p.templates.len())).collect()
    }

    /// Does any resource satisfy `test`?
    pub fn any_resource(&self, test: impl Fn(&Resource) -> bool) -> bool {
        self.parts.iter().any(|(_, p)| p.resources.iter().any(&test))
    }

    /// Does any template satisfy `test`?
    pub fn any_template(&self, test: impl Fn(&ResourceTemplate) -> bool) -> bool {
        self.parts.iter().any(|(_, p)| p.templates.iter().any(&test))
    }

    /// Up to `limit` visible resources from `offset` of the merged list.
    pub fn resources_page(&self, offset: usize, limit: usize, visible: &dyn Fn(&str) -> bool) -> Page<Resource> {
        page(&self.parts, offset, limit, |p| &p.resources, |r| visible(&r.uri))
    }

    /// Up to `limit` visible templates from `offset` of the merged list.
    pub fn templates_page(
        &self,
        offset: usize,
        limit: usize,
        visible: &dyn Fn(&ResourceTemplate) -> bool,
    ) -> Page<ResourceTemplate> {
        page(&self.parts, offset, limit, |p| &p.templates, visible)
    }

    /// The snapshot's own copy of an upstream's name (so a borrow of it lives as long as the
    /// snapshot), or `None` when the snapshot holds nothing of it.
    pub fn upstream_name(&self, upstream: &str) -> Option<&str> {
        self.parts.iter().find(|(name, _)| name == upstream).map(|(name, _)| name.as_str())
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
pub(crate) fn page<P, T: Clone>(
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
mod tests {
    use super::*;

    fn entries(prefix: &str, n: usize) -> UpstreamCatalog {
        UpstreamCatalog {
            resources: (0..n).map(|i| Resource::new(format!("{prefix}+x://r/{i}"), format!("r{i}"))).collect(),
            templates: vec![ResourceTemplate::new(format!("{prefix}+x://r/{{id}}"), "t")],
        }
    }

    fn all_pages(snapshot: &Snapshot, limit: usize, visible: &dyn Fn(&str) -> bool) -> Vec<String> {
        let mut uris = Vec::new();
        let mut offset = Some(0);
        while let Some(at) = offset {
            let page = snapshot.resources_page(at, limit, visible);
            assert!(page.items.len() <= limit);
            uris.extend(page.items.into_iter().map(|r| r.uri));
            offset = page.next;
        }
        uris
    }

    #[test]
    fn schemes_of_an_upstream_are_those_of_its_own_resources_and_templates() {
        let catalog = Catalog::new();
        let mut a = entries("a", 1);
        a.templates.push(ResourceTemplate::new("a+Demo://t/{id}", "t2"));
        catalog.set_upstream("a", a);
        catalog.set_upstream(
            "b",
            UpstreamCatalog { resources: vec![Resource::new("b+file:///x", "x")], templates: vec![] },
        );
        let snapshot = catalog.snapshot();
        assert_eq!(snapshot.schemes_of("a").into_iter().collect::<Vec<_>>(), ["demo", "x"]);
        assert_eq!(snapshot.schemes_of("b").into_iter().collect::<Vec<_>>(), ["file"]);
        assert!(snapshot.schemes_of("c").is_empty());
    }

    #[test]
    fn pages_walk_the_merged_list_in_upstream_name_order() {
        let catalog = Catalog::new();
        catalog.set_upstream("b", entries("b", 3));
        catalog.set_upstream("a", entries("a", 4));
        let snapshot = catalog.snapshot();
        assert_eq!(snapshot.generation, 2);
        let uris = all_pages(&snapshot, 3, &|_| true);
        assert_eq!(uris.len(), 7);
        assert!(uris[..4].iter().all(|u| u.starts_with("a+")));
        assert!(uris[4..].iter().all(|u| u.starts_with("b+")));
        assert_eq!(snapshot.template_count(), 2);
    }

    #[test]
    fn duplicates_are_dropped_and_the_first_kept() {
        let mut part = entries("a", 3);
        part.resources.push(Resource::new("a+x://r/1", "second"));
        part.templates.push(ResourceTemplate::new("a+x://r/{id}", "second"));
        assert_eq!(part.dedupe(), 2);
        let names: Vec<&str> = part.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["r0", "r1", "r2"]);
        assert_eq!(part.templates.len(), 1);
        assert_eq!(part.templates[0].name, "t");
    }

    #[test]
    fn an_exact_fit_ends_without_an_empty_page() {
        let catalog = Catalog::new();
        catalog.set_upstream("a", entries("a", 4));
        let page = catalog.snapshot().resources_page(0, 4, &|_| true);
        assert_eq!(page.items.len(), 4);
        assert_eq!(page.next, None);
    }

    #[test]
    fn hidden_items_are_skipped_not_counted() {
        let catalog = Catalog::new();
        catalog.set_upstream("a", entries("a", 10));
        let even = |uri: &str| uri.rsplit('/').next().unwrap().parse::<u32>().unwrap() % 2 == 0;
        let uris = all_pages(&catalog.snapshot(), 2, &even);
        assert_eq!(uris, ["a+x://r/0", "a+x://r/2", "a+x://r/4", "a+x://r/6", "a+x://r/8"]);
    }

    #[test]
    fn snapshots_are_immutable_and_removal_bumps_the_generation() {
        let catalog = Catalog::new();
        catalog.set_upstream("a", entries("a", 2));
        let before = catalog.snapshot();
        let generation = catalog.remove_upstream("a");
        assert_eq!(before.resource_count(), 2);
        assert_eq!(catalog.snapshot().resource_count(), 0);
        assert_eq!(generation, before.generation + 1);
    }
}
