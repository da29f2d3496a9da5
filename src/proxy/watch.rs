//! Watching a folder (or one file in it) for changes, for the reload tasks.
//!
//! The notify callback only signals "something changed" through a channel of one slot: a
//! signal already waiting says everything a second one would, so a full slot loses nothing.
//! Editors write in several steps, so a change counts once the folder has been quiet for a
//! moment (`settle`).

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub(super) struct FileChanges {
    changed: mpsc::Receiver<()>,
    /// Kept alive for as long as changes are wanted.
    _watcher: notify::RecommendedWatcher,
}

impl FileChanges {
    /// Watch `dir` (not recursively); with `file`, only changes naming that file count. `what`
    /// names it in the warning when it cannot be watched (then `None`: reload with SIGHUP).
    pub fn watch(dir: &Path, file: Option<OsString>, what: &str) -> Option<Self> {
        let (signal, changed) = mpsc::channel(1);
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            let named = |file: &OsString| event.paths.iter().any(|p| p.file_name() == Some(file.as_os_str()));
            if !event.kind.is_access() && file.as_ref().is_none_or(named) {
                let _ = signal.try_send(());
            }
        });
        let watched = watcher.and_then(|mut watcher| {
            notify::Watcher::watch(&mut watcher, dir, notify::RecursiveMode::NonRecursive).map(|()| watcher)
        });
        match watched {
            Ok(watcher) => Some(Self { changed, _watcher: watcher }),
            Err(error) => {
                tracing::warn!(error = %error, path = %dir.display(), "cannot watch the {what}; reload with SIGHUP");
                None
            }
        }
    }

    /// Wait for a change and for the quiet after it. False on shutdown.
    pub async fn next_burst(&mut self, settle: Duration, shutdown: &CancellationToken) -> bool {
        tokio::select! {
            Some(()) = self.changed.recv() => {}
            _ = shutdown.cancelled() => return false,
        }
        loop {
            tokio::select! {
                quiet = tokio::time::timeout(settle, self.changed.recv()) => match quiet {
                    Ok(Some(())) => continue,
                    Ok(None) | Err(_) => return true,
                },
                _ = shutdown.cancelled() => return false,
            }
        }
    }
}
