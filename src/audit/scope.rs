//! What the core notes while it decides one host request, for that request's audit events: the
//! upstream it was routed to and each part refused by policy. The hosts' side runs the request
//! inside [`noting`] (or [`noting_sync`]) and hands the notes to [`super::Audit::request`];
//! the core calls [`routed`] and [`denied`] where it decides, on the request's own task.
//!
//! A tokio task-local, like the request's principal in `auth`: the deciding code stays free of
//! audit plumbing, and a note outside a request (a test, an internal read) goes nowhere. The
//! denial's metric is counted either way.

use std::cell::RefCell;
use std::future::Future;

use crate::metrics::{DenialKind, Metrics};

/// One part of a request refused by policy.
#[derive(Debug, Clone)]
pub struct Denial {
    pub kind: DenialKind,
    /// The URI or name, as the host named it.
    pub target: String,
    pub upstream: Option<String>,
}

/// What the core noted for one request.
#[derive(Debug, Default)]
pub struct Notes {
    /// The upstream the request was routed to (the first, if several).
    pub upstream: Option<String>,
    pub denials: Vec<Denial>,
    /// The policy file whose rule decided the request's URI (the first decided), if a file did.
    pub policy_file: Option<String>,
}

tokio::task_local! {
    static NOTES: RefCell<Notes>;
}

/// Run `request`, keeping what the core notes while it runs.
pub async fn noting<F: Future>(request: F) -> (F::Output, Notes) {
    NOTES
        .scope(RefCell::new(Notes::default()), async move {
            let output = request.await;
            (output, NOTES.with(|notes| notes.take()))
        })
        .await
}

/// [`noting`] for a request decided without awaiting.
pub fn noting_sync<T>(request: impl FnOnce() -> T) -> (T, Notes) {
    NOTES.sync_scope(RefCell::new(Notes::default()), || {
        let output = request();
        (output, NOTES.with(|notes| notes.take()))
    })
}

/// The request was routed to `upstream`.
pub fn routed(upstream: &str) {
    let _ = NOTES.try_with(|notes| {
        let mut notes = notes.borrow_mut();
        if notes.upstream.is_none() {
            notes.upstream = Some(upstream.to_string());
        }
    });
}

/// Policy decided the request's URI by a rule of `file` (the first decision is kept).
pub fn decided_by(file: Option<&str>) {
    let Some(file) = file else { return };
    let _ = NOTES.try_with(|notes| {
        let mut notes = notes.borrow_mut();
        if notes.policy_file.is_none() {
            notes.policy_file = Some(file.to_string());
        }
    });
}

/// Policy refused `target` (a URI or a name as the host named it) of the request: counted in
/// `mcp_proxy_denials_total`, and noted for its audit events.
pub fn denied(metrics: &Metrics, kind: DenialKind, target: &str, upstream: Option<&str>) {
    metrics.denied(kind);
    let denial = Denial { kind, target: target.to_string(), upstream: upstream.map(str::to_string) };
    let _ = NOTES.try_with(|notes| notes.borrow_mut().denials.push(denial));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn notes_are_kept_per_request_and_dropped_outside_one() {
        let metrics = Metrics::new();
        denied(&metrics, DenialKind::Read, "a+x:/1", None);
        let ((), notes) = noting(async {
            routed("docs");
            tokio::task::yield_now().await;
            routed("other");
            denied(&metrics, DenialKind::Call, "docs__t", Some("docs"));
        })
        .await;
        assert_eq!(notes.upstream.as_deref(), Some("docs"));
        assert_eq!(notes.denials.len(), 1);
        let ((), notes) = noting_sync(|| denied(&metrics, DenialKind::Subscribe, "a+x:/2", Some("a")));
        assert_eq!(notes.denials[0].target, "a+x:/2");
        assert!(metrics.render().contains("mcp_proxy_denials_total{kind=\"read\"} 1"));
    }
}
