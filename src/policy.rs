//! Access policies: `policies/*.toml` → per-principal allow/deny globs over namespaced,
//! normalised URIs, and the decisions made with them. Loading reads files; every decision
//! after that is pure and synchronous.
//!
//! A policy file:
//! ```toml
//! principals = ["ci-bot", "group:eng"]   # "*" = anyone no file names; "group:<g>" = members of g
//! allow = ["docs+**"]
//! deny  = ["*+file:///**/.env"]
//! ```
//! Only `*.toml` files in the directory are read (so `x.toml.example` is ignored), in name
//! order. A principal's rules are the union of the files naming it, or, if no file names it,
//! of the `*` files — a named principal does **not** inherit the `*` rules. **Deny wins**;
//! nothing allowed → denied.
//!
//! Groups (from a JWT claim, see [`crate::auth`]; `policy explain --group`): decisions are made
//! for an [`identity`] — a principal and its groups. Its rules are the union of the files
//! naming the principal **and** of the files naming any of its groups (`group:<g>`); deny in any
//! of them wins. The `*` files apply only when neither the principal nor any of its groups is
//! named by some file: membership of a named group is "being named".
//!
//! Globs (globset, `literal_separator`): `*` and `?` stay within a `/`-separated segment;
//! `**` matches anything, `/` included, **wherever it appears** — globset alone treats a `**`
//! that is not a whole path component (`docs+**`, `a**b`) as `*`, so such a pattern is
//! compiled as the union of its variants with that `**` read as `*` and as `*/**/*`, which
//! together match exactly "any string". `{a,b}` and `[abc]` work as in globset.
//!
//! Matching is done on the URI as [`crate::uri::normalize`] leaves it (lower-case scheme and
//! host, decoded unreserved characters, no dot segments, no `//`). Two deliberate
//! asymmetries close the remaining gaps, both in the deny direction:
//! - **deny globs match case-insensitively**, allow globs case-sensitively. URI paths keep
//!   their case (a case-sensitive server must get what was asked), but an upstream on a
//!   case-insensitive file system serves `Secrets/` for `secrets/`; denying both is the only
//!   safe reading. Over-denying `SECRETS/` on a case-sensitive server is the accepted cost.
//! - **deny globs also see the URI without its query, cut at an encoded `?`/`#`, and those
//!   with and without a trailing `/`**, so `…/.env?x=1`, `…/.env%23x` and `…/.env/` are denied
//!   by `**/.env`, and `…/secrets` (the folder itself, whose listing names what is inside) by
//!   `**/secrets/**`; and, when the URI names a port, **the same without the port**, so a
//!   deny on `web+web://secret.corp/**` also covers `web+web://secret.corp:80/…` (an upstream
//!   may resolve a custom scheme by its host alone; its default port is unknowable).
//!
//! Query and fragment, allow and deny alike: the fragment never reaches a decision
//! (normalisation drops it: RFC 3986 never sends it to a server). The query is sent, and an
//! upstream may act on it or ignore it, so both readings are judged: a URI with a query is
//! denied when a deny glob matches it with **or** without the query, and allowed only when
//! allow globs match it with **and** without the query. `*.md` therefore allows neither
//! `secret.txt?x=.md` (without the query it is `secret.txt`) nor `a.md?v=1` (with it, it does
//! not end in `.md`); write `{*.md,*.md[?]*}` to allow queries on `.md` URIs.
//!
//! Templates: [`PolicySet::template_visible`] lists a template when some URI it can produce
//! may be allowed. Each `{…}` expression is widened to "any string", giving a set that
//! contains every expansion; the template is listed when that set meets an allow glob outside
//! every deny glob (decided exactly on DFAs of the globs). The error is one-sided on purpose:
//! a template can be listed although all its real expansions are denied (reads, subscriptions
//! and notifications are still checked per URI, so nothing is served), but a template one of
//! whose expansions is allowed is never hidden — hiding would make a resource the client may
//! read undiscoverable. What leaks in the listed-but-denied case is the template's shape,
//! never a resource.
//!
//! Invariant: a [`PolicySet`] that exists compiled every glob of every file; decisions cannot
//! fail.

mod identity;
mod load;
mod memo;
mod rules;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

pub use self::identity::{
    GROUP_PREFIX, JWT_MARK, identity, is_valid_group, jwt_identity, split_identity, without_groups,
};
use self::load::{PolicyFile, parse_file, read_dir};
use self::memo::Memo;
pub use self::memo::{Judged, Judgement};
use self::rules::{Rule, Rules};
use crate::problem::Problem;
use crate::uri::{self, UriError};

/// The compiled policies; a cheap `Clone` handle.
#[derive(Clone)]
pub struct PolicySet {
    inner: Arc<Inner>,
    /// The judgements of this set (and of no other): see [`PolicySet::judge`].
    memo: Arc<Memo>,
}

