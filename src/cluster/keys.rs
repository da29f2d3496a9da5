//! Keys derived from the cluster secret: one per use, so that no two uses ever share a key and the
//! secret itself is used for nothing but deriving. Every replica given the same secret derives
//! the same keys; another secret derives unrelated ones.
//!
//! The derivation is HMAC-SHA256(secret, `"mcp-resource-proxy cluster v1\0" ‖ label`) — HKDF's
//! expand step for one block, with the label as its info.
//!
//! Invariant: a derived key never leaves the process (not to Redis, logs or `/status`); what may
//! be shown is [`ClusterKeys::namespace`], a tag that names the cluster's keys in Redis and says
//! nothing of the secret.

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The labels of the derived keys. A new use takes a new label.
pub mod label {
    /// Pagination cursors (`crate::cursor::CursorKey`).
    pub const CURSOR: &str = "cursor";
    /// Upstreams' `requestState`s sealed to their subscriber (`crate::tools`).
    pub const REQUEST_STATE: &str = "request-state";
    /// 2025 session ids.
    pub const SESSION_ID: &str = "session-id";
    /// The prefix of the cluster's keys in Redis.
    pub const NAMESPACE: &str = "redis-namespace";
    /// The pass on each request to a replica's session endpoint (`crate::cluster::session_pass`).
    pub const SESSION_PASS: &str = "session-pass";
    /// Principals' names in Redis keys (`crate::cluster::counts`).
    pub const PRINCIPAL: &str = "principal-tag";
    /// What the cluster keeps in Redis, sealed (`crate::cluster::sealed`).
    pub const REDIS_SEAL: &str = "redis-seal";
    /// URIs and principals as Redis keys and fields name them (`crate::cluster::sealed`).
    pub const REDIS_NAMES: &str = "redis-names";
}

/// The keys of one cluster secret.
#[derive(Clone)]
pub struct ClusterKeys {
    secret: Vec<u8>,
    namespace: String,
}

impl ClusterKeys {
    pub fn new(secret: &[u8]) -> Self {
        let mut keys = Self { secret: secret.to_vec(), namespace: String::new() };
        let tag = keys.derive(label::NAMESPACE);
        keys.namespace = tag[..8].iter().map(|b| format!("{b:02x}")).collect();
        keys
    }

    /// The key for `label` (one of [`label`]).
    pub fn derive(&self, label: &str) -> [u8; 32] {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret).expect("any key length");
        mac.update(b"mcp-resource-proxy cluster v1\0");
        mac.update(label.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// A principal's name in Redis keys: 24 hex digits of a keyed hash (the name itself is
    /// never in a key).
    pub fn principal_tag(&self, principal: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.derive(label::PRINCIPAL)).expect("any key length");
        mac.update(principal.as_bytes());
        mac.finalize().into_bytes()[..12].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// 16 hex digits naming this secret's cluster (its keys in Redis start `mcp-proxy:<this>:`),
    /// so clusters with different secrets sharing one Redis never see each other's keys.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

impl fmt::Debug for ClusterKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterKeys").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn one_secret_derives_the_same_keys_everywhere_and_one_per_use() {
        let (a, b) = (ClusterKeys::new(SECRET), ClusterKeys::new(SECRET));
        assert_eq!(a.derive(label::CURSOR), b.derive(label::CURSOR));
        assert_eq!(a.namespace(), b.namespace());
        let uses = [
            a.derive(label::CURSOR),
            a.derive(label::REQUEST_STATE),
            a.derive(label::SESSION_ID),
            a.derive(label::NAMESPACE),
            a.derive(label::PRINCIPAL),
            a.derive(label::REDIS_SEAL),
            a.derive(label::REDIS_NAMES),
            a.derive(label::SESSION_PASS),
        ];
        for (i, x) in uses.iter().enumerate() {
            for y in &uses[i + 1..] {
                assert_ne!(x, y, "two uses share a key");
            }
            assert_ne!(&x[..], SECRET, "the secret is never a key");
        }
    }

    #[test]
    fn another_secret_derives_unrelated_keys_and_nothing_shows_the_secret() {
        let (a, other) = (ClusterKeys::new(SECRET), ClusterKeys::new(b"another secret, just as long, 32b"));
        assert_ne!(a.derive(label::CURSOR), other.derive(label::CURSOR));
        assert_ne!(a.namespace(), other.namespace());
        assert_eq!(a.namespace().len(), 16);
        assert_ne!(a.principal_tag("alice"), other.principal_tag("alice"));
        assert_eq!(a.principal_tag("alice").len(), 24);
        assert!(!a.principal_tag("alice").contains("alice"));
        let shown = format!("{a:?}");
        assert!(!shown.contains("0123456789"), "{shown}");
    }
}
