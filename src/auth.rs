//! Who is calling over HTTP: the first thing `/mcp`'s front middleware
//! (`downstream::fast::front`) does — [`Authenticator::authenticate_subject`] turns the
//! `Authorization` header into a [`Principal`], carried on by [`run_as`] in the request
//! extensions, or [`Authenticator::refuse`] answers 401 before any MCP processing.
//!
//! `mode = "bearer"`: the request needs exactly one `Authorization: Bearer <token>` header
//! (scheme case-insensitive, one space, a token of visible ASCII). The token is hashed with
//! SHA-256 and compared in constant time with every configured digest. When it matches none
//! and `[auth.jwt]` is configured, a token shaped like a JWT is validated as an OAuth 2.1
//! access token ([`jwt`]); its principal carries the token's groups (a policy identity, see
//! [`crate::policy::identity`]). Missing, malformed, unknown or invalid → `401` with one short
//! body that does not say which, and `WWW-Authenticate: Bearer` — with `[auth.jwt]`, naming the
//! protected resource metadata ([`metadata`]) and, when a token was sent, `error="invalid_token"`.
//! `mode = "none"`: every request is [`ANONYMOUS`] and the header is not looked at.
//!
//! rmcp's streamable HTTP service hands each request's `http::request::Parts` (extensions
//! included) to the handler, so the handler reads the principal with [`principal_of`].
//!
//! A JWT's stream ends when the token stops being accepted ([`expiry`]). The JWT a request
//! presented goes on in its extensions ([`SubjectToken`], [`subject_of`]): an upstream that
//! exchanges tokens (RFC 8693) exchanges that one for the request's calls, prompts, reads,
//! completions and subscriptions (for a 2026-07-28 listen stream, whose handler rmcp makes per
//! request, through [`current_subject`]). Each principal's latest-expiring accepted JWT is also
//! kept in memory ([`subjects`]), for what an exchanging upstream's session sends on its own
//! before any subscription is held on it (its handshake).
//!
//! Invariant: a token is never logged or echoed; a static token only has its digest compared,
//! and a JWT is kept only in [`subjects`], until it expires.

pub mod expiry;
mod jwks;
pub mod jwt;
pub mod metadata;
pub mod subjects;

use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::header::{AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use self::jwt::{JwtRejection, JwtValidator};
use self::subjects::Subjects;
use crate::config::{AuthConfig, AuthMode};
pub use crate::host::SubjectToken;

/// The principal of `mode = "none"` HTTP requests.
pub const ANONYMOUS: &str = "anonymous";

/// The authenticated caller, in the request extensions of every request that got through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(pub String);

/// Why a request was turned away (for logs; the client always gets the same answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    Missing,
    Malformed,
    UnknownToken,
    InvalidJwt(JwtRejection),
}

impl Rejection {
    /// A bounded label for metrics and the audit trail (one of
    /// [`crate::metrics::AUTH_REFUSAL_REASONS`]); it says why, never what was sent.
    pub fn label(self) -> &'static str {
        match self {
            Rejection::Missing => "missing",
            Rejection::Malformed => "malformed",
            Rejection::UnknownToken => "unknown_token",
            Rejection::InvalidJwt(jwt) => match jwt {
                JwtRejection::Malformed => "malformed_jwt",
                JwtRejection::Algorithm => "algorithm",
                JwtRejection::UnknownKey => "unknown_key",
                JwtRejection::Signature => "bad_signature",
                JwtRejection::Expired => "expired",
                JwtRejection::NotYetValid => "not_yet_valid",
                JwtRejection::Issuer => "wrong_issuer",
                JwtRejection::Audience => "wrong_audience",
                JwtRejection::Claims => "bad_claims",
            },
        }
    }
}

/// The configured tokens as digests; a cheap `Clone` handle for the middleware state.
#[derive(Clone)]
pub struct Authenticator {
    inner: Arc<Inner>,
}

struct Inner {
    mode: AuthMode,
    tokens: Vec<(String, [u8; 32])>,
    jwt: Option<JwtValidator>,
    /// The protected resource metadata URL, with `[auth.jwt]`.
    resource_metadata: Option<String>,
    /// Where each principal's latest accepted JWT is kept (token exchange).
    subjects: Subjects,
}

impl Authenticator {
    #[cfg(test)]
    pub fn new(config: &AuthConfig) -> Authenticator {
        Self::keeping(config, Subjects::default())
    }

    /// An authenticator for `config`, keeping each principal's latest accepted JWT in `subjects`.
    pub fn keeping(config: &AuthConfig, subjects: Subjects) -> Authenticator {
        let tokens = config.tokens.iter().map(|t| (t.principal.clone(), t.sha256)).collect();
        let jwt = config.jwt.as_ref().map(JwtValidator::new);
        let resource_metadata = config.jwt.as_ref().map(|jwt| metadata::metadata_url(&jwt.resource));
        Authenticator { inner: Arc::new(Inner { mode: config.mode, tokens, jwt, resource_metadata, subjects }) }
    }

