//! The requests one MCP session of the session endpoint cancelled: the other replica says
//! `notifications/cancelled` for a request once its host cancelled it (or it timed out there),
//! and the call it runs here ends, which drops its upstream request and so cancels it upstream,
//! as for a call served here. rmcp neither aborts a handler on a cancellation nor tells it from
//! the end of the MCP session (both cancel the request's own token), and a call whose answer is
//! kept (`kept`) runs on when the other replica goes away: only the notification ends a call.
//!
//! Invariant: a call ends early only by a cancellation of its own request id on its own MCP
//! session; at most [`EARLY`] cancellations that came before their call ran are remembered.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use rmcp::model::RequestId;
use tokio_util::sync::CancellationToken;

use crate::error::ProxyError;

/// Cancellations remembered that came before their call ran (rmcp runs a request's handler and
/// a notification's in tasks of their own, in no set order); each request id is used once on
/// a session, so an older one that never matched is forgotten.
const EARLY: usize = 64;

/// The calls of one MCP session that may be cancelled, by request id; shared behind an `Arc`.
#[derive(Default)]
pub(super) struct Cancellations {
    book: Mutex<Book>,
}

#[derive(Default)]
struct Book {
    running: HashMap<RequestId, CancellationToken>,
    early: VecDeque<RequestId>,
}

/// One call that its request's cancellation ends; forgotten when dropped.
pub(super) struct Cancellable {
    calls: Arc<Cancellations>,
    id: RequestId,
    cancelled: CancellationToken,
}

impl Cancellations {
    /// The call of request `id` from now on: cancelled by its `notifications/cancelled` (at
    /// once when that came first).
    pub(super) fn watch(self: &Arc<Self>, id: &RequestId) -> Cancellable {
        let cancelled = CancellationToken::new();
        let mut book = self.book.lock().expect("cancellations lock");
        if let Some(at) = book.early.iter().position(|early| early == id) {
            book.early.remove(at);
            cancelled.cancel();
        }
        book.running.insert(id.clone(), cancelled.clone());
        Cancellable { calls: self.clone(), id: id.clone(), cancelled }
    }

    /// Request `id` was cancelled: its call ends, or will as soon as it runs.
    pub(super) fn cancel(&self, id: &RequestId) {
        let mut book = self.book.lock().expect("cancellations lock");
        match book.running.get(id) {
            Some(cancelled) => cancelled.cancel(),
            None => {
                if book.early.len() >= EARLY {
                    book.early.pop_front();
                }
                book.early.push_back(id.clone());
            }
        }
    }
}

impl Cancellable {
    /// `call`'s outcome, or an error once its request was cancelled (`call` is dropped then,
    /// which cancels its upstream request).
    pub(super) async fn run<T>(self, call: impl Future<Output = Result<T, ProxyError>>) -> Result<T, ProxyError> {
        tokio::select! {
            outcome = call => outcome,
            () = self.cancelled.cancelled() => {
                tracing::debug!("cluster: another replica cancelled its request; the call ends here");
                Err(ProxyError::InvalidParams("the request was cancelled".into()))
            }
        }
    }
}

impl Drop for Cancellable {
    fn drop(&mut self) {
        self.calls.book.lock().expect("cancellations lock").running.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_cancelled_call_ends_and_another_runs_on() {
        let calls = Arc::new(Cancellations::default());
        let (cancelled, other) = (calls.watch(&RequestId::Number(1)), calls.watch(&RequestId::Number(2)));
        calls.cancel(&RequestId::Number(1));
        let ended = cancelled.run(std::future::pending::<Result<(), ProxyError>>()).await;
        assert!(matches!(ended, Err(ProxyError::InvalidParams(_))), "{ended:?}");
        assert!(other.run(async { Ok(()) }).await.is_ok());
        assert!(calls.book.lock().expect("lock").running.is_empty(), "each forgotten when it ended");
    }

    #[tokio::test]
    async fn a_cancellation_that_came_first_ends_its_call_when_it_runs() {
        let calls = Arc::new(Cancellations::default());
        calls.cancel(&RequestId::Number(7));
        let ended = calls.watch(&RequestId::Number(7)).run(std::future::pending::<Result<(), ProxyError>>()).await;
        assert!(ended.is_err(), "{ended:?}");
        assert!(calls.book.lock().expect("lock").early.is_empty(), "used once");
        for n in 0..EARLY as i64 + 10 {
            calls.cancel(&RequestId::Number(100 + n));
        }
        assert_eq!(calls.book.lock().expect("lock").early.len(), EARLY, "bounded");
    }
}
