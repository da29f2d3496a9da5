//! The served folder's address space: `file://` URIs ↔ absolute paths under it, and mime types.
//!
//! Invariant: [`Root::open`] and [`Root::watchable`] only ever hand out what lies inside the
//! folder lexically and is reached from the folder's handle without following any symlink (see
//! [`beneath`]). Anything else (`..`, encoded `.`/`/`, a query, a fragment, a foreign host,
//! control characters, any symlink, a FIFO or device) is refused: the caller answers "not
//! found" and says nothing more.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, percent_encode};

use super::beneath::{self, Opened, Refused};

/// Bytes a path segment must percent-encode: everything but RFC 3986 `pchar`
/// (unreserved, sub-delims, `:` and `@`). Non-ASCII bytes are always encoded.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// How the folder's files are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UriBase {
    /// Relative to the folder: `file:///README.md` (the default; no host path is published).
    #[default]
    Relative,
    /// By absolute host path: `file:///srv/docs/README.md`.
    Absolute,
}

/// The canonical folder being served, a handle on it, and its URI.
#[derive(Debug)]
pub(super) struct Root {
    dir: PathBuf,
    /// Everything is opened relative to this handle (see [`beneath`]).
    handle: OwnedFd,
    uri: String,
    base: UriBase,
}

impl Root {
    /// Canonicalises and opens `dir`, naming files as `base` says; an error if it does not
    /// exist or is not a directory.
    pub(super) fn new(dir: &Path, base: UriBase) -> io::Result<Root> {
        let dir = dir.canonicalize()?;
        if !dir.is_dir() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "serve-dir needs a directory"));
        }
        let handle = beneath::open_root(&dir)?;
        let uri = match base {
            UriBase::Absolute => path_to_uri(&dir),
            UriBase::Relative => "file://".to_string(),
        };
        Ok(Root { dir, handle, uri, base })
    }

    /// The canonical folder.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The handle on the folder.
    pub(super) fn handle(&self) -> &OwnedFd {
        &self.handle
    }

    /// The URI of the folder without its trailing slash: `file://` (relative names) or
    /// `file:///<canonical dir>` (absolute ones).
    pub(super) fn uri(&self) -> &str {
        &self.uri
    }

    /// The URI of `path`, a path under the folder.
    pub(super) fn uri_of(&self, path: &Path) -> String {
        match self.base {
            UriBase::Absolute => path_to_uri(path),
            UriBase::Relative => path_to_uri(&Path::new("/").join(path.strip_prefix(&self.dir).unwrap_or(path))),
        }
    }

    /// Whether an absolute path lies under the folder (component-wise, no IO).
    pub(super) fn contains(&self, path: &Path) -> bool {
        path.starts_with(&self.dir)
    }

    /// The resource name of `path`: relative to the folder, `/`-separated.
    pub(super) fn name_of(&self, path: &Path) -> String {
        let relative = path.strip_prefix(&self.dir).unwrap_or(path);
        let parts: Vec<_> = relative.components().map(|c| c.as_os_str().to_string_lossy()).collect();
        parts.join("/")
    }

    /// The absolute path `uri` names if it is lexically under the folder. No IO.
    pub(super) fn locate(&self, uri: &str) -> Option<PathBuf> {
        let path = uri_to_path(uri)?;
        let path = match self.base {
            UriBase::Absolute => path,
            UriBase::Relative => self.dir.join(path.strip_prefix("/").ok()?),
        };
        self.contains(&path).then_some(path)
    }

    /// Opens what `uri` names: a regular file or directory under the folder reached without
    /// following any symlink. Returns the path as the URI spells it (its extension picks the
    /// mime type) with the handle.
    pub(super) fn open(&self, uri: &str) -> Result<(PathBuf, Opened), Refused> {
        let path = self.locate(uri).ok_or(Refused::NotServed)?;
        let relative = path.strip_prefix(&self.dir).map_err(|_| Refused::NotServed)?;
        let opened = beneath::open_under(&self.handle, relative)?;
        Ok((path, opened))
    }

    /// The path to watch for `uri`: its lexical path if it is, or may become, a file or
    /// directory that [`Root::open`] serves, so a subscription may precede the file; `None`
    /// for anything outside the folder or reached through a symlink.
    pub(super) fn watchable(&self, uri: &str) -> Option<PathBuf> {
        match self.open(uri) {
            Ok((path, _)) => Some(path),
            Err(Refused::Missing) => self.locate(uri),
            Err(_) => None,
        }
    }
}

/// `file://` + the absolute `path`, each segment percent-encoded.
pub(super) fn path_to_uri(path: &Path) -> String {
    let mut uri = String::from("file://");
    for component in path.components() {
        if let Component::Normal(segment) = component {
            uri.push('/');
            uri.extend(percent_encode(segment.as_encoded_bytes(), SEGMENT));
        }
    }
    if uri.len() == "file://".len() {
        uri.push('/');
    }
    uri
}

/// The URI of `path` below the one named `base` (which names a directory).
pub(super) fn uri_below(base: &str, relative: &Path) -> String {
    let mut uri = base.trim_end_matches('/').to_string();
    for component in relative.components() {
        if let Component::Normal(segment) = component {
            uri.push('/');
            uri.extend(percent_encode(segment.as_encoded_bytes(), SEGMENT));
        }
    }
    uri
}