    /// The principal for a request with these headers.
    #[cfg(test)]
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, Rejection> {
        self.authenticate_subject(headers).await.map(|(principal, _)| principal)
    }

    /// The principal for a request with these headers, and the JWT it presented (none for
    /// static tokens and `mode = "none"`).
    pub async fn authenticate_subject(
        &self,
        headers: &HeaderMap,
    ) -> Result<(Principal, Option<SubjectToken>), Rejection> {
        if self.inner.mode == AuthMode::None {
            return Ok((Principal(ANONYMOUS.into()), None));
        }
        let token = bearer_token(headers)?;
        if let Some(principal) = self.static_principal(token) {
            return Ok((Principal(principal.to_string()), None));
        }
        match &self.inner.jwt {
            Some(jwt) if JwtValidator::looks_like_jwt(token) => match jwt.validate_until(token).await {
                Ok((identity, until)) => {
                    self.inner.subjects.record(&identity, token, until);
                    Ok((Principal(identity), Some(SubjectToken::new(token, until))))
                }
                Err(rejection) => Err(Rejection::InvalidJwt(rejection)),
            },
            _ => Err(Rejection::UnknownToken),
        }
    }

    /// The principal of a configured static token, compared in constant time with all.
    fn static_principal(&self, token: &str) -> Option<&str> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (principal, expected) in &self.inner.tokens {
            let equal: bool = digest.ct_eq(expected).into();
            if equal && found.is_none() {
                found = Some(principal.as_str());
            }
        }
        found
    }

    /// The 401 for `rejection`.
    fn unauthorized(&self, rejection: Rejection) -> Response {
        let challenge = match &self.inner.resource_metadata {
            Some(url) => metadata::challenge(url, rejection != Rejection::Missing),
            None => "Bearer".to_string(),
        };
        let headers = [(WWW_AUTHENTICATE, challenge), (CONTENT_TYPE, "text/plain; charset=utf-8".to_string())];
        (StatusCode::UNAUTHORIZED, headers, "missing or invalid bearer token\n").into_response()
    }
}

impl Authenticator {
    /// The 401 for a request refused for `rejection`, noted in the log.
    pub fn refuse(&self, rejection: Rejection, method: &http::Method) -> Response {
        tracing::debug!(reason = ?rejection, %method, "unauthorized request");
        self.unauthorized(rejection)
    }
}

/// Run the rest of the chain for an authenticated request: its [`Principal`] (and the JWT it
/// presented, a [`SubjectToken`]) in the request's extensions and, for the whole request, in
/// [`current_principal`] and [`current_subject`] (the MCP service factory, which rmcp calls
/// without the request, builds the handler for this principal).
pub async fn run_as(principal: Principal, subject: Option<SubjectToken>, mut request: Request, next: Next) -> Response {
    tracing::trace!(principal = %principal.0, "authenticated");
    let name = principal.0.clone();
    request.extensions_mut().insert(principal);
    if let Some(subject) = &subject {
        request.extensions_mut().insert(subject.clone());
    }
    REQUEST_PRINCIPAL.scope((name, subject), next.run(request)).await
}

tokio::task_local! {
    static REQUEST_PRINCIPAL: (String, Option<SubjectToken>);
}

/// The principal of the HTTP request being handled on this task, if any.
pub fn current_principal() -> Option<String> {
    REQUEST_PRINCIPAL.try_with(|(principal, _)| principal.clone()).ok()
}

/// The JWT the HTTP request being handled on this task presented, if any.
pub fn current_subject() -> Option<SubjectToken> {
    REQUEST_PRINCIPAL.try_with(|(_, subject)| subject.clone()).ok().flatten()
}

/// The principal the middleware put into a request's extensions.
pub fn principal_of(parts: &http::request::Parts) -> Option<&str> {
    parts.extensions.get::<Principal>().map(|p| p.0.as_str())
}

/// The JWT the request presented, which the middleware put into its extensions.
pub fn subject_of(parts: &http::request::Parts) -> Option<&SubjectToken> {
    parts.extensions.get::<SubjectToken>()
}

/// The token of the one `Authorization: Bearer <token>` header.
fn bearer_token(headers: &HeaderMap) -> Result<&str, Rejection> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next().ok_or(Rejection::Missing)?;
    if values.next().is_some() {
        return Err(Rejection::Malformed);
    }
    let text = value.to_str().map_err(|_| Rejection::Malformed)?;
    let (scheme, token) = text.split_once(' ').ok_or(Rejection::Malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Rejection::Malformed);
    }
    Ok(token)
}

#[cfg(test)]
mod tests;
