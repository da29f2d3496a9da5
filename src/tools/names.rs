//! Namespaced tool and prompt names, both ways, and the pseudo-URIs policies decide them on.
//!
//! A host sees `<upstream>__<name>`: `docs__search`, `everything__get-sum`. The spec's tool-name
//! rule (2025-11-25, "Tool names"): 1 to 128 characters from `A-Z a-z 0-9 _ - .`, case-sensitive.
//! Upstream names are `[a-z0-9-]` (see [`crate::namespace::is_valid_upstream_name`]): they never
//! contain `_`, so the first `__` of a presented name always ends the upstream's name and what
//! follows is the upstream's own name, whatever it contains (`__` included) — two upstreams can
//! never present the same name. Prompts follow the same rules.
//!
//! A name the spec's rules do not allow once prefixed (too long, or characters outside the set,
//! or `.`/`..`, which would not survive as a URI path) is not offered: the caller skips it and
//! counts it.
//!
//! One upstream may instead present its names as they are (`unprefixed = true`, for hosts
//! and test suites that expect a server's own names). [`Naming`] presents and resolves names
//! for a set of upstreams. Such a name is offered only when it does not [`split`] (it is not
//! `<a valid upstream name>__<rest>`, configured or not) and does not start with
//! [`RESERVED_PREFIX`] (the proxy's own bridge tools). So every presented name is exactly one
//! of: the proxy's (`proxy_…`), a prefixed one (it splits, and its upstream part names its
//! owner), or the un-prefixed upstream's (it does not split) — never two at once, whatever
//! upstreams are configured later.
//!
//! Policies decide over pseudo-URIs in the same glob files as resources:
//! `tool://<upstream>/<name>` and `prompt://<upstream>/<name>` (the upstream's own name). They
//! never collide with a resource's namespaced URI, which always starts with `<upstream>+`.
//!
//! Invariant: [`split`] of [`join`] gives back exactly what went in, and [`join`] never makes
//! a name outside the spec's rules; [`Naming::origin`] of [`Naming::present`] gives back
//! exactly the upstream and name that went in, for every upstream, prefixed or not.

/// The separator between the upstream's name and the tool's or prompt's own.
pub const SEPARATOR: &str = "__";
/// The spec's maximum tool-name length.
pub const MAX_NAME_LEN: usize = 128;
/// Names the proxy keeps for its own tools (the bridge's); an un-prefixed upstream's name
/// starting with it is not offered.
pub const RESERVED_PREFIX: &str = "proxy_";

/// How names are presented for a set of upstreams: prefixed, but for the one (if any) that
/// presents its own names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Naming<'a> {
    pub unprefixed: Option<&'a str>,
}

/// What a presented name names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offering {
    Tool,
    Prompt,
}

impl Offering {
    /// The pseudo-URI scheme and the word errors use.
    pub fn label(self) -> &'static str {
        match self {
            Offering::Tool => "tool",
            Offering::Prompt => "prompt",
        }
    }
}

/// Why an upstream's name cannot be offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("longer than {MAX_NAME_LEN} characters (once prefixed with the upstream's name, if it is)")]
    TooLong,
    #[error("has characters outside A-Z a-z 0-9 _ - . (or is empty, `.` or `..`)")]
    Characters,
    #[error("unprefixed, it would read as another upstream's `<upstream>__<name>` or a proxy_ tool")]
    Ambiguous,
}

impl<'a> Naming<'a> {
    /// The name a host sees for `upstream`'s `name`.
    pub fn present(&self, upstream: &str, name: &str) -> Result<String, NameError> {
        if self.unprefixed != Some(upstream) {
            return join(upstream, name);
        }
        check_characters(name)?;
        if name.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong);
        }
        if split(name).is_some() || name.starts_with(RESERVED_PREFIX) {
            return Err(NameError::Ambiguous);
        }
        Ok(name.to_string())
    }

    /// `(upstream, name)` of a presented name, or `None` when it can be no upstream's (a name
    /// that is not listed still resolves; the catalog says whether it exists).
    pub fn origin<'n>(&self, presented: &'n str) -> Option<(&'n str, &'n str)>
    where
        'a: 'n,
    {
        match split(presented) {
            Some(prefixed) => Some(prefixed),
            None if presented.starts_with(RESERVED_PREFIX) => None,
            None => self.unprefixed.map(|upstream| (upstream, presented)),
        }
    }
}

/// The prefixed name a host sees for `upstream`'s `name`.
pub fn join(upstream: &str, name: &str) -> Result<String, NameError> {
    check_characters(name)?;
    let joined = format!("{upstream}{SEPARATOR}{name}");
    if joined.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong);
    }
    Ok(joined)
}

fn check_characters(name: &str) -> Result<(), NameError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if name.is_empty() || name == "." || name == ".." || !name.chars().all(allowed) {
        return Err(NameError::Characters);
    }
    Ok(())
}

