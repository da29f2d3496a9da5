//! The identity policies decide for: a principal name and the groups it belongs to, carried
//! through the proxy as one string so that everything keyed by "principal" (sessions,
//! cursors, views, subscriptions) keys by the whole identity.
//!
//! Form: the name alone (`alice`) when there are no groups, else the name and the sorted,
//! de-duplicated groups joined by `,` in brackets (`alice[eng,ops]`). Neither a principal nor
//! a group name holds `[`, `]` or `,`, so the first `[` always ends the name. One token, no
//! spaces: it reads as one field in logs.
//!
//! A principal vouched for by a JWT ends in [`JWT_MARK`] (`alice{jwt}`, `alice[eng]{jwt}`): it
//! is a different identity from the static-token principal of the same name — its own sessions,
//! cursors, caps and cache views — while policy files still name both as `alice` (no principal
//! name holds `{`, so the mark cannot be forged by a name).
//!
//! Invariant: only groups a policy file could name are kept (valid principal names without
//! `,`). Dropping the others changes no decision: no file can name them.

use std::collections::BTreeSet;

use super::is_valid_principal;

/// The prefix of a group entry in a policy file's `principals` (`"group:eng"`).
pub const GROUP_PREFIX: &str = "group:";

/// The identity string of `principal` with `groups` (see the module doc).
pub fn identity<S: AsRef<str>>(principal: &str, groups: &[S]) -> String {
    let kept: BTreeSet<&str> = groups.iter().map(AsRef::as_ref).filter(|g| is_valid_group(g)).collect();
    if kept.is_empty() {
        return principal.to_string();
    }
    let joined: Vec<&str> = kept.into_iter().collect();
    format!("{principal}[{}]", joined.join(","))
}

/// What ends the identity of a principal that a JWT vouched for (see the module doc).
pub const JWT_MARK: &str = "{jwt}";

/// The identity string of `principal` with `groups`, as vouched for by a JWT.
pub fn jwt_identity<S: AsRef<str>>(principal: &str, groups: &[S]) -> String {
    format!("{}{JWT_MARK}", identity(principal, groups))
}

/// The principal name and the groups of an identity string (a JWT's mark dropped).
pub fn split_identity(identity: &str) -> (&str, Vec<&str>) {
    let identity = identity.strip_suffix(JWT_MARK).unwrap_or(identity);
    match identity.split_once('[') {
        None => (identity, Vec::new()),
        Some((name, rest)) => {
            let groups = rest.strip_suffix(']').unwrap_or(rest);
            (name, groups.split(',').filter(|g| !g.is_empty()).collect())
        }
    }
}

/// Who an identity string is, whatever groups its token carried: the name, with a JWT's mark
/// (`alice[eng]{jwt}` → `alice{jwt}`, `alice[eng]` → `alice`). What one principal is allowed
/// in amounts (its rate limits) is keyed by this, so a token with other groups is not another
/// allowance.
pub fn without_groups(identity: &str) -> std::borrow::Cow<'_, str> {
    let (name, groups) = split_identity(identity);
    match (groups.is_empty(), identity.ends_with(JWT_MARK)) {
        (true, _) => std::borrow::Cow::Borrowed(identity),
        (false, true) => std::borrow::Cow::Owned(format!("{name}{JWT_MARK}")),
        (false, false) => std::borrow::Cow::Borrowed(name),
    }
}

/// A group name a policy file may name as `group:<name>`.
pub fn is_valid_group(name: &str) -> bool {
    is_valid_principal(name) && !name.contains(',')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(principal: &str, groups: &[&str], expected: &str, split: (&str, &[&str])) {
        let text = identity(principal, groups);
        assert_eq!(text, expected);
        let (name, found) = split_identity(&text);
        assert_eq!((name, found.as_slice()), split);
    }

    #[test]
    fn identities_round_trip_and_keep_only_nameable_groups() {
        check("alice", &[], "alice", ("alice", &[]));
        assert_eq!(split_identity(&jwt_identity::<&str>("alice", &[])), ("alice", Vec::new()));
        assert_eq!(split_identity(&jwt_identity("alice", &["eng"])), ("alice", vec!["eng"]));
        assert_ne!(jwt_identity::<&str>("alice", &[]), identity::<&str>("alice", &[]));
        check("alice", &["ops", "eng", "ops"], "alice[eng,ops]", ("alice", &["eng", "ops"]));
        check("bob@example.com", &["Domain Users", "a,b", "", "g*"], "bob@example.com", ("bob@example.com", &[]));
        check("carol", &["x", "bad group"], "carol[x]", ("carol", &["x"]));
    }

    #[test]
    fn without_its_groups_an_identity_is_its_name_and_its_mark() {
        for (identity, expected) in [
            ("alice", "alice"),
            ("alice[eng,ops]", "alice"),
            ("alice{jwt}", "alice{jwt}"),
            ("alice[eng]{jwt}", "alice{jwt}"),
            ("alice[a]{jwt}", "alice{jwt}"),
        ] {
            assert_eq!(without_groups(identity), expected, "{identity}");
        }
    }
}
