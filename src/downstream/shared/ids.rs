//! Session ids a replica can check without asking anyone: `<nonce>.<tag>`, both base64url, the
//! tag an HMAC-SHA256 (with the cluster's session-id key) over the nonce and the principal that
//! opened the session. A forged id, one of another principal, or one made under another cluster
//! secret fails [`SessionIds::verify`] and is answered like an unknown session; a replayed one
//! (its session ended) passes, and finds no record.
//!
//! Redis never sees an id: a session's record is stored under [`SessionIds::record_key`], an HMAC
//! of the id, so reading Redis gives nobody a session id to present.
//!
//! The same key marks the event ids of a session's POST streams ([`SessionIds::event_id`]):
//! `<rmcp's id>.<replica>.<request id>.<tag>`, the first three base64url, the tag an HMAC over
//! the session id and the three, so an event id says which replica served the stream and which
//! JSON-RPC request it answers, and holds only on the session it was given on.

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
        let tag = self.mac("tag", &[&nonce, principal.as_bytes()]).finalize().into_bytes();
        format!("{}.{}", URL_SAFE_NO_PAD.encode(nonce), URL_SAFE_NO_PAD.encode(&tag[..TAG]))
    }

    /// `id` was minted with this key for `principal`.
    pub fn verify(&self, id: &str, principal: &str) -> bool {
        let Some((nonce, tag)) = id.split_once('.') else { return false };
        let (Ok(nonce), Ok(tag)) = (URL_SAFE_NO_PAD.decode(nonce), URL_SAFE_NO_PAD.decode(tag)) else {
            return false;
        };
        nonce.len() == NONCE
            && tag.len() == TAG
            && self.mac("tag", &[&nonce, principal.as_bytes()]).verify_truncated_left(&tag).is_ok()
    }

    /// The name of `id`'s record in Redis (hex; says nothing of the id).
    pub fn record_key(&self, id: &str) -> String {
        self.hex("record", &[id.as_bytes()], 16)
    }

    /// The key of `id`'s per-host upstream sessions: the same on every replica, and what news
    /// of the session's end carries ([`host_key_of`]).
    pub fn host_key(&self, id: &str) -> u64 {
        host_key_of(&self.record_key(id)).expect("a record key is hex")
    }

    /// The event id of rmcp's event `rmcp` on the stream replica `replica` serves for request
    /// `request` (its JSON) of session `session`.
    pub fn event_id(&self, session: &str, replica: &str, request: &str, rmcp: &str) -> String {
        let parts = [rmcp, replica, request].map(|part| URL_SAFE_NO_PAD.encode(part));
        let tag = self.event_mac(session, [&parts[0], &parts[1], &parts[2]]).finalize().into_bytes();
        format!("{}.{}.{}.{}", parts[0], parts[1], parts[2], URL_SAFE_NO_PAD.encode(&tag[..TAG]))
    }

    /// What event id `id` says, when it was made by [`Self::event_id`] for `session` with this
    /// key; `None` for anything else (rmcp's own ids, forged or foreign ones).
    pub fn open_event_id(&self, session: &str, id: &str) -> Option<StreamEvent> {
        let mut parts = id.split('.');
        let (rmcp, replica, request, tag) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        self.event_mac(session, [rmcp, replica, request]).verify_truncated_left(&tag).ok()?;
        let text = |part: &str| String::from_utf8(URL_SAFE_NO_PAD.decode(part).ok()?).ok();
        Some(StreamEvent { rmcp: text(rmcp)?, replica: text(replica)?, request: text(request)? })
    }

    /// The key under which the answer of request `request` (its JSON) of session `session` is
    /// kept when its stream is lost: the same on every replica, and saying nothing of either.
    pub fn call_key(&self, session: &str, request: &str) -> String {
        self.hex("call", &[session.as_bytes(), request.as_bytes()], 16)
    }

    /// A principal's name in Redis (hex; the cap counters are per principal).
    pub fn principal_key(&self, principal: &str) -> String {
        self.hex("principal", &[principal.as_bytes()], 12)
    }

    fn event_mac(&self, session: &str, [rmcp, replica, request]: [&str; 3]) -> Hmac<Sha256> {
        self.mac("event", &[session.as_bytes(), rmcp.as_bytes(), replica.as_bytes(), request.as_bytes()])
    }

    /// The first `bytes` bytes of [`Self::mac`]'s tag, in hex.
    fn hex(&self, purpose: &str, parts: &[&[u8]], bytes: usize) -> String {
        self.mac(purpose, parts).finalize().into_bytes()[..bytes].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The MAC, under this key, of `purpose` and then each of `parts` after a NUL.
    fn mac(&self, purpose: &str, parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(purpose.as_bytes());
        for part in parts {
            mac.update(b"\0");
            mac.update(part);
        }
        mac
    }
}

/// What an event id of a session's POST stream says ([`SessionIds::open_event_id`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StreamEvent {
    /// rmcp's own event id, for the replica that served the stream.
    pub rmcp: String,
    /// The replica that served the stream.
    pub replica: String,
    /// The JSON-RPC request the stream answers (its id as JSON).
    pub request: String,
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
    fn an_event_id_opens_only_on_its_session_under_the_same_key() {
        let ids = SessionIds::new([7; 32]);
        let session = ids.mint("alice");
        let id = ids.event_id(&session, "replica-1", "7", "0/3");
        let opened = ids.open_event_id(&session, &id).expect("opens");
        assert_eq!(opened, StreamEvent { rmcp: "0/3".into(), replica: "replica-1".into(), request: "7".into() });
        assert_eq!(ids.open_event_id(&ids.mint("alice"), &id), None, "another session");
        assert_eq!(SessionIds::new([8; 32]).open_event_id(&session, &id), None, "another secret");
        let forged = ids.event_id(&session, "replica-2", "7", "0/3");
        let (head, _) = id.rsplit_once('.').unwrap();
        let (_, tag) = forged.rsplit_once('.').unwrap();
        assert_eq!(ids.open_event_id(&session, &format!("{head}.{tag}")), None, "a tag of other parts");
        for plain in ["0/3", "0", "", "a.b.c", "a.b.c.d.e"] {
            assert_eq!(ids.open_event_id(&session, plain), None, "{plain:?}");
        }
        assert_eq!(ids.call_key(&session, "7"), ids.call_key(&session, "7"));
        assert_ne!(ids.call_key(&session, "7"), ids.call_key(&session, "\"7\""));
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
