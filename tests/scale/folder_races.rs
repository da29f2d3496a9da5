//! The folder server against a hostile folder that changes under it: a path swapped between a
//! file and a symlink out, a path swapped between a file and a FIFO, entries vanishing while
//! a directory is read. Each race runs for a bounded number of reads (several tasks at once,
//! through a real rmcp client over `tokio::io::duplex`) and asserts zero escapes, zero hangs
//! and zero spurious failures; a control asserts the race really alternated.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use mcp_resource_proxy::serve_dir::{FolderServer, UriBase};
use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::{ClientCacheConfig, ServiceExt};
use rustix::fs::{CWD, FileType, Mode, OFlags, RenameFlags};
use tokio::time::timeout;

/// Reads per race (spread over [`TASKS`] concurrent tasks).
const READS: usize = 4_000;
const TASKS: usize = 8;
/// The most swaps a swapper makes even if the reads have not finished.
const MAX_SWAPS: usize = 1_000_000;
/// How long any one read may take before it counts as hung.
const READ_DEADLINE: Duration = Duration::from_secs(5);
const SECRET: &str = "SECRET-FROM-OUTSIDE-THE-FOLDER";
const INSIDE: &str = "inside";

/// What one read answered.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// Contents, as their texts (blobs as `<blob>`) and URIs.
    Read(Vec<(String, String)>),
    /// An MCP error (code).
    Refused(i32),
    /// No answer within [`READ_DEADLINE`].
    Hung,
}

/// `outer/secret.txt` next to the served folder `outer/served/`.
struct Folder {
    _temp: tempfile::TempDir,
    outer: PathBuf,
    served: PathBuf,
}

impl Folder {
    fn new() -> Folder {
        let temp = tempfile::tempdir().unwrap();
        let outer = temp.path().canonicalize().unwrap();
        let served = outer.join("served");
        std::fs::create_dir(&served).unwrap();
        std::fs::write(outer.join("secret.txt"), SECRET).unwrap();
        Folder { _temp: temp, outer, served }
    }

    /// The URI of `relative` (files are named relative to the folder; `""` is the folder).
    fn uri(&self, relative: &str) -> String {
        match relative.trim_end_matches('/') {
            "" => "file:///".to_string(),
            relative => format!("file:///{relative}"),
        }
    }
}

async fn connect(dir: &Path) -> RunningService<RoleClient, ()> {
    let server = FolderServer::with_uri_base(dir, UriBase::Relative).unwrap();
    let (server_side, client_side) = tokio::io::duplex(1024 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_side).await {
            let _ = running.waiting().await;
        }
    });
    let client = ().serve(client_side).await.unwrap();
    client.peer().set_response_cache_config(ClientCacheConfig::disabled()).await;
    client
}

async fn read(peer: &Peer<RoleClient>, uri: &str) -> Outcome {
    match timeout(READ_DEADLINE, peer.read_resource(ReadResourceRequestParams::new(uri))).await {
        Err(_) => Outcome::Hung,
        Ok(Err(rmcp::ServiceError::McpError(e))) => Outcome::Refused(e.code.0),
        Ok(Err(other)) => panic!("transport failure reading {uri}: {other:?}"),
        Ok(Ok(result)) => Outcome::Read(result.contents.iter().map(text_and_uri).collect()),
    }
}

fn text_and_uri(contents: &ResourceContents) -> (String, String) {
    match contents {
        ResourceContents::TextResourceContents { uri, text, .. } => (text.clone(), uri.clone()),
        ResourceContents::BlobResourceContents { uri, .. } => ("<blob>".into(), uri.clone()),
        other => panic!("unexpected contents {other:?}"),
    }
}

/// [`READS`] reads spread over [`TASKS`] tasks, each of one of `uris` in turn.
async fn race_reads(peer: &Peer<RoleClient>, uris: &[String]) -> Vec<Outcome> {
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let peer = peer.clone();
        let uris = uris.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for i in 0..READS / TASKS {
                outcomes.push(read(&peer, &uris[(task + i) % uris.len()]).await);
            }
            outcomes
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.extend(task.await.unwrap());
    }
    outcomes
}

/// A thread running `step` until told to stop (or [`MAX_SWAPS`] times).
struct Swapper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<usize>>,
}

impl Swapper {
    fn start(mut step: impl FnMut() + Send + 'static) -> Swapper {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut swaps = 0;
            while !stopped.load(Ordering::Relaxed) && swaps < MAX_SWAPS {
                step();
                swaps += 1;
            }
            swaps
        });
        Swapper { stop, thread: Some(thread) }
    }

    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Atomically exchanges what the names `a` and `b` point at (one syscall, so a swapper
/// flips many times per time slice even on a loaded machine).
fn exchange(a: &Path, b: &Path) {
    rustix::fs::renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).unwrap();
}

