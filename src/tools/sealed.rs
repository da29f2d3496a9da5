//! An upstream's own `requestState`, sealed before a 2026-07-28 host sees it. An upstream that
//! answers `input_required` keeps the call's progress in its `requestState` (answers it already
//! has, say) and trusts whoever sends it back; through the proxy every host is one client to
//! it, so a state handed to alice must come back from alice. The proxy hands the host
//! `mcp-proxy-sealed:` + base64url(the state sealed with an AEAD: `crypto::SealingKey`,
//! ChaCha20-Poly1305, a random nonce per state), the principal, the presented name and the
//! upstream bound to it as associated data; the key is per process (or, in a cluster, derived
//! from the cluster secret, so any replica opens what another sealed). A retry's state is
//! opened and checked before anything goes upstream, and the host reads nothing of it.
//!
//! Invariant: an upstream's `requestState` reaches it only from the principal it was handed to,
//! for the same presented name and upstream; another principal's, a tampered, a foreign or an
//! unsealed state answers exactly like an unknown `requestState` of the proxy's own and never
//! reaches the upstream. The proxy's own states (`parked`) are bound the same way by its table.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use rmcp::model::InputRequiredResult;

use super::parked;
use crate::crypto::SealingKey;
use crate::error::ProxyError;

/// How every sealed upstream `requestState` begins.
pub(super) const SEALED_PREFIX: &str = "mcp-proxy-sealed:";

/// The per-process key upstream states are sealed with.
pub(super) struct StateSeal {
    key: SealingKey,
}

/// Whom a sealed state belongs to.
pub(super) struct SealedFor<'a> {
    pub principal: &'a str,
    pub name: &'a str,
    pub upstream: &'a str,
}

impl StateSeal {
    pub fn random() -> Self {
        Self::from_bytes(rand::random())
    }

    /// A key every replica of a cluster shares (derived from the cluster secret).
    pub fn from_bytes(key: [u8; 32]) -> Self {
        Self { key: SealingKey::new(&key) }
    }

    /// `state` as the host may hold it.
    pub fn seal(&self, sealed_for: &SealedFor<'_>, state: &str) -> String {
        let sealed = self.key.seal(&associated(sealed_for), state.as_bytes());
        format!("{SEALED_PREFIX}{}", URL_SAFE_NO_PAD.encode(sealed))
    }

    /// The host's `requestState` in `state` opened for the upstream. The proxy's own (of a call
    /// parked for the host's input, on whichever replica) is not sealed and stays as it is; a
    /// state this caller was not handed answers like an unknown one.
    pub fn open_in(&self, sealed_for: &SealedFor<'_>, state: &mut Option<String>) -> Result<(), ProxyError> {
        let Some(sealed) = state.as_deref().filter(|state| !parked::is_ours(Some(state))) else { return Ok(()) };
        let Some(opened) = self.open(sealed_for, sealed) else {
            tracing::debug!(
                principal = sealed_for.principal,
                name = sealed_for.name,
                "a requestState not handed to this caller"
            );
            return Err(parked::unknown_state());
        };
        *state = Some(opened);
        Ok(())
    }

    /// `needs` for the host: an upstream's `requestState` sealed to the caller; the proxy's own
    /// passed as it is, since only the principal that was asked can resume it anyway.
    pub fn seal_needs(&self, sealed_for: &SealedFor<'_>, mut needs: InputRequiredResult) -> InputRequiredResult {
        if !parked::is_ours(needs.request_state.as_deref()) {
            needs.request_state = needs.request_state.map(|state| self.seal(sealed_for, &state));
        }
        needs
    }

    /// The upstream's state inside `sealed`, if this caller was handed it.
    pub fn open(&self, sealed_for: &SealedFor<'_>, sealed: &str) -> Option<String> {
        let bytes = URL_SAFE_NO_PAD.decode(sealed.strip_prefix(SEALED_PREFIX)?).ok()?;
        let state = self.key.open(&associated(sealed_for), &bytes)?;
        String::from_utf8(state).ok()
    }
}

/// Whom a sealed state is bound to: each part with its length, so no two run together.
fn associated(sealed_for: &SealedFor<'_>) -> Vec<u8> {
    let mut associated = b"upstream requestState\0".to_vec();
    for part in [sealed_for.principal, sealed_for.name, sealed_for.upstream] {
        associated.extend_from_slice(&(part.len() as u64).to_be_bytes());
        associated.extend_from_slice(part.as_bytes());
    }
    associated
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: SealedFor<'static> = SealedFor { principal: "alice", name: "fx__ask", upstream: "fx" };

    #[test]
    fn a_sealed_state_opens_only_for_its_holder() {
        let seal = StateSeal::random();
        let sealed = seal.seal(&ALICE, "upstream state 1");
        assert!(sealed.starts_with(SEALED_PREFIX));
        let bytes = URL_SAFE_NO_PAD.decode(sealed.strip_prefix(SEALED_PREFIX).unwrap()).unwrap();
        assert!(!bytes.windows(14).any(|w| w == b"upstream state"), "the host reads nothing of the state");
        assert_ne!(seal.seal(&ALICE, "upstream state 1"), sealed, "each seal has a nonce of its own");
        assert_eq!(seal.open(&ALICE, &sealed).as_deref(), Some("upstream state 1"));
        for other in [
            SealedFor { principal: "bob", ..ALICE },
            SealedFor { name: "fx__other", ..ALICE },
            SealedFor { upstream: "gx", ..ALICE },
        ] {
            assert_eq!(seal.open(&other, &sealed), None);
        }
        assert_eq!(StateSeal::random().open(&ALICE, &sealed), None, "another process's key");
        let mut tampered = URL_SAFE_NO_PAD.decode(sealed.strip_prefix(SEALED_PREFIX).unwrap()).unwrap();
        *tampered.last_mut().unwrap() ^= 1;
        assert_eq!(seal.open(&ALICE, &format!("{SEALED_PREFIX}{}", URL_SAFE_NO_PAD.encode(tampered))), None);
        for garbage in ["upstream state 1", "mcp-proxy-sealed:", "mcp-proxy-sealed:!!", "mcp-proxy-sealed:AAAA"] {
            assert_eq!(seal.open(&ALICE, garbage), None, "{garbage}");
        }
    }
}
