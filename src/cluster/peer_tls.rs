//! TLS between replicas (`[cluster] peer_tls`): the MCP listener's side (a TLS acceptor that
//! requires a certificate the cluster's CA issued, offering HTTP/2 and HTTP/1.1 by ALPN) and the
//! forwarding side (a client that trusts only that CA, presents this replica's certificate and
//! asks for HTTP/2), both on the process's one crypto provider, ring.
//!
//! Invariant: a replica with `peer_tls` takes a connection as another replica's only when the
//! TLS handshake verified the peer's certificate against the cluster's CA, and reaches the
//! others only over TLS whose server certificate that CA issued for the name it connects to.

use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;

use crate::config::PeerTls;

/// The ALPN names the listener offers another replica: HTTP/2 first.
const ALPN_SERVED: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The TLS acceptor of the MCP listener for other replicas.
pub fn acceptor(tls: &PeerTls) -> tokio_rustls::TlsAcceptor {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(tls.roots.clone(), provider.clone())
        .build()
        .expect("checked roots make a verifier");
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(tls.chain.clone(), tls.key())
        .expect("a checked certificate and its key");
    config.alpn_protocols = ALPN_SERVED.iter().map(|name| name.to_vec()).collect();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// The TLS configuration the forwarder reaches the others with.
pub fn client_config(tls: &PeerTls) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default versions")
        .with_root_certificates(tls.roots.clone())
        .with_client_auth_cert(tls.chain.clone(), tls.key())
        .expect("a checked certificate and its key");
    config.alpn_protocols = vec![b"h2".to_vec()];
    config
}
