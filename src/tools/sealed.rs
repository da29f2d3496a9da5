//! An upstream's own `requestState`, sealed before a 2026-07-28 host sees it. An upstream that
//! answers `input_required` keeps the call's progress in its `requestState` (answers it already
//! has, say) and trusts whoever sends it back; through the proxy every host is one client to
//! it, so a state handed to alice must come back from alice. The proxy hands the host
//! `mcp-proxy-sealed:` + base64url(HMAC-SHA256 tag ‖ the upstream's state), the tag over the
//! principal, the presented name, the upstream and the state, keyed per process (or, in a cluster, derived from the cluster secret, so any replica opens
//! what another sealed); a retry's
//! state is opened and checked before anything goes upstream.
//!
//! Invariant: an upstream's `requestState` reaches it only from the principal it was handed to,
//! for the same presented name and upstream; another principal's, a tampered, a foreign or an
//! unsealed state answers exactly like an unknown `requestState` of the proxy's own and never
//! reaches the upstream. The proxy's own states (`parked`) are bound the same way by its table.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// How every sealed upstream `requestState` begins.
pub(super) const SEALED_PREFIX: &str = "mcp-proxy-sealed:";

const TAG_LEN: usize = 32;

/// The per-process key upstream states are sealed with.
pub(super) struct StateSeal {
    key: [u8; 32],
}

/// Whom a sealed state belongs to.
pub(super) struct Holder<'a> {
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
        Self { key }
    }

    /// `state` as the host may hold it.
    pub fn seal(&self, holder: &Holder<'_>, state: &str) -> String {
        let mut sealed = self.mac(holder, state).finalize().into_bytes().to_vec();
        sealed.extend_from_slice(state.as_bytes());
        format!("{SEALED_PREFIX}{}", URL_SAFE_NO_PAD.encode(sealed))
    }

    /// The upstream's state inside `sealed`, if this holder was handed it.
    pub fn open(&self, holder: &Holder<'_>, sealed: &str) -> Option<String> {
        let bytes = URL_SAFE_NO_PAD.decode(sealed.strip_prefix(SEALED_PREFIX)?).ok()?;
        if bytes.len() < TAG_LEN {
            return None;
        }
        let (tag, state) = bytes.split_at(TAG_LEN);
        let state = std::str::from_utf8(state).ok()?;
        self.mac(holder, state).verify_slice(tag).ok()?;
        Some(state.to_owned())
    }

    fn mac(&self, holder: &Holder<'_>, state: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(b"upstream requestState\0");
        for part in [holder.principal, holder.name, holder.upstream, state] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: Holder<'static> = Holder { principal: "alice", name: "fx__ask", upstream: "fx" };

    #[test]
    fn a_sealed_state_opens_only_for_its_holder() {
        let seal = StateSeal::random();
        let sealed = seal.seal(&ALICE, "upstream state 1");
        assert!(sealed.starts_with(SEALED_PREFIX));
        assert!(!sealed.contains("upstream state"), "the host sees no plain state");
        assert_eq!(seal.open(&ALICE, &sealed).as_deref(), Some("upstream state 1"));
        for other in [
            Holder { principal: "bob", ..ALICE },
            Holder { name: "fx__other", ..ALICE },
            Holder { upstream: "gx", ..ALICE },
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