/// The outcome for one (principal, URI), and what decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The policy file (name within the policies directory) whose rule decided; `None` when
    /// nothing matched (default deny) or when no policies are configured (allow all).
    pub file: Option<String>,
    /// The glob, as written in the file, that decided.
    pub pattern: Option<String>,
}

enum Inner {
    AllowAll,
    Files {
        files: Vec<String>,
        named: BTreeMap<String, RuleSet>,
        /// By group name (without the `group:` prefix).
        groups: BTreeMap<String, RuleSet>,
        fallback: Box<RuleSet>,
    },
}

/// The rules of one principal (or of the `*` fallback).
struct RuleSet {
    allow: Rules,
    deny: Rules,
}

impl PolicySet {
    /// Everything is allowed: for configurations without a policies directory.
    pub fn allow_all() -> PolicySet {
        PolicySet::of(Inner::AllowAll)
    }

    /// Read and compile every `*.toml` in `dir`; every problem of every file at once.
    pub fn load(dir: &Path) -> Result<PolicySet, Vec<Problem>> {
        let mut problems = Vec::new();
        let files = read_dir(dir, &mut problems);
        let parsed: Vec<PolicyFile> =
            files.iter().filter_map(|(name, text)| parse_file(dir, name, text, &mut problems)).collect();
        if problems.is_empty() { PolicySet::from_files(parsed) } else { Err(problems) }
    }

    /// Compile policy files given as `(file name, TOML text)`.
    #[cfg(test)]
    pub fn from_texts(files: &[(&str, &str)]) -> Result<PolicySet, Vec<Problem>> {
        let mut problems = Vec::new();
        let parsed: Vec<PolicyFile> =
            files.iter().filter_map(|(name, text)| parse_file(Path::new(""), name, text, &mut problems)).collect();
        if problems.is_empty() { PolicySet::from_files(parsed) } else { Err(problems) }
    }

    /// May `principal` (an [`identity`]: a name, maybe with groups) see `uri`? `uri` must be
    /// namespaced and already normalised.
    pub fn decide(&self, principal: &str, uri: &str) -> Decision {
        let Some(sets) = self.rules_of(principal) else {
            return Decision { allowed: true, file: None, pattern: None };
        };
        let views = deny_views(uri);
        for rules in &sets {
            let denied = views.iter().filter_map(|view| rules.deny.first_match(view)).min_by_key(|(i, _)| *i);
            if let Some((_, rule)) = denied {
                return rule.decision(false);
            }
        }
        // An allow must cover every reading an upstream may give the URI: with its query (a
        // server that acts on it) and without (one that ignores it), so that neither a query
        // (`secret.txt?x=.md`) nor a missing one widens an allow glob.
        let bare = uri::without_query(uri);
        let allowed = sets.iter().find_map(|rules| rules.allow.first_match(uri));
        let covered = bare == uri || sets.iter().any(|rules| rules.allow.first_match(bare).is_some());
        match allowed {
            Some((_, rule)) if covered => rule.decision(true),
            _ => Decision { allowed: false, file: None, pattern: None },
        }
    }

    /// [`crate::uri::normalize`] then [`PolicySet::decide`]: the normalised URI (the only form
    /// to forward) and the decision, or why the URI is refused.
    pub fn normalize_and_decide(&self, principal: &str, uri: &str) -> Result<(String, Decision), UriError> {
        let normal = uri::normalize(uri)?;
        let decision = self.decide(principal, &normal);
        Ok((normal, decision))
    }

    /// [`PolicySet::normalize_and_decide`], memoised in this set for short URIs: the same
    /// answer, from one lookup when this (principal, URI) was judged before. A reload makes a
    /// new set, with a memo of its own.
    pub fn judge(&self, principal: &str, uri: &str) -> Judgement {
        self.memo.get_or(principal, uri, || {
            let (normalized, decision) = self.normalize_and_decide(principal, uri)?;
            Ok(Arc::new(Judged { normalized, decision }))
        })
    }

    /// Shorthand: normalises and is allowed.
    #[cfg(test)]
    pub fn allows(&self, principal: &str, uri: &str) -> bool {
        self.normalize_and_decide(principal, uri).is_ok_and(|(_, decision)| decision.allowed)
    }

    /// Is a namespaced RFC 6570 template listed for `principal`? See the module doc. With
    /// groups, each rule set is judged with its own denies: that can only list more (the
    /// permitted side of the error), never hide a template whose expansion is allowed.
    pub fn template_visible(&self, principal: &str, template: &str) -> bool {
        match self.rules_of(principal) {
            None => true,
            Some(sets) => sets.iter().any(|rules| rules::template_may_be_allowed(template, &rules.allow, &rules.deny)),
        }
    }

    /// The policy files this set was compiled from (empty for allow-all).
    pub fn files(&self) -> &[String] {
        match &*self.inner {
            Inner::AllowAll => &[],
            Inner::Files { files, .. } => files,
        }
    }

