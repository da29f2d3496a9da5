//! Listing and reading the folder: blocking file IO, run by callers on the blocking pool.
//!
//! Invariant: only paths that [`Root`] vouches for are opened, and only regular files are read
//! (never FIFOs or devices); symlinks are followed only when they land inside the folder, and
//! symlinked directories are not descended into while listing (no cycles).

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rmcp::ErrorData;
use rmcp::model::{Resource, ResourceContents};

use super::paths::{Root, mime_by_extension, mime_for, path_to_uri};

/// The most bytes one read returns (a file, or all files of a directory read together).
pub(super) const MAX_READ_BYTES: u64 = 16 * 1024 * 1024;

/// How many leading bytes decide "text or binary" for a file with an unknown extension.
const SNIFF_BYTES: u64 = 8 * 1024;

/// Mime type of a directory's listing in a directory read.
const DIRECTORY_MIME: &str = "inode/directory";

/// Why a read produced no contents.
#[derive(Debug)]
pub(super) enum ReadError {
    /// Missing, outside the folder, or not a file or directory: all look the same.
    NotFound,
    /// Over [`MAX_READ_BYTES`].
    TooLarge,
    /// Any other IO failure; its text is for the log only.
    Io(io::Error),
}

impl ReadError {
    /// The wire error; never carries OS text or paths.
    pub(super) fn to_error_data(&self) -> ErrorData {
        match self {
            ReadError::NotFound => ErrorData::resource_not_found("resource not found", None),
            ReadError::TooLarge => {
                ErrorData::invalid_request("resource is too large: reads are limited to 16 MiB", None)
            }
            ReadError::Io(_) => ErrorData::internal_error("resource could not be read", None),
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

/// Every regular file under the folder, sorted by URI.
pub(super) fn list(root: &Root) -> Vec<Resource> {
    let mut resources = Vec::new();
    walk(root, root.dir(), &mut resources);
    resources.sort_by(|a, b| a.uri.cmp(&b.uri));
    resources
}

/// The contents `uri` names: one for a file, one per direct entry for a directory.
pub(super) fn read(root: &Root, uri: &str) -> Result<Vec<ResourceContents>, ReadError> {
    let located = root.resolve(uri).ok_or(ReadError::NotFound)?;
    let metadata = fs::metadata(&located.real)?;
    if metadata.is_dir() {
        return read_directory(root, &located.real);
    }
    if !metadata.is_file() {
        return Err(ReadError::NotFound);
    }
    let mut budget = MAX_READ_BYTES;
    let contents = read_file(&located.real, &located.path, uri.to_owned(), &mut budget)?;
    Ok(vec![contents])
}

fn walk(root: &Root, dir: &Path, resources: &mut Vec<Resource>) {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(uri = %path_to_uri(dir), error = %e, "cannot list directory");
            return;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        if file_type.is_dir() {
            walk(root, &path, resources);
        } else if let Some(resource) = describe(root, &path, file_type.is_symlink()) {
            resources.push(resource);
        }
    }
}

/// The resource for `path` if it is, or links to, a regular file inside the folder.
fn describe(root: &Root, path: &Path, is_symlink: bool) -> Option<Resource> {
    let real = if is_symlink {
        let real = path.canonicalize().ok()?;
        root.contains(&real).then_some(real)?
    } else {
        path.to_path_buf()
    };
    let metadata = fs::metadata(&real).ok()?;
    if !metadata.is_file() {
        return None;
    }
    let mime = mime_by_extension(path).unwrap_or_else(|| mime_for(path, sniff_utf8(&real)));
    let resource = Resource::new(path_to_uri(path), root.name_of(path)).with_mime_type(mime).with_size(metadata.len());
    Some(resource)
}

/// Whether the first bytes of a file are UTF-8 (a sequence cut at the end still counts).
fn sniff_utf8(path: &Path) -> bool {
    let mut head = Vec::new();
    let read = File::open(path).and_then(|f| f.take(SNIFF_BYTES).read_to_end(&mut head));
    read.is_ok() && looks_utf8(&head)
}

fn looks_utf8(bytes: &[u8]) -> bool {
    match std::str::from_utf8(bytes) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    }
}

/// One content per direct entry of `dir` (a real directory inside the folder), by name.
fn read_directory(root: &Root, dir: &Path) -> Result<Vec<ResourceContents>, ReadError> {
    let mut budget = MAX_READ_BYTES;
    let mut contents = Vec::new();
    for name in entry_names(dir)? {
        let path = dir.join(&name);
        let Ok(real) = path.canonicalize() else {
            continue;
        };
        if !root.contains(&real) {
            continue;
        }
        let Ok(metadata) = fs::metadata(&real) else {
            continue;
        };
        let uri = path_to_uri(&path);
        if metadata.is_dir() {
            contents.push(directory_listing(&real, uri)?);
        } else if metadata.is_file() {
            contents.push(read_file(&real, &path, uri, &mut budget)?);
        }
    }
    Ok(contents)
}

/// A subdirectory as text: its entry names, one per line.
fn directory_listing(dir: &Path, uri: String) -> Result<ResourceContents, ReadError> {
    let names: Vec<String> = entry_names(dir)?.iter().map(|name| name.to_string_lossy().into_owned()).collect();
    Ok(ResourceContents::text(names.join("\n"), uri).with_mime_type(DIRECTORY_MIME))
}

fn entry_names(dir: &Path) -> io::Result<Vec<std::ffi::OsString>> {
    let mut names = fs::read_dir(dir)?.map(|entry| entry.map(|e| e.file_name())).collect::<io::Result<Vec<_>>>()?;
    names.sort();
    Ok(names)
}

/// A regular file as text (UTF-8) or base64 blob, charged against `budget`.
fn read_file(real: &Path, named: &Path, uri: String, budget: &mut u64) -> Result<ResourceContents, ReadError> {
    let file = File::open(real)?;
    if !file.metadata()?.is_file() {
        return Err(ReadError::NotFound);
    }
    let mut bytes = Vec::new();
    file.take(*budget + 1).read_to_end(&mut bytes)?;
    let len = bytes.len() as u64;
    if len > *budget {
        return Err(ReadError::TooLarge);
    }
    *budget -= len;
    Ok(contents_of(bytes, named, uri))
}

fn contents_of(bytes: Vec<u8>, named: &Path, uri: String) -> ResourceContents {
    match String::from_utf8(bytes) {
        Ok(text) => ResourceContents::text(text, uri).with_mime_type(mime_for(named, true)),
        Err(e) => ResourceContents::blob(STANDARD.encode(e.into_bytes()), uri).with_mime_type(mime_for(named, false)),
    }
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
}