/// `(upstream, name)` of a prefixed name, or `None` when it is not one.
pub fn split(presented: &str) -> Option<(&str, &str)> {
    let (upstream, name) = presented.split_once(SEPARATOR)?;
    (crate::namespace::is_valid_upstream_name(upstream) && !name.is_empty()).then_some((upstream, name))
}

/// The pseudo-URI a policy decides `upstream`'s `name` on: `tool://docs/search`.
pub fn policy_uri(offering: Offering, upstream: &str, name: &str) -> String {
    format!("{}://{upstream}/{name}", offering.label())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(upstream: &str, name: &str, expected: Result<&str, NameError>) {
        let joined = join(upstream, name);
        assert_eq!(joined.as_deref().map_err(|e| *e), expected, "{upstream} {name}");
        if let Ok(joined) = joined {
            assert_eq!(split(&joined), Some((upstream, name)), "round trip of {joined}");
            let uri = policy_uri(Offering::Tool, upstream, name);
            assert_eq!(crate::uri::normalize(&uri).as_deref(), Ok(uri.as_str()), "{uri} is already normal");
        }
    }

    #[test]
    fn names_round_trip_within_the_spec_rules() {
        check("everything", "get-sum", Ok("everything__get-sum"));
        check("mem", "create_entities", Ok("mem__create_entities"));
        check("a", "__x__", Ok("a____x__"));
        check("a-b", "v1.2", Ok("a-b__v1.2"));
        check("a", "CamelCase", Ok("a__CamelCase"));
        check("a", "", Err(NameError::Characters));
        check("a", "has space", Err(NameError::Characters));
        check("a", "a/b", Err(NameError::Characters));
        check("a", "..", Err(NameError::Characters));
        check("a", "é", Err(NameError::Characters));
        check("a", &"x".repeat(125), Ok(&format!("a__{}", "x".repeat(125))));
        check("a", &"x".repeat(126), Err(NameError::TooLong));
    }

    #[test]
    fn no_two_upstreams_present_the_same_name() {
        // Upstream names have no `_`: the first `__` is always the separator.
        assert_eq!(split("a___b"), Some(("a", "_b")));
        assert_eq!(split("a-__b"), None, "`a-` is no upstream name");
        assert_eq!(split("no-separator"), None);
        assert_eq!(split("A__b"), None);
        assert_eq!(split("a__"), None);
    }

    fn check_unprefixed(naming: Naming, upstream: &str, name: &str, expected: Result<&str, NameError>) {
        let presented = naming.present(upstream, name);
        assert_eq!(presented.as_deref().map_err(|e| *e), expected, "{upstream} {name}");
        if let Ok(presented) = presented {
            assert_eq!(naming.origin(&presented), Some((upstream, name)), "round trip of {presented}");
        }
    }

    #[test]
    fn one_upstream_may_present_its_own_names_and_none_is_ambiguous() {
        let naming = Naming { unprefixed: Some("conf") };
        check_unprefixed(naming, "conf", "test_simple_text", Ok("test_simple_text"));
        check_unprefixed(naming, "conf", "get-sum", Ok("get-sum"));
        check_unprefixed(naming, "conf", "_x__y", Ok("_x__y"));
        check_unprefixed(naming, "conf", "A__b", Ok("A__b"));
        check_unprefixed(naming, "conf", &"x".repeat(128), Ok(&"x".repeat(128)));
        check_unprefixed(naming, "conf", &"x".repeat(129), Err(NameError::TooLong));
        // Would read as another upstream's (configured or not) or the proxy's own.
        check_unprefixed(naming, "conf", "docs__search", Err(NameError::Ambiguous));
        check_unprefixed(naming, "conf", "conf__x", Err(NameError::Ambiguous));
        check_unprefixed(naming, "conf", "proxy_resources_read", Err(NameError::Ambiguous));
        check_unprefixed(naming, "conf", "has space", Err(NameError::Characters));
        // The others stay prefixed.
        check_unprefixed(naming, "docs", "search", Ok("docs__search"));
        check_unprefixed(Naming::default(), "conf", "test_simple_text", Ok("conf__test_simple_text"));
        // Names no upstream can have resolve to none.
        assert_eq!(naming.origin("proxy_resources_read"), None);
        assert_eq!(Naming::default().origin("test_simple_text"), None);
    }

    #[test]
    fn prefixed_and_unprefixed_names_never_meet() {
        // Every name a set of upstreams presents resolves to its owner alone.
        let naming = Naming { unprefixed: Some("b") };
        let owned = [("a", "x"), ("a", "b__x"), ("b", "x"), ("b", "a_x"), ("c", "x"), ("b", "a-__x")];
        let mut seen = std::collections::HashMap::new();
        for (upstream, name) in owned {
            let presented = naming.present(upstream, name).expect("offered");
            assert_eq!(naming.origin(&presented), Some((upstream, name)));
            assert_eq!(seen.insert(presented.clone(), upstream), None, "{presented} presented twice");
        }
    }
}
