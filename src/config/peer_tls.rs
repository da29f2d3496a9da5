//! `[cluster] peer_tls`: TLS between replicas. Each replica has a certificate (`cert_file`, its
//! key in `key_file`) that the cluster's CA (`ca_file`) issued; it serves it to the replicas
//! that connect to it and presents it to the replicas it connects to, and accepts only a peer
//! whose certificate that CA issued.
//!
//! Invariant: a [`PeerTls`] holds a certificate chain, its private key and CA certificates
//! that were read, parsed and checked together: the CA verifies the certificate (as a client's
//! certificate: no name is checked here, the others check the name they connect to) and the key
//! is the certificate's. The key is shown nowhere (`Debug` prints only the paths).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use figment::value::Value;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use serde::Deserialize;

use super::{Problem, expand_vars, push, report_unknown};

/// TLS between replicas, checked.
#[derive(Clone)]
pub struct PeerTls {
    /// Where the certificate was read from (for messages).
    pub cert_file: PathBuf,
    /// This replica's certificate and the chain up to (not including) the CA, DER.
    pub chain: Vec<CertificateDer<'static>>,
    /// Its private key (DER; never shown).
    key: Arc<PrivateKeyDer<'static>>,
    /// The CA certificates a peer's certificate must chain to.
    pub roots: Arc<rustls::RootCertStore>,
}

impl PeerTls {
    /// The private key of [`PeerTls::chain`]'s first certificate.
    pub fn key(&self) -> PrivateKeyDer<'static> {
        self.key.clone_key()
    }
}

impl PartialEq for PeerTls {
    fn eq(&self, other: &Self) -> bool {
        self.cert_file == other.cert_file && self.chain == other.chain
    }
}

impl Eq for PeerTls {}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerTls").field("cert_file", &self.cert_file).finish_non_exhaustive()
    }
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct RawPeerTls {
    cert_file: Option<String>,
    key_file: Option<String>,
    ca_file: Option<String>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

/// `peer_tls` checked; every problem goes to `problems` (each file's, at once).
pub(super) fn validate_peer_tls(
    raw: RawPeerTls,
    base: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Option<PeerTls> {
    report_unknown("cluster.peer_tls", &raw.unknown, problems);
    let mut read = |key: &str, raw: Option<String>| {
        let at = format!("cluster.peer_tls.{key}");
        let Some(raw) = raw else {
            push(problems, &at, "missing: peer_tls needs cert_file, key_file and ca_file".into());
            return None;
        };
        let path = match expand_vars(&raw, lookup) {
            Ok(path) => base.join(path),
            Err(name) => {
                push(problems, &at, format!("`{raw}`: environment variable `{name}` is not set"));
                return None;
            }
        };
        match std::fs::read(&path) {
            Ok(pem) => Some((at, path, pem)),
            Err(error) => {
                push(problems, &at, format!("{}: cannot be read ({})", path.display(), error.kind()));
                None
            }
        }
    };
    let (cert, key, ca) =
        (read("cert_file", raw.cert_file), read("key_file", raw.key_file), read("ca_file", raw.ca_file));
    let chain = cert.as_ref().and_then(|(at, path, pem)| certificates(at, path, pem, problems));
    let key = key.and_then(|(at, path, pem)| match PrivateKeyDer::from_pem_slice(&pem) {
        Ok(key) => Some(key),
        Err(_) => {
            push(problems, &at, format!("{}: holds no PEM private key", path.display()));
            None
        }
    });
    let roots = ca.and_then(|(at, path, pem)| roots(&at, &path, &certificates(&at, &path, &pem, problems)?, problems));
    let (chain, key, roots, (at, cert_file, _)) = (chain?, key?, roots?, cert?);
    verified(&at, &cert_file, &chain, &key, &roots, problems)?;
    Some(PeerTls { cert_file, chain, key: Arc::new(key), roots: Arc::new(roots) })
}

/// The certificates of the PEM file at `path`; none is a problem.
fn certificates(
    at: &str,
    path: &Path,
    pem: &[u8],
    problems: &mut Vec<Problem>,
) -> Option<Vec<CertificateDer<'static>>> {
    let certificates: Vec<_> = CertificateDer::pem_slice_iter(pem).filter_map(Result::ok).collect();
    if certificates.is_empty() {
        push(
            problems,
            at,
            format!("{}: holds no certificate (no `-----BEGIN CERTIFICATE-----` block)", path.display()),
        );
        return None;
    }
    Some(certificates)
}

/// The CA certificates as roots; one a TLS stack cannot take is a problem.
fn roots(
    at: &str,
    path: &Path,
    certificates: &[CertificateDer<'static>],
    problems: &mut Vec<Problem>,
) -> Option<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    let (_, unusable) = roots.add_parsable_certificates(certificates.iter().cloned());
    if unusable > 0 || roots.is_empty() {
        push(problems, at, format!("{}: holds a certificate that is not a usable CA certificate", path.display()));
        return None;
    }
    Some(roots)
}

/// Whether the CA issued the certificate (checked as a client's, now) and the key is its own.
fn verified(
    at: &str,
    cert_file: &Path,
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
    roots: &rustls::RootCertStore,
    problems: &mut Vec<Problem>,
) -> Option<()> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots.clone()), provider.clone())
        .build()
        .expect("roots that are not empty make a verifier");
    let (end, intermediates) = chain.split_first().expect("at least one certificate");
    if let Err(error) = verifier.verify_client_cert(end, intermediates, UnixTime::now()) {
        let shown = cert_file.display();
        push(problems, at, format!("{shown}: the CA of `ca_file` does not verify it ({error})"));
        return None;
    }
    let matches = rustls::sign::CertifiedKey::from_der(chain.to_vec(), key.clone_key(), &provider);
    if matches.is_err() {
        push(problems, at, format!("{}: `key_file` is not this certificate's key", cert_file.display()));
        return None;
    }
    Some(())
}
