//! URI normalisation: the one form of a URI that policies decide on and that goes upstream.
//!
//! [`normalize`] applies RFC 3986 §6.2.2 syntax-based normalisation and then folds or refuses
//! everything that would let two spellings of one resource be judged differently by a glob and
//! by the upstream that serves it. Pure: no IO.
//!
//! Invariant: what is checked is what is forwarded. A URI either normalises to exactly one
//! string, which the policy decides on and which is the only form sent upstream, or it is
//! refused (the caller answers "not found"). `normalize(normalize(u)?) == normalize(u)`.
//!
//! The rules, in order (components are split on the raw text, RFC 3986 Appendix B, so an
//! encoded delimiter never delimits):
//! - **Refused outright:** the empty string; control characters (U+0000–U+001F, U+007F, C1) and
//!   any whitespace, raw or percent-encoded (`%00`–`%1F`, `%7F`); a backslash, raw or encoded
//!   (`%5C`): Windows upstreams treat it as a separator and RFC 3986 does not allow it, so
//!   it can only be a trick; a `%` not followed by two hex digits; no valid scheme.
//! - **Non-ASCII** is percent-encoded as UTF-8 (the RFC 3987 IRI → URI mapping), as are the
//!   ASCII characters RFC 3986 never allows raw (`"<>^`{|}`). No Unicode normalisation
//!   (NFC/NFKC) is done: encoded bytes are compared as bytes.
//! - **Scheme** lower-cased (`DOCS+FILE:` → `docs+file:`).
//! - **Authority: one spelling per host.** An upstream that resolves URIs with a URL parser
//!   reads `//@h/`, `//u@h/`, `//h:/`, `//h:80/` and `//h./` all as host `h`, while a glob sees
//!   five other strings. So: **user info is refused** (`u@h`, and the empty `@h`: resource
//!   URIs carry no credentials, and stripping it would forward what the host did not ask for);
//!   the **host** is lower-cased and **one trailing `.` is dropped** (`h.` → `h`; `h..` and an
//!   empty host before a `.` are refused); an **empty port is dropped** (`h:` → `h`); an
//!   **explicit port is kept** without leading zeros (`h:080` → `h:80`), and a non-numeric or
//!   out-of-range port is refused. Which port a custom scheme defaults to is unknowable, so
//!   `h:80` stays its own authority for allow globs, but deny globs also judge it without the
//!   port ([`without_port`], see `policy`): a deny on host `h` covers every port of `h`.
//! - **Percent-encoding:** hex upper-cased (`%2f` → `%2F`); encoded unreserved characters
//!   (`A–Z a–z 0–9 - . _ ~`) decoded (`%73ecrets` → `secrets`, `%2e%2e` → `..`), so that
//!   encoded dots become dot segments and are removed below.
//! - **Encoded `/` (`%2F`) in the authority or path is refused.** Keeping it encoded is not
//!   safe: a glob sees `secrets%2Fkey` as one segment while a file server that decodes the
//!   path opens `secrets/key`. Decoding it is not safe either: it would forward a different
//!   resource to a server that does keep it as data. Only refusing has one meaning for both.
//!   In the query and fragment `%2F` is ordinary data and is kept.
//! - **Double encoding** (`%25` followed by two hex digits, e.g. `%252e`) in the authority or
//!   path is refused: an upstream that decodes twice would see a dot or a slash the policy
//!   never saw. A literal `%` elsewhere (`100%25`) is fine.
//! - **Paths:** runs of `/` collapse to one (`a//b` → `a/b`); dot segments are removed (RFC 3986
//!   §5.2.4; `..` above the root is dropped), also in rootless paths, which stay rootless.
//!   A segment that still ends in `.` or in an encoded space (`secrets.`, `.env%20`), or that
//!   names an NTFS stream (`::$`), is refused: Windows strips or reinterprets them, so
//!   `secrets.` would open `secrets` behind the policy's back.
//! - **`file:` URIs** (original scheme `file`, after any `name+`): `file://localhost/x` and
//!   `file:/x` fold to `file:///x` (RFC 8089); any other authority, and a rootless path
//!   (`file:a/.env`), is refused, so a deny rule written as `*+file:///…` covers every file URI
//!   that can get through.
//! - **Case of paths is kept.** Paths are case-sensitive in RFC 3986 and for many servers;
//!   folding would forward a different resource. Case-insensitive file systems are handled
//!   by the policy instead: deny globs match case-insensitively (see `policy`).
//! - **The fragment is dropped** (after the checks above). RFC 3986 §3.5: a fragment names
//!   part of what the server returns and is never sent to it, so `x#y` is the resource `x` —
//!   judged, cached and forwarded as `x`. Keeping it would let a glob see text no server acts
//!   on (`secret.txt#.md` matching `*.md`).
//! - **Invisible formatting characters** (zero-width space/joiners U+200B–U+200F, bidi
//!   embeddings and overrides U+202A–U+202E and isolates U+2066–U+2069, U+2060–U+2064, the BOM
//!   U+FEFF), raw or percent-encoded, are refused: RFC 3987 §4.1 forbids the bidi ones, and all
//!   of them only make two different URIs look alike to a person reading a policy or a log.
//! - **Longer than [`MAX_URI_BYTES`]** (as sent) is refused before anything else is done.
//! - The query gets percent-encoding normalisation only; it is kept and forwarded.

mod authority;
mod percent;

use thiserror::Error;

use self::authority::normalize_authority;
pub use self::authority::without_port;
use self::percent::{Component, encode_raw, has_invisible, normalize_percent};

