//! Progress of routed calls: a host's `progressToken` is not sent upstream as it is (two
//! hosts may pick the same one); each upstream request carries the token rmcp gives it (one
//! per request on that connection), and the upstream's `notifications/progress` for it go to
//! the host that asked, with the host's own token (the upstream connection routes them, in
//! order with the answer: see `crate::upstream`'s `progress`).
//!
//! Invariant: the host's progress token and protocol metadata never go upstream.

use rmcp::model::RequestMetaObject;

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
    use rmcp::model::{NumberOrString, ProgressToken};

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
