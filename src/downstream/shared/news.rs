//! `[cluster]`: the `session-news` task hears what other replicas did to sessions this one
//! holds: a session ended (`DELETE` anywhere) is closed here too; a session's subscriptions
//! changed, so its GET stream here (if any) syncs again; its `logging/setLevel` on another
//! replica sets the level its handler here filters log messages by; a session ended anywhere
//! closes its per-host upstream sessions held here. The same channel carries what one replica
//! says to another about a session's requests: a host's answer to a request this replica asked
//! (`answers`: sealed and addressed to the asking replica; the others leave it unread), and the
//! questions and words on who keeps a cut stream's answer (`keepers`). A lost message (the push
//! connection dropped, or the queue overflowed) makes every stream here sync again, and every
//! question waiting here read what its keeper may have written; a session ended while news was
//! lost is closed here once it falls idle and its record is found gone (`sessions`). A lost
//! answer is lost with its request's call (the upstream's request times out).

#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::{PushInfo, PushKind, Value};
use rmcp::model::LoggingLevel;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::answers::{ANSWER, Answers};
use super::keepers::{COLLECT, KEPT, Keepers};
use super::records::{ENDED, LEVEL, Records, SUBSCRIPTIONS};
use super::streams::OpenStreams;
use crate::downstream::sessions::SessionBook;

/// News waiting to be handled; past it, news counts as lost.
const NEWS_QUEUE: usize = 1024;
/// How often the subscription is tried while Redis cannot be reached.
const RETRY: Duration = Duration::from_secs(1);

/// What the task acts on.
pub(crate) struct Newsroom {
    pub records: Records,
    pub book: Arc<SessionBook>,
    pub manager: Arc<LocalSessionManager>,
    pub streams: Arc<OpenStreams>,
    /// Per-host upstream sessions of a session ended anywhere are closed (on the replica that
    /// holds them, which may hold no handler of the session).
    pub proxy: crate::proxy::Proxy,
    /// Hosts' answers forwarded to this replica go to their sessions through it.
    pub answers: Arc<Answers>,
    /// Who keeps a cut stream's answer: asked and told here.
    pub keepers: Keepers,
}

impl Newsroom {
    /// Hear and act on session news until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let (sender, mut news) = mpsc::channel::<PushInfo>(NEWS_QUEUE);
        let lost = Arc::new(AtomicBool::new(false));
        let overflow = lost.clone();
        let config = ConnectionManagerConfig::new().set_automatic_resubscription().set_push_sender(
            move |info: PushInfo| -> Result<(), ()> {
                if sender.try_send(info).is_err() {
                    overflow.store(true, Ordering::Relaxed);
                }
                Ok(())
            },
        );
        let channel = self.records.news_channel();
        let mut retry = tokio::time::interval(RETRY);
        let _connection = loop {
            tokio::select! {
                _ = retry.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            match self.records.cluster().connect(config.clone()).await {
                Ok(mut connection) => match connection.subscribe(&channel).await {
                    Ok(()) => {
                        // News sent before the subscription (streams opened at start) was not
                        // heard: every stream held here reads its record again.
                        self.streams.resync_all();
                        break connection;
                    }
                    Err(error) => tracing::debug!(error = %error, "cluster: session news not subscribed yet"),
                },
                Err(error) => tracing::debug!(error = %error, "cluster: session news not connected yet"),
            }
        };
        loop {
            let info = tokio::select! {
                info = news.recv() => info,
                _ = shutdown.cancelled() => return,
            };
            let Some(info) = info else { return };
            if lost.swap(false, Ordering::Relaxed) {
                self.streams.resync_all();
                self.keepers.news_lost();
            }
            self.handle(info).await;
        }
    }

    async fn handle(&self, info: PushInfo) {
        match info.kind {
            PushKind::Message => {}
            PushKind::Disconnection => {
                tracing::debug!("cluster: session news connection dropped; every stream syncs again");
                self.streams.resync_all();
                self.keepers.news_lost();
                return;
            }
            _ => return,
        }
        let Some(Value::BulkString(payload)) = info.data.get(1) else { return };
        let Some((what, news)) = std::str::from_utf8(payload).ok().and_then(|text| text.split_once(' ')) else {
            return;
        };
        match what {
            ENDED => self.ended(news).await,
            SUBSCRIPTIONS => self.streams.resync(news),
            LEVEL => self.level(news),
            ANSWER => self.answer(news).await,
            COLLECT => self.keepers.asked(news),
            KEPT => self.keepers.heard(news),
            _ => {}
        }
    }

    /// `answer <replica> <sealed>`: a host's answer to a request of this replica, handed to the
    /// session it was asked on (one for another replica is left unread).
    async fn answer(&self, news: &str) {
        let Some((session, answer)) = self.answers.open(news) else { return };
        self.answers.handed(self.manager.accept_message(&session, answer).await.is_ok());
    }

    /// `level <record key> <level>`: the session's handler here filters by the new level (one
    /// restored here a moment later too).
    fn level(&self, news: &str) {
        let Some((record_key, level)) = news.split_once(' ') else { return };
        let Ok(level) = serde_json::from_str::<LoggingLevel>(level) else { return };
        let ids = &self.records.ids;
        self.book.news_level(record_key, |session| ids.record_key(session), level);
    }

    /// The session keyed `record_key` ended on some replica: it ends here too.
    async fn ended(&self, record_key: &str) {
        if let Some(key) = super::ids::host_key_of(record_key) {
            self.proxy.host_ended(key);
        }
        let ids = &self.records.ids;
        for session in self.book.find(|session| ids.record_key(session) == record_key) {
            tracing::debug!("cluster: a session ended elsewhere is closed here");
            let _ = self.manager.close_session(&Arc::from(session.as_str())).await;
            self.book.forget(&session);
        }
    }
}
