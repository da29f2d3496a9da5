//! How one string an upstream sent is judged for one caller: a resource URI of that upstream
//! (namespaced), one the caller may not read (denied), a raw URI of another upstream, or
//! anything else (left alone).
//!
//! The judgement is by rule — the caller's policy over the string, the schemes each upstream
//! serves (its listed resources and templates) — never by looking up whether the resource
//! exists, so what a host sees does not depend on that.
//!
//! - A whole URI (a scheme, something after it, no whitespace or control characters) in a
//!   scheme the upstream serves is namespaced (`docs+py://…`); denied when the caller may not
//!   read the namespaced form.
//! - A URI already in the proxy's form (`<name>+<uri>`) is denied when the policy denies it,
//!   whichever upstream it names and whether that upstream is up or not.
//! - A URI in a scheme only other upstreams serve is denied when the caller may not read it as
//!   theirs (`<other>+<uri>`), otherwise it is [`Link::Elsewhere`].
//! - Everything else (`https://…` pages, `data:` icons, prose) is [`Link::Plain`]; prose
//!   ([`Links::names_denied`]) counts as naming a denied resource when one of its words does.

use std::cell::OnceCell;
use std::collections::BTreeSet;

use crate::catalog::Snapshot;
use crate::namespace;
use crate::policy::PolicySet;

use super::visible;

/// What a string is, for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Link {
    /// Not a resource URI of any upstream: passed as it is.
    Plain,
    /// A resource URI of the upstream, in the proxy's form.
    Namespaced(String),
    /// A raw URI in a scheme only other upstreams serve, which the caller may read.
    Elsewhere,
    /// Names a resource the caller may not read.
    Denied,
}

/// The judge for strings from `upstream`, for `principal`.
pub(crate) struct Links<'a> {
    upstream: &'a str,
    policy: &'a PolicySet,
    principal: &'a str,
    resources: &'a Snapshot,
    /// The schemes `upstream` serves (computed on first need, as `others`: most results and
    /// lists hold no string to judge).
    own: OnceCell<BTreeSet<String>>,
    /// The schemes every other upstream serves (computed on first need).
    others: OnceCell<Vec<(String, BTreeSet<String>)>>,
}

impl<'a> Links<'a> {
    pub(crate) fn new(upstream: &'a str, resources: &'a Snapshot, policy: &'a PolicySet, principal: &'a str) -> Self {
        Self { upstream, policy, principal, resources, own: OnceCell::new(), others: OnceCell::new() }
    }

    pub(crate) fn upstream(&self) -> &str {
        self.upstream
    }

    pub(crate) fn policy(&self) -> &PolicySet {
        self.policy
    }

    pub(crate) fn principal(&self) -> &str {
        self.principal
    }

    /// May the caller read this namespaced URI?
    pub(crate) fn visible(&self, namespaced: &str) -> bool {
        visible(self.policy, self.principal, namespaced)
    }

    /// Judge a whole string.
    pub(crate) fn judge(&self, text: &str) -> Link {
        let Some(scheme) = namespace::whole_uri_scheme(text) else { return Link::Plain };
        if self.own.get_or_init(|| self.resources.schemes_of(self.upstream)).contains(&scheme) {
            return match namespace::namespaced(self.upstream, text) {
                Some(namespaced) if self.visible(&namespaced) => Link::Namespaced(namespaced),
                Some(_) => Link::Denied,
                None => Link::Plain,
            };
        }
        if namespace::split(text).is_some() {
            return if self.visible(text) { Link::Plain } else { Link::Denied };
        }
        let mut served_elsewhere = false;
        for (other, schemes) in self.others() {
            if schemes.contains(&scheme) {
                served_elsewhere = true;
                if !namespace::namespaced(other, text).is_some_and(|namespaced| self.visible(&namespaced)) {
                    return Link::Denied;
                }
            }
        }
        if served_elsewhere { Link::Elsewhere } else { Link::Plain }
    }

