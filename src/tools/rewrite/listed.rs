//! Icons of listed resources and templates, for one caller over one page of a merged list: each
//! `src` judged by the rule of [`super::links`] for the upstream that listed the entry (a `src`
//! in a scheme it serves was namespaced when it was listed; one the caller may not read is
//! dropped; `https:` and `data:` ones are kept as sent).
//!
//! One judge per upstream met on the page (a merged list holds each upstream's entries
//! together), so the schemes of the others are gathered at most once per upstream; an entry
//! without icons costs nothing.

use rmcp::model::Icon;

use super::{Links, icons_for};
use crate::catalog::Snapshot;
use crate::namespace;
use crate::policy::PolicySet;

/// The judges of one page's icons, for one caller.
pub(crate) struct ListedIcons<'a> {
    resources: &'a Snapshot,
    policy: &'a PolicySet,
    principal: &'a str,
    judges: Vec<Links<'a>>,
}

impl<'a> ListedIcons<'a> {
    /// For `principal` under `policy` (its request's one snapshot), over the catalog snapshot
    /// the page was cut from.
    pub(crate) fn new(resources: &'a Snapshot, policy: &'a PolicySet, principal: &'a str) -> Self {
        Self { resources, policy, principal, judges: Vec::new() }
    }

    /// The icons of the entry listed as `listed` (its namespaced URI or template) as the caller
    /// may see them: `None` when none is left, or when the entry is not of an upstream in the
    /// snapshot (never the case for an entry of this page).
    pub(crate) fn icons(&mut self, listed: &str, icons: Option<Vec<Icon>>) -> Option<Vec<Icon>> {
        let icons = icons?;
        if icons.is_empty() {
            return Some(icons);
        }
        let (upstream, _) = namespace::split(listed)?;
        let (upstream, _) = self.resources.parts().find(|(name, _)| *name == upstream)?;
        let at = match self.judges.iter().position(|links| links.upstream() == upstream) {
            Some(at) => at,
            None => {
                self.judges.push(Links::new(upstream, self.resources, self.policy, self.principal));
                self.judges.len() - 1
            }
        };
        icons_for(&self.judges[at], Some(icons))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Catalog, UpstreamCatalog};
    use rmcp::model::{Resource, ResourceTemplate};

    fn srcs(icons: Option<Vec<Icon>>) -> Option<Vec<String>> {
        icons.map(|icons| icons.into_iter().map(|icon| icon.src).collect())
    }

    #[test]
    fn listed_icons_are_judged_for_the_upstream_that_listed_the_entry() {
        let catalog = Catalog::new();
        let docs = UpstreamCatalog {
            resources: vec![Resource::new("docs+py://doc/1", "d")],
            templates: vec![ResourceTemplate::new("docs+py://doc/{id}", "t")],
        };
        catalog.set_upstream("docs", docs);
        let fx = UpstreamCatalog { resources: vec![Resource::new("fx+fx://fx/1", "f")], templates: vec![] };
        catalog.set_upstream("fx", fx);
        let snapshot = catalog.snapshot();
        let text =
            "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"docs+py://doc/secret/**\", \"fx+fx://fx/hidden/**\"]\n";
        let policy = PolicySet::from_texts(&[("p.toml", text)]).expect("valid policy");
        let mut listed = ListedIcons::new(&snapshot, &policy, "alice");
        let icons = |srcs: &[&str]| Some(srcs.iter().map(|src| Icon::new(*src)).collect::<Vec<_>>());
        let sent = icons(&[
            "docs+py://icons/a.png",
            "docs+py://doc/secret/b.png",
            "py://doc/secret/raw.png",
            "fx://fx/hidden/c.png",
            "fx://fx/d.png",
            "https://e.com/e.png",
        ]);
        let expected = ["docs+py://icons/a.png", "fx://fx/d.png", "https://e.com/e.png"].map(String::from).to_vec();
        assert_eq!(srcs(listed.icons("docs+py://doc/1", sent)), Some(expected));
        let template = listed.icons("docs+py://doc/{id}", icons(&["docs+py://doc/secret/t.png", "py://icons/t.png"]));
        assert_eq!(srcs(template), Some(vec!["docs+py://icons/t.png".to_string()]));
        assert_eq!(listed.icons("docs+py://doc/1", icons(&["docs+py://doc/secret/only.png"])), None);
        assert_eq!(listed.icons("docs+py://doc/1", None), None);
        assert_eq!(listed.icons("gone+x://1", icons(&["https://e.com/x.png"])), None);
        assert_eq!(listed.judges.len(), 1, "one judge per upstream met");
    }
}
