//! Namespaced URIs: a resource `uri` of upstream `docs` is presented as `docs+<uri>`.
//!
//! `+` is legal in a URI scheme, so a namespaced URI is still an RFC 3986 URI and a namespaced
//! template is still an RFC 6570 template. Upstream names cannot contain `+`, so the first `+`
//! always splits the name from the original. Pure: no IO.
//!
//! Invariant: `split(&namespaced(name, uri)?) == Some((name, uri))` for every valid name and
//! every `uri` that has a scheme; a URI without a scheme is never namespaced (never guessed at).

/// `name` + `+` + `uri`, or `None` when `uri` has no RFC 3986 scheme.
pub fn namespaced(upstream: &str, uri: &str) -> Option<String> {
    has_scheme(uri).then(|| format!("{upstream}+{uri}"))
}

/// The same for an RFC 6570 template: the template must begin with a literal scheme.
pub fn namespaced_template(upstream: &str, template: &str) -> Option<String> {
    namespaced(upstream, template)
}

/// `(upstream, original)` of a namespaced URI, or `None` when it is not one: no `+`, an
/// invalid upstream name before it, or no scheme after it.
pub fn split(namespaced: &str) -> Option<(&str, &str)> {
    let (upstream, original) = namespaced.split_once('+')?;
    (is_valid_upstream_name(upstream) && has_scheme(original)).then_some((upstream, original))
}

/// `^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
pub fn is_valid_upstream_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => allowed(first) && allowed(last) && bytes.iter().all(|b| allowed(b) || *b == b'-'),
        _ => false,
    }
}

/// The lower-cased scheme of `text` when it is a whole URI: an RFC 3986 scheme, something after
/// the `:`, and no whitespace or control characters (so prose naming a URI is not one).
pub fn whole_uri_scheme(text: &str) -> Option<String> {
    let (scheme, rest) = text.split_once(':')?;
    let whole = has_scheme(text) && !rest.is_empty() && !text.chars().any(|c| c.is_whitespace() || c.is_control());
    whole.then(|| scheme.to_ascii_lowercase())
}

/// RFC 3986 §3.1: `scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`, followed by `:`.
pub fn has_scheme(uri: &str) -> bool {
    let Some((scheme, _)) = uri.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_round_trip(name: &str, uri: &str, expected: &str) {
        let presented = namespaced(name, uri).expect("has a scheme");
        assert_eq!(presented, expected);
        assert_eq!(split(&presented), Some((name, uri)), "round trip of {uri}");
    }

    #[test]
    fn round_trips() {
        check_round_trip("docs", "file:///guide.md", "docs+file:///guide.md");
        check_round_trip("mem", "urn:note:7", "mem+urn:note:7");
        check_round_trip("gh", "repo://acme/app/README.md", "gh+repo://acme/app/README.md");
        check_round_trip("vcs", "svn+ssh://host/repo/trunk", "vcs+svn+ssh://host/repo/trunk");
        check_round_trip("a-1", "file:///a%20b/c%2Fd?x=1#f", "a-1+file:///a%20b/c%2Fd?x=1#f");
        check_round_trip("x", "demo://resource/static/document/a.md", "x+demo://resource/static/document/a.md");
        check_round_trip("0", "HTTP://Example.COM/", "0+HTTP://Example.COM/");
    }

    #[test]
    fn templates_round_trip() {
        let presented = namespaced_template("gh", "repo://{owner}/{repo}/README.md").unwrap();
        assert_eq!(presented, "gh+repo://{owner}/{repo}/README.md");
        assert_eq!(split(&presented), Some(("gh", "repo://{owner}/{repo}/README.md")));
        assert_eq!(namespaced_template("d", "file:///r/{+path}").unwrap(), "d+file:///r/{+path}");
        assert_eq!(namespaced_template("d", "{+base}/x"), None);
    }

    #[test]
    fn uris_without_a_scheme_are_not_namespaced() {
        for uri in ["", "no-scheme/item", "/abs/path", "1abc:x", ":x", "a b:c", "{scheme}:x"] {
            assert_eq!(namespaced("docs", uri), None, "{uri:?}");
        }
    }

    #[test]
    fn split_rejects_what_is_not_namespaced() {
        for uri in [
            "file:///a",
            "docs",
            "docs+",
            "docs+no-scheme",
            "+file:///a",
            "Docs+file:///a",
            "do_cs+file:///a",
            "-docs+file:///a",
            "docs-+file:///a",
        ] {
            assert_eq!(split(uri), None, "{uri:?}");
        }
    }

    #[test]
    fn upstream_names() {
        for ok in ["a", "docs", "a-b", "0", "a1-2b"] {
            assert!(is_valid_upstream_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a+b", "a.b", "ä"] {
            assert!(!is_valid_upstream_name(bad), "{bad}");
        }
    }
}