/// The mime type of a file: by extension, else by whether its bytes are UTF-8.
pub(super) fn mime_for(path: &Path, is_utf8: bool) -> &'static str {
    mime_by_extension(path).unwrap_or(if is_utf8 { "text/plain" } else { "application/octet-stream" })
}

/// The mime type implied by the extension of `path`, if it is a known one.
pub(super) fn mime_by_extension(path: &Path) -> Option<&'static str> {
    let extension = path.extension()?.to_str()?.to_ascii_lowercase();
    let mime = match extension.as_str() {
        "md" | "markdown" => "text/markdown",
        "txt" | "text" | "log" => "text/plain",
        "json" => "application/json",
        "toml" => "application/toml",
        "yaml" | "yml" => "application/yaml",
        "xml" => "application/xml",
        "rs" => "text/x-rust",
        "py" => "text/x-python",
        "go" => "text/x-go",
        "c" | "h" => "text/x-c",
        "sh" => "text/x-shellscript",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "js" | "mjs" => "text/javascript",
        "csv" => "text/csv",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        "wasm" => "application/wasm",
        _ => return None,
    };
    Some(mime)
}

/// The absolute path a `file:` URI names, or `None` if the URI is not a plain local one.
fn uri_to_path(uri: &str) -> Option<PathBuf> {
    if uri.chars().any(char::is_control) || uri.contains(['?', '#']) {
        return None;
    }
    let scheme = uri.get(..7)?;
    if !scheme.eq_ignore_ascii_case("file://") {
        return None;
    }
    let rest = &uri[7..];
    let (host, path) = rest.split_at(rest.find('/')?);
    if !(host.is_empty() || host.eq_ignore_ascii_case("localhost")) {
        return None;
    }
    let mut result = PathBuf::from("/");
    for segment in decode_segments(&path[1..])? {
        result.push(os_string(segment)?);
    }
    Some(result)
}

/// Percent-decoded path segments; `None` for `.`, `..`, an empty inner segment or a
/// decoded `/`, NUL or control byte. One trailing slash is allowed.
fn decode_segments(path: &str) -> Option<Vec<Vec<u8>>> {
    let mut parts = path.split('/').peekable();
    let mut segments = Vec::new();
    while let Some(part) = parts.next() {
        if part.is_empty() {
            if parts.peek().is_none() {
                break;
            }
            return None;
        }
        let bytes: Vec<u8> = percent_decode_str(part).collect();
        let forbidden = |b: &u8| *b == b'/' || b.is_ascii_control();
        if bytes.iter().any(forbidden) || bytes == b"." || bytes == b".." {
            return None;
        }
        segments.push(bytes);
    }
    Some(segments)
}

#[cfg(unix)]
fn os_string(bytes: Vec<u8>) -> Option<OsString> {
    use std::os::unix::ffi::OsStringExt;
    Some(OsString::from_vec(bytes))
}

#[cfg(not(unix))]
fn os_string(bytes: Vec<u8>) -> Option<OsString> {
    String::from_utf8(bytes).ok().map(OsString::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(uri: &str, expected: Option<&str>) {
        assert_eq!(uri_to_path(uri), expected.map(PathBuf::from), "uri_to_path({uri:?})");
    }

    #[test]
    fn uris_parse_to_absolute_paths_or_nothing() {
        check("file:///srv/docs/a.md", Some("/srv/docs/a.md"));
        check("file://localhost/srv/a%20b.md", Some("/srv/a b.md"));
        check("FILE://LocalHost/srv/", Some("/srv"));
        check("file:///srv/%C3%A9.txt", Some("/srv/é.txt"));
        check("file:///", Some("/"));
        check("file:///srv/../etc/passwd", None);
        check("file:///srv/%2e%2e/etc", None);
        check("file:///srv/%2E%2E%2Fetc", None);
        check("file:///srv/a%2fb", None);
        check("file:///srv/./a", None);
        check("file:///srv//a", None);
        check("file:///srv/a?x=1", None);
        check("file:///srv/a#top", None);
        check("file://example.com/srv/a", None);
        check("file:///srv/a%0Ab", None);
        check("file:///srv/a\nb", None);
        check("file:///srv/a%00", None);
        check("http:///srv/a", None);
        check("file:", None);
    }

    #[test]
    fn paths_encode_to_uris() {
        let cases = [
            ("/srv/docs/a.md", "file:///srv/docs/a.md"),
            ("/srv/a b#c?.md", "file:///srv/a%20b%23c%3F.md"),
            ("/srv/100%/é", "file:///srv/100%25/%C3%A9"),
            ("/srv/x+y=z@w:v", "file:///srv/x+y=z@w:v"),
            ("/", "file:///"),
        ];
        for (path, uri) in cases {
            assert_eq!(path_to_uri(Path::new(path)), uri, "path_to_uri({path:?})");
            assert_eq!(uri_to_path(uri), Some(PathBuf::from(path)), "round trip {uri}");
        }
    }

    #[test]
    fn mime_types_follow_extension_then_content() {
        let cases = [
            ("a.md", true, "text/markdown"),
            ("a.JSON", true, "application/json"),
            ("a.rs", true, "text/x-rust"),
            ("a.png", false, "image/png"),
            ("Makefile", true, "text/plain"),
            ("blob.bin", false, "application/octet-stream"),
        ];
        for (name, utf8, mime) in cases {
            assert_eq!(mime_for(Path::new(name), utf8), mime, "{name}");
        }
    }
}
