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
//! Policies decide over pseudo-URIs in the same glob files as resources:
//! `tool://<upstream>/<name>` and `prompt://<upstream>/<name>` (the upstream's own name). They
//! never collide with a resource's namespaced URI, which always starts with `<upstream>+`.
//!
//! Invariant: [`split`] of [`join`] gives back exactly what went in, and [`join`] never makes
//! a name outside the spec's rules.

/// The separator between the upstream's name and the tool's or prompt's own.
pub const SEPARATOR: &str = "__";
/// The spec's maximum tool-name length.
pub const MAX_NAME_LEN: usize = 128;

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
    #[error("longer than {MAX_NAME_LEN} characters once prefixed with the upstream's name")]
    TooLong,
    #[error("has characters outside A-Z a-z 0-9 _ - . (or is empty, `.` or `..`)")]
    Characters,
}

/// The name a host sees for `upstream`'s `name`.
pub fn join(upstream: &str, name: &str) -> Result<String, NameError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if name.is_empty() || name == "." || name == ".." || !name.chars().all(allowed) {
        return Err(NameError::Characters);
    }
    let joined = format!("{upstream}{SEPARATOR}{name}");
    if joined.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong);
    }
    Ok(joined)
}

/// `(upstream, name)` of a presented name, or `None` when it is not one.
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
}