    /// Is `other` this very set (the same load), not merely equal rules?
    pub fn same(&self, other: &PolicySet) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// True for [`PolicySet::allow_all`].
    pub fn is_allow_all(&self) -> bool {
        matches!(*self.inner, Inner::AllowAll)
    }

    /// The rule sets of an identity: its principal's and its groups' (those some file names),
    /// or the `*` set when none is named; `None` for allow-all.
    fn rules_of(&self, principal: &str) -> Option<Vec<&RuleSet>> {
        match &*self.inner {
            Inner::AllowAll => None,
            Inner::Files { named, groups, fallback, .. } => {
                let (name, member_of) = split_identity(principal);
                let mut sets: Vec<&RuleSet> = named.get(name).into_iter().collect();
                sets.extend(member_of.iter().filter_map(|group| groups.get(*group)));
                if sets.is_empty() {
                    sets.push(fallback);
                }
                Some(sets)
            }
        }
    }

    fn of(inner: Inner) -> PolicySet {
        PolicySet { inner: Arc::new(inner), memo: Arc::default() }
    }

    fn from_files(files: Vec<PolicyFile>) -> Result<PolicySet, Vec<Problem>> {
        let entries: BTreeSet<&str> =
            files.iter().flat_map(|f| f.principals.iter().map(String::as_str)).filter(|p| *p != "*").collect();
        let mut problems = Vec::new();
        let mut named = BTreeMap::new();
        let mut groups = BTreeMap::new();
        for entry in entries {
            let rules = match RuleSet::of(&files, entry) {
                Ok(rules) => rules,
                Err(message) => {
                    problems.push(Problem { at: format!("policies for `{entry}`"), message });
                    continue;
                }
            };
            match entry.strip_prefix(GROUP_PREFIX) {
                Some(group) => drop(groups.insert(group.to_string(), rules)),
                None => drop(named.insert(entry.to_string(), rules)),
            }
        }
        let fallback = RuleSet::of(&files, "*").map_err(|message| {
            problems.push(Problem { at: "policies for `*`".into(), message });
        });
        match fallback {
            Ok(fallback) if problems.is_empty() => {
                let files = files.iter().map(|f| f.name.clone()).collect();
                let fallback = Box::new(fallback);
                Ok(PolicySet::of(Inner::Files { files, named, groups, fallback }))
            }
            _ => Err(problems),
        }
    }
}

impl fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.inner {
            Inner::AllowAll => f.write_str("PolicySet::AllowAll"),
            Inner::Files { files, named, groups, .. } => f
                .debug_struct("PolicySet")
                .field("files", files)
                .field("principals", &named.keys().collect::<Vec<_>>())
                .field("groups", &groups.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

impl RuleSet {
    fn of(files: &[PolicyFile], principal: &str) -> Result<RuleSet, String> {
        let mine = || files.iter().filter(|f| f.principals.iter().any(|p| p == principal));
        let allow: Vec<Rule> = mine().flat_map(|f| f.allow.iter().cloned()).collect();
        let deny: Vec<Rule> = mine().flat_map(|f| f.deny.iter().cloned()).collect();
        Ok(RuleSet { allow: Rules::new(allow)?, deny: Rules::new(deny)? })
    }
}

/// What deny globs are matched against: the URI; without its query (and fragment); that cut
/// at an encoded `?` or `#` (`%3F`, `%23`: an upstream that decodes a URI before parsing it
/// reads a query there); and each of those with and without a trailing `/` (servers often
/// treat `dir` and `dir/` as one resource). When the authority has a port, all of that again
/// without the port (a deny on a host covers every port of it).
fn deny_views(uri: &str) -> Vec<String> {
    let mut views = spelling_views(uri);
    if let Some(portless) = uri::without_port(uri) {
        views.extend(spelling_views(&portless));
    }
    views
}

/// [`deny_views`] of one spelling of the authority.
fn spelling_views(uri: &str) -> Vec<String> {
    let bare = uri::without_query(uri);
    let mut views = vec![uri.to_string()];
    let cut = [bare.find("%3F"), bare.find("%23")].into_iter().flatten().min().map(|end| &bare[..end]);
    for base in std::iter::once(bare).chain(cut) {
        let trimmed = base.trim_end_matches('/');
        views.extend([base.to_string(), format!("{trimmed}/")]);
        if !trimmed.ends_with(':') && !trimmed.ends_with("//") {
            views.push(trimmed.to_string());
        }
    }
    views
}

/// A principal name: non-empty, printable ASCII without spaces, no glob characters, not
/// starting with `group:` (which names a group in policy files).
pub fn is_valid_principal(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(GROUP_PREFIX)
        && name.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'*' | b'?' | b'[' | b']' | b'{' | b'}'))
}

#[cfg(test)]
mod tests;
