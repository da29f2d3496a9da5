//! The label values of [`super::Metrics`]: closed sets as enums, and the two open-but-bounded
//! ones (upstream names, policy file names) checked for shape.
//!
//! Invariant: no function here returns a value that could be a URI (every URI has a `:`).

use crate::namespace::is_valid_upstream_name;

/// How a downstream session reaches the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stdio,
    Http,
}

/// Which notification (both eras map onto these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationKind {
    /// `notifications/resources/updated` (or its 2026-07-28 listen-stream form).
    Updated,
    /// `notifications/resources/list_changed`.
    ListChanged,
}

/// Why the cache dropped an entry on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionCause {
    /// The byte bound was reached.
    Size,
    /// Its TTL ran out.
    Expired,
}

/// Why the proxy dropped cache entries because they may be stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidationCause {
    /// The upstream said `resources/updated` for the URI (or a parent of it).
    Updated,
    /// The upstream reconnected: updates may have been missed.
    Reconnect,
    /// A config or policy reload.
    Reload,
    /// An update arrived while the value was loading: the loaded value was not inserted.
    UpdatedDuringLoad,
}

/// What happened in the shared cache tier (a cluster's Redis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedCacheEvent {
    /// An entry was found in the shared tier (and copied to the local one).
    Hit,
    /// The local tier held the entry Redis vouched for: nothing was fetched.
    LocalHit,
    /// Nothing vouched for in the shared tier: the read went upstream.
    Miss,
    /// A loaded result was stored in the shared tier.
    Fill,
    /// A loaded result was not stored: an update overtook its load.
    FillOvertaken,
    /// An `updated` raised a URI's version for every replica.
    Invalidation,
    /// Anything of an upstream may have changed: its floor rose for every replica.
    FloorRaised,
    /// A call to Redis failed or took too long.
    Error,
}

/// What became of a host's answer to a request a replica sent it (`[cluster]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerOutcome {
    /// It came to the replica that asked, which took it.
    Local,
    /// It came to another replica, which published it, sealed and addressed to the asking
    /// one, on the session news channel.
    Forwarded,
    /// This replica asked, and took the answer another replica forwarded.
    Delivered,
    /// Dropped: no request of this session is waiting for it (forged, of another session or
    /// principal, answered already), or it did not open.
    Dropped,
    /// Forwarded to no one: the asking replica is not seen alive (gone), or Redis is down.
    Unheard,
}

/// What the cluster keeps in Redis, sealed, that was read back and did not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SealedKind {
    /// A shared cache entry.
    CacheEntry,
    /// A 2025 session's record: its principal, `initialize` parameters, log level or a
    /// subscribed URI.
    SessionRecord,
    /// A host's answer addressed to this replica on the session news channel.
    SessionNews,
    /// A call's answer kept for a host's resumption of its cut stream.
    KeptAnswer,
}

/// What a client was refused by policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenialAction {
    /// A `resources/read`.
    Read,
    /// A resource or template hidden from a list page (counted per hidden item).
    List,
    /// A subscription (legacy subscribe or a URI of a listen stream).
    Subscribe,
    /// A `tools/call`, `prompts/get` or `completion/complete` (and a tool or prompt hidden from
    /// a list page counts as `list`).
    Use,
}

/// What a request refused by policy asked for (`mcp_proxy_denials_total{kind}` and the audit
/// trail's denial events). A list that leaves entries out is not a denial of this kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenialKind {
    /// A `resources/read` (also through a bridge tool).
    Read,
    /// A `resources/subscribe` or a URI of a listen stream.
    Subscribe,
    /// A `tools/call` (an upstream's tool or a bridge tool).
    Call,
    /// A `prompts/get` (or a completion for a prompt).
    Prompt,
    /// A completion for a resource template.
    Template,
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

impl DenialKind {
    pub const ALL: [DenialKind; 5] =
        [DenialKind::Read, DenialKind::Subscribe, DenialKind::Call, DenialKind::Prompt, DenialKind::Template];

