//! The process's one crypto provider, ring: rustls's process default (the HTTP clients of
//! reqwest and rmcp, `rediss://`), jsonwebtoken's (JWT signatures, `jwt`), and the AEAD that
//! seals what the proxy hands a host to bring back unread ([`SealingKey`]: cursors, upstreams'
//! `requestState`s).
//!
//! Invariant: [`install`] runs before anything needs a process default: `main` calls it first,
//! and every maker of an HTTP client ([`http_client`]) or of a JWT verifier calls it too (it
//! does its work once), so rustls and jsonwebtoken never find themselves without a provider.
//! Invariant: a sealed message opens only under its key and with the same associated data;
//! every seal draws a fresh random nonce.

mod jwt;

use std::sync::Once;

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};

/// What [`SealingKey::seal`] adds to a message: its nonce and its tag.
pub const SEAL_OVERHEAD: usize = NONCE_LEN + 16;

/// Make ring the process default of rustls and of jsonwebtoken, once; later calls do nothing.
/// A default some embedding program installed first is kept.
pub fn install() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        // An error says a default is there already: it stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let _ = jsonwebtoken::crypto::CryptoProvider::install_default(&jwt::PROVIDER);
    });
}

/// A reqwest client builder, the provider installed first (reqwest has none of its own).
pub fn http_client() -> reqwest::ClientBuilder {
    install();
    reqwest::Client::builder()
}

/// A ChaCha20-Poly1305 key. A sealed message is `nonce ‖ ciphertext ‖ tag`, the nonce random.
#[derive(Clone)]
pub struct SealingKey(LessSafeKey);

impl SealingKey {
    pub fn new(key: &[u8; 32]) -> Self {
        let key = UnboundKey::new(&CHACHA20_POLY1305, key).expect("a 32-byte ChaCha20-Poly1305 key");
        Self(LessSafeKey::new(key))
    }

    /// `plaintext` encrypted and authenticated together with `associated` (which is not sent).
    pub fn seal(&self, associated: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let nonce: [u8; NONCE_LEN] = rand::random();
        let mut sealed = Vec::with_capacity(SEAL_OVERHEAD + plaintext.len());
        sealed.extend_from_slice(&nonce);
        let mut body = plaintext.to_vec();
        self.0
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(associated), &mut body)
            .expect("a message far below ChaCha20-Poly1305's limit");
        sealed.extend_from_slice(&body);
        sealed
    }

    /// The plaintext of `sealed`, if this key sealed it with this `associated` data.
    pub fn open(&self, associated: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < SEAL_OVERHEAD {
            return None;
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = body.to_vec();
        let plaintext = self.0.open_in_place(nonce, Aad::from(associated), &mut body).ok()?;
        Some(plaintext.to_vec())
    }
}

impl std::fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealingKey(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_message_opens_only_under_its_key_and_associated_data() {
        let key = SealingKey::new(&[7; 32]);
        let sealed = key.seal(b"alice", b"page 3");
        assert_eq!(sealed.len(), SEAL_OVERHEAD + 6);
        assert_eq!(key.open(b"alice", &sealed).as_deref(), Some(&b"page 3"[..]));
        assert_ne!(key.seal(b"alice", b"page 3"), sealed, "a fresh nonce per seal");
        assert_eq!(key.open(b"bob", &sealed), None);
        assert_eq!(SealingKey::new(&[8; 32]).open(b"alice", &sealed), None);
        for at in 0..sealed.len() {
            let mut tampered = sealed.clone();
            tampered[at] ^= 1;
            assert_eq!(key.open(b"alice", &tampered), None, "byte {at} flipped");
        }
        assert_eq!(key.open(b"alice", &sealed[..SEAL_OVERHEAD - 1]), None);
    }
}
