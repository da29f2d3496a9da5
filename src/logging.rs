//! What the proxy's logs leave out: rmcp's own reports of a peer that went away; and what the
//! human log escapes: every control character a field or message carries ([`EscapedFields`]).
//!
//! Hosts name URIs, tools and prompts, and upstreams answer with error texts that quote them: a
//! CR, LF or ESC printed raw would forge log lines or drive the reader's terminal. The human
//! format writes each field's text with its control characters escaped as Rust does (`\r`,
//! `\n`, `\u{1b}`), at every level and for every field, whoever logs it. (The JSON format
//! escapes them already.)
//!
//! rmcp's service logs at `error` when it cannot write a response because the other side is
//! gone — `failed to send pending response during drain error=channel closed` when a host
//! closes a 2026-07-28 listen stream, `broken pipe` when the in-process folder server's last
//! answer finds its connection already closed at shutdown, and the like. A host leaving is ordinary: the proxy
//! notes it at `debug` itself (its outlet goes, its subscriptions are released). Other rmcp
//! errors still show.
//!
//! Invariants: only events of rmcp's service whose `error` says the channel or transport is
//! closed are dropped; nothing of the proxy's own logging is. No control character of a field's
//! text reaches the human log raw: each event is one line.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Metadata};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::layer::{Context, Filter};

/// The human format's fields (`fmt::layer().fmt_fields(EscapedFields)`): the message, then
/// `name=value` pairs, as the default format writes them, with every control character escaped
/// (see the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = EscapingVisitor { writer, first: true, result: Ok(()) };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes the fields it visits, escaped, separated by a space.
struct EscapingVisitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl Visit for EscapingVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        let text = format!("{value:?}");
        let separator = if std::mem::take(&mut self.first) { "" } else { " " };
        self.result = match field.name() {
            "message" => write!(self.writer, "{separator}{}", Escaped(&text)),
            name => write!(self.writer, "{separator}{name}={}", Escaped(&text)),
        };
    }
}

/// Text with its control characters escaped (`\r`, `\n`, `\t`, `\u{1b}`…), the rest as it is.
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

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
    fn control_characters_are_escaped_and_the_rest_is_kept() {
        let escaped = |text: &str| Escaped(text).to_string();
        assert_eq!(escaped("fx+fx://fx/item/1"), "fx+fx://fx/item/1");
        assert_eq!(escaped("a\r\nb\x1b[31mc\u{7f}"), "a\\r\\nb\\u{1b}[31mc\\u{7f}");
        assert_eq!(escaped("é \"quoted\" \\ tab\t"), "é \"quoted\" \\ tab\\t");
    }

    #[test]
    fn the_human_format_writes_every_field_on_one_line() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let lines = lines.clone();
            move || Capture(lines.clone())
        };
        let layer = tracing_subscriber::fmt::layer().with_writer(writer).with_ansi(false).fmt_fields(EscapedFields);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let (uri, error) = ("x\r\nFORGED\x1b[2J", "resource not found: x\nFORGED");
            let span = tracing::info_span!("request", name = %"t\nool");
            let _entered = span.enter();
            tracing::info!(uri, error = %error, "read \x1b failed");
        });
        let text = String::from_utf8(lines.lock().unwrap().concat()).unwrap();
        assert_eq!(text.matches('\n').count(), 1, "one line: {text:?}");
        assert!(!text.contains('\r') && !text.contains('\x1b'), "{text:?}");
        assert!(text.contains(r#"uri="x\r\nFORGED\u{1b}[2J""#), "{text:?}");
        assert!(text.contains(r"error=resource not found: x\nFORGED"), "{text:?}");
        assert!(text.contains(r"read \u{1b} failed") && text.contains(r"name=t\nool"), "{text:?}");
    }

    /// Collects what a layer writes.
    struct Capture(Arc<Mutex<Vec<Vec<u8>>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().push(bytes.to_vec());
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
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
