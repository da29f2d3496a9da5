//! The era of a streamable HTTP POST, told from its head and its request metadata, as rmcp's
//! server tells it: a 2026-07-28 stateless request carries complete protocol `_meta` and the
//! same version in `MCP-Protocol-Version`; a request on a 2025-era session carries none.
//!
//! Invariant: versions are classified by [`Era::of_known`] alone (the one era rule,
//! `crate::protocol`); this module adds only what the head and `_meta` must look like.

use http::HeaderMap;

use super::headers::{self, PROTOCOL_VERSION};
use crate::protocol::Era;

/// The `_meta` key of a 2026-07-28 request's protocol version.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The `_meta` key of a 2026-07-28 request's client capabilities (required).
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The `_meta` key of a 2026-07-28 request's client info.
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// What every protocol key of `_meta` starts with.
pub const META_PROTOCOL_PREFIX: &str = "io.modelcontextprotocol/";
/// The one `_meta` key a 2025-era request carries that concerns the transport.
pub const META_PROGRESS_TOKEN: &str = "progressToken";

/// The `_meta` keys of W3C Trace Context and Baggage (reserved since 2026-07-28, SEP-414): they
/// concern no era, so a request may carry them in either.
pub const META_TRACE_KEYS: [&str; 3] = ["traceparent", "tracestate", "baggage"];

/// What the era rule asks of a request's `_meta`.
#[derive(Debug, Default, PartialEq)]
pub struct MetaFacts {
    /// `protocolVersion`, when it is a string (rmcp's `RequestMetaObject::protocol_version`).
    pub version: Option<String>,
    /// `clientCapabilities` is present and decodes as rmcp's `ClientCapabilities`.
    pub capabilities: bool,
    /// Every key is one of protocol version, client capabilities, client info, progress token,
    /// or a trace context key ([`META_TRACE_KEYS`]).
    pub only_known_keys: bool,
    /// Every key is `progressToken` or a trace context key (true for no `_meta`).
    pub only_progress_token: bool,
}

impl MetaFacts {
    /// The facts of a request without `_meta`.
    pub fn absent() -> Self {
        Self { only_known_keys: true, only_progress_token: true, ..Self::default() }
    }

    /// Whether `key` is one of the keys [`MetaFacts`] knows: the four protocol keys and the
    /// trace context's.
    pub fn known_key(key: &str) -> bool {
        [META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROGRESS_TOKEN].contains(&key)
            || META_TRACE_KEYS.contains(&key)
    }

    /// Whether `key` may be in a 2025-era session request's `_meta`: the progress token and the
    /// trace context's keys.
    pub fn transport_key(key: &str) -> bool {
        key == META_PROGRESS_TOKEN || META_TRACE_KEYS.contains(&key)
    }
}

/// `Some(Era::Modern)` for a plain 2026-07-28 stateless request (complete request metadata and
/// nothing else in `_meta`, the version header agreeing, no session); `Some(Era::Legacy)` for a
/// plain request on a 2025-era session (no request metadata but a progress token, a known
/// pre-2026 version header or none); `None` for anything else (rmcp has an answer for it).
pub fn of_request(head: &HeaderMap, meta: &MetaFacts, in_session: bool) -> Option<Era> {
    let header = headers::single(head, PROTOCOL_VERSION)?;
    match (in_session, meta.version.as_deref()) {
        (false, Some(v)) if Era::of_known(v) == Some(Era::Modern) && header == Some(v) => {
            // rmcp's `missing_required_keys`: the version (present here) and the capabilities.
            (meta.capabilities && meta.only_known_keys).then_some(Era::Modern)
        }
        (true, None) if meta.only_progress_token && header.is_none_or(|v| Era::of_known(v) == Some(Era::Legacy)) => {
            Some(Era::Legacy)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn modern_meta() -> MetaFacts {
        MetaFacts { version: Some("2026-07-28".into()), capabilities: true, ..MetaFacts::absent() }
    }

    fn check(versions: &[&str], meta: MetaFacts, in_session: bool, expected: Option<Era>) {
        let mut head = HeaderMap::new();
        for version in versions {
            head.append(PROTOCOL_VERSION, version.parse().expect("a header value"));
        }
        assert_eq!(of_request(&head, &meta, in_session), expected, "{versions:?} {meta:?} session: {in_session}");
    }

    #[test]
    fn a_request_is_of_an_era_only_when_its_head_and_meta_agree() {
        check(&["2026-07-28"], modern_meta(), false, Some(Era::Modern));
        check(&[], modern_meta(), false, None);
        check(&["2025-11-25"], modern_meta(), false, None);
        check(&["2026-07-28", "2026-07-28"], modern_meta(), false, None);
        check(&["2026-07-28"], modern_meta(), true, None);
        check(&["2026-07-28"], MetaFacts { capabilities: false, ..modern_meta() }, false, None);
        check(&["2026-07-28"], MetaFacts { only_known_keys: false, ..modern_meta() }, false, None);
        let other = MetaFacts { version: Some("2099-01-01".into()), ..modern_meta() };
        check(&["2099-01-01"], other, false, None);
        check(&[], MetaFacts::absent(), true, Some(Era::Legacy));
        check(&["2025-11-25"], MetaFacts::absent(), true, Some(Era::Legacy));
        check(&["2024-11-05"], MetaFacts::absent(), true, Some(Era::Legacy));
        check(&["2025-11-26"], MetaFacts::absent(), true, None);
        check(&["2026-07-28"], MetaFacts::absent(), true, None);
        check(&[], MetaFacts { only_progress_token: false, ..MetaFacts::absent() }, true, None);
        check(&[], MetaFacts::absent(), false, None);
    }
}
