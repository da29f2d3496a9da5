//! The ground floor of protocol facts: the two eras of MCP the proxy speaks, the protocol
//! version strings it knows, the methods it serves, and the one way an era is told from a
//! negotiated version. Everything above (config, metrics, upstreams, hosts) takes these from
//! here; this module imports nothing of the crate.
//!
//! Invariant: era detection exists once ([`Era::of_text`]; [`Era::of`] and [`Era::of_known`]
//! apply it — the wire floor's request era too); a version string the proxy accepts in config
//! is in [`KNOWN_VERSIONS`] (rmcp's list), and the 2026-07-28 one is [`MODERN_VERSION`].

use rmcp::model::ProtocolVersion;

/// The protocol era spoken on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2025 and earlier: `initialize`, sessions, `resources/subscribe`.
    Legacy,
    /// 2026-07-28: stateless, `server/discover`, `subscriptions/listen`.
    Modern,
}

/// The 2026-07-28 version string (stateless, `server/discover`).
pub const MODERN_VERSION: &str = "2026-07-28";

/// Every version an upstream may be pinned to (`protocol = "..."`).
pub const KNOWN_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", MODERN_VERSION];

/// The legacy handshake version the proxy offers when it falls back from a probe.
pub const LEGACY_HANDSHAKE: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// The `kind` in the error data of a list that the session endpoint answers for a session that
/// lists no tools or prompts of its own (the upstream's lists are its lists).
pub const NO_OWN_LISTS: &str = "no_own_lists";

/// The methods hosts call on the proxy (their request counters exist from the start).
pub mod method {
    pub const RESOURCES_LIST: &str = "resources/list";
    pub const TEMPLATES_LIST: &str = "resources/templates/list";
    pub const RESOURCES_READ: &str = "resources/read";
    pub const RESOURCES_SUBSCRIBE: &str = "resources/subscribe";
    pub const RESOURCES_UNSUBSCRIBE: &str = "resources/unsubscribe";
    pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
    pub const TOOLS_LIST: &str = "tools/list";
    pub const TOOLS_CALL: &str = "tools/call";
    pub const PROMPTS_LIST: &str = "prompts/list";
    pub const PROMPTS_GET: &str = "prompts/get";
    pub const COMPLETION_COMPLETE: &str = "completion/complete";
}

/// Every method a host may call on the proxy.
pub const DOWNSTREAM_METHODS: &[&str] = &[
    method::RESOURCES_LIST,
    method::TEMPLATES_LIST,
    method::RESOURCES_READ,
    method::RESOURCES_SUBSCRIBE,
    method::RESOURCES_UNSUBSCRIBE,
    method::SUBSCRIPTIONS_LISTEN,
    method::TOOLS_LIST,
    method::TOOLS_CALL,
    method::PROMPTS_LIST,
    method::PROMPTS_GET,
    method::COMPLETION_COMPLETE,
];

/// Whether the proxy serves `method` to hosts.
pub fn is_downstream_method(method: &str) -> bool {
    DOWNSTREAM_METHODS.contains(&method)
}

impl Era {
    /// The era of a negotiated version: a version whose lifecycle starts with `initialize`
    /// (one before 2026-07-28: rmcp's `has_initialize`) is legacy, anything newer is 2026-07-28.
    pub fn of(version: &ProtocolVersion) -> Era {
        Era::of_text(version.as_str())
    }

    /// The era of a connection whose version may be unknown (no handshake seen yet): legacy.
    pub fn of_negotiated(version: Option<&ProtocolVersion>) -> Era {
        version.map_or(Era::Legacy, Era::of)
    }

    /// The era of a version string: the one rule every era is told by (versions compare as
    /// dates, the form they have).
    pub fn of_text(version: &str) -> Era {
        if version < MODERN_VERSION { Era::Legacy } else { Era::Modern }
    }

    /// The era of a version the proxy (and rmcp) knows; `None` for any other string (a request
    /// header naming one is refused by rmcp).
    pub fn of_known(version: &str) -> Option<Era> {
        KNOWN_VERSIONS.contains(&version).then(|| Era::of_text(version))
    }

    /// Its one name wherever a user reads it: the `era` metric label, `/status`, logs and the
    /// audit trail.
    pub fn label(self) -> &'static str {
        match self {
            Era::Legacy => "2025",
            Era::Modern => MODERN_VERSION,
        }
    }

    /// A version of this era to ask for.
    pub fn version(self) -> ProtocolVersion {
        match self {
            Era::Legacy => LEGACY_HANDSHAKE,
            Era::Modern => ProtocolVersion::V_2026_07_28,
        }
    }
}

/// An era is written as its [`Era::label`].
impl serde::Serialize for Era {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.label())
    }
}

/// A pinned version string as rmcp's type (any string is a version to rmcp).
pub fn version_of(text: &str) -> ProtocolVersion {
    serde_json::from_value(serde_json::Value::String(text.to_string())).expect("a string is a version")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(version: &str, expected: Era) {
        assert_eq!(Era::of(&version_of(version)), expected, "{version}");
        assert_eq!(Era::of_text(version), expected, "{version}");
    }

    #[test]
    fn every_known_version_has_one_era() {
        check("2024-11-05", Era::Legacy);
        check("2025-03-26", Era::Legacy);
        check("2025-06-18", Era::Legacy);
        check("2025-11-25", Era::Legacy);
        check(MODERN_VERSION, Era::Modern);
        assert_eq!(Era::of_negotiated(None), Era::Legacy);
        assert_eq!(Era::of(&Era::Modern.version()), Era::Modern);
        assert_eq!(Era::of(&Era::Legacy.version()), Era::Legacy);
        assert_eq!(Era::of_known("2025-11-25"), Some(Era::Legacy));
        assert_eq!(Era::of_known(MODERN_VERSION), Some(Era::Modern));
        assert_eq!(Era::of_known("2025-11-26"), None);
    }

    /// The versions known here are rmcp's, and both tell eras alike (the wire floor mirrors
    /// rmcp's checks of version headers with this list).
    #[test]
    fn the_known_versions_and_their_eras_are_rmcps() {
        let rmcp: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS.iter().map(ProtocolVersion::as_str).collect();
        assert_eq!(rmcp, KNOWN_VERSIONS);
        for version in ProtocolVersion::KNOWN_VERSIONS.iter().chain([&version_of("2027-01-01"), &version_of("x")]) {
            let expected = if version.has_initialize() { Era::Legacy } else { Era::Modern };
            assert_eq!(Era::of(version), expected, "{version}");
        }
    }

    #[test]
    fn every_downstream_method_is_served_and_nothing_else() {
        for method in DOWNSTREAM_METHODS {
            assert!(is_downstream_method(method));
        }
        assert!(!is_downstream_method("sampling/createMessage"));
    }
}