/// The longest URI accepted, in bytes as sent (8 KiB: far above any real resource URI, and
/// what common HTTP servers accept as a whole request line).
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// Why a URI cannot be normalised. Callers answer these exactly like "not found".
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UriError {
    #[error("empty URI")]
    Empty,
    #[error("no valid scheme")]
    NoScheme,
    #[error("control character or whitespace")]
    ControlOrWhitespace,
    #[error("backslash")]
    Backslash,
    #[error("invalid percent-encoding")]
    InvalidPercent,
    #[error("encoded `/` in the path or authority")]
    EncodedSlash,
    #[error("double percent-encoding")]
    DoubleEncoded,
    #[error("a path segment ends in `.` or a space, or names a stream")]
    AmbiguousSegment,
    #[error("a file URI that is not file:///<absolute path>")]
    FileForm,
    #[error("an invisible formatting character (zero-width, bidi control, BOM)")]
    Invisible,
    #[error("longer than {MAX_URI_BYTES} bytes")]
    TooLong,
    #[error("user info in the authority (`user@host`, also an empty one)")]
    UserInfo,
    #[error("a port that is not a number from 0 to 65535")]
    InvalidPort,
    #[error("a host that is empty or ends in more than one `.`")]
    AmbiguousHost,
}

/// Normalise `uri` (see the module doc for every rule), or say why it cannot be.
pub fn normalize(uri: &str) -> Result<String, UriError> {
    if uri.is_empty() {
        return Err(UriError::Empty);
    }
    if uri.len() > MAX_URI_BYTES {
        return Err(UriError::TooLong);
    }
    let text = encode_raw(uri)?;
    let parts = Parts::split(&text)?;
    let scheme = parts.scheme.to_ascii_lowercase();
    let mut authority = match parts.authority {
        Some(raw) => Some(normalize_authority(raw)?),
        None => None,
    };
    let mut path = normalize_percent(parts.path, Component::Path)?;
    if is_file_scheme(&scheme) {
        match authority.as_deref() {
            None if path.starts_with('/') => authority = Some(String::new()),
            Some("") => {}
            Some("localhost") => authority = Some(String::new()),
            None | Some(_) => return Err(UriError::FileForm),
        }
    }
    path = remove_dot_segments(&collapse_slashes(&path));
    check_segments(&path)?;
    let mut out = scheme;
    out.push(':');
    if let Some(authority) = authority {
        out.push_str("//");
        out.push_str(&authority);
    }
    out.push_str(&path);
    if let Some(query) = parts.query {
        out.push('?');
        out.push_str(&normalize_percent(query, Component::Query)?);
    }
    if let Some(fragment) = parts.fragment {
        // Checked like a query (a malformed one is a trick, not data), then dropped.
        normalize_percent(fragment, Component::Query)?;
    }
    if has_invisible(&out) {
        return Err(UriError::Invisible);
    }
    Ok(out)
}

/// The URI without its query and fragment: what a server that ignores them would serve.
pub fn without_query(uri: &str) -> &str {
    uri.find(['?', '#']).map_or(uri, |end| &uri[..end])
}

/// The raw components of a URI, RFC 3986 Appendix B.
struct Parts<'a> {
    scheme: &'a str,
    authority: Option<&'a str>,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> Parts<'a> {
    fn split(text: &'a str) -> Result<Parts<'a>, UriError> {
        let (scheme, rest) = text.split_once(':').ok_or(UriError::NoScheme)?;
        if !is_scheme(scheme) {
            return Err(UriError::NoScheme);
        }
        let (rest, fragment) = split_off(rest, '#');
        let (rest, query) = split_off(rest, '?');
        let (authority, path) = match rest.strip_prefix("//") {
            Some(after) => {
                let end = after.find('/').unwrap_or(after.len());
                (Some(&after[..end]), &after[end..])
            }
            None => (None, rest),
        };
        Ok(Parts { scheme, authority, path, query, fragment })
    }
}

fn split_off(text: &str, delimiter: char) -> (&str, Option<&str>) {
    match text.split_once(delimiter) {
        Some((before, after)) => (before, Some(after)),
        None => (text, None),
    }
}

fn is_scheme(scheme: &str) -> bool {
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// `file`, or `<name>+file` for a namespaced one.
fn is_file_scheme(scheme: &str) -> bool {
    scheme.rsplit('+').next() == Some("file")
}

fn collapse_slashes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if !(c == '/' && out.ends_with('/')) {
            out.push(c);
        }
    }
    out
}

/// RFC 3986 §5.2.4 on whole segments. A rootless path stays rootless.
fn remove_dot_segments(path: &str) -> String {
    let rooted = path.starts_with('/');
    let body = path.strip_prefix('/').unwrap_or(path);
    let mut kept: Vec<&str> = Vec::new();
    let mut segments = body.split('/').peekable();
    let mut ends_in_directory = false;
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        match segment {
            "." => ends_in_directory = last,
            ".." => {
                kept.pop();
                ends_in_directory = last;
            }
            other => {
                kept.push(other);
                ends_in_directory = false;
            }
        }
    }
    let mut out = if rooted { String::from("/") } else { String::new() };
    out.push_str(&kept.join("/"));
    if ends_in_directory && !kept.is_empty() {
        out.push('/');
    }
    out
}

fn check_segments(path: &str) -> Result<(), UriError> {
    let ambiguous = |segment: &str| segment.ends_with('.') || segment.ends_with("%20") || segment.contains("::$");
    if path.split('/').any(ambiguous) { Err(UriError::AmbiguousSegment) } else { Ok(()) }
}

#[cfg(test)]
mod tests;
