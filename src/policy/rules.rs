//! Compiled glob lists: first-match lookup for decisions, and a DFA of the whole list for the
//! template check (a breadth-first search over the product of three DFAs: the widened
//! template, the allow globs, the deny globs).

use std::collections::{HashSet, VecDeque};

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use regex_automata::dfa::{Automaton, dense};
use regex_automata::nfa::thompson;
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::util::syntax;
use regex_automata::{Anchored, MatchKind};

use super::Decision;

/// Above this many explored product states the template check gives up and lists.
const SEARCH_LIMIT: usize = 200_000;
/// A pattern may hold this many `**` that are not whole path components (2^n variants).
const MAX_INLINE_DOUBLE_STARS: u32 = 3;

/// One glob as written in one file.
#[derive(Clone)]
pub(super) struct Rule {
    file: String,
    pattern: String,
    globs: Vec<Glob>,
}

/// An ordered list of rules (files by name, then patterns in file order).
pub(super) struct Rules {
    rules: Vec<Rule>,
    set: GlobSet,
    /// Glob index in `set` → rule index.
    owner: Vec<usize>,
    automaton: Compiled,
}

enum Compiled {
    /// No rules: matches nothing.
    Never,
    Built(Box<dense::DFA<Vec<u32>>>),
    /// Too large to build: the template check must assume the worst for listing (list it).
    Unknown,
}

impl Rule {
    /// Compile `pattern`; deny rules match case-insensitively (see the module doc).
    pub(super) fn new(file: &str, pattern: &str, case_insensitive: bool) -> Result<Rule, String> {
        if pattern.is_empty() {
            return Err("empty pattern".into());
        }
        if !case_insensitive && has_upper_case_scheme(pattern) {
            return Err(format!("`{pattern}` has an upper-case scheme; URIs are matched with a lower-case scheme"));
        }
        let mut globs = Vec::new();
        for variant in double_star_variants(pattern)? {
            let glob = GlobBuilder::new(&variant)
                .literal_separator(true)
                .case_insensitive(case_insensitive)
                .build()
                .map_err(|e| format!("`{pattern}` is not a valid glob: {}", e.kind()))?;
            globs.push(glob);
        }
        Ok(Rule { file: file.to_string(), pattern: pattern.to_string(), globs })
    }

    pub(super) fn decision(&self, allowed: bool) -> Decision {
        Decision { allowed, file: Some(self.file.clone()), pattern: Some(self.pattern.clone()) }
    }
}

impl Rules {
    pub(super) fn new(rules: Vec<Rule>) -> Result<Rules, String> {
        let mut builder = GlobSetBuilder::new();
        let mut owner = Vec::new();
        for (index, rule) in rules.iter().enumerate() {
            for glob in &rule.globs {
                builder.add(glob.clone());
                owner.push(index);
            }
        }
        let set = builder.build().map_err(|e| e.to_string())?;
        let automaton = build_automaton(&rules);
        Ok(Rules { rules, set, owner, automaton })
    }

    /// The first rule (in file and pattern order) matching `uri`, with its position.
    pub(super) fn first_match(&self, uri: &str) -> Option<(usize, &Rule)> {
        let glob = *self.set.matches(uri).first()?;
        let index = self.owner[glob];
        Some((index, &self.rules[index]))
    }
}

/// Could some expansion of `template` be allowed by `allow` and not denied by `deny`?
/// Over-approximates (see the module doc): `false` only when that is certain.
pub(super) fn template_may_be_allowed(template: &str, allow: &Rules, deny: &Rules) -> bool {
    let allow = match &allow.automaton {
        Compiled::Never => return false,
        Compiled::Unknown => return true,
        Compiled::Built(dfa) => dfa,
    };
    let deny = match &deny.automaton {
        Compiled::Never => None,
        Compiled::Unknown => return true,
        Compiled::Built(dfa) => Some(dfa),
    };
    let Some(shape) = dfa(&[template_regex(template)], false) else { return true };
    search(&shape, allow, deny.map(|d| &**d))
}

