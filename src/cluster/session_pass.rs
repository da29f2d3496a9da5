//! The pass on every request to a replica's session endpoint (`POST|GET|DELETE
//! /mcp-proxy/session` on its MCP listener, served by `downstream`): one header, [`HEADER`],
//! sealed (ChaCha20-Poly1305, the `crypto` AEAD) under the key derived from the cluster secret
//! for this use. It says whose upstream session the request is for ([`Identity`]: the
//! principal, the upstream, the host session and what its host declared), the JWT the host's
//! request came with (which the owner exchanges for the upstream's token), the replica it is
//! for, when it was made and a nonce. The endpoint opens it before a byte of the body is read.
//!
//! Invariant: a request is heard only with a pass sealed under this cluster's key, made for
//! this replica at most [`FRESH_FOR`] ago, whose nonce was not seen before (kept until it would
//! be stale); the pass carries the JWT sealed, never in clear.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::crypto::SealingKey;
use crate::host::{HostSession, SubjectToken};

/// The route of the session endpoint on the MCP listener.
pub const PATH: &str = "/mcp-proxy/session";
/// The header carrying the pass.
pub const HEADER: &str = "mcp-proxy-session-pass";
/// A pass older than this (or this far in the future) is refused.
pub const FRESH_FOR: Duration = Duration::from_secs(30);
/// Nonces kept at most (beyond this, after dropping the stale ones, requests are refused).
const MAX_NONCES: usize = 200_000;
/// What a pass is sealed with, besides the key (kept apart from any other sealed value).
const BOUND_TO: &[u8] = b"mcp-proxy session pass v1";

/// Whose upstream session a request to the endpoint is for. An MCP session of the endpoint is
/// bound to the identity of its `initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub principal: String,
    pub upstream: String,
    /// A per-host upstream's host session (none: the principal's session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostSession>,
}

/// A pass, opened: whose session, and the JWT its host's request came with.
#[derive(Debug, Clone)]
pub struct Opened {
    pub identity: Identity,
    pub subject: Option<SubjectToken>,
    /// The key a 2025 host's call's answer is kept under here, when that host loses the
    /// replica that sent it.
    pub kept_as: Option<String>,
}

/// Why a request's pass was refused (nothing of it was read past its head).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no pass this cluster sealed")]
    Unsealed,
    #[error("made for another replica")]
    Elsewhere,
    #[error("not fresh")]
    Stale,
    #[error("seen before")]
    Replayed,
    #[error("not over TLS from a replica of the cluster's CA")]
    Unverified,
}

impl Refusal {
    /// A bounded label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Unsealed => "unsealed",
            Refusal::Elsewhere => "elsewhere",
            Refusal::Stale => "stale",
            Refusal::Replayed => "replayed",
            Refusal::Unverified => "unverified",
        }
    }
}

/// What a pass carries, as sealed.
#[derive(Serialize, Deserialize)]
struct Sealed {
    to: String,
    issued_ms: u64,
    nonce: String,
    identity: Identity,
    /// The JWT and the first second it is no longer accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    subject: Option<(String, u64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kept_as: Option<String>,
}

/// A cheap `Clone` handle: makes passes for other replicas and opens those made for this one.
#[derive(Clone)]
pub struct Passes {
    inner: Arc<Inner>,
}

struct Inner {
    replica: String,
    key: SealingKey,
    /// Nonces seen, with when they become stale (ms since the epoch).
    seen: Mutex<HashMap<String, u64>>,
}

impl Passes {
    /// The passes of replica `replica` under the cluster's derived key `key`.
    pub fn new(replica: &str, key: &[u8; 32]) -> Passes {
        let inner = Inner { replica: replica.to_string(), key: SealingKey::new(key), seen: Mutex::default() };
        Passes { inner: Arc::new(inner) }
    }

    /// A pass for one request to replica `to` for `identity`'s session, with the JWT
    /// `subject` its host's request came with and the key its answer is kept under.
    pub fn make(&self, to: &str, identity: &Identity, subject: Option<&SubjectToken>, kept_as: Option<&str>) -> String {
        seal_with(&self.inner.key, to, (now_ms(), kept_as), identity, subject)
    }

    /// Whether `pass` was made for this replica under the cluster's key, and is fresh; the
    /// nonce is not kept (the listener asks this of a connection's first request head).
    pub fn admits(&self, pass: Option<&str>) -> Result<(), Refusal> {
        self.opened(pass).map(drop)
    }

