//! The shared tier's way back up: [`SharedTier::recover`], called at each housekeeping tick while
//! the tier is down. Redis must answer on the shared connection, the floors that could not be
//! raised while it was away are raised, and the look sockets left idle meanwhile are closed,
//! before the tier counts as up again.

use std::sync::atomic::Ordering;

use super::{CALL_TIMEOUT, Down, SharedTier};

impl SharedTier {
    /// When the tier is down: record what could not be (pending floors), then count it up
    /// again. True when Redis answered (or the tier was up).
    pub async fn recover(&self) -> bool {
        if self.is_up() {
            return true;
        }
        if self.ping().await.is_err() {
            return false;
        }
        let pending: Vec<String> = self.pending.lock().expect("pending lock").iter().cloned().collect();
        for upstream in pending {
            if self.raise(&upstream).await.is_err() {
                return false;
            }
            self.pending.lock().expect("pending lock").remove(&upstream);
        }
        // A look socket left idle while the tier was down may be to a Redis gone since: none is
        // taken again, so no read fails on one once the tier is up.
        if let Some(sockets) = &self.sockets {
            sockets.close_idle();
        }
        if !self.up.swap(true, Ordering::AcqRel) {
            tracing::info!("the shared cache tier is reachable");
            self.metrics.set_shared_cache_up(true);
        }
        true
    }

    /// `PING` on the shared connection. A connection that has not seen Redis go (the looks,
    /// which go on their own sockets, saw it) fails its first command and reconnects only then:
    /// a `PING` that failed so (an error the connection reconnects on) is sent once more, on the
    /// new connection. One that found no answer in time is not.
    async fn ping(&self) -> Result<(), Down> {
        let ping = || {
            let mut connection = self.connection.clone();
            async move { redis::cmd("PING").query_async::<()>(&mut connection).await }
        };
        match tokio::time::timeout(CALL_TIMEOUT, ping()).await {
            Ok(Err(error)) if error.is_io_error() || error.is_unrecoverable_error() => self.call(ping()).await,
            first => self.settle(first),
        }
    }
}
