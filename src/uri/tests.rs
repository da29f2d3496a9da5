use super::*;

/// `expected`: the normalised form, or the reason it is refused.
fn check(input: &str, expected: Result<&str, UriError>) {
    let got = normalize(input);
    assert_eq!(got.as_deref().map_err(Clone::clone), expected, "normalize({input:?})");
    if let Ok(normal) = &got {
        assert_eq!(normalize(normal).as_ref(), Ok(normal), "idempotent on {normal:?}");
    }
}

#[test]
fn already_normal_uris_are_unchanged() {
    for uri in [
        "docs+file:///guide.md",
        "mem+urn:note:7",
        "gh+repo://acme/app/README.md",
        "x+demo://resource/static/document/a.md",
        "a+file:///a%20b/c.md?x=1",
        "docs+file:///dir/",
        "docs+file:///",
        "vcs+svn+ssh://host/repo/trunk",
        "a+http://example.com:8080/A/B?Q=%2F",
        "a+http://[::1]:8080/x",
        "docs+file:///100%25.md",
    ] {
        check(uri, Ok(uri));
    }
}

#[test]
fn case_of_scheme_and_host_is_folded_and_path_case_kept() {
    check("DOCS+FILE:///Guide.md", Ok("docs+file:///Guide.md"));
    check("gh+Repo://ACME/App/README.md", Ok("gh+repo://acme/App/README.md"));
    check("a+http://EXAMPLE.com:8080/X", Ok("a+http://example.com:8080/X"));
    check("a+http://ex%c3%a4mple.com/", Ok("a+http://ex%C3%A4mple.com/"));
}

#[test]
fn percent_encoding_is_normalised() {
    check("docs+file:///a%2db%2Ec%5f%7e.md", Ok("docs+file:///a-b.c_~.md"));
    check("docs+file:///%73ecrets/x", Ok("docs+file:///secrets/x"));
    check("docs+file:///a%3fb%23c", Ok("docs+file:///a%3Fb%23c"));
    check("docs+file:///caf%c3%a9", Ok("docs+file:///caf%C3%A9"));
    check("docs+file:///x?path=a%2fb", Ok("docs+file:///x?path=a%2Fb"));
    check("docs+file:///café", Ok("docs+file:///caf%C3%A9"));
    check("docs+file:///a{b}|c", Ok("docs+file:///a%7Bb%7D%7Cc"));
}

#[test]
fn dot_segments_and_slash_runs_are_removed() {
    check("docs+file:///a/./b/../c", Ok("docs+file:///a/c"));
    check("docs+file:///a/%2e%2e/secrets/k", Ok("docs+file:///secrets/k"));
    check("docs+file:///a/%2E%2E/%2E/secrets/k", Ok("docs+file:///secrets/k"));
    check("docs+file:///../../etc/passwd", Ok("docs+file:///etc/passwd"));
    check("docs+file:///a//b///c", Ok("docs+file:///a/b/c"));
    check("docs+file:////a", Ok("docs+file:///a"));
    check("docs+file:///a/b/..", Ok("docs+file:///a/"));
    check("docs+file:///a/.", Ok("docs+file:///a/"));
    check("docs+file:///..", Ok("docs+file:///"));
    check("gh+repo://acme/../x", Ok("gh+repo://acme/x"));
    check("mem+notes:a/../b", Ok("mem+notes:b"));
    check("mem+urn:note:7", Ok("mem+urn:note:7"));
    check("docs+file:///.env", Ok("docs+file:///.env"));
    check("docs+file:///a/...b", Ok("docs+file:///a/...b"));
}

/// The spellings an upstream with a URL parser reads as one host (`secret.corp`) normalise to
/// one string or are refused.
#[test]
fn an_authority_has_one_spelling() {
    check("web+web://secret.corp./x", Ok("web+web://secret.corp/x"));
    check("web+web://SECRET.corp.:/x", Ok("web+web://secret.corp/x"));
    check("web+web://secret.corp:/x", Ok("web+web://secret.corp/x"));
    check("web+web://secret.corp%2E/x", Ok("web+web://secret.corp/x"));
    check("web+web://secret.corp:080/x", Ok("web+web://secret.corp:80/x"));
    check("web+web://secret.corp:0/x", Ok("web+web://secret.corp:0/x"));
    check("web+web://secret.corp:000/x", Ok("web+web://secret.corp:0/x"));
    check("web+web://secret.corp:65535", Ok("web+web://secret.corp:65535"));
    check("web+web://[::1]:/x", Ok("web+web://[::1]/x"));
    check("web+web://@secret.corp/x", Err(UriError::UserInfo));
    check("web+web://u@secret.corp/x", Err(UriError::UserInfo));
    check("web+web://u:p@secret.corp/x", Err(UriError::UserInfo));
    check("web+web://secret.corp:65536/x", Err(UriError::InvalidPort));
    check("web+web://secret.corp:8o/x", Err(UriError::InvalidPort));
    check("web+web://secret.corp:80:80/x", Err(UriError::InvalidPort));
    check("web+web://[::1]x/x", Err(UriError::InvalidPort));
    check("web+web://[::1/x", Err(UriError::AmbiguousHost));
    check("web+web://secret.corp../x", Err(UriError::AmbiguousHost));
    check("web+web://./x", Err(UriError::AmbiguousHost));
    assert_eq!(without_port("web+web://secret.corp:80/x?y"), Some("web+web://secret.corp/x?y".into()));
    assert_eq!(without_port("web+web://[::1]:80"), Some("web+web://[::1]".into()));
    assert_eq!(without_port("web+web://secret.corp/x:80"), None);
    assert_eq!(without_port("mem+urn:note:7"), None);
}

