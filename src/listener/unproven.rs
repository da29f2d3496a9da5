//! Connections that have not yet sent a whole request head, oldest first. When a listener is
//! at its connection cap and another client arrives, the oldest of them is closed to make room
//! (a slowloris holds its connections this way, trickling a head it never finishes), so a
//! fresh client is served at once instead of waiting out the header timeout. Connections that
//! have sent a request are never closed for room.
//!
//! Invariant: a connection is in the book from its accept until its first request head is
//! complete (or it ends), never after.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// The book of one listener's unproven connections.
#[derive(Clone, Default)]
pub(super) struct Unproven {
    inner: Arc<Mutex<Book>>,
}

#[derive(Default)]
struct Book {
    next: u64,
    /// By accept order: the first is the oldest.
    open: BTreeMap<u64, CancellationToken>,
}

/// One accepted connection's place in the book; leaves it when dropped.
pub(super) struct Place {
    book: Unproven,
    id: u64,
    /// Cancelled when the connection is closed for room.
    pub evicted: CancellationToken,
}

impl Unproven {
    /// A freshly accepted connection.
    pub fn enter(&self) -> Place {
        let mut book = self.inner.lock().expect("unproven lock");
        let id = book.next;
        book.next += 1;
        let evicted = CancellationToken::new();
        book.open.insert(id, evicted.clone());
        Place { book: self.clone(), id, evicted }
    }

    /// Close the oldest unproven connection; false when there is none.
    pub fn evict_oldest(&self) -> bool {
        let oldest = self.inner.lock().expect("unproven lock").open.pop_first();
        oldest.map(|(_, evicted)| evicted.cancel()).is_some()
    }

    fn leave(&self, id: u64) {
        self.inner.lock().expect("unproven lock").open.remove(&id);
    }
}

impl Place {
    /// The connection sent a whole request head: it is no longer a candidate for eviction.
    pub fn proven(&self) {
        self.book.leave(self.id);
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.book.leave(self.id);
    }
}

/// Run `connection` until it ends or is evicted (then it is dropped: the socket closes).
pub(super) async fn until_evicted<F: Future>(connection: F, evicted: CancellationToken) -> Option<F::Output> {
    tokio::select! {
        output = connection => Some(output),
        _ = evicted.cancelled() => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_unproven_connection_is_evicted_and_proven_ones_never() {
        let book = Unproven::default();
        let (first, second, third) = (book.enter(), book.enter(), book.enter());
        first.proven();
        assert!(book.evict_oldest());
        assert!(!first.evicted.is_cancelled(), "a proven connection stays");
        assert!(second.evicted.is_cancelled(), "the oldest unproven one goes");
        drop(third);
        assert!(!book.evict_oldest(), "a connection that ended is not in the book");
    }
}
