//! Checks of the `[[upstreams]]` settings that guard the proxy against its upstreams:
//! `inherit_env` (what a stdio child may see of the proxy's environment) and
//! `max_response_bytes` (the largest single message accepted from an upstream), `uri_base`
//! (how a folder upstream names its files), `unprefixed` (at most one upstream presents
//! its tools and prompts under their own names), and `roots` (the `file://` roots an upstream
//! is given), and `session` (shared, or one upstream session per principal or per host; a
//! stdio upstream's default is one per principal, unless one principal is served).

use figment::value::Value;

use super::cache::bytes;
use super::{Problem, RawUpstream, SessionMode, UpstreamSessions, UriBase, integer, push};

/// What kind of upstream the `session` settings are for: each has its own default.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Kind {
    /// The in-process folder server: shared only.
    Folder,
    /// A child process over stdio: per principal unless set. Such a server names no call in
    /// the requests it sends (sampling, elicitation), so on a shared child they reach a host
    /// only while one principal ever called it; and what it keeps per session (a toggle, a
    /// knowledge graph) would be every principal's.
    Stdio,
    /// Streamable HTTP: shared unless set (each call's POST stream attributes what it relays).
    Http,
}

/// `session = "shared" | "per-principal" | "per-host"` (a folder upstream is shared only; a
/// stdio one is per principal when `session` is not set), `session_idle` (a duration),
/// `max_sessions` and `max_sessions_per_principal` (at least 1).
pub(super) fn sessions(at: &str, kind: Kind, raw: &RawUpstream, problems: &mut Vec<Problem>) -> UpstreamSessions {
    let defaults = UpstreamSessions::default();
    let folder = kind == Kind::Folder;
    let mode = match raw.session.as_deref() {
        None if kind == Kind::Stdio => SessionMode::PerPrincipal,
        None | Some("shared") => SessionMode::Shared,
        Some("per-principal") => SessionMode::PerPrincipal,
        Some("per-host") => SessionMode::PerHost,
        Some(other) => {
            let message = format!("`{other}` is not \"shared\", \"per-principal\" or \"per-host\"");
            push(problems, &format!("{at}.session"), message);
            SessionMode::Shared
        }
    };
    if folder && mode != SessionMode::Shared {
        push(problems, &format!("{at}.session"), "a folder upstream keeps no session state: it is shared only".into());
    }
    let idle = match raw.session_idle.as_deref() {
        None => defaults.idle,
        Some(text) => super::parse_duration(text).filter(|d| !d.is_zero()).unwrap_or_else(|| {
            push(problems, &format!("{at}.session_idle"), format!("`{text}` is not a duration like 30s or 5m"));
            defaults.idle
        }),
    };
    let count = |value: Option<i64>, key: &str, default: usize, problems: &mut Vec<Problem>| {
        integer(value, default, 1..=100_000, &format!("{at}.{key}"), problems)
    };
    let max = count(raw.max_sessions, "max_sessions", defaults.max, problems);
    let max_per_principal =
        count(raw.max_sessions_per_principal, "max_sessions_per_principal", defaults.max_per_principal, problems);
    UpstreamSessions { mode, set: raw.session.is_some(), idle, max, max_per_principal }
}

/// Every request is one principal's (`[auth] mode = "none"`, or a `serve --stdio` host): a
/// stdio upstream whose `session` is not set is shared, one child as it would be per principal.
pub(super) fn one_principal_served(upstreams: &mut [super::UpstreamConfig]) {
    for upstream in upstreams.iter_mut().filter(|upstream| !upstream.sessions.set) {
        upstream.sessions.mode = SessionMode::Shared;
    }
}

/// The default `max_response_bytes`: rmcp's own limit for stdio lines and HTTP bodies.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 << 20;
/// `max_response_bytes` may not go below this (an `initialize` answer must fit) …
const MIN_RESPONSE_BYTES: u64 = 4 << 10;
/// … nor above this.
const MAX_RESPONSE_BYTES: u64 = 1 << 30;

/// `unprefixed = true` on more than one upstream: each one after the first is a problem
/// (`(index, name)` of every upstream that sets it, in config order).
pub(super) fn at_most_one_unprefixed(setting: &[(usize, Option<String>)], problems: &mut Vec<Problem>) {
    let Some(((_, first), rest)) = setting.split_first() else { return };
    let first = first.as_deref().unwrap_or("?");
    for (index, name) in rest {
        let at = match name {
            Some(name) => format!("upstreams[{index}] ({name}).unprefixed"),
            None => format!("upstreams[{index}].unprefixed"),
        };
        let message = format!("`{first}` already presents its names unprefixed; at most one upstream may");
        push(problems, &at, message);
    }
}

