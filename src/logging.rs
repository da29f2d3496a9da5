//! What the proxy's logs leave out: rmcp's own reports of a peer that went away.
//!
//! rmcp's service logs at `error` when it cannot write a response because the other side is
//! gone — `failed to send pending response during drain error=channel closed` when a host
//! closes a 2026-07-28 listen stream, `broken pipe` when the in-process folder server's last
//! answer finds its connection already closed at shutdown, and the like. A host leaving is ordinary: the proxy
//! notes it at `debug` itself (its outlet goes, its subscriptions are released). Other rmcp
//! errors still show.
//!
//! Invariant: only events of rmcp's service whose `error` says the channel or transport is
//! closed are dropped; nothing of the proxy's own logging is.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Metadata};
use tracing_subscriber::layer::{Context, Filter};

/// A per-layer filter that drops rmcp's "the peer is gone" errors (see the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct WithoutPeerGone;

impl<S> Filter<S> for WithoutPeerGone {
    fn enabled(&self, _: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _: &Context<'_, S>) -> bool {
        if !event.metadata().target().starts_with("rmcp::service") {
            return true;
        }
        let mut error = ErrorField(None);
        event.record(&mut error);
        !error.0.as_deref().is_some_and(says_peer_gone)
    }
}

/// Whether an rmcp error text says only that the other side is gone.
pub fn says_peer_gone(error: &str) -> bool {
    let error = error.to_ascii_lowercase();
    ["channel closed", "transport closed", "connection closed", "broken pipe"].iter().any(|gone| error.contains(gone))
}

/// The text of an event's `error` field.
struct ErrorField(Option<String>);

impl Visit for ErrorField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "error" || field.name() == "e" {
            self.0 = Some(value.to_string());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "error" || field.name() == "e" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    fn check(error: &str, gone: bool) {
        assert_eq!(says_peer_gone(error), gone, "{error}");
    }

    #[test]
    fn only_a_gone_peer_counts_as_gone() {
        check("channel closed", true);
        check("Transport closed", true);
        check("connection closed: initialize response", true);
        check("broken pipe", true);
        check("task 12 panicked", false);
        check("invalid params", false);
    }

    /// Counts the events that pass the filter.
    struct Count(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Count {
        fn on_event(&self, event: &Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
            self.0.lock().unwrap().push(event.metadata().target().to_string());
        }
    }

    #[test]
    fn rmcp_gone_peer_errors_are_dropped_and_everything_else_passes() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Count(seen.clone()).with_filter(WithoutPeerGone));
        tracing::subscriber::with_default(subscriber, || {
            let error = "channel closed";
            tracing::error!(target: "rmcp::service", %error, "failed to send pending response during drain");
            tracing::error!(target: "rmcp::service", error = "boom", "response send task failed");
            tracing::error!(target: "mcp_resource_proxy::upstream", %error, "ours");
            tracing::info!(target: "rmcp::service", "serve finished");
        });
        assert_eq!(*seen.lock().unwrap(), ["rmcp::service", "mcp_resource_proxy::upstream", "rmcp::service"]);
    }
}