#[test]
fn file_uris_have_one_form() {
    check("docs+file://localhost/a", Ok("docs+file:///a"));
    check("docs+file://LOCALHOST/a", Ok("docs+file:///a"));
    check("docs+file:/a/b", Ok("docs+file:///a/b"));
    check("file:///a", Ok("file:///a"));
    check("docs+file://server/share/a", Err(UriError::FileForm));
    check("docs+file:a/.env", Err(UriError::FileForm));
    check("docs+file://user@localhost/a", Err(UriError::UserInfo));
    check("docs+file://localhost:/a", Ok("docs+file:///a"));
    check("docs+file://localhost./a", Ok("docs+file:///a"));
    check("docs+file://localhost:80/a", Err(UriError::FileForm));
}

#[test]
fn ambiguous_input_is_refused() {
    check("", Err(UriError::Empty));
    check("no-scheme", Err(UriError::NoScheme));
    check("/abs", Err(UriError::NoScheme));
    check("1x:y", Err(UriError::NoScheme));
    check("%64ocs+file:///a", Err(UriError::NoScheme));
    check("docs+file:///a b", Err(UriError::ControlOrWhitespace));
    check("docs+file:///a\tb", Err(UriError::ControlOrWhitespace));
    check("docs+file:///a\u{0}b", Err(UriError::ControlOrWhitespace));
    check("docs+file:///a\u{85}b", Err(UriError::ControlOrWhitespace));
    check("docs+file:///a\u{a0}b", Err(UriError::ControlOrWhitespace));
    check("docs+file:///a%00b", Err(UriError::ControlOrWhitespace));
    check("docs+file:///a%0ab", Err(UriError::ControlOrWhitespace));
    check("docs+file:///a?x=%7f", Err(UriError::ControlOrWhitespace));
    check("docs+file:///a\\b", Err(UriError::Backslash));
    check("docs+file:///a%5cb", Err(UriError::Backslash));
    check("docs+file:///a%2", Err(UriError::InvalidPercent));
    check("docs+file:///a%zz", Err(UriError::InvalidPercent));
    check("docs+file:///a%", Err(UriError::InvalidPercent));
    check("docs+file:///secrets%2fkey", Err(UriError::EncodedSlash));
    check("gh+repo://acme%2Fx/y", Err(UriError::EncodedSlash));
    check("docs+file:///%252e%252e/x", Err(UriError::DoubleEncoded));
    check("docs+file:///secrets./k", Err(UriError::AmbiguousSegment));
    check("docs+file:///a/.env.", Err(UriError::AmbiguousSegment));
    check("docs+file:///a/.env%20", Err(UriError::AmbiguousSegment));
    check("docs+file:///a/...", Err(UriError::AmbiguousSegment));
    check("docs+file:///a/.env::$DATA", Err(UriError::AmbiguousSegment));
}

#[test]
fn without_query_cuts_at_query_or_fragment() {
    assert_eq!(without_query("a+b:///x?y#z"), "a+b:///x");
    assert_eq!(without_query("a+b:///x#z?y"), "a+b:///x");
    assert_eq!(without_query("a+b:///x"), "a+b:///x");
}

#[test]
fn the_fragment_is_checked_then_dropped() {
    check("a+file:///a%20b/c.md?x=1#f", Ok("a+file:///a%20b/c.md?x=1"));
    check("ev+ev://frag/secret.txt#.md", Ok("ev+ev://frag/secret.txt"));
    check("ev+ev://frag/secret.txt#", Ok("ev+ev://frag/secret.txt"));
    check("ev+ev://frag/secret.txt#/../x.md", Ok("ev+ev://frag/secret.txt"));
    check("ev+ev://frag/secret.txt?a=b#c", Ok("ev+ev://frag/secret.txt?a=b"));
    check("ev+ev://frag/a.md#x%00", Err(UriError::ControlOrWhitespace));
    check("ev+ev://frag/a.md#%zz", Err(UriError::InvalidPercent));
    // An encoded `#` is data, not a fragment: kept.
    check("ev+ev://frag/a%23.md", Ok("ev+ev://frag/a%23.md"));
}

#[test]
fn invisible_formatting_characters_are_refused_raw_or_encoded() {
    for uri in [
        "docs\u{200B}+file:///a.md",
        "docs+file:///.env\u{200B}",
        "docs+file:///a/\u{202E}dm.txt",
        "docs+file:///a/%E2%80%AEdm.txt",
        "docs+file:///a/%e2%80%8b.env",
        "docs+file:///a.md?x=%EF%BB%BF",
        "docs+file:///\u{2066}a\u{2069}",
    ] {
        assert!(matches!(normalize(uri), Err(UriError::Invisible | UriError::NoScheme)), "{uri:?}");
    }
    check("docs+file:///a/%E2%80%AEdm.txt", Err(UriError::Invisible));
    check("docs+file:///caf%C3%A9/%E2%82%AC", Ok("docs+file:///caf%C3%A9/%E2%82%AC"));
}

#[test]
fn very_long_uris_are_refused() {
    let long = format!("docs+file:///{}", "a".repeat(MAX_URI_BYTES));
    check(&long, Err(UriError::TooLong));
    let fits = format!("docs+file:///{}", "a".repeat(MAX_URI_BYTES - "docs+file:///".len()));
    assert_eq!(normalize(&fits).as_deref(), Ok(fits.as_str()));
}

#[test]
fn confusable_upstream_names_never_form_a_scheme() {
    // Fullwidth and Cyrillic look-alikes of `docs` are percent-encoded, and `%` cannot be in a scheme.
    check("\u{FF44}ocs+file:///a.md", Err(UriError::NoScheme));
    check("d\u{043E}cs+file:///a.md", Err(UriError::NoScheme));
}
