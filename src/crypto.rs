//! The process's one crypto provider, ring: rustls's process default (the HTTP clients of
//! reqwest and rmcp, `rediss://`) and jsonwebtoken's (JWT signatures, `jwt`).
//!
//! Invariant: [`install`] runs before anything needs a process default: `main` calls it first,
//! and every maker of an HTTP client ([`http_client`]) or of a JWT verifier calls it too (it
//! does its work once), so rustls and jsonwebtoken never find themselves without a provider.

mod jwt;

use std::sync::Once;

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
