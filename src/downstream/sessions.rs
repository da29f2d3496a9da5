//! Legacy HTTP session upkeep. rmcp closes a session after its keep-alive passes without a
//! request — even one that is subscribed and only waiting for notifications. The proxy turns
//! that off and reaps sessions itself: one holding no subscriptions once it has been silent for
//! `server.session_idle_timeout`, a subscribed one after `server.subscribed_session_idle_timeout`
//! (a bound for hosts that vanished without a word).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;

use crate::proxy::Proxy;
use crate::subscriptions::HolderId;

/// When each legacy session last made a request, and its holder id once it has one.
#[derive(Default)]
pub(super) struct SessionBook {
    sessions: Mutex<HashMap<String, Seen>>,
}

struct Seen {
    last: Instant,
    holder: Option<HolderId>,
}

impl SessionBook {
    /// The session made a request.
    pub fn touch(&self, session: &str, holder: Option<HolderId>) {
        let mut sessions = self.sessions.lock().expect("sessions lock");
        let seen = sessions.entry(session.to_string()).or_insert(Seen { last: Instant::now(), holder: None });
        seen.last = Instant::now();
        seen.holder = seen.holder.or(holder);
    }

    /// Sessions due to be closed now.
    fn due(&self, idle: Duration, subscribed_idle: Duration, holds: impl Fn(HolderId) -> bool) -> Vec<String> {
        let now = Instant::now();
        let sessions = self.sessions.lock().expect("sessions lock");
        sessions
            .iter()
            .filter(|(_, seen)| {
                let limit = if seen.holder.is_some_and(&holds) { subscribed_idle } else { idle };
                now.duration_since(seen.last) >= limit
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn forget(&self, session: &str) {
        self.sessions.lock().expect("sessions lock").remove(session);
    }
}

/// Close sessions as they fall due, until `shutdown`.
pub(super) async fn reap(
    book: Arc<SessionBook>,
    manager: Arc<LocalSessionManager>,
    proxy: Proxy,
    shutdown: CancellationToken,
) {
    let server = proxy.config().server.clone();
    let every = (server.session_idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(60));
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.cancelled() => return,
        }
        let due = book.due(server.session_idle_timeout, server.subscribed_session_idle_timeout, |holder| {
            proxy.holds_anything(holder)
        });
        for session in due {
            tracing::info!(session = %session, "closing idle session");
            let _ = manager.close_session(&Arc::from(session.as_str())).await;
            book.forget(&session);
        }
    }
}
