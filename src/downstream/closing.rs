//! Shutdown of the HTTP listener in order: 2026-07-28 listen streams are closed gracefully
//! first, then rmcp's service and the remaining connections stop.
//!
//! A listen stream is a long-lived SSE response to a `subscriptions/listen` POST. The
//! 2026-07-28 schema ends one gracefully with a final `SubscriptionsListenResult`, which rmcp
//! writes when the handler's `listen` returns; a stream cut by rmcp's cancellation instead
//! ends without it (hosts report the subscription lost) and rmcp logs the failed write. So on
//! shutdown every `listen` is told to return ([`ClosingStreams::closing`]), the streamed POST
//! responses are awaited until their bodies end (bounded by [`CLOSE_GRACE`]), and only then is
//! rmcp's token cancelled.
//!
//! Invariant: rmcp's cancellation token is cancelled only after every streamed POST response
//! that was open at shutdown has ended, or after [`CLOSE_GRACE`].

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use http::Method;
use http::header::CONTENT_TYPE;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long listen streams get to end before the rest is cut.
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The open streamed POST responses, and the signal that they should end.
#[derive(Clone, Default)]
pub(super) struct ClosingStreams {
    /// Cancelled at shutdown: every `listen` returns, which ends its stream gracefully.
    pub closing: CancellationToken,
    open: TaskTracker,
}

impl ClosingStreams {
    /// Wait for `shutdown`, close the listen streams, wait for their responses to end (at most
    /// [`CLOSE_GRACE`]), then cancel `stop` (rmcp's token).
    pub async fn close_in_order(self, shutdown: CancellationToken, stop: CancellationToken) {
        shutdown.cancelled().await;
        self.closing.cancel();
        self.open.close();
        if tokio::time::timeout(CLOSE_GRACE, self.open.wait()).await.is_err() {
            tracing::debug!(open = self.open.len(), "streams still open after the grace period; cutting them");
        }
        stop.cancel();
    }
}

/// Middleware: a POST answered with an SSE stream is counted open until its body ends or is
/// dropped (the host went away).
pub(super) async fn track_streams(State(streams): State<ClosingStreams>, request: Request, next: Next) -> Response {
    let post = request.method() == Method::POST;
    let response = next.run(request).await;
    let streamed = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !(post && streamed) {
        return response;
    }
    let open = streams.open.token();
    response.map(|body| {
        Body::from_stream(body.into_data_stream().map(move |chunk| {
            let _open = &open;
            chunk
        }))
    })
}