/// `roots`: each a `file://` URI of an absolute path (`file:///srv/data`, or with a host:
/// `file://host/srv/data`), without whitespace, control characters, `.`/`..` segments or a
/// query or fragment, and named once. Every bad entry is a problem of its own.
pub(super) fn roots(at: &str, roots: &[String], problems: &mut Vec<Problem>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::with_capacity(roots.len());
    for (index, root) in roots.iter().enumerate() {
        let at = format!("{at}.roots[{index}]");
        if let Err(why) = check_root(root) {
            push(problems, &at, format!("`{root}` {why}"));
        } else if kept.contains(root) {
            push(problems, &at, format!("`{root}` is named twice"));
        } else {
            kept.push(root.clone());
        }
    }
    kept
}

/// Why `root` is not a root the proxy can hand an upstream.
fn check_root(root: &str) -> Result<(), &'static str> {
    let Some(rest) = root.strip_prefix("file://") else {
        return Err("is not a file:// URI (like file:///srv/data)");
    };
    if root.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("holds whitespace or control characters (percent-encode them)");
    }
    if root.contains(['?', '#']) {
        return Err("has a query or fragment");
    }
    let Some(slash) = rest.find('/') else {
        return Err("has no absolute path (like file:///srv/data)");
    };
    let path = &rest[slash..];
    if path.split('/').any(|segment| segment == "." || segment == "..") {
        return Err("has a `.` or `..` segment");
    }
    Ok(())
}

/// `inherit_env`: names of variables of the proxy's environment a stdio child also gets. Each
/// must be a plain variable name (`[A-Za-z_][A-Za-z0-9_]*`); duplicates are dropped.
pub(super) fn inherit_env(at: &str, names: Vec<String>, problems: &mut Vec<Problem>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::with_capacity(names.len());
    for name in names {
        if !is_variable_name(&name) {
            push(problems, &format!("{at}.inherit_env"), format!("`{name}` is not a variable name like API_KEY"));
        } else if !kept.contains(&name) {
            kept.push(name);
        }
    }
    kept
}

/// `max_response_bytes`: a size like `"16MiB"` or a number of bytes, within 4KiB..=1GiB.
pub(super) fn max_response_bytes(at: &str, value: Option<&Value>, problems: &mut Vec<Problem>) -> usize {
    let Some(value) = value else { return DEFAULT_MAX_RESPONSE_BYTES };
    match bytes(value) {
        Some(bytes @ MIN_RESPONSE_BYTES..=MAX_RESPONSE_BYTES) => usize::try_from(bytes).unwrap_or(usize::MAX),
        Some(bytes) => {
            push(problems, &format!("{at}.max_response_bytes"), format!("{bytes} bytes is outside 4KiB..=1GiB"));
            DEFAULT_MAX_RESPONSE_BYTES
        }
        None => {
            let message = "not a size like 16MiB, 512KiB or a number of bytes".to_string();
            push(problems, &format!("{at}.max_response_bytes"), message);
            DEFAULT_MAX_RESPONSE_BYTES
        }
    }
}

/// `uri_base` of a folder upstream: `relative` (the default) or `absolute`.
pub(super) fn uri_base(at: &str, value: Option<&str>, problems: &mut Vec<Problem>) -> UriBase {
    match value {
        None | Some("relative") => UriBase::Relative,
        Some("absolute") => UriBase::Absolute,
        Some(other) => {
            push(problems, &format!("{at}.uri_base"), format!("`{other}` is not \"relative\" or \"absolute\""));
            UriBase::Relative
        }
    }
}

/// A portable environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
pub(crate) fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `url` as it may be shown (logs, `/status`, errors, problems): user and password, the path,
/// every query value and the fragment replaced by `***`. Only scheme, host, port and the query's
/// keys stay — with the upstream's name beside it that says which upstream is meant, and a token
/// anywhere in the path (`https://host/mcp/${TOKEN}`) cannot show.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(at) => url.split_at(at + 3),
        None => ("", url),
    };
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, _)) => (rest, "#***"),
        None => (rest, ""),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = match authority.rsplit_once('@') {
        Some((_, host)) => format!("***@{host}"),
        None => authority.to_string(),
    };
    let path = if path.trim_matches('/').is_empty() { path } else { "/***" };
    let query = query.map(|query| {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) => format!("{key}=***"),
                None => pair.to_string(),
            })
            .collect();
        format!("?{}", pairs.join("&"))
    });
    format!("{scheme}{host}{path}{}{fragment}", query.unwrap_or_default())
}