    /// Does `text` (a whole URI, or prose) name a resource the caller may not read?
    pub(crate) fn names_denied(&self, text: &str) -> bool {
        self.denied_words(text).next().is_some()
    }

    /// The words of `text` that name a resource the caller may not read.
    pub(crate) fn denied_words<'t>(&'t self, text: &'t str) -> impl Iterator<Item = &'t str> + 't {
        words(text).filter(|word| self.judge(word) == Link::Denied)
    }

    fn others(&self) -> &[(String, BTreeSet<String>)] {
        self.others.get_or_init(|| {
            let names = self.resources.counts().into_iter().map(|(name, _, _)| name);
            let others = names.filter(|name| name != self.upstream);
            others.map(|name| (self.resources.schemes_of(&name), name)).map(|(schemes, name)| (name, schemes)).collect()
        })
    }
}

/// The URI-like words of prose: split at whitespace and at characters a URI never holds raw
/// (quotes, brackets, `<>`, `|`, `` ` ``, `,`, `;`), trailing sentence punctuation trimmed.
fn words(text: &str) -> impl Iterator<Item = &str> {
    let separator = |c: char| c.is_whitespace() || c.is_control() || "\"'<>()[]{}|`,;".contains(c);
    text.split(separator)
        .map(|word| word.trim_end_matches(['.', ':', '!', '?']))
        .filter(|word| word.contains(':') && !word.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Catalog, UpstreamCatalog};
    use rmcp::model::Resource;

    fn resources() -> Catalog {
        let catalog = Catalog::new();
        let docs = UpstreamCatalog { resources: vec![Resource::new("docs+py://doc/public/1", "p")], templates: vec![] };
        catalog.set_upstream("docs", docs);
        let fx = UpstreamCatalog { resources: vec![Resource::new("fx+fx://fx/item/1", "i")], templates: vec![] };
        catalog.set_upstream("fx", fx);
        catalog
    }

    fn policy() -> PolicySet {
        let text =
            "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"docs+py://doc/secret/**\", \"fx+fx://fx/hidden/**\"]\n";
        PolicySet::from_texts(&[("p.toml", text)]).expect("valid policy")
    }

    fn check(text: &str, expected: Link) {
        let (catalog, policy) = (resources(), policy());
        let snapshot = catalog.snapshot();
        let links = Links::new("docs", &snapshot, &policy, "alice");
        assert_eq!(links.judge(text), expected, "{text}");
    }

    #[test]
    fn strings_are_judged_by_rule() {
        check("py://doc/public/1", Link::Namespaced("docs+py://doc/public/1".into()));
        check("py://doc/public/404", Link::Namespaced("docs+py://doc/public/404".into()));
        check("PY://doc/secret/1", Link::Denied);
        check("py://doc/secret/never-listed", Link::Denied);
        check("docs+py://doc/secret/1", Link::Denied);
        check("gone+x://anything", Link::Plain);
        check("fx://fx/hidden/1", Link::Denied);
        check("fx://fx/item/1", Link::Elsewhere);
        check("https://example.com/py://doc/secret/1", Link::Plain);
        check("py://doc/secret/1 is best", Link::Plain);
        check("py:", Link::Plain);
        check("plain words", Link::Plain);
    }

    #[test]
    fn prose_names_a_denied_resource_when_one_of_its_words_does() {
        let (catalog, policy) = (resources(), policy());
        let snapshot = catalog.snapshot();
        let links = Links::new("docs", &snapshot, &policy, "alice");
        assert!(links.names_denied("see (py://doc/secret/1), then stop."));
        assert!(links.names_denied("\"fx://fx/hidden/2\""));
        assert!(!links.names_denied("py://doc/public/1 is best; https://example.com/a:b too"));
        let denied: Vec<&str> = links.denied_words("a py://doc/secret/1. b docs+py://doc/secret/2").collect();
        assert_eq!(denied, ["py://doc/secret/1", "docs+py://doc/secret/2"]);
    }
}
