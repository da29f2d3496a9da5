//! What a supervisor supervises ([`Role`]): an upstream's shared connection (`shared`: the
//! catalog, status, gauges and events are its own) or a session of it (`session`: its events
//! reach only its subscribers). The supervisor (`supervisor`) runs the same loop for both and
//! asks its role at each step where the two differ.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Connection, Era, EventSender, Link, Offered, UpstreamEvent};

/// What supervising an upstream's shared connection and a session of it differ in. The
/// defaults are a session's: no catalog, no lists, nothing counted.
pub(super) trait Role: Send + Sync + 'static {
    fn supervised(&self) -> &Connection;

    /// Every page of resources and templates into the catalog: when to list again (if ever), whether it changed.
    fn load_catalog(
        &self,
        _link: &Link,
        _stop: &CancellationToken,
    ) -> impl Future<Output = Result<Reload, String>> + Send {
        async { Ok(Reload { refresh: None, changed: false }) }
    }

    /// Its tools and prompts, fetched before it counts as up.
    fn offered_at_up(&self, _link: &Link) -> impl Future<Output = Offered> + Send {
        async { Offered::default() }
    }

    /// How many resources are in its catalog.
    fn resources(&self) -> usize {
        0
    }

    /// It is up on `era` (`reconnected`: again). True when its connection reports only the changes
    /// it hears: a session's first subscribes only what was subscribed since it opened, none unseen.
    fn came_up(&self, era: Era, reconnected: bool) -> bool {
        tracing::debug!(upstream = self.supervised().name(), era = era.label(), "upstream session up");
        !reconnected
    }

    /// Its connection ended; `lost`: not stopped, it went down.
    fn ended(&self, _lost: bool) {}

    /// Send `event` on.
    fn emit(&self, events: &EventSender, event: UpstreamEvent);

    /// Its notices overflowed: every URI may have changed unseen.
    fn lost_everything(&self, events: &EventSender);

    /// It said its tools or prompts changed: fetch them again on `link` and pass them on.
    fn refetch_offerings(&self, link: &Link, events: &EventSender) -> impl Future<Output = ()> + Send;

    /// It is up and `Up` was sent: what more it lists is fetched (a session at its owner's:
    /// what that session lists as its own there); nothing by default.
    fn listed_at_up(&self, _link: &Link, _events: &EventSender) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// What a catalog load found.
pub(super) struct Reload {
    /// When the lists must be fetched again, if ever.
    pub refresh: Option<Duration>,
    /// Whether the catalog differs from what it was.
    pub changed: bool,
}
