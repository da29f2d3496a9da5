//! Opening things under the served folder through directory handles, never through paths.
//!
//! Invariant: every open starts at the folder's own directory handle and walks one name at a
//! time with `O_NOFOLLOW` (intermediate names also `O_DIRECTORY`), so no symlink is ever
//! followed and nothing can be swapped in between a check and the open: what is judged (by
//! `fstat` on the handle) is what is read. The final open adds `O_NONBLOCK`, so a FIFO or a
//! device cannot block a thread, and anything that is not a regular file or a directory is
//! refused as if it were missing.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;

/// An opened regular file or directory: the handle and what `fstat` said of it.
#[derive(Debug)]
pub(super) enum Opened {
    /// A regular file.
    File(File),
    /// A directory handle (for listing and opening its entries).
    Directory(OwnedFd),
}

/// What a path names when looked at without opening it (listing only).
#[derive(Debug, PartialEq)]
pub(super) enum Kind {
    File {
        len: u64,
    },
    Directory,
    /// Symlinks, FIFOs, sockets, devices: never listed, never read.
    Other,
}

/// Why an open failed.
#[derive(Debug)]
pub(super) enum Refused {
    /// Nothing there (possibly gone since the directory was read).
    Missing,
    /// A symlink somewhere on the way, or something that is not a file or directory.
    NotServed,
    /// Any other failure (permissions, IO); its text is for the log only.
    Io(io::Error),
}

/// Opens the folder itself (read-only, a directory, not a symlink).
pub(super) fn open_root(dir: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    Ok(rustix::fs::open(dir, flags, Mode::empty())?)
}

/// Opens `relative` (plain names only, as [`super::paths::Root::locate`] hands out) under
/// the directory `root`, refusing every symlink on the way.
pub(super) fn open_under(root: &OwnedFd, relative: &Path) -> Result<Opened, Refused> {
    let names: Vec<&OsStr> = relative
        .components()
        .map(|component| match component {
            Component::Normal(name) => Ok(name),
            _ => Err(Refused::NotServed),
        })
        .collect::<Result<_, _>>()?;
    let Some((last, parents)) = names.split_last() else {
        return open_entry(root, OsStr::new("."));
    };
    let mut dir: Option<OwnedFd> = None;
    for name in parents {
        let parent = dir.as_ref().unwrap_or(root);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        dir = Some(rustix::fs::openat(parent, *name, flags, Mode::empty()).map_err(refusal)?);
    }
    open_entry(dir.as_ref().unwrap_or(root), last)
}

/// Opens the entry `name` of the directory `dir` (no symlinks, no blocking) and keeps it
/// only if `fstat` on the handle says regular file or directory.
pub(super) fn open_entry(dir: &OwnedFd, name: &OsStr) -> Result<Opened, Refused> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = rustix::fs::openat(dir, name, flags, Mode::empty()).map_err(refusal)?;
    let stat = rustix::fs::fstat(&fd).map_err(refusal)?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok(Opened::File(File::from(fd))),
        FileType::Directory => Ok(Opened::Directory(fd)),
        _ => Err(Refused::NotServed),
    }
}

/// What the entry `name` of `dir` is, without following a symlink or opening it.
pub(super) fn kind_of(dir: &OwnedFd, name: &OsStr) -> Result<Kind, Refused> {
    let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(refusal)?;
    Ok(match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Kind::File { len: stat.st_size as u64 },
        FileType::Directory => Kind::Directory,
        _ => Kind::Other,
    })
}

/// The entry names of the directory `dir` (without `.` and `..`), sorted; `Ok(None)` if
/// there are more than `max` of them.
pub(super) fn entry_names(dir: &OwnedFd, max: usize) -> io::Result<Option<Vec<OsString>>> {
    let mut names = Vec::new();
    for entry in Dir::read_from(dir.as_fd())? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if names.len() == max {
            return Ok(None);
        }
        names.push(OsStr::from_bytes(name).to_os_string());
    }
    names.sort();
    Ok(Some(names))
}

fn refusal(errno: Errno) -> Refused {
    match errno {
        Errno::NOENT => Refused::Missing,
        // A symlink (ELOOP with O_NOFOLLOW; ENOTDIR when one sits where a directory was
        // expected, or a file does), a socket (ENXIO), an unsupported node.
        Errno::LOOP | Errno::NOTDIR | Errno::NXIO | Errno::OPNOTSUPP | Errno::NODEV => Refused::NotServed,
        other => Refused::Io(other.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_kind(result: Result<Opened, Refused>) -> &'static str {
        match result {
            Ok(Opened::File(_)) => "file",
            Ok(Opened::Directory(_)) => "directory",
            Err(Refused::Missing) => "missing",
            Err(Refused::NotServed) => "not served",
            Err(Refused::Io(_)) => "io",
        }
    }

    #[test]
    fn opens_files_and_directories_and_refuses_links_fifos_and_missing_names() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
        std::fs::write(dir.join("sub/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink("a.txt", dir.join("sub/link")).unwrap();
        std::os::unix::fs::symlink("sub", dir.join("linked-dir")).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, dir.join("fifo"), FileType::Fifo, Mode::RUSR | Mode::WUSR, 0).unwrap();
        let root = open_root(dir).unwrap();
        let cases = [
            ("", "directory"),
            ("sub", "directory"),
            ("sub/deeper", "directory"),
            ("sub/a.txt", "file"),
            ("sub/link", "not served"),
            ("linked-dir/a.txt", "not served"),
            ("linked-dir", "not served"),
            ("fifo", "not served"),
            ("sub/a.txt/x", "not served"),
            ("sub/missing", "missing"),
            ("missing/a.txt", "missing"),
            ("../etc", "not served"),
        ];
        for (relative, expected) in cases {
            assert_eq!(refused_kind(open_under(&root, Path::new(relative))), expected, "{relative:?}");
        }
        assert_eq!(kind_of(&root, OsStr::new("fifo")).ok(), Some(Kind::Other));
        assert_eq!(kind_of(&root, OsStr::new("linked-dir")).ok(), Some(Kind::Other));
        let names = entry_names(&root, 10).unwrap().unwrap();
        assert_eq!(names, ["fifo", "linked-dir", "sub"]);
        assert_eq!(entry_names(&root, 2).unwrap(), None, "over the cap");
    }
}
