//! The `[auth]` and `[policies]` sections: who is calling, and where the policies are.
//!
//! `mode = "bearer"` accepts static tokens (`[[auth.tokens]]`), JWT access tokens (`[auth.jwt]`,
//! see [`jwt`]), or both at once: it needs at least one of them.
//!
//! Invariant: no plain token is kept. `token_env` is read once, hashed with SHA-256 and dropped;
//! only `(principal, digest)` pairs leave this module, and their `Debug` hides the digest.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::value::Value;
use serde::Deserialize;
use sha2::{Digest, Sha256};

pub use self::jwt::{JwksSource, JwtConfig};
use super::{Problem, push, report_unknown};
use crate::policy::{PolicySet, is_valid_principal};

mod jwt;

/// `[auth]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    pub mode: AuthMode,
    /// Permit `mode = "none"` on a listen address that is not loopback.
    pub allow_unauthenticated: bool,
    /// Every configured token as (principal, SHA-256 of the token); several may share a principal.
    pub tokens: Vec<TokenDigest>,
    /// `[auth.jwt]`: JWT access tokens, when configured.
    pub jwt: Option<JwtConfig>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// No authentication: every HTTP request is principal `anonymous`.
    None,
    /// `Authorization: Bearer <token>` on every request.
    Bearer,
}

/// One accepted token, as its SHA-256 digest.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenDigest {
    pub principal: String,
    pub sha256: [u8; 32],
}

/// `[policies]`.
#[derive(Debug, Clone)]
pub struct PoliciesConfig {
    /// The policies directory; `None` when there is none (everything is allowed).
    pub dir: Option<PathBuf>,
    /// The policies as loaded with the configuration (reloads load `dir` again).
    pub set: PolicySet,
}

impl fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenDigest").field("principal", &self.principal).field("sha256", &"<hidden>").finish()
    }
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct RawAuth {
    mode: Option<String>,
    allow_unauthenticated: Option<bool>,
    #[serde(default)]
    tokens: Vec<RawToken>,
    jwt: Option<jwt::RawJwt>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize, Default)]
struct RawToken {
    principal: Option<String>,
    token_env: Option<String>,
    token_sha256: Option<String>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize, Default)]
pub(super) struct RawPolicies {
    dir: Option<PathBuf>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

pub(super) fn validate_auth(
    raw: RawAuth,
    listen: SocketAddr,
    base: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> AuthConfig {
    report_unknown("auth", &raw.unknown, problems);
    let mode = match raw.mode.as_deref() {
        None | Some("none") => AuthMode::None,
        Some("bearer") => AuthMode::Bearer,
        Some(other) => {
            push(problems, "auth.mode", format!("`{other}` is not \"none\" or \"bearer\""));
            AuthMode::Bearer
        }
    };
    let allow_unauthenticated = raw.allow_unauthenticated.unwrap_or(false);
    let configured = raw.tokens.len();
    let mut seen = BTreeSet::new();
    let tokens: Vec<TokenDigest> = raw
        .tokens
        .into_iter()
        .enumerate()
        .filter_map(|(index, token)| validate_token(index, token, lookup, &mut seen, problems))
        .collect();
    let jwt = raw.jwt.map(|raw| jwt::validate_jwt(raw, base, problems));
    match mode {
        AuthMode::Bearer if configured == 0 && jwt.is_none() => {
            push(problems, "auth.tokens", "mode = \"bearer\" needs at least one [[auth.tokens]] or [auth.jwt]".into());
        }
        AuthMode::None if configured > 0 || jwt.is_some() => {
            let set = if configured > 0 { "[[auth.tokens]] are set" } else { "[auth.jwt] is set" };
            push(problems, "auth.mode", format!("{set} but mode is \"none\": set mode = \"bearer\""));
        }
        AuthMode::None if !listen.ip().is_loopback() && !allow_unauthenticated => push(
            problems,
            "auth.mode",
            format!(
                "\"none\" on {listen}, which is not loopback: set mode = \"bearer\", or allow_unauthenticated = true"
            ),
        ),
        _ => {}
    }
    AuthConfig { mode, allow_unauthenticated, tokens, jwt }
}

fn validate_token(
    index: usize,
    raw: RawToken,
    lookup: &dyn Fn(&str) -> Option<String>,
    seen: &mut BTreeSet<[u8; 32]>,
    problems: &mut Vec<Problem>,
) -> Option<TokenDigest> {
    let at = format!("auth.tokens[{index}]");
    report_unknown(&at, &raw.unknown, problems);
    let principal = raw.principal.unwrap_or_default();
    if principal.is_empty() {
        push(problems, &at, "missing `principal`".into());
    } else if !is_valid_principal(&principal) {
        push(
            problems,
            &format!("{at}.principal"),
            format!("`{principal}` is not a principal name (non-empty, no spaces or glob characters, not `group:…`)"),
        );
    }
    let digest = match (raw.token_env, raw.token_sha256) {
        (Some(var), None) => match lookup(&var) {
            Some(token) if !token.is_empty() => Some(Sha256::digest(token.as_bytes()).into()),
            Some(_) => err(problems, &format!("{at}.token_env"), format!("environment variable `{var}` is empty")),
            None => err(problems, &format!("{at}.token_env"), format!("environment variable `{var}` is not set")),
        },
        (None, Some(hex)) => {
            let digest = parse_sha256(&hex);
            if digest.is_none() {
                push(
                    problems,
                    &format!("{at}.token_sha256"),
                    "must be 64 hex digits (the SHA-256 of the token)".into(),
                );
            }
            digest
        }
        _ => err(problems, &at, "needs exactly one of `token_env`, `token_sha256`".into()),
    }?;
    if !seen.insert(digest) {
        push(problems, &at, "the same token is configured twice".into());
    }
    Some(TokenDigest { principal, sha256: digest })
}

pub(super) fn validate_policies(raw: RawPolicies, base: &Path, problems: &mut Vec<Problem>) -> PoliciesConfig {
    report_unknown("policies", &raw.unknown, problems);
    let dir = match raw.dir {
        Some(dir) => Some(base.join(dir)),
        None => Some(base.join("policies")).filter(|dir| dir.is_dir()),
    };
    let set = match &dir {
        None => PolicySet::allow_all(),
        Some(dir) => PolicySet::load(dir).unwrap_or_else(|found| {
            problems.extend(found);
            PolicySet::allow_all()
        }),
    };
    PoliciesConfig { dir, set }
}

/// 64 hex digits → 32 bytes.
fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut digest = [0; 32];
    for (index, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(digest)
}

fn err<T>(problems: &mut Vec<Problem>, at: &str, message: String) -> Option<T> {
    push(problems, at, message);
    None
}