/// `text` with every `http://` or `https://` URL in it passed through [`redact_url`] — for
/// error texts (of reqwest, rmcp) that quote the URL they failed on.
pub fn redact_urls_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = find_url_start(rest) {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let end = tail.find(|c: char| c.is_whitespace() || "\"'<>()[]{}`".contains(c)).unwrap_or(tail.len());
        out.push_str(&redact_url(&tail[..end]));
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn find_url_start(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    [lower.find("http://"), lower.find("https://")].into_iter().flatten().min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: &str) {
        assert_eq!(redact_urls_in(input), expected, "{input}");
    }

    #[test]
    fn credentials_query_values_and_fragments_are_redacted() {
        check("http://127.0.0.1:9/mcp", "http://127.0.0.1:9/***");
        check("http://127.0.0.1:9/", "http://127.0.0.1:9/");
        check("https://host/mcp/SECRET_TOKEN", "https://host/***");
        check("https://user:pass@host/mcp", "https://***@host/***");
        check("http://h/mcp?api_key=s3cret&x", "http://h/***?api_key=***&x");
        check("http://h/mcp?a=1&b=2#frag", "http://h/***?a=***&b=***#***");
        check(
            "error sending request for url (HTTPS://u:p@h:1/m?k=v): refused",
            "error sending request for url (HTTPS://***@h:1/***?k=***): refused",
        );
        check("two http://a@b/ and https://c/?d=e.", "two http://***@b/ and https://c/?d=***");
        check("no url here", "no url here");
    }

    #[test]
    fn every_problem_of_the_new_keys_is_reported_at_once() {
        let text = r#"
            [[upstreams]]
            name = "a"
            command = "x"
            inherit_env = ["OK", "not ok"]
            env = { "BAD=NAME" = "v" }
            max_response_bytes = "12"

            [[upstreams]]
            name = "b"
            url = "http://u:p@h/mcp?k=v"
            inherit_env = ["X"]
            max_response_bytes = "2GiB"

            unprefixed = true

            [[upstreams]]
            name = "c"
            url = "ftp://u:p@h/?k=s3cret"
            max_response_bytes = "64KiB"
            unprefixed = true

            [[upstreams]]
            name = "d"
            url = "http://h/mcp"
            unprefixed = true
        "#;
        let error = super::super::Config::from_toml(text, std::path::Path::new("/"), &|_| None).unwrap_err();
        let problems: Vec<String> = error.problems.iter().map(|p| format!("{}: {}", p.at, p.message)).collect();
        assert_eq!(
            problems,
            [
                "upstreams[0] (a).env: `BAD=NAME` is not a variable name like API_KEY",
                "upstreams[0] (a).inherit_env: `not ok` is not a variable name like API_KEY",
                "upstreams[0] (a).max_response_bytes: 12 bytes is outside 4KiB..=1GiB",
                "upstreams[1] (b).inherit_env: applies only to `command` upstreams",
                "upstreams[1] (b).max_response_bytes: 2147483648 bytes is outside 4KiB..=1GiB",
                "upstreams[2] (c).url: `ftp://***@h/?k=***` is not an http:// or https:// URL",
                "upstreams[2] (c).unprefixed: `b` already presents its names unprefixed; at most one upstream may",
                "upstreams[3] (d).unprefixed: `b` already presents its names unprefixed; at most one upstream may",
            ]
        );
    }

    #[test]
    fn max_response_bytes_may_be_a_bare_number_of_bytes() {
        let load = |bytes: &str| {
            let text = format!("[[upstreams]]\nname = \"a\"\nurl = \"http://h/mcp\"\nmax_response_bytes = {bytes}\n");
            super::super::Config::from_toml(&text, std::path::Path::new("/"), &|_| None)
        };
        assert_eq!(load("65536").unwrap().upstreams[0].max_response_bytes, 65536);
        let problems = load("12").unwrap_err().problems;
        let shown: Vec<String> = problems.iter().map(|p| format!("{}: {}", p.at, p.message)).collect();
        assert_eq!(shown, ["upstreams[0] (a).max_response_bytes: 12 bytes is outside 4KiB..=1GiB"]);
    }

    #[test]
    fn variable_names_are_checked() {
        let mut problems = Vec::new();
        let kept = inherit_env("u", vec!["A_1".into(), "A_1".into(), "1A".into(), "X=Y".into()], &mut problems);
        assert_eq!(kept, ["A_1"]);
        assert_eq!(problems.len(), 2);
    }
}