/// Breadth-first over (template, allow, deny) states on the bytes a normalised URI can hold.
fn search(shape: &dense::DFA<Vec<u32>>, allow: &dense::DFA<Vec<u32>>, deny: Option<&dense::DFA<Vec<u32>>>) -> bool {
    let start_config = start::Config::new().anchored(Anchored::Yes);
    let (Ok(s0), Ok(a0)) = (shape.start_state(&start_config), allow.start_state(&start_config)) else {
        return true;
    };
    let d0 = match deny.map(|d| d.start_state(&start_config)) {
        Some(Ok(state)) => Some(state),
        Some(Err(_)) => return true,
        None => None,
    };
    let accepts = |dfa: &dense::DFA<Vec<u32>>, state: StateID| dfa.is_match_state(dfa.next_eoi_state(state));
    let mut seen: HashSet<(StateID, StateID, Option<StateID>)> = HashSet::from([(s0, a0, d0)]);
    let mut queue = VecDeque::from([(s0, a0, d0)]);
    while let Some((s, a, d)) = queue.pop_front() {
        if accepts(shape, s) && accepts(allow, a) && !d.is_some_and(|d| accepts(deny.expect("deny dfa"), d)) {
            return true;
        }
        if seen.len() > SEARCH_LIMIT {
            return true;
        }
        for byte in 0x21u8..=0x7E {
            let next = (
                shape.next_state(s, byte),
                allow.next_state(a, byte),
                d.map(|d| deny.expect("deny dfa").next_state(d, byte)),
            );
            if shape.is_dead_state(next.0) || allow.is_dead_state(next.1) {
                continue;
            }
            if seen.insert(next) {
                queue.push_back(next);
            }
        }
    }
    false
}

fn build_automaton(rules: &[Rule]) -> Compiled {
    let regexes: Vec<String> = rules.iter().flat_map(|r| r.globs.iter().map(|g| g.regex().to_string())).collect();
    if regexes.is_empty() {
        return Compiled::Never;
    }
    match dfa(&regexes, true) {
        Some(dfa) => Compiled::Built(Box::new(dfa)),
        None => Compiled::Unknown,
    }
}

fn dfa(regexes: &[String], bounded: bool) -> Option<dense::DFA<Vec<u32>>> {
    let limit = bounded.then_some(64 << 20);
    dense::Builder::new()
        .configure(
            dense::Config::new()
                .match_kind(MatchKind::All)
                .start_kind(regex_automata::dfa::StartKind::Anchored)
                .determinize_size_limit(limit)
                .dfa_size_limit(limit),
        )
        .syntax(syntax::Config::new().unicode(false).utf8(false).dot_matches_new_line(true))
        .thompson(thompson::Config::new().utf8(false))
        .build_many(regexes)
        .ok()
}

/// The template as a regex over URIs: literal text byte for byte (scheme lower-cased,
/// non-ASCII percent-encoded as normalisation would), each `{…}` as "any string".
fn template_regex(template: &str) -> String {
    let scheme_end = template.find(':').filter(|end| !template[..*end].contains('{')).unwrap_or(0);
    let mut regex = String::from("^");
    let mut in_expression = false;
    for (index, c) in template.char_indices() {
        match c {
            '{' if !in_expression => {
                in_expression = true;
                regex.push_str("(?s-u:.)*");
            }
            '}' if in_expression => in_expression = false,
            _ if in_expression => {}
            c => {
                let c = if index < scheme_end { c.to_ascii_lowercase() } else { c };
                let mut buffer = [0; 4];
                for byte in c.encode_utf8(&mut buffer).bytes() {
                    if byte.is_ascii() {
                        regex.push_str(&format!("\\x{byte:02X}"));
                    } else {
                        regex.push_str(
                            &format!("%{byte:02X}").bytes().map(|b| format!("\\x{b:02X}")).collect::<String>(),
                        );
                    }
                }
            }
        }
    }
    regex.push('$');
    regex
}

/// `pattern` with every `**` that is not a whole path component read both as `*` and as
/// `*/**/*`: globset alone would treat it as `*`; the union of the two matches any string.
fn double_star_variants(pattern: &str) -> Result<Vec<String>, String> {
    let bytes = pattern.as_bytes();
    let mut variants = vec![String::new()];
    let mut inline = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"**") {
            let whole = (i == 0 || bytes[i - 1] == b'/') && (i + 2 == bytes.len() || bytes[i + 2] == b'/');
            if whole {
                variants.iter_mut().for_each(|v| v.push_str("**"));
            } else {
                inline += 1;
                variants = variants.into_iter().flat_map(|v| [format!("{v}*"), format!("{v}*/**/*")]).collect();
            }
            i += 2;
            continue;
        }
        let c = pattern[i..].chars().next().expect("char boundary");
        variants.iter_mut().for_each(|v| v.push(c));
        i += c.len_utf8();
    }
    if inline > MAX_INLINE_DOUBLE_STARS {
        return Err(format!("`{pattern}` has more than {MAX_INLINE_DOUBLE_STARS} `**` inside path segments"));
    }
    Ok(variants)
}

/// The literal text that starts the scheme (up to `:`, `/` or a glob character) has
/// upper-case letters: such a pattern can never match a normalised URI.
fn has_upper_case_scheme(pattern: &str) -> bool {
    let end = pattern.find([':', '/', '*', '?', '[', '{', '\\']).unwrap_or(pattern.len());
    pattern[..end].bytes().any(|b| b.is_ascii_uppercase())
}
