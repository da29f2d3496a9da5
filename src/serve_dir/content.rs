//! Listing and reading the folder: blocking file IO, run by callers on the blocking pool.
//!
//! Invariant: everything is opened through [`super::beneath`] from the folder's handle, so no
//! symlink is ever followed, only regular files are read (never FIFOs or devices) and what
//! is read is the handle that was checked. A reply stays within [`MAX_REPLY_BYTES`] counted
//! as it goes on the wire (base64 for blobs, JSON escaping for text), a directory read within
//! [`MAX_DIRECTORY_ENTRIES`]; a directory read names nothing but its direct entries, each as
//! its own content under its own URI, so a per-URI policy can drop any of them.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rmcp::ErrorData;
use rmcp::model::{Resource, ResourceContents};

use super::beneath::{self, Kind, Opened, Refused};
use super::paths::{Root, mime_by_extension, mime_for};

/// The most bytes the contents of one reply may take on the wire (a file, or all entries of
/// a directory read together): 16 MiB, less room for the JSON-RPC envelope, because a
/// transport refuses messages over 16 MiB.
pub(super) const MAX_REPLY_BYTES: u64 = 16 * 1024 * 1024 - 64 * 1024;

/// The most entries a directory read answers for; a bigger directory is refused.
pub(super) const MAX_DIRECTORY_ENTRIES: usize = 10_000;

/// How deep a listing descends below the folder.
const MAX_LIST_DEPTH: usize = 64;

/// The most entries of one directory a listing looks at (a bigger one is skipped, logged).
const MAX_LIST_ENTRIES: usize = 100_000;

/// The JSON one content or listed resource adds besides its strings (keys, quotes, braces).
const ITEM_OVERHEAD: u64 = 128;

/// How many leading bytes decide "text or binary" for a file with an unknown extension.
const SNIFF_BYTES: u64 = 8 * 1024;

/// Mime type of a subdirectory's (empty) content in a directory read.
const DIRECTORY_MIME: &str = "inode/directory";

/// Why a read produced no contents.
#[derive(Debug)]
pub(super) enum ReadError {
    /// Missing, outside the folder, a symlink, or not a file or directory: all look the same.
    NotFound,
    /// Over [`MAX_REPLY_BYTES`] once encoded.
    TooLarge,
    /// A directory with more than [`MAX_DIRECTORY_ENTRIES`] entries.
    TooManyEntries,
    /// Any other IO failure; its text is for the log only.
    Io(io::Error),
}

impl ReadError {
    /// The wire error; never carries OS text or paths.
    pub(super) fn to_error_data(&self) -> ErrorData {
        match self {
            ReadError::NotFound => ErrorData::resource_not_found("resource not found", None),
            ReadError::TooLarge => ErrorData::invalid_request(
                "resource is too large: a reply is limited to 16 MiB as sent (base64 for binary, escaped text)",
                None,
            ),
            ReadError::TooManyEntries => {
                ErrorData::invalid_request("directory is too large: a directory read is limited to 10000 entries", None)
            }
            ReadError::Io(_) => ErrorData::internal_error("resource could not be read", None),
        }
    }
}

impl From<Refused> for ReadError {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::Missing | Refused::NotServed => ReadError::NotFound,
            Refused::Io(e) => ReadError::Io(e),
        }
    }
}

impl From<io::Error> for ReadError {
    fn from(error: io::Error) -> Self {
        match error.kind() {
            io::ErrorKind::NotFound => ReadError::NotFound,
            _ => ReadError::Io(error),
        }
    }
}

/// Every regular file under the folder (not through symlinks), sorted by URI; bounded in
/// depth and in size on the wire (a truncated listing is logged).
pub(super) fn list(root: &Root) -> Vec<Resource> {
    let mut walk = Walk { root, resources: Vec::new(), budget: Budget::new(), full: false, skipped: false };
    walk.directory(root.handle(), root.dir(), 0);
    if walk.full || walk.skipped {
        let listed = walk.resources.len();
        tracing::warn!(uri = %root.uri(), listed, full = walk.full, "folder listing incomplete: too large or too deep");
    }
    let mut resources = walk.resources;
    resources.sort_by(|a, b| a.uri.cmp(&b.uri));
    resources
}

/// The contents `uri` names: one for a file, one per direct entry for a directory.
pub(super) fn read(root: &Root, uri: &str) -> Result<Vec<ResourceContents>, ReadError> {
    let (path, opened) = root.open(uri)?;
    let mut budget = Budget::new();
    match opened {
        Opened::Directory(dir) => read_directory(root, &dir, &path, &mut budget),
        Opened::File(file) => Ok(vec![read_file(file, &path, uri.to_owned(), &mut budget)?]),
    }
}

/// Bytes left for one reply, as sent.
struct Budget {
    left: u64,
}

impl Budget {
    fn new() -> Budget {
        Budget { left: MAX_REPLY_BYTES }
    }

    fn charge(&mut self, bytes: u64) -> Result<(), ReadError> {
        self.left = self.left.checked_sub(bytes).ok_or(ReadError::TooLarge)?;
        Ok(())
    }
}

/// A listing in progress.
struct Walk<'a> {
    root: &'a Root,
    resources: Vec<Resource>,
    budget: Budget,
    /// The size budget ran out: nothing more is listed.
    full: bool,
    /// A directory was too deep or too big and was left out.
    skipped: bool,
}

