//! Progress of routed calls: a host's `progressToken` is not sent upstream as it is (two
//! hosts may pick the same one); each upstream request carries the token rmcp gives it (one
//! per request on that connection), and the upstream's `notifications/progress` for it go to
//! the host that asked, with the host's own token.
//!
//! Invariant: progress reaches only the host whose call it belongs to, and only from the
//! upstream that call went to; the token is forgotten [`PROGRESS_GRACE`] after the call ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{ProgressNotificationParam, ProgressToken, RequestMetaObject};

/// Where one call's progress goes (a host's request); never waits.
pub trait ProgressOutlet: Send + Sync + 'static {
    /// Pass on progress; the outlet puts the host's own token in.
    fn send(&self, progress: ProgressNotificationParam);
}

/// Calls in flight that asked for progress, by (upstream, the upstream request's token).
#[derive(Default)]
pub(super) struct ProgressBook {
    calls: Mutex<HashMap<(String, ProgressToken), Arc<dyn ProgressOutlet>>>,
}

/// A registered call; dropping it forgets the token.
pub(super) struct ProgressTicket {
    book: Arc<ProgressBook>,
    key: (String, ProgressToken),
}

/// How long progress of a call that has answered is still passed on: it travels apart from the
/// result and may arrive just after it.
pub(super) const PROGRESS_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

impl ProgressBook {
    /// Progress `upstream` sends for `token` goes to `outlet` until the ticket is dropped.
    pub fn register(
        self: &Arc<Self>,
        upstream: &str,
        token: &ProgressToken,
        outlet: Arc<dyn ProgressOutlet>,
    ) -> ProgressTicket {
        let key = (upstream.to_string(), token.clone());
        self.calls.lock().expect("progress lock").insert(key.clone(), outlet);
        ProgressTicket { book: self.clone(), key }
    }

    /// Progress `upstream` sent: to its call's host, if it is one of ours.
    pub fn deliver(&self, upstream: &str, progress: ProgressNotificationParam) {
        let key = (upstream.to_string(), progress.progress_token.clone());
        let outlet = self.calls.lock().expect("progress lock").get(&key).cloned();
        if let Some(outlet) = outlet {
            outlet.send(progress);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.calls.lock().expect("progress lock").len()
    }
}

impl Drop for ProgressTicket {
    fn drop(&mut self) {
        self.book.calls.lock().expect("progress lock").remove(&self.key);
    }
}

/// `_meta` keys the proxy does not pass upstream: the host's protocol metadata (the proxy
/// speaks to the upstream in its own era) and its progress token.
fn is_hosts_own(key: &str) -> bool {
    key.starts_with("io.modelcontextprotocol/") || key == "progressToken"
}

/// The host's `_meta` without the keys that are the host's own.
pub(super) fn upstream_meta(meta: Option<RequestMetaObject>) -> RequestMetaObject {
    let mut meta = meta.unwrap_or_default();
    meta.0.0.retain(|key, _| !is_hosts_own(key));
    meta
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    struct Collect(Mutex<Vec<f64>>);

    impl ProgressOutlet for Collect {
        fn send(&self, progress: ProgressNotificationParam) {
            self.0.lock().unwrap().push(progress.progress);
        }
    }

    fn progress(token: i64, value: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(token)), value)
    }

    #[test]
    fn progress_goes_only_to_its_call_and_only_from_its_upstream() {
        let book = Arc::new(ProgressBook::default());
        let outlet = Arc::new(Collect(Mutex::default()));
        let token = ProgressToken(NumberOrString::Number(6));
        let ticket = book.register("ev", &token, outlet.clone());
        book.deliver("ev", progress(6, 1.0));
        book.deliver("other", progress(6, 2.0));
        book.deliver("ev", progress(7, 3.0));
        assert_eq!(*outlet.0.lock().unwrap(), [1.0]);
        drop(ticket);
        assert_eq!(book.len(), 0);
        book.deliver("ev", progress(6, 4.0));
        assert_eq!(*outlet.0.lock().unwrap(), [1.0]);
    }

    #[test]
    fn the_hosts_own_meta_stays_with_the_host() {
        let mut host_meta = RequestMetaObject::default();
        host_meta.set_progress_token(ProgressToken(NumberOrString::Number(7)));
        host_meta.0.0.insert("io.modelcontextprotocol/protocolVersion".into(), "2026-07-28".into());
        host_meta.0.0.insert("trace".into(), "kept".into());
        let meta = upstream_meta(Some(host_meta));
        assert_eq!(meta.0.0.keys().collect::<Vec<_>>(), ["trace"]);
    }
}
