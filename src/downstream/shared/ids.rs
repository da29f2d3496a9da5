//! Session ids a replica can check without asking anyone: `<nonce>.<tag>`, both base64url, the
//! tag an HMAC-SHA256 (with the cluster's session-id key) over the nonce and the principal that
//! opened the session. A forged id, one of another principal, or one made under another cluster
//! secret fails [`SessionIds::verify`] and is answered like an unknown session; a replayed one
//! (its session ended) passes, and finds no record.
//!
//! Redis never sees an id: a session's record is stored under [`SessionIds::record_key`], an HMAC
//! of the id, so reading Redis gives nobody a session id to present.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

const NONCE: usize = 16;
const TAG: usize = 16;

/// Mints and checks session ids with one derived key.
#[derive(Clone)]
pub(crate) struct SessionIds {
    key: [u8; 32],
}

impl SessionIds {
    pub fn new(key: [u8; 32]) -> Self {
        Self { key }
    }

    /// A new id for a session `principal` opens.
    pub fn mint(&self, principal: &str) -> String {
        let nonce: [u8; NONCE] = rand::random();
        let tag = self.tag(&nonce, principal);
        format!("{}.{}", URL_SAFE_NO_PAD.encode(nonce), URL_SAFE_NO_PAD.encode(tag))
    }

    /// `id` was minted with this key for `principal`.
    pub fn verify(&self, id: &str, principal: &str) -> bool {
        let Some((nonce, tag)) = id.split_once('.') else { return false };
        let (Ok(nonce), Ok(tag)) = (URL_SAFE_NO_PAD.decode(nonce), URL_SAFE_NO_PAD.decode(tag)) else {
            return false;
        };
        if nonce.len() != NONCE || tag.len() != TAG {
            return false;
        }
        let mut mac = self.mac(b"tag\0");
        mac.update(&nonce);
        mac.update(b"\0");
        mac.update(principal.as_bytes());
        mac.verify_truncated_left(&tag).is_ok()
    }

    /// The name of `id`'s record in Redis (hex; says nothing of the id).
    pub fn record_key(&self, id: &str) -> String {
        let mut mac = self.mac(b"record\0");
        mac.update(id.as_bytes());
        mac.finalize().into_bytes()[..16].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The key of `id`'s per-host upstream sessions: the same on every replica, and what news
    /// of the session's end carries ([`host_key_of`]).
    pub fn host_key(&self, id: &str) -> u64 {
        host_key_of(&self.record_key(id)).expect("a record key is hex")
    }

    /// A principal's name in Redis (hex; the cap counters are per principal).
    pub fn principal_key(&self, principal: &str) -> String {
        let mut mac = self.mac(b"principal\0");
        mac.update(principal.as_bytes());
        mac.finalize().into_bytes()[..12].iter().map(|b| format!("{b:02x}")).collect()
    }

    fn tag(&self, nonce: &[u8], principal: &str) -> [u8; TAG] {
        let mut mac = self.mac(b"tag\0");
        mac.update(nonce);
        mac.update(b"\0");
        mac.update(principal.as_bytes());
        let full = mac.finalize().into_bytes();
        full[..TAG].try_into().expect("16 bytes")
    }

    fn mac(&self, purpose: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(purpose);
        mac
    }
}

/// The key of the per-host upstream sessions of the session whose record key is `record_key`
/// (its first 16 hex digits); `None` for anything else.
pub fn host_key_of(record_key: &str) -> Option<u64> {
    u64::from_str_radix(record_key.get(..16)?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(ids: &SessionIds, id: &str, principal: &str, expected: bool) {
        assert_eq!(ids.verify(id, principal), expected, "verify({id:?}, {principal:?})");
    }

    #[test]
    fn only_an_id_minted_for_the_principal_under_the_same_key_verifies() {
        let ids = SessionIds::new([7; 32]);
        let other_secret = SessionIds::new([8; 32]);
        let id = ids.mint("alice");
        check(&ids, &id, "alice", true);
        check(&ids, &id, "bob", false);
        check(&other_secret, &id, "alice", false);
        let (nonce, tag) = id.split_once('.').unwrap();
        let mut flipped = tag.as_bytes().to_vec();
        flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
        check(&ids, &format!("{nonce}.{}", String::from_utf8(flipped).unwrap()), "alice", false);
        for forged in [
            "",
            ".",
            "abc",
            "abc.def",
            "3f2a1c9e-0000-4000-8000-000000000000",
            &format!("{nonce}."),
            &format!(".{tag}"),
        ] {
            check(&ids, forged, "alice", false);
        }
        assert_ne!(ids.mint("alice"), id, "ids are random");
    }

    #[test]
    fn record_keys_are_stable_per_id_and_hide_it() {
        let ids = SessionIds::new([7; 32]);
        let id = ids.mint("alice");
        assert_eq!(ids.record_key(&id), ids.record_key(&id));
        assert_ne!(ids.record_key(&id), ids.record_key(&ids.mint("alice")));
        assert_ne!(ids.record_key(&id), SessionIds::new([8; 32]).record_key(&id));
        assert!(!ids.record_key(&id).contains(id.split_once('.').unwrap().0));
        assert_eq!(ids.record_key(&id).len(), 32);
    }
}