impl Walk<'_> {
    /// Lists the regular files under `dir` (whose path is `path`), descending into real
    /// subdirectories only.
    fn directory(&mut self, dir: &OwnedFd, path: &Path, depth: usize) {
        let names = match beneath::entry_names(dir, MAX_LIST_ENTRIES) {
            Ok(Some(names)) => names,
            Ok(None) => {
                self.skipped = true;
                return;
            }
            Err(e) => {
                tracing::warn!(uri = %self.root.uri_of(path), error = %e, "cannot list directory");
                return;
            }
        };
        for name in names {
            if self.full {
                return;
            }
            let child = path.join(&name);
            match beneath::kind_of(dir, &name) {
                Ok(Kind::Directory) if depth >= MAX_LIST_DEPTH => self.skipped = true,
                Ok(Kind::Directory) => {
                    if let Ok(Opened::Directory(subdir)) = beneath::open_entry(dir, &name) {
                        self.directory(&subdir, &child, depth + 1);
                    }
                }
                Ok(Kind::File { len }) => self.file(dir, &name, &child, len),
                Ok(Kind::Other) | Err(_) => {}
            }
        }
    }

    fn file(&mut self, dir: &OwnedFd, name: &OsStr, path: &Path, len: u64) {
        let mime = match mime_by_extension(path) {
            Some(mime) => mime,
            None => match beneath::open_entry(dir, name) {
                Ok(Opened::File(file)) => mime_for(path, sniff_utf8(file)),
                _ => return,
            },
        };
        let resource =
            Resource::new(self.root.uri_of(path), self.root.name_of(path)).with_mime_type(mime).with_size(len);
        let cost = json_len(&resource.uri) + json_len(&resource.name) + mime.len() as u64 + ITEM_OVERHEAD;
        match self.budget.charge(cost) {
            Ok(()) => self.resources.push(resource),
            Err(_) => self.full = true,
        }
    }
}

/// Whether the first bytes of a file are UTF-8 (a sequence cut at the end still counts).
fn sniff_utf8(file: File) -> bool {
    let mut head = Vec::new();
    let read = file.take(SNIFF_BYTES).read_to_end(&mut head);
    read.is_ok() && looks_utf8(&head)
}

fn looks_utf8(bytes: &[u8]) -> bool {
    match std::str::from_utf8(bytes) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    }
}

/// One content per direct entry of the directory `dir` (whose path is `path`), by name:
/// a file with its data, a subdirectory as an empty `inode/directory` content (read its URI
/// for its entries). Entries that vanish, are symlinks or are not files or directories are
/// skipped.
fn read_directory(
    root: &Root,
    dir: &OwnedFd,
    path: &Path,
    budget: &mut Budget,
) -> Result<Vec<ResourceContents>, ReadError> {
    let names = beneath::entry_names(dir, MAX_DIRECTORY_ENTRIES)?.ok_or(ReadError::TooManyEntries)?;
    let mut contents = Vec::new();
    for name in names {
        let child = path.join(&name);
        let uri = root.uri_of(&child);
        match beneath::open_entry(dir, &name) {
            Ok(Opened::Directory(_)) => {
                budget.charge(json_len(&uri) + DIRECTORY_MIME.len() as u64 + ITEM_OVERHEAD)?;
                contents.push(ResourceContents::text("", uri).with_mime_type(DIRECTORY_MIME));
            }
            Ok(Opened::File(file)) => contents.push(read_file(file, &child, uri, budget)?),
            Err(Refused::Io(e)) => tracing::debug!(uri = %uri, error = %e, "directory entry skipped"),
            Err(Refused::Missing | Refused::NotServed) => {}
        }
    }
    Ok(contents)
}

/// An opened regular file as text (UTF-8) or base64 blob, charged against `budget` at its
/// size as sent.
fn read_file(file: File, named: &Path, uri: String, budget: &mut Budget) -> Result<ResourceContents, ReadError> {
    let mut bytes = Vec::new();
    // What is sent is never smaller than the bytes read, so this bounds memory too.
    file.take(budget.left + 1).read_to_end(&mut bytes)?;
    let fixed = json_len(&uri) + ITEM_OVERHEAD;
    match String::from_utf8(bytes) {
        Ok(text) => {
            let mime = mime_for(named, true);
            budget.charge(fixed + mime.len() as u64 + json_len(&text))?;
            Ok(ResourceContents::text(text, uri).with_mime_type(mime))
        }
        Err(e) => {
            let mime = mime_for(named, false);
            budget.charge(fixed + mime.len() as u64 + base64_len(e.as_bytes().len()))?;
            Ok(ResourceContents::blob(STANDARD.encode(e.into_bytes()), uri).with_mime_type(mime))
        }
    }
}

/// The length of `text` inside a JSON string as serde_json writes it.
fn json_len(text: &str) -> u64 {
    text.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

/// The length of `n` bytes in padded base64.
fn base64_len(n: usize) -> u64 {
    (n as u64).div_ceil(3) * 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_sniffing_tolerates_a_cut_sequence() {
        assert!(looks_utf8("héllo".as_bytes()));
        assert!(looks_utf8(&"é".as_bytes()[..1]));
        assert!(!looks_utf8(&[0xff, 0xfe, 0x00]));
    }

    #[test]
    fn sizes_are_counted_as_serialised() {
        for text in ["plain", "a\"b\\c", "line\nbreak\ttab", "\u{1}\u{1f}\u{7f}", "é€😀", ""] {
            let serialised = serde_json::to_string(text).unwrap();
            assert_eq!(json_len(text), serialised.len() as u64 - 2, "{text:?}");
        }
        for n in [0, 1, 2, 3, 4, 5, 6, 1000] {
            assert_eq!(base64_len(n), STANDARD.encode(vec![0u8; n]).len() as u64, "{n}");
        }
    }
}
