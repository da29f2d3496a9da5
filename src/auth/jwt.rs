//! JWT access tokens (`[auth.jwt]`): signature by a key of the JWKS (`super::jwks`), one of
//! the configured algorithms, `iss`, `aud` (this resource), `exp` and `nbf` with the leeway;
//! then the principal claim and the groups claim become a policy [`jwt_identity`].
//!
//! Invariant: a token is accepted only when every check passed; the token itself is never
//! logged, only why it was refused ([`JwtRejection`]).

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Validation, decode, decode_header};
use serde_json::{Map, Value};

use super::jwks::KeyStore;
use crate::config::JwtConfig;
use crate::policy::{is_valid_principal, jwt_identity};

/// Why a JWT was refused (a bounded label for logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtRejection {
    /// Not three base64url parts with a JSON header naming a known algorithm (`alg: none` too).
    Malformed,
    /// An algorithm that is not configured, or that the key cannot verify.
    Algorithm,
    /// No key in the JWKS has the token's `kid`.
    UnknownKey,
    Signature,
    Expired,
    NotYetValid,
    Issuer,
    Audience,
    /// A required claim is missing or has the wrong shape; or no usable principal.
    Claims,
}

/// Validates tokens for one `[auth.jwt]`.
pub struct JwtValidator {
    config: JwtConfig,
    keys: KeyStore,
}

impl JwtValidator {
    pub fn new(config: &JwtConfig) -> JwtValidator {
        let keys = KeyStore::new(config.jwks.clone(), config.jwks_refresh, config.jwks_min_refresh);
        JwtValidator { config: config.clone(), keys }
    }

    /// Does this look like a JWT (three dot-separated parts)? Other tokens are static ones.
    pub fn looks_like_jwt(token: &str) -> bool {
        token.split('.').count() == 3
    }

    /// The identity (principal and groups) a valid token stands for.
    #[cfg(test)]
    pub async fn validate(&self, token: &str) -> Result<String, JwtRejection> {
        self.validate_until(token).await.map(|(identity, _)| identity)
    }

    /// The identity a valid token stands for, and the first second the proxy refuses it
    /// (`exp` plus the leeway, plus one: `exp` itself is still accepted), since the epoch.
    pub async fn validate_until(&self, token: &str) -> Result<(String, u64), JwtRejection> {
        let header = decode_header(token).map_err(|_| JwtRejection::Malformed)?;
        if !self.config.algorithms.contains(&header.alg) {
            return Err(JwtRejection::Algorithm);
        }
        let key = self.keys.key_for(header.kid.as_deref(), header.alg).await.ok_or(JwtRejection::UnknownKey)?;
        let claims = decode::<Map<String, Value>>(token, &key, &self.validation(header.alg))
            .map_err(|error| rejection(error.kind()))?
            .claims;
        let principal = claims.get(&self.config.principal_claim).and_then(Value::as_str).unwrap_or_default();
        if !is_valid_principal(principal) {
            return Err(JwtRejection::Claims);
        }
        let exp = claims.get("exp").and_then(Value::as_u64).ok_or(JwtRejection::Claims)?;
        let until = exp.saturating_add(self.config.leeway.as_secs()).saturating_add(1);
        Ok((jwt_identity(principal, &self.groups(&claims)), until))
    }

    fn validation(&self, algorithm: jsonwebtoken::Algorithm) -> Validation {
        let mut validation = Validation::new(algorithm);
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&self.config.audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation
    }

    /// The groups claim: an array of strings (other entries ignored) or one string.
    fn groups<'a>(&self, claims: &'a Map<String, Value>) -> Vec<&'a str> {
        let Some(claim) = &self.config.groups_claim else { return Vec::new() };
        match claims.get(claim) {
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
            Some(Value::String(one)) => vec![one.as_str()],
            _ => Vec::new(),
        }
    }
}

fn rejection(kind: &ErrorKind) -> JwtRejection {
    match kind {
        ErrorKind::InvalidSignature => JwtRejection::Signature,
        ErrorKind::ExpiredSignature => JwtRejection::Expired,
        ErrorKind::ImmatureSignature => JwtRejection::NotYetValid,
        ErrorKind::InvalidIssuer => JwtRejection::Issuer,
        ErrorKind::InvalidAudience => JwtRejection::Audience,
        ErrorKind::InvalidAlgorithm
        | ErrorKind::InvalidRsaKey(_)
        | ErrorKind::InvalidEcdsaKey
        | ErrorKind::InvalidEddsaKey
        | ErrorKind::InvalidKeyFormat => JwtRejection::Algorithm,
        ErrorKind::MissingRequiredClaim(_) | ErrorKind::InvalidClaimFormat(_) => JwtRejection::Claims,
        _ => JwtRejection::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use jsonwebtoken::jwk::{Jwk, JwkSet};
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    use serde_json::json;

    use super::*;
    use crate::config::JwksSource;

    fn key() -> EncodingKey {
        crate::crypto::install();
        let der = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/jwt/rsa-a.der")).unwrap();
        EncodingKey::from_rsa_der(&der)
    }

    /// A validator over a JWKS file holding the test key as `kid = "k"`, principal from `email`.
    fn validator(dir: &Path) -> JwtValidator {
        let mut jwk = Jwk::from_encoding_key(&key(), Algorithm::RS256).unwrap();
        jwk.common.key_id = Some("k".into());
        let path = dir.join("jwks.json");
        std::fs::write(&path, serde_json::to_vec(&JwkSet { keys: vec![jwk] }).unwrap()).unwrap();
        JwtValidator::new(&JwtConfig {
            resource: "https://p.example/mcp".into(),
            audiences: vec!["https://p.example/mcp".into()],
            issuer: "https://id.example".into(),
            jwks: JwksSource::File(path),
            algorithms: vec![Algorithm::RS256],
            leeway: Duration::from_secs(30),
            principal_claim: "email".into(),
            groups_claim: Some("team".into()),
            authorization_servers: vec![],
            scopes_supported: vec![],
            jwks_refresh: Duration::from_secs(300),
            jwks_min_refresh: Duration::from_secs(30),
        })
    }

    fn token(algorithm: Algorithm, claims: serde_json::Value) -> String {
        let mut header = Header::new(algorithm);
        header.kid = Some("k".into());
        let key = if algorithm == Algorithm::HS256 { EncodingKey::from_secret(b"public").unwrap() } else { key() };
        encode(&header, &claims, &key).unwrap()
    }

    #[tokio::test]
    async fn a_jwks_file_the_principal_claim_and_a_single_string_group() {
        let dir = tempfile::tempdir().unwrap();
        let validator = validator(dir.path());
        let exp = jsonwebtoken::get_current_timestamp() + 600;
        let claims = |email: &str| json!({"iss": "https://id.example", "aud": "https://p.example/mcp", "exp": exp, "sub": "u-1", "email": email, "team": "eng"});
        let cases = [
            (token(Algorithm::RS256, claims("ann@example.com")), Ok("ann@example.com[eng]{jwt}")),
            (token(Algorithm::RS256, claims("group:admins")), Err(JwtRejection::Claims)),
            (token(Algorithm::RS256, claims("*")), Err(JwtRejection::Claims)),
            (token(Algorithm::HS256, claims("ann@example.com")), Err(JwtRejection::Algorithm)),
        ];
        for (token, expected) in cases {
            assert_eq!(validator.validate(&token).await.as_deref().map_err(|e| *e), expected);
        }
    }
}
