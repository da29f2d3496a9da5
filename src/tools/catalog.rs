//! The offerings catalog: per upstream, its tools and prompts (every upstream page, names
//! already namespaced), and the merged, immutable snapshots pages are cut from — the same
//! pattern as [`crate::catalog`] (and its [`crate::catalog::page`]), kept apart so resources
//! and offerings change independently.
//!
//! Invariant: the generation grows with every change; a snapshot never changes once built.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::{Prompt, Tool};

use super::names::{Naming, Offering};
use crate::catalog::{Fingerprint, Page, page};

/// What one upstream offers, with namespaced names.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct UpstreamOfferings {
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
    /// Its names are presented as they are (`unprefixed = true`), not `<upstream>__<name>`.
    pub unprefixed: bool,
}

/// An immutable merged view: the upstreams in name order, each in its own order.
#[derive(Debug, Default)]
pub struct OfferingsSnapshot {
    pub generation: u64,
    parts: Vec<(String, Arc<UpstreamOfferings>)>,
    /// [`OfferingsSnapshot::fingerprint`], made on first use.
    fingerprint: OnceLock<u64>,
}

/// The live offerings catalog. A cheap `Clone` handle.
#[derive(Debug, Clone, Default)]
pub struct OfferingsCatalog {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    generation: u64,
    upstreams: BTreeMap<String, Arc<UpstreamOfferings>>,
    snapshot: Arc<OfferingsSnapshot>,
}

impl OfferingsCatalog {
    /// Replace what `upstream` offers (`None`: it left). Returns the snapshots before and
    /// after, or `None` when nothing changed.
    pub fn replace(
        &self,
        upstream: &str,
        offerings: Option<UpstreamOfferings>,
    ) -> Option<(Arc<OfferingsSnapshot>, Arc<OfferingsSnapshot>)> {
        let mut state = self.inner.lock().expect("offerings lock");
        if state.upstreams.get(upstream).map(|current| &**current) == offerings.as_ref() {
            return None;
        }
        match offerings {
            Some(offerings) => state.upstreams.insert(upstream.to_string(), Arc::new(offerings)),
            None => state.upstreams.remove(upstream),
        };
        state.generation += 1;
        let parts = state.upstreams.iter().map(|(name, part)| (name.clone(), part.clone())).collect();
        let next = Arc::new(OfferingsSnapshot { generation: state.generation, parts, fingerprint: OnceLock::new() });
        let before = std::mem::replace(&mut state.snapshot, next.clone());
        Some((before, next))
    }

    /// The current merged view.
    pub fn snapshot(&self) -> Arc<OfferingsSnapshot> {
        self.inner.lock().expect("offerings lock").snapshot.clone()
    }
}

impl OfferingsSnapshot {
    /// A digest of what positions entries in the merged lists (each upstream's name, whether
    /// it is unprefixed, its tools' and prompts' names, in order): equal on every replica that
    /// offers the same, whatever its generation.
    pub fn fingerprint(&self) -> u64 {
        *self.fingerprint.get_or_init(|| {
            let mut digest = Fingerprint::default();
            for (name, part) in &self.parts {
                digest.add(name);
                digest.add(if part.unprefixed { "\0unprefixed" } else { "\0prefixed" });
                part.tools.iter().for_each(|tool| digest.add(&tool.name));
                digest.add("\0prompts");
                part.prompts.iter().for_each(|prompt| digest.add(&prompt.name));
            }
            digest.finish()
        })
    }

    /// This view with `own` parts in place of (or besides) the upstreams' shared ones: what a
    /// caller whose upstream sessions list their own tools and prompts sees. Its generation is
    /// its own (a cursor of one view is no cursor of another).
    pub fn with_own(&self, own: Vec<(String, Arc<UpstreamOfferings>)>) -> OfferingsSnapshot {
        let mut parts: BTreeMap<String, Arc<UpstreamOfferings>> = self.parts.iter().cloned().collect();
        let mut digest = Fingerprint::default();
        digest.add(&self.generation.to_string());
        for (name, part) in own {
            digest.add(&name);
            part.tools.iter().for_each(|tool| digest.add(&tool.name));
            digest.add("\0prompts");
            part.prompts.iter().for_each(|prompt| digest.add(&prompt.name));
            parts.insert(name, part);
        }
        // The top bit set: never the generation of a shared view.
        let generation = digest.finish() | 1 << 63;
        OfferingsSnapshot { generation, parts: parts.into_iter().collect(), fingerprint: OnceLock::new() }
    }

    /// Counts per upstream: `(name, tools, prompts)`.
    pub fn counts(&self) -> Vec<(String, usize, usize)> {
        self.parts.iter().map(|(n, p)| (n.clone(), p.tools.len(), p.prompts.len())).collect()
    }

