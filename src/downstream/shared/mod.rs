//! `[cluster]`: 2025 sessions that any replica serves. A session's id is minted with the
//! cluster's session-id key and bound to its principal (`ids`); its record lives in Redis
//! (`records`): rmcp re-creates the session from it, initialized, on a replica asked for a
//! session it does not hold (the session gate checks the id and the record's principal first).
//! The replica serving the session's GET stream holds its subscriptions (`streams`); `DELETE`
//! anywhere ends it everywhere (`news`); the session caps and idle reaping are the records'. A
//! host's answer to a request a replica sent it reaches that replica wherever it lands
//! (`answers`, on the news channel). A request's stream cut with the replica serving it is
//! resumed on any other (`resumed`), which asks on the news channel who keeps its answer
//! (`keepers`).
//!
//! Without `[cluster]` none of this exists and sessions are the process's own, as before.

pub(crate) mod answers;
pub(crate) mod ids;
pub(crate) mod keepers;
pub(crate) mod news;
pub(crate) mod records;
pub(crate) mod resumed;
pub(crate) mod streams;

use std::sync::Arc;

use self::records::{Record, Records};
use self::resumed::Resumption;
use self::streams::{OpenStreams, StreamSubscriptions};

tokio::task_local! {
    /// The record of the session a request is restoring on this replica.
    static RESTORING: Record;
}

/// What the listener shares about `[cluster]` sessions; a cheap `Clone`.
#[derive(Clone)]
pub(crate) struct Shared {
    pub records: Records,
    pub stream_subscriptions: StreamSubscriptions,
    pub resumption: Resumption,
}

impl Shared {
    pub fn streams(&self) -> &Arc<OpenStreams> {
        &self.stream_subscriptions.streams
    }
}

/// Run `work` (the request that restores a session here) with the session's record at hand
/// for the handler rmcp builds for it ([`restoring`]).
pub(crate) async fn restore_with<F: Future>(record: Record, work: F) -> F::Output {
    RESTORING.scope(record, work).await
}

/// The record of the session the current request restores, if it does.
pub(crate) fn restoring() -> Option<Record> {
    RESTORING.try_with(Clone::clone).ok()
}
