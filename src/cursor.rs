//! Opaque pagination cursors: base64url of a version byte and a sealed record (which list,
//! catalog generation, position), sealed with an AEAD (ChaCha20-Poly1305, a random nonce per
//! cursor; `crypto::SealingKey`) under a key of the process, bound to the caller as associated
//! data. The position is a place in the merged list *including* entries the caller may not see,
//! and the generation counts every catalog change: in the clear they would tell a host how many
//! hidden resources there are and when they change.
//!
//! Pure: no IO. Invariant: a cursor decodes only if this process minted it, for this list and
//! this principal; anything else is [`CursorError`] (the proxy answers -32602). Nothing in a
//! cursor is readable without the key.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::crypto::{SEAL_OVERHEAD, SealingKey};

const VERSION: u8 = 2;
const BODY_LEN: usize = 1 + 8 + 8;
/// A cursor's bytes: the version, then the sealed body.
const CURSOR_LEN: usize = 1 + SEAL_OVERHEAD + BODY_LEN;

/// Which merged list a cursor pages through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Resources = 1,
    Templates = 2,
    Tools = 3,
    Prompts = 4,
}

/// Where the next page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub list: ListKind,
    pub generation: u64,
    pub offset: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    #[error("cursor is not one this proxy issued")]
    Malformed,
    #[error("cursor failed authentication")]
    Forged,
    #[error("cursor belongs to another list")]
    WrongList,
    #[error("cursor is from an older version of the list")]
    Stale,
}

/// The secret cursors are authenticated with, and what names a version of a list in them.
/// One process on its own: a random key and the catalog's generation (cursors do not survive a
/// restart, and the generation would not either). Replicas of a cluster: a key derived from the
/// cluster secret and the list's content fingerprint, so a cursor one replica minted pages on
/// every replica whose list is the same.
#[derive(Clone)]
pub struct CursorKey {
    key: SealingKey,
    by_content: bool,
}

impl CursorKey {
    pub fn random() -> Self {
        Self::from_bytes(rand::random())
    }

    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self { key: SealingKey::new(&bytes), by_content: false }
    }

    /// The key of a cluster (derived from its secret): lists are versioned by content.
    pub fn shared(bytes: [u8; 32]) -> Self {
        Self { key: SealingKey::new(&bytes), by_content: true }
    }

    /// The version of a list that cursors carry: its `generation` (one process), or its
    /// content `fingerprint` (a cluster, where generations are per replica).
    pub fn list_version(&self, generation: u64, fingerprint: impl FnOnce() -> u64) -> u64 {
        if self.by_content { fingerprint() } else { generation }
    }

    pub fn encode(&self, principal: &str, position: Position) -> String {
        let mut body = Vec::with_capacity(BODY_LEN);
        body.push(position.list as u8);
        body.extend_from_slice(&position.generation.to_be_bytes());
        body.extend_from_slice(&position.offset.to_be_bytes());
        let mut record = Vec::with_capacity(CURSOR_LEN);
        record.push(VERSION);
        record.extend_from_slice(&self.key.seal(&associated(principal), &body));
        URL_SAFE_NO_PAD.encode(record)
    }

    pub fn decode(&self, principal: &str, list: ListKind, cursor: &str) -> Result<Position, CursorError> {
        let record = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| CursorError::Malformed)?;
        if record.len() != CURSOR_LEN || record[0] != VERSION {
            return Err(CursorError::Malformed);
        }
        let body = self.key.open(&associated(principal), &record[1..]).ok_or(CursorError::Forged)?;
        let kind = match body[0] {
            1 => ListKind::Resources,
            2 => ListKind::Templates,
            3 => ListKind::Tools,
            4 => ListKind::Prompts,
            _ => return Err(CursorError::Malformed),
        };
        if kind != list {
            return Err(CursorError::WrongList);
        }
        let generation = u64::from_be_bytes(body[1..9].try_into().expect("8 bytes"));
        let offset = u64::from_be_bytes(body[9..17].try_into().expect("8 bytes"));
        Ok(Position { list: kind, generation, offset })
    }

    /// Where a page of `list` (at catalog `generation`) starts for `principal`: the start
    /// without a cursor, else the cursor's offset — when it decodes and is of this generation.
    /// The one paging rule of every merged list (resources, templates, tools, prompts).
    pub fn page_start(
        &self,
        principal: &str,
        list: ListKind,
        generation: u64,
        cursor: Option<&str>,
    ) -> Result<usize, CursorError> {
        let Some(cursor) = cursor else { return Ok(0) };
        let position = self.decode(principal, list, cursor)?;
        if position.generation != generation {
            return Err(CursorError::Stale);
        }
        usize::try_from(position.offset).map_err(|_| CursorError::Malformed)
    }

    /// The cursor of the page of `list` (at catalog `generation`) that starts at `offset`.
    pub fn page_cursor(&self, principal: &str, list: ListKind, generation: u64, offset: usize) -> String {
        self.encode(principal, Position { list, generation, offset: offset as u64 })
    }
}

