//! What one upstream offers besides resources, as the catalog lists it: its tools and prompts
//! (every upstream page, names already namespaced), a [`Part`] of the one
//! [`crate::catalog::Catalog`], and what the tools service asks of a snapshot of them.

use rmcp::model::{Icon, MetaObject, Prompt, Tool};

use super::names::{Naming, Offering};
use crate::catalog::{Fingerprint, Part, Snapshot};
use crate::cursor::ListKind;
use crate::fanout::Listing;

/// What one upstream offers, with namespaced names.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct UpstreamOfferings {
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
    /// Its names are presented as they are (`unprefixed = true`), not `<upstream>__<name>`.
    pub unprefixed: bool,
}

/// A tool or a prompt as the catalog lists it: what the one list path (namespacing, pages,
/// views) asks of either.
pub trait Listed: Clone + serde::Serialize + Send + Sync + 'static {
    const OFFERING: Offering;
    const LIST: ListKind;
    const LISTING: Listing;

    /// This kind's entries of an upstream's part.
    fn entries(part: &UpstreamOfferings) -> &Vec<Self>;
    fn name(&self) -> &str;
    fn rename(&mut self, name: String);
    fn meta(&mut self) -> &mut Option<MetaObject>;
    fn icons(&mut self) -> &mut Option<Vec<Icon>>;
}

/// [`Listed`] for a tool or a prompt, which differ only in these.
macro_rules! listed {
    ($entry:ident, $list:ident, $entries:ident) => {
        impl Listed for $entry {
            const OFFERING: Offering = Offering::$entry;
            const LIST: ListKind = ListKind::$list;
            const LISTING: Listing = Listing::$list;
            fn entries(part: &UpstreamOfferings) -> &Vec<$entry> {
                &part.$entries
            }
            fn name(&self) -> &str {
                &self.name
            }
            fn rename(&mut self, name: String) {
                self.name = name.into();
            }
            fn meta(&mut self) -> &mut Option<MetaObject> {
                &mut self.meta
            }
            fn icons(&mut self) -> &mut Option<Vec<Icon>> {
                &mut self.icons
            }
        }
    };
}

listed!(Tool, Tools, tools);
listed!(Prompt, Prompts, prompts);

impl Part for UpstreamOfferings {
    fn fingerprint(&self, digest: &mut Fingerprint) {
        digest.add(if self.unprefixed { "\0unprefixed" } else { "\0prefixed" });
        self.tools.iter().for_each(|tool| digest.add(&tool.name));
        digest.add("\0prompts");
        self.prompts.iter().for_each(|prompt| digest.add(&prompt.name));
    }

    fn counts(&self) -> (usize, usize) {
        (self.tools.len(), self.prompts.len())
    }
}

impl Snapshot<UpstreamOfferings> {
    /// How this snapshot's names are presented: the upstream whose names are un-prefixed, if
    /// one is up.
    pub fn naming(&self) -> Naming<'_> {
        Naming { unprefixed: self.parts().find(|(_, part)| part.unprefixed).map(|(name, _)| name) }
    }

    /// The tool a host names (namespaced), if `upstream` offers it.
    pub fn tool(&self, upstream: &str, presented: &str) -> Option<&Tool> {
        self.part(upstream)?.tools.iter().find(|t| t.name == presented)
    }

    /// Does `upstream` offer the tool or prompt a host names (namespaced)?
    pub fn offers(&self, offering: Offering, upstream: &str, presented: &str) -> bool {
        let Some(part) = self.part(upstream) else { return false };
        match offering {
            Offering::Tool => part.tools.iter().any(|tool| tool.name == presented),
            Offering::Prompt => part.prompts.iter().any(|prompt| prompt.name == presented),
        }
    }

    /// Every entry of one kind, in list order.
    pub fn all<T: Listed>(&self) -> impl Iterator<Item = &T> {
        self.parts().flat_map(|(_, part)| T::entries(part))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::catalog::Catalog;
    use crate::cursor::{CursorKey, ListKind};

    fn offerings(upstream: &str, tools: usize) -> UpstreamOfferings {
        let tool = |i| Tool::new(format!("{upstream}__t{i}"), "a tool", Arc::new(Default::default()));
        UpstreamOfferings { tools: (0..tools).map(tool).collect(), ..Default::default() }
    }

    fn all_tools(snapshot: &Snapshot<UpstreamOfferings>, limit: usize) -> Vec<String> {
        let key = CursorKey::random();
        let mut names = Vec::new();
        let mut cursor = None;
        loop {
            let list = ("alice", ListKind::Tools);
            let page = snapshot.page_for(&key, list, (cursor.as_deref(), limit), |p| &p.tools, |_| true).unwrap();
            assert!(page.items.len() <= limit);
            names.extend(page.items.into_iter().map(|t| t.name.to_string()));
            cursor = page.next_cursor;
            if cursor.is_none() {
                return names;
            }
        }
    }

    #[test]
    fn pages_cross_upstreams_in_name_order() {
        let catalog = Catalog::<UpstreamOfferings>::default();
        catalog.replace("b", Some(offerings("b", 2)));
        catalog.replace("a", Some(offerings("a", 3)));
        let names = all_tools(&catalog.snapshot(), 2);
        assert_eq!(names, ["a__t0", "a__t1", "a__t2", "b__t0", "b__t1"]);
        assert!(catalog.snapshot().tool("b", "b__t1").is_some());
        assert!(catalog.snapshot().tool("a", "b__t1").is_none());
    }

    #[test]
    fn a_view_with_own_parts_lists_them_in_place_of_the_shared_ones_under_its_own_generation() {
        let catalog = Catalog::<UpstreamOfferings>::default();
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
        let catalog = Catalog::<UpstreamOfferings>::default();
        let first = catalog.replace("a", Some(offerings("a", 1))).expect("a change");
        assert!(catalog.replace("a", Some(offerings("a", 1))).is_none());
        let after = catalog.replace("a", None).expect("a change");
        assert_eq!(after.generation, first.generation + 1);
        assert!(after.counts().is_empty());
        assert!(catalog.replace("a", None).is_none());
    }
}