    /// How this snapshot's names are presented: the upstream whose names are un-prefixed, if
    /// one is up.
    pub fn naming(&self) -> Naming<'_> {
        let unprefixed = self.parts.iter().find(|(_, part)| part.unprefixed).map(|(name, _)| name.as_str());
        Naming { unprefixed }
    }

    /// The tool a host names (namespaced), if `upstream` offers it.
    pub fn tool(&self, upstream: &str, presented: &str) -> Option<&Tool> {
        self.part(upstream)?.tools.iter().find(|t| t.name == presented)
    }

    /// The prompt a host names (namespaced), if `upstream` offers it.
    pub fn prompt(&self, upstream: &str, presented: &str) -> Option<&Prompt> {
        self.part(upstream)?.prompts.iter().find(|p| p.name == presented)
    }

    /// Does `upstream` offer the tool or prompt a host names (namespaced)?
    pub fn offers(&self, offering: Offering, upstream: &str, presented: &str) -> bool {
        match offering {
            Offering::Tool => self.tool(upstream, presented).is_some(),
            Offering::Prompt => self.prompt(upstream, presented).is_some(),
        }
    }

    /// Up to `limit` visible tools from `offset` of the merged list.
    pub fn tools_page(&self, offset: usize, limit: usize, visible: &dyn Fn(&Tool) -> bool) -> Page<Tool> {
        page(&self.parts, offset, limit, |p| &p.tools, visible)
    }

    /// Up to `limit` visible prompts from `offset` of the merged list.
    pub fn prompts_page(&self, offset: usize, limit: usize, visible: &dyn Fn(&Prompt) -> bool) -> Page<Prompt> {
        page(&self.parts, offset, limit, |p| &p.prompts, visible)
    }

    /// Every tool and prompt, in list order.
    pub fn all(&self) -> impl Iterator<Item = (Option<&Tool>, Option<&Prompt>)> {
        self.parts.iter().flat_map(|(_, part)| {
            let tools = part.tools.iter().map(|t| (Some(t), None));
            tools.chain(part.prompts.iter().map(|p| (None, Some(p))))
        })
    }

    fn part(&self, upstream: &str) -> Option<&UpstreamOfferings> {
        let at = self.parts.binary_search_by(|(name, _)| name.as_str().cmp(upstream)).ok()?;
        Some(&self.parts[at].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offerings(upstream: &str, tools: usize) -> UpstreamOfferings {
        let tool = |i| Tool::new(format!("{upstream}__t{i}"), "a tool", Arc::new(Default::default()));
        UpstreamOfferings { tools: (0..tools).map(tool).collect(), ..Default::default() }
    }

    fn all_tools(snapshot: &OfferingsSnapshot, limit: usize) -> Vec<String> {
        let mut names = Vec::new();
        let mut offset = Some(0);
        while let Some(at) = offset {
            let page = snapshot.tools_page(at, limit, &|_| true);
            assert!(page.items.len() <= limit);
            names.extend(page.items.into_iter().map(|t| t.name.to_string()));
            offset = page.next;
        }
        names
    }

    #[test]
    fn pages_cross_upstreams_in_name_order() {
        let catalog = OfferingsCatalog::default();
        catalog.replace("b", Some(offerings("b", 2)));
        catalog.replace("a", Some(offerings("a", 3)));
        let names = all_tools(&catalog.snapshot(), 2);
        assert_eq!(names, ["a__t0", "a__t1", "a__t2", "b__t0", "b__t1"]);
        assert!(catalog.snapshot().tool("b", "b__t1").is_some());
        assert!(catalog.snapshot().tool("a", "b__t1").is_none());
    }

    #[test]
    fn a_view_with_own_parts_lists_them_in_place_of_the_shared_ones_under_its_own_generation() {
        let catalog = OfferingsCatalog::default();
        catalog.replace("a", Some(offerings("a", 1)));
        catalog.replace("b", Some(offerings("b", 1)));
        let shared = catalog.snapshot();
        let own = shared.with_own(vec![("a".into(), Arc::new(offerings("a", 3)))]);
        assert_eq!(all_tools(&own, 10), ["a__t0", "a__t1", "a__t2", "b__t0"]);
        assert_eq!(all_tools(&shared, 10), ["a__t0", "b__t0"], "the shared view is unchanged");
        assert_ne!(own.generation, shared.generation);
        assert_ne!(own.fingerprint(), shared.fingerprint());
        let other = shared.with_own(vec![("a".into(), Arc::new(offerings("a", 2)))]);
        assert_ne!(own.generation, other.generation, "each own view has its own");
        assert!(own.tool("a", "a__t2").is_some() && shared.tool("a", "a__t2").is_none());
    }

    #[test]
    fn an_unchanged_upstream_makes_no_generation_and_removal_does() {
        let catalog = OfferingsCatalog::default();
        let (_, first) = catalog.replace("a", Some(offerings("a", 1))).expect("a change");
        assert!(catalog.replace("a", Some(offerings("a", 1))).is_none());
        let (before, after) = catalog.replace("a", None).expect("a change");
        assert_eq!(before.generation, first.generation);
        assert_eq!(after.generation, first.generation + 1);
        assert!(after.counts().is_empty());
        assert!(catalog.replace("a", None).is_none());
    }
}
