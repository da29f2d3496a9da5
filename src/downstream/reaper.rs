//! The idle reaper of legacy HTTP sessions (the `session-reaper` task): it closes the sessions
//! the [`SessionBook`] finds due, idle or unused since their `initialize`. With `[cluster]` it
//! also tells the sessions' records of this replica's activity, and closes a session due here
//! only once its record is gone (`server.unused_session_idle_timeout` does not apply there: the
//! record's expiry is the cluster's reaping).

use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;

use super::sessions::SessionBook;
use super::shared::records::Records;
use crate::proxy::Proxy;

/// Close sessions as they fall due, until `shutdown`. With `[cluster]` (`records`), a session
/// active here is told to its record, and one due here is closed only once its record is gone
/// (it may be active on other replicas; the cluster's idle reaping is the record's expiry).
pub(super) async fn reap(
    book: Arc<SessionBook>,
    manager: Arc<LocalSessionManager>,
    proxy: Proxy,
    records: Option<Records>,
    shutdown: CancellationToken,
) {
    let server = proxy.config().server.clone();
    let unused = if records.is_some() { Duration::ZERO } else { server.unused_session_idle_timeout };
    let shortest = if unused.is_zero() { server.session_idle_timeout } else { server.session_idle_timeout.min(unused) };
    let every = (shortest / 4).clamp(Duration::from_millis(100), Duration::from_secs(60));
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let timeouts = (server.session_idle_timeout, server.subscribed_session_idle_timeout, unused);
        let mut due = book.due(timeouts, |subscriber| proxy.subscribes_anything(subscriber));
        if let Some(records) = &records {
            due = still_due(&book, records, due).await;
        }
        for session in due {
            // The session id stays out of the log: it is the session's only credential.
            tracing::info!("closing idle session");
            close(&book, &manager, &session).await;
        }
    }
}

/// Close `session` in rmcp and take it out of the book (and the sessions metric).
async fn close(book: &SessionBook, manager: &LocalSessionManager, session: &str) {
    let _ = manager.close_session(&Arc::from(session)).await;
    book.forget(session);
}

/// `[cluster]`: push this replica's activity to the records; of `due`, the sessions whose record
/// is gone (a session whose record lives, or cannot be asked about, stays).
async fn still_due(book: &SessionBook, records: &Records, due: Vec<String>) -> Vec<String> {
    let mut gone = Vec::new();
    for session in book.to_push() {
        if let Ok(false) = records.touch(&session).await {
            gone.push(session);
        }
    }
    for session in due {
        match records.exists(&session).await {
            Ok(false) => gone.push(session),
            _ => book.refresh(&session),
        }
    }
    gone.sort();
    gone.dedup();
    gone
}