    pub fn label(self) -> &'static str {
        match self {
            DenialKind::Read => "read",
            DenialKind::Subscribe => "subscribe",
            DenialKind::Call => "call",
            DenialKind::Prompt => "prompt",
            DenialKind::Template => "template",
        }
    }
}

impl Transport {
    pub fn label(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

impl NotificationKind {
    pub const ALL: [NotificationKind; 2] = [NotificationKind::Updated, NotificationKind::ListChanged];

    pub fn label(self) -> &'static str {
        match self {
            NotificationKind::Updated => "updated",
            NotificationKind::ListChanged => "list_changed",
        }
    }
}

impl EvictionCause {
    pub const ALL: [EvictionCause; 2] = [EvictionCause::Size, EvictionCause::Expired];

    pub fn label(self) -> &'static str {
        match self {
            EvictionCause::Size => "size",
            EvictionCause::Expired => "expired",
        }
    }
}

impl InvalidationCause {
    pub const ALL: [InvalidationCause; 4] = [
        InvalidationCause::Updated,
        InvalidationCause::Reconnect,
        InvalidationCause::Reload,
        InvalidationCause::UpdatedDuringLoad,
    ];

    pub fn label(self) -> &'static str {
        match self {
            InvalidationCause::Updated => "updated",
            InvalidationCause::Reconnect => "reconnect",
            InvalidationCause::Reload => "reload",
            InvalidationCause::UpdatedDuringLoad => "updated_during_load",
        }
    }
}

impl AnswerOutcome {
    pub const ALL: [AnswerOutcome; 5] = [
        AnswerOutcome::Local,
        AnswerOutcome::Forwarded,
        AnswerOutcome::Delivered,
        AnswerOutcome::Dropped,
        AnswerOutcome::Unheard,
    ];

    pub fn label(self) -> &'static str {
        match self {
            AnswerOutcome::Local => "local",
            AnswerOutcome::Forwarded => "forwarded",
            AnswerOutcome::Delivered => "delivered",
            AnswerOutcome::Dropped => "dropped",
            AnswerOutcome::Unheard => "unheard",
        }
    }
}

impl SharedCacheEvent {
    pub const ALL: [SharedCacheEvent; 8] = [
        SharedCacheEvent::Hit,
        SharedCacheEvent::LocalHit,
        SharedCacheEvent::Miss,
        SharedCacheEvent::Fill,
        SharedCacheEvent::FillOvertaken,
        SharedCacheEvent::Invalidation,
        SharedCacheEvent::FloorRaised,
        SharedCacheEvent::Error,
    ];

    pub fn label(self) -> &'static str {
        match self {
            SharedCacheEvent::Hit => "hit",
            SharedCacheEvent::LocalHit => "local_hit",
            SharedCacheEvent::Miss => "miss",
            SharedCacheEvent::Fill => "fill",
            SharedCacheEvent::FillOvertaken => "fill_overtaken",
            SharedCacheEvent::Invalidation => "invalidation",
            SharedCacheEvent::FloorRaised => "floor_raised",
            SharedCacheEvent::Error => "error",
        }
    }
}

impl SealedKind {
    pub const ALL: [SealedKind; 4] =
        [SealedKind::CacheEntry, SealedKind::SessionRecord, SealedKind::SessionNews, SealedKind::KeptAnswer];

    pub fn label(self) -> &'static str {
        match self {
            SealedKind::CacheEntry => "cache_entry",
            SealedKind::SessionRecord => "session_record",
            SealedKind::SessionNews => "session_news",
            SealedKind::KeptAnswer => "kept_answer",
        }
    }
}

impl DenialAction {
    pub const ALL: [DenialAction; 4] =
        [DenialAction::Read, DenialAction::List, DenialAction::Subscribe, DenialAction::Use];

    pub fn label(self) -> &'static str {
        match self {
            DenialAction::Read => "read",
            DenialAction::List => "list",
            DenialAction::Subscribe => "subscribe",
            DenialAction::Use => "use",
        }
    }
}

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