    /// `pass` opened, when it is made for this replica under the cluster's key, fresh and not
    /// seen before (its nonce is kept from now on).
    pub fn open(&self, pass: Option<&str>) -> Result<Opened, Refusal> {
        let sealed = self.opened(pass)?;
        let now = now_ms();
        let mut seen = self.inner.seen.lock().expect("nonces lock");
        if seen.len() >= MAX_NONCES {
            seen.retain(|_, stale_at| *stale_at > now);
        }
        if seen.len() >= MAX_NONCES || seen.contains_key(&sealed.nonce) {
            return Err(Refusal::Replayed);
        }
        seen.insert(sealed.nonce, sealed.issued_ms + FRESH_FOR.as_millis() as u64);
        let subject = sealed.subject.map(|(token, until)| SubjectToken::new(&token, until));
        Ok(Opened { identity: sealed.identity, subject, kept_as: sealed.kept_as })
    }

    fn opened(&self, pass: Option<&str>) -> Result<Sealed, Refusal> {
        let sealed = pass.and_then(|pass| URL_SAFE_NO_PAD.decode(pass).ok()).ok_or(Refusal::Unsealed)?;
        let plain = self.inner.key.open(BOUND_TO, &sealed).ok_or(Refusal::Unsealed)?;
        let sealed: Sealed = serde_json::from_slice(&plain).map_err(|_| Refusal::Unsealed)?;
        if sealed.to != self.inner.replica {
            return Err(Refusal::Elsewhere);
        }
        if sealed.issued_ms.abs_diff(now_ms()) > FRESH_FOR.as_millis() as u64 {
            return Err(Refusal::Stale);
        }
        Ok(sealed)
    }
}

/// A pass for replica `to` made at `issued_ms` for `identity`'s session (with the key its
/// answer is kept under, `kept_as`), sealed under `key` (the cluster's derived key for this use).
pub fn seal_with(
    key: &SealingKey,
    to: &str,
    (issued_ms, kept_as): (u64, Option<&str>),
    identity: &Identity,
    subject: Option<&SubjectToken>,
) -> String {
    let mut nonce = [0u8; 16];
    rand::Rng::fill_bytes(&mut rand::rng(), &mut nonce);
    let sealed = Sealed {
        to: to.to_string(),
        issued_ms,
        nonce: URL_SAFE_NO_PAD.encode(nonce),
        identity: identity.clone(),
        subject: subject.map(|subject| (subject.token().to_string(), subject.until())),
        kept_as: kept_as.map(str::to_owned),
    };
    let plain = serde_json::to_vec(&sealed).expect("a pass serialises");
    URL_SAFE_NO_PAD.encode(key.seal(BOUND_TO, &plain))
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::keys::label;

    fn passes(replica: &str, secret: &[u8]) -> Passes {
        Passes::new(replica, &crate::cluster::ClusterKeys::new(secret).derive(label::SESSION_PASS))
    }

    fn alice() -> Identity {
        Identity { principal: "alice".into(), upstream: "fx".into(), host: None }
    }

    #[test]
    fn a_pass_opens_once_on_its_replica_only_and_carries_the_jwt_sealed() {
        let (from, to) = (passes("replica-0", b"one secret"), passes("replica-1", b"one secret"));
        let subject = SubjectToken::new("header.payload.signature", 4_000_000_000);
        let pass = from.make("replica-1", &alice(), Some(&subject), Some("kept-1"));
        assert!(!pass.contains("payload"), "the JWT is not in clear");
        assert_eq!(from.admits(Some(&pass)), Err(Refusal::Elsewhere));
        assert_eq!(to.admits(Some(&pass)), Ok(()));
        let opened = to.open(Some(&pass)).expect("opens");
        assert_eq!(opened.identity, alice());
        assert_eq!(opened.subject, Some(subject));
        assert_eq!(opened.kept_as.as_deref(), Some("kept-1"));
        assert_eq!(to.open(Some(&pass)).err(), Some(Refusal::Replayed));
    }

    #[test]
    fn another_secrets_a_stale_or_a_mangled_pass_is_refused() {
        let to = passes("replica-1", b"one secret");
        let foreign = passes("replica-0", b"another secret").make("replica-1", &alice(), None, None);
        assert_eq!(to.admits(Some(&foreign)), Err(Refusal::Unsealed));
        let key = SealingKey::new(&crate::cluster::ClusterKeys::new(b"one secret").derive(label::SESSION_PASS));
        let stale = seal_with(&key, "replica-1", (now_ms() - 31_000, None), &alice(), None);
        assert_eq!(to.admits(Some(&stale)), Err(Refusal::Stale));
        for mangled in [None, Some(""), Some("not base64!"), Some("AAAA")] {
            assert_eq!(to.admits(mangled), Err(Refusal::Unsealed), "{mangled:?}");
        }
    }
}
