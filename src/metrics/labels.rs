//! The label values of [`super::Metrics`]: closed sets as enums, and the two open-but-bounded
//! ones (upstream names, policy file names) checked for shape.
//!
//! Invariant: no function here returns a value that could be a URI (every URI has a `:`).

use crate::namespace::is_valid_upstream_name;

/// Label enums: each written as `Variant => "label"`, with the derives every label needs,
/// `ALL` (every variant, in order) and `label()`.
macro_rules! labels {
    ($($(#[$doc:meta])* pub enum $name:ident { $($(#[$vdoc:meta])* $variant:ident => $label:literal,)* })*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// Every value, in the order written.
            pub const ALL: &[Self] = &[$(Self::$variant),*];

            /// The value as a metric label.
            pub fn label(self) -> &'static str {
                match self {
                    $(Self::$variant => $label,)*
                }
            }
        }
    )*};
}

labels! {
    /// How a downstream session reaches the proxy.
    pub enum Transport {
        Stdio => "stdio",
        Http => "http",
    }

    /// Which notification (both eras map onto these).
    pub enum NotificationKind {
        /// `notifications/resources/updated` (or its 2026-07-28 listen-stream form).
        Updated => "updated",
        /// `notifications/resources/list_changed`.
        ListChanged => "list_changed",
    }

    /// Why the cache dropped an entry on its own.
    pub enum EvictionCause {
        /// The byte bound was reached.
        Size => "size",
        /// Its TTL ran out.
        Expired => "expired",
    }

    /// Why the proxy dropped cache entries because they may be stale.
    pub enum InvalidationCause {
        /// The upstream said `resources/updated` for the URI (or a parent of it).
        Updated => "updated",
        /// The upstream reconnected: updates may have been missed.
        Reconnect => "reconnect",
        /// A config or policy reload.
        Reload => "reload",
        /// An update arrived while the value was loading: the loaded value was not inserted.
        UpdatedDuringLoad => "updated_during_load",
    }

    /// What happened in the shared cache tier (a cluster's Redis).
    pub enum SharedCacheEvent {
        /// An entry was found in the shared tier (and copied to the local one).
        Hit => "hit",
        /// The local tier held the entry Redis vouched for: nothing was fetched.
        LocalHit => "local_hit",
        /// Nothing vouched for in the shared tier: the read went upstream.
        Miss => "miss",
        /// A loaded result was stored in the shared tier.
        Fill => "fill",
        /// A loaded result was not stored: an update overtook its load.
        FillOvertaken => "fill_overtaken",
        /// An `updated` raised a URI's version for every replica.
        Invalidation => "invalidation",
        /// Anything of an upstream may have changed: its floor rose for every replica.
        FloorRaised => "floor_raised",
        /// A call to Redis failed or took too long.
        Error => "error",
    }

    /// What became of a host's answer to a request a replica sent it (`[cluster]`).
    pub enum AnswerOutcome {
        /// It came to the replica that asked, which took it.
        Local => "local",
        /// It came to another replica, which published it, sealed and addressed to the asking
        /// one, on the session news channel.
        Forwarded => "forwarded",
        /// This replica asked, and took the answer another replica forwarded.
        Delivered => "delivered",
        /// Dropped: no request of this session is waiting for it (forged, of another session or
        /// principal, answered already), or it did not open.
        Dropped => "dropped",
        /// Forwarded to no one: the asking replica is not seen alive (gone), or Redis is down.
        Unheard => "unheard",
    }

    /// What the cluster keeps in Redis, sealed, that was read back and did not open.
    pub enum SealedKind {
        /// A shared cache entry.
        CacheEntry => "cache_entry",
        /// A 2025 session's record: its principal, `initialize` parameters, log level or a
        /// subscribed URI.
        SessionRecord => "session_record",
        /// A host's answer addressed to this replica on the session news channel.
        SessionNews => "session_news",
        /// A call's answer kept for a host's resumption of its cut stream.
        KeptAnswer => "kept_answer",
    }

    /// What a client was refused by policy.
    pub enum DenialAction {
        /// A `resources/read`.
        Read => "read",
        /// A resource or template hidden from a list page (counted per hidden item).
        List => "list",
        /// A subscription (legacy subscribe or a URI of a listen stream).
        Subscribe => "subscribe",
        /// A `tools/call`, `prompts/get` or `completion/complete` (and a tool or prompt hidden from
        /// a list page counts as `list`).
        Use => "use",
    }

    /// What a request refused by policy asked for (`mcp_proxy_denials_total{kind}` and the audit
    /// trail's denial events). A list that leaves entries out is not a denial of this kind.
    pub enum DenialKind {
        /// A `resources/read` (also through a bridge tool).
        Read => "read",
        /// A `resources/subscribe` or a URI of a listen stream.
        Subscribe => "subscribe",
        /// A `tools/call` (an upstream's tool or a bridge tool).
        Call => "call",
        /// A `prompts/get` (or a completion for a prompt).
        Prompt => "prompt",
        /// A completion for a resource template.
        Template => "template",
    }
}

/// Every `reason` of `mcp_proxy_auth_refused_total`, as the auth module names them.
pub const AUTH_REFUSAL_REASONS: &[&str] = &[
    "missing",
    "malformed",
    "unknown_token",
    "malformed_jwt",
    "algorithm",
    "unknown_key",
    "bad_signature",
    "expired",
    "not_yet_valid",
    "wrong_issuer",
    "wrong_audience",
    "bad_claims",
];

/// An upstream name as a label value: config-validated names only (`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`,
/// which no URI matches); anything else is `invalid` so a mistake cannot leak a URI into a label.
pub(super) fn upstream_label(upstream: &str) -> &str {
    if is_valid_upstream_name(upstream) { upstream } else { "invalid" }
}

/// A policy file name as a label value (`team-a.toml`, `teams/a.toml`); `None` is `default`,
/// anything not shaped like a relative file name (a `:` in particular) is `other`.
pub(super) fn policy_label(policy: Option<&str>) -> &str {
    let Some(file) = policy else { return "default" };
    let file_like =
        file.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/')) && file.len() <= 128;
    if file_like && !file.is_empty() { file } else { "other" }
}