fn reads_inside(outcomes: &[Outcome]) -> usize {
    outcomes.iter().filter(|o| matches!(o, Outcome::Read(c) if c.iter().any(|(text, _)| text == INSIDE))).count()
}

/// `served/swap.txt` alternates between a regular file and a symlink to a secret outside;
/// reads of it and of the folder never return the secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_swapped_in_never_reads_outside_the_folder() {
    let folder = Folder::new();
    let (target, link) = (folder.served.join("swap.txt"), folder.outer.join("link.swap"));
    std::fs::write(&target, INSIDE).unwrap();
    std::os::unix::fs::symlink(folder.outer.join("secret.txt"), &link).unwrap();
    let client = connect(&folder.served).await;
    let swapper = Swapper::start(move || exchange(&target, &link));
    let outcomes = race_reads(client.peer(), &[folder.uri("swap.txt"), folder.uri("")]).await;
    let swaps = swapper.finish();
    let escapes: Vec<_> = outcomes.iter().filter(|o| format!("{o:?}").contains(SECRET)).collect();
    assert!(escapes.is_empty(), "{} of {} reads returned the secret: {:?}", escapes.len(), outcomes.len(), escapes[0]);
    assert!(!outcomes.contains(&Outcome::Hung), "a read hung");
    assert!(swaps > 0 && reads_inside(&outcomes) > 0, "control: the race ran ({swaps} swaps)");
    client.cancel().await.unwrap();
}

/// Opens the FIFO for writing (without blocking) until no reader waits on it, so a reader
/// stuck in `open` is released and the test can end even when the server misbehaves.
struct FifoReleaser(PathBuf);

impl Drop for FifoReleaser {
    fn drop(&mut self) {
        let flags = OFlags::WRONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
        for _ in 0..10_000 {
            if rustix::fs::open(&self.0, flags, Mode::empty()).is_err() {
                return;
            }
        }
    }
}

/// `served/swap` alternates between a regular file and a FIFO nobody writes to; every read
/// of it and of the folder answers within the deadline, and none is served the FIFO.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_swapped_in_never_blocks_a_read() {
    let folder = Folder::new();
    let (target, fifo) = (folder.served.join("swap"), folder.outer.join("fifo.swap"));
    std::fs::write(&target, INSIDE).unwrap();
    rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::RUSR | Mode::WUSR, 0).unwrap();
    // A second name for the FIFO that never moves, for the releaser.
    std::fs::hard_link(&fifo, folder.outer.join("fifo.keep")).unwrap();
    let _releaser = FifoReleaser(folder.outer.join("fifo.keep"));
    let client = connect(&folder.served).await;
    let swapper = Swapper::start(move || exchange(&target, &fifo));
    let outcomes = race_reads(client.peer(), &[folder.uri("swap"), folder.uri("")]).await;
    let swaps = swapper.finish();
    let hung = outcomes.iter().filter(|o| **o == Outcome::Hung).count();
    assert_eq!(hung, 0, "{hung} of {} reads hung", outcomes.len());
    assert!(swaps > 0 && reads_inside(&outcomes) > 0, "control: the race ran ({swaps} swaps)");
    client.cancel().await.unwrap();
}

/// Files appear and vanish in `served/churn/` while it is read: every read succeeds and
/// carries the file that stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_vanishing_mid_read_are_skipped() {
    let folder = Folder::new();
    let churn = folder.served.join("churn");
    std::fs::create_dir(&churn).unwrap();
    std::fs::write(churn.join("keep.txt"), INSIDE).unwrap();
    let client = connect(&folder.served).await;
    let churning = churn.clone();
    let swapper = Swapper::start(move || {
        for i in 0..32 {
            std::fs::write(churning.join(format!("f{i:02}")), "brief").unwrap();
        }
        std::fs::create_dir(churning.join("gone-dir")).unwrap();
        for i in 0..32 {
            std::fs::remove_file(churning.join(format!("f{i:02}"))).unwrap();
        }
        std::fs::remove_dir(churning.join("gone-dir")).unwrap();
    });
    let outcomes = race_reads(client.peer(), &[folder.uri("churn")]).await;
    let swaps = swapper.finish();
    let failed: Vec<_> = outcomes.iter().filter(|o| !matches!(o, Outcome::Read(_))).collect();
    assert!(failed.is_empty(), "{} of {} reads failed: {:?}", failed.len(), outcomes.len(), failed[0]);
    assert_eq!(reads_inside(&outcomes), outcomes.len(), "every read carries keep.txt");
    assert!(swaps > 0, "control: the churn ran");
    client.cancel().await.unwrap();
}
