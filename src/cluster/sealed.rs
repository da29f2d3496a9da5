//! What the proxy keeps in Redis, sealed: the shared cache's entries and the 2025 sessions'
//! records (principal, `initialize` parameters with `clientInfo`, log level, subscribed URIs)
//! are encrypted and authenticated with the AEAD of [`crate::crypto`] (ChaCha20-Poly1305, a
//! random nonce each) under a key derived from the cluster secret for this use alone
//! (`keys::label::REDIS_SEAL`). Each value is bound, as associated data, to the Redis key and
//! field it is written under (and whatever else its reader checks, such as an entry's voucher),
//! so a value copied or moved to another place does not open there. Where Redis must name a
//! URI or a principal (a key, a hash field), it names it by a keyed digest ([`RedisSeal::name`]),
//! never in clear.
//!
//! A value that does not open (written by someone without the secret, sealed under another
//! secret, altered, moved, or written in clear before sealing) is taken as missing: the caller
//! treats it as a miss (a cache entry loads again, a session is unknown, a subscription is not
//! listed), it is counted in `mcp_proxy_cluster_redis_rejected_total{kind}` and logged at debug.
//!
//! Invariant: nothing this module seals can be read, or forged, without the cluster secret;
//! a value opens only under the key and field it was sealed for.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::keys::{ClusterKeys, label};
use crate::crypto::SealingKey;
use crate::metrics::{Metrics, SealedKind};

/// The first byte of every sealed value: a value in another format (an older release's JSON in
/// clear) never opens.
const VERSION: u8 = 1;

/// Seals and opens what this cluster keeps in Redis. A cheap `Clone`.
#[derive(Clone)]
pub struct RedisSeal {
    key: SealingKey,
    /// The keyed digest of names, keyed once (each name clones it).
    names: Hmac<Sha256>,
    metrics: Metrics,
}

impl RedisSeal {
    pub fn new(keys: &ClusterKeys, metrics: Metrics) -> Self {
        let names = Hmac::<Sha256>::new_from_slice(&keys.derive(label::REDIS_NAMES)).expect("any key length");
        Self { key: SealingKey::new(&keys.derive(label::REDIS_SEAL)), names, metrics }
    }

    /// `plaintext` sealed for `field` of the Redis key `redis_key`, bound to `bound` too.
    pub fn seal(&self, (redis_key, field, bound): (&str, &str, &str), plaintext: &[u8]) -> Vec<u8> {
        let mut sealed = Vec::with_capacity(1 + crate::crypto::SEAL_OVERHEAD + plaintext.len());
        sealed.push(VERSION);
        sealed.extend_from_slice(&self.key.seal(&associated(redis_key, field, bound), plaintext));
        sealed
    }

    /// The plaintext of `sealed`, if it was sealed by this cluster for this very place; else
    /// `None`, counted under `kind` and logged at debug.
    pub fn open(
        &self,
        kind: SealedKind,
        (redis_key, field, bound): (&str, &str, &str),
        sealed: &[u8],
    ) -> Option<Vec<u8>> {
        let opened = match sealed.split_first() {
            Some((&VERSION, rest)) => self.key.open(&associated(redis_key, field, bound), rest),
            _ => None,
        };
        if opened.is_none() {
            self.metrics.redis_rejected(kind);
            tracing::debug!(
                kind = kind.label(),
                "cluster: a value in Redis does not open under this cluster's key (forged, another secret's, \
                 altered, moved, or written before sealing); taken as missing"
            );
        }
        opened
    }

    /// As [`RedisSeal::open`], for text.
    pub fn open_text(&self, kind: SealedKind, place: (&str, &str, &str), sealed: &[u8]) -> Option<String> {
        let opened = self.open(kind, place, sealed)?;
        match String::from_utf8(opened) {
            Ok(text) => Some(text),
            Err(_) => {
                self.metrics.redis_rejected(kind);
                None
            }
        }
    }

    /// `text` (a URI, a principal) as Redis may name it: 32 hex digits of a keyed digest, the
    /// same on every replica of this cluster and saying nothing of the text.
    pub fn name(&self, text: &str) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut mac = self.names.clone();
        mac.update(text.as_bytes());
        let mut name = String::with_capacity(32);
        for byte in &mac.finalize().into_bytes()[..16] {
            name.push(char::from(HEX[usize::from(byte >> 4)]));
            name.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
        name
    }
}

impl std::fmt::Debug for RedisSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisSeal(..)")
    }
}

/// What a value is bound to besides the key: the format, its Redis key, its field and `bound`,
/// each ended by a zero byte (none of them holds one).
fn associated(redis_key: &str, field: &str, bound: &str) -> Vec<u8> {
    let mut associated = b"mcp-proxy redis\0".to_vec();
    associated.push(VERSION);
    for part in [redis_key, field, bound] {
        associated.extend_from_slice(part.as_bytes());
        associated.push(0);
    }
    associated
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn seal(secret: &[u8]) -> (RedisSeal, Metrics) {
        let metrics = Metrics::new();
        (RedisSeal::new(&ClusterKeys::new(secret), metrics.clone()), metrics)
    }

    fn rejected(metrics: &Metrics) -> f64 {
        let exposition = metrics.render();
        let line = exposition
            .lines()
            .find(|line| line.starts_with("mcp_proxy_cluster_redis_rejected_total{kind=\"cache_entry\"}"))
            .expect("the series is there from the start");
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    #[test]
    fn a_value_opens_only_under_its_cluster_key_and_place_and_each_refusal_is_counted() {
        let (ours, metrics) = seal(SECRET);
        let place = ("mcp-proxy:ns:cache:e:up:3:-:name", "b", "");
        let sealed = ours.seal(place, b"the body");
        let kind = SealedKind::CacheEntry;
        assert_eq!(ours.open(kind, place, &sealed).as_deref(), Some(&b"the body"[..]));
        assert_eq!(rejected(&metrics), 0.0);
        let refused = [
            ours.open(kind, ("mcp-proxy:ns:cache:e:up:4:-:name", "b", ""), &sealed),
            ours.open(kind, (place.0, "v", ""), &sealed),
            ours.open(kind, (place.0, "b", "replica-2"), &sealed),
            seal(b"another secret, just as long, 32b").0.open(kind, place, &sealed),
            ours.open(kind, place, b"{\"result\":{\"contents\":[]}}"),
            ours.open(kind, place, b""),
        ];
        assert!(refused.iter().all(Option::is_none), "{refused:?}");
        assert_eq!(rejected(&metrics), 5.0, "the other secret's seal counts on its own metrics");
        let shown = String::from_utf8_lossy(&sealed);
        assert!(!shown.contains("the body"), "sealed in clear: {shown}");
    }

    #[test]
    fn a_name_is_the_same_for_the_cluster_and_says_nothing_of_the_text() {
        let (ours, _) = seal(SECRET);
        let name = ours.name("file:///alice/notes.md");
        assert_eq!(name, seal(SECRET).0.name("file:///alice/notes.md"));
        assert_ne!(name, seal(b"another secret, just as long, 32b").0.name("file:///alice/notes.md"));
        assert_ne!(name, ours.name("file:///alice/notes.mdx"));
        assert_eq!(name.len(), 32);
        // The digest as every release names it (HMAC-SHA256 of the text, its first 16 bytes in hex).
        let mut mac = Hmac::<Sha256>::new_from_slice(&ClusterKeys::new(SECRET).derive(label::REDIS_NAMES)).unwrap();
        mac.update(b"file:///alice/notes.md");
        let expected: String = mac.finalize().into_bytes()[..16].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(name, expected);
        assert!(!name.contains("alice"));
    }
}