impl std::fmt::Debug for CursorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorKey(..)")
    }
}

/// What a cursor is bound to besides its key: its version and the principal it was minted for.
fn associated(principal: &str) -> Vec<u8> {
    let mut associated = b"mcp-proxy cursor\0".to_vec();
    associated.push(VERSION);
    associated.extend_from_slice(principal.as_bytes());
    associated
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> CursorKey {
        CursorKey::from_bytes([7; 32])
    }

    fn position() -> Position {
        Position { list: ListKind::Resources, generation: 42, offset: 300 }
    }

    fn check(cursor: &str, principal: &str, list: ListKind, expected: Result<Position, CursorError>) {
        assert_eq!(key().decode(principal, list, cursor), expected, "cursor {cursor:?}");
    }

    #[test]
    fn a_page_starts_where_its_cursor_says_in_the_same_generation_only() {
        let list = ListKind::Tools;
        assert_eq!(key().page_start("alice", list, 9, None), Ok(0));
        let cursor = key().page_cursor("alice", list, 9, 50);
        assert_eq!(key().page_start("alice", list, 9, Some(&cursor)), Ok(50));
        assert_eq!(key().page_start("alice", list, 10, Some(&cursor)), Err(CursorError::Stale));
        assert_eq!(key().page_start("bob", list, 9, Some(&cursor)), Err(CursorError::Forged));
        assert_eq!(key().page_start("alice", ListKind::Prompts, 9, Some(&cursor)), Err(CursorError::WrongList));
    }

    #[test]
    fn round_trip() {
        let cursor = key().encode("alice", position());
        check(&cursor, "alice", ListKind::Resources, Ok(position()));
        assert!(cursor.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    }

    #[test]
    fn the_position_cannot_be_read_from_a_cursor() {
        let cursor = key().encode("alice", position());
        let raw = URL_SAFE_NO_PAD.decode(&cursor).unwrap();
        let in_clear = |bytes: [u8; 8]| raw.windows(8).any(|window| window == bytes);
        assert!(!in_clear(42u64.to_be_bytes()), "the generation is not in the clear");
        assert!(!in_clear(300u64.to_be_bytes()), "the offset is not in the clear");
        let again = key().encode("alice", position());
        assert_ne!(again, cursor, "each cursor has a nonce of its own");
        check(&again, "alice", ListKind::Resources, Ok(position()));
        assert_eq!(cursor.len(), 62, "46 bytes in base64url");
    }

    #[test]
    fn rejects_forgeries_and_misuse() {
        let cursor = key().encode("alice", position());
        let mut raw = URL_SAFE_NO_PAD.decode(&cursor).unwrap();
        raw[17] ^= 1; // a byte of the sealed position
        let tampered = URL_SAFE_NO_PAD.encode(&raw);
        let other_key = CursorKey::from_bytes([8; 32]).encode("alice", position());
        let templates = key().encode("alice", Position { list: ListKind::Templates, ..position() });

        check(&tampered, "alice", ListKind::Resources, Err(CursorError::Forged));
        check(&other_key, "alice", ListKind::Resources, Err(CursorError::Forged));
        check(&cursor, "bob", ListKind::Resources, Err(CursorError::Forged));
        check(&templates, "alice", ListKind::Resources, Err(CursorError::WrongList));
        check("", "alice", ListKind::Resources, Err(CursorError::Malformed));
        check("not base64!", "alice", ListKind::Resources, Err(CursorError::Malformed));
        check(&cursor[..cursor.len() - 2], "alice", ListKind::Resources, Err(CursorError::Malformed));
        check("AQEAAAAAAAAAKgAAAAAAAAEs", "alice", ListKind::Resources, Err(CursorError::Malformed));
    }

    #[test]
    fn a_cluster_key_versions_lists_by_content_and_a_process_key_by_generation() {
        let (shared, own) = (CursorKey::shared([7; 32]), CursorKey::from_bytes([7; 32]));
        assert_eq!(shared.list_version(1, || 99), 99);
        assert_eq!(own.list_version(1, || 99), 1);
        let cursor = shared.page_cursor("alice", ListKind::Resources, 99, 2);
        assert_eq!(shared.page_start("alice", ListKind::Resources, 99, Some(&cursor)), Ok(2));
        assert_eq!(
            CursorKey::shared([8; 32]).page_start("alice", ListKind::Resources, 99, Some(&cursor)),
            Err(CursorError::Forged),
            "another cluster's key"
        );
    }
}
