//! The runtime spine: every long-lived background task of the process is spawned here, under
//! its name, and owned here until it ends.
//!
//! [`Spine::spawn`] instruments the task with a `task` span carrying its name, tracks it (a
//! [`TaskTracker`]) and lists it among the running ones until it returns, so a drain that runs
//! out of time can say which tasks were still busy. The spine also carries the process-wide
//! shutdown token: every task it runs selects on [`Spine::shutdown`] (or on a child of it).
//!
//! The named tasks: `signals`, `sighup`, `admin`, `mcp-server`, `event-loop`,
//! `cache-housekeeping`, `policy-watch`, `config-watch`, `cluster-heartbeat` (with `[cluster]`), `supervisor:<upstream>`,
//! `watching:<upstream>` (one per connection), `outlet:<id>` (one per host outlet), and the HTTP
//! listener's `session-reaper` and `listen-closing`. Outside it by design: the accept loop's
//! per-connection tasks, short per-request tasks, a stdio child's stderr reader (it ends with
//! the child), and the folder server's and JWKS refresher's own tasks. On SIGTERM/ctrl-c `main`
//! cancels the token and drains within the grace period (5 s), naming any task still running.
//!
//! Invariant: once [`Spine::drain`] returned `Ok`, no task spawned through the spine is
//! running; a task spawned after the drain began is still awaited by it.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// A cheap `Clone` handle on the process's background tasks.
#[derive(Clone, Default)]
pub struct Spine {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    tracker: TaskTracker,
    shutdown: CancellationToken,
    /// Task number → name, for every task still running.
    running: Mutex<BTreeMap<u64, String>>,
    next: AtomicU64,
}

/// Removes a task from the running list when its future ends or is dropped.
struct Running {
    spine: Arc<Inner>,
    number: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.spine.running.lock().expect("running lock").remove(&self.number);
    }
}

impl Spine {
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide shutdown signal: cancelled once, on SIGTERM/ctrl-c (or by a test).
    pub fn shutdown(&self) -> CancellationToken {
        self.inner.shutdown.clone()
    }

    /// Run `task` in the background as `name` (e.g. `supervisor:docs`), in a span of that name.
    pub fn spawn<F>(&self, name: impl Into<String>, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let name = name.into();
        let number = self.inner.next.fetch_add(1, Ordering::Relaxed);
        self.inner.running.lock().expect("running lock").insert(number, name.clone());
        let guard = Running { spine: self.inner.clone(), number };
        let span = tracing::info_span!("task", task = %name);
        self.inner.tracker.spawn(
            async move {
                let _guard = guard;
                task.await
            }
            .instrument(span),
        )
    }

    /// The names of the tasks still running, in the order they were spawned.
    pub fn running(&self) -> Vec<String> {
        self.inner.running.lock().expect("running lock").values().cloned().collect()
    }

    /// Cancel the shutdown token and wait (at most `grace`) for every task to end. On time
    /// out, the names of those still running.
    pub async fn drain(&self, grace: Duration) -> Result<(), Vec<String>> {
        self.inner.shutdown.cancel();
        self.inner.tracker.close();
        match tokio::time::timeout(grace, self.inner.tracker.wait()).await {
            Ok(()) => Ok(()),
            Err(_) => Err(self.running()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_drain_waits_for_every_task_and_names_the_late_ones() {
        let spine = Spine::new();
        let shutdown = spine.shutdown();
        spine.spawn("polite", async move { shutdown.cancelled().await });
        assert_eq!(spine.running(), vec!["polite".to_string()]);
        assert_eq!(spine.drain(Duration::from_secs(5)).await, Ok(()));
        assert!(spine.running().is_empty());

        let stubborn = Spine::new();
        stubborn.spawn("stubborn", std::future::pending::<()>());
        let late = stubborn.drain(Duration::from_millis(10)).await;
        assert_eq!(late, Err(vec!["stubborn".to_string()]));
    }
}
