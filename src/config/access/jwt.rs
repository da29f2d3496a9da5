//! `[auth.jwt]`: the proxy as an OAuth 2.1 resource server (MCP authorization, RFC 9728).
//!
//! Invariant: a validated [`JwtConfig`] allows only asymmetric algorithms (RS*, PS*, ES*,
//! EdDSA): a JWKS is public, so an HMAC "key" from it would let anyone sign; `none` is not an
//! algorithm here at all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use figment::value::Value;
use jsonwebtoken::Algorithm;
use serde::Deserialize;

use super::super::{Problem, duration, push, report_unknown};

/// `[auth.jwt]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtConfig {
    /// This proxy's resource URI (the MCP endpoint, e.g. `https://proxy.example.com/mcp`):
    /// the `resource` of the metadata, and the default audience.
    pub resource: String,
    /// Accepted `aud` values (default: `[resource]`).
    pub audiences: Vec<String>,
    /// The one accepted `iss`.
    pub issuer: String,
    pub jwks: JwksSource,
    pub algorithms: Vec<Algorithm>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// The claim naming the principal (default `sub`).
    pub principal_claim: String,
    /// The claim listing the groups (an array of strings, or one string); none by default.
    pub groups_claim: Option<String>,
    /// `authorization_servers` of the metadata (default: `[issuer]`).
    pub authorization_servers: Vec<String>,
    /// `scopes_supported` of the metadata, when set.
    pub scopes_supported: Vec<String>,
    /// Keys older than this are fetched again on the next request.
    pub jwks_refresh: Duration,
    /// At most one fetch per this interval, whatever the tokens ask for (unknown `kid`s).
    pub jwks_min_refresh: Duration,
}

/// Where the signing keys are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    Url(String),
    File(PathBuf),
}

#[derive(Debug, Deserialize, Default)]
pub(in crate::config) struct RawJwt {
    resource: Option<String>,
    audiences: Option<Vec<String>>,
    issuer: Option<String>,
    jwks_url: Option<String>,
    jwks_file: Option<PathBuf>,
    algorithms: Option<Vec<String>>,
    leeway: Option<String>,
    principal_claim: Option<String>,
    groups_claim: Option<String>,
    authorization_servers: Option<Vec<String>>,
    #[serde(default)]
    scopes_supported: Vec<String>,
    jwks_refresh: Option<String>,
    jwks_min_refresh: Option<String>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

const AT: &str = "auth.jwt";
const MAX_LEEWAY: Duration = Duration::from_secs(300);

pub(in crate::config) fn validate_jwt(raw: RawJwt, base: &Path, problems: &mut Vec<Problem>) -> JwtConfig {
    report_unknown(AT, &raw.unknown, problems);
    let resource = required_url(raw.resource, "resource", problems);
    let issuer = raw.issuer.unwrap_or_default();
    if issuer.is_empty() {
        push(problems, AT, "missing `issuer` (the `iss` every token must carry)".into());
    }
    let jwks = match (raw.jwks_url, raw.jwks_file) {
        (Some(url), None) => {
            check_url(&url, "jwks_url", problems);
            JwksSource::Url(url)
        }
        (None, Some(file)) => JwksSource::File(base.join(file)),
        _ => {
            push(problems, AT, "needs exactly one of `jwks_url`, `jwks_file`".into());
            JwksSource::File(PathBuf::new())
        }
    };
    let leeway = duration(raw.leeway.as_deref(), "30s", &format!("{AT}.leeway"), problems);
    if leeway > MAX_LEEWAY {
        push(problems, &format!("{AT}.leeway"), "must be at most 5m".into());
    }
    let audiences = raw.audiences.unwrap_or_else(|| vec![resource.clone()]);
    if audiences.is_empty() || audiences.iter().any(String::is_empty) {
        push(problems, &format!("{AT}.audiences"), "must list at least one non-empty audience".into());
    }
    let authorization_servers = raw.authorization_servers.unwrap_or_else(|| vec![issuer.clone()]);
    for server in &authorization_servers {
        check_url(server, "authorization_servers", problems);
    }
    JwtConfig {
        resource,
        audiences,
        issuer,
        jwks,
        algorithms: algorithms(raw.algorithms, problems),
        leeway,
        principal_claim: claim(raw.principal_claim, "sub", "principal_claim", problems),
        groups_claim: raw.groups_claim.map(|c| claim(Some(c), "", "groups_claim", problems)),
        authorization_servers,
        scopes_supported: raw.scopes_supported,
        jwks_refresh: duration(raw.jwks_refresh.as_deref(), "5m", &format!("{AT}.jwks_refresh"), problems),
        jwks_min_refresh: duration(raw.jwks_min_refresh.as_deref(), "30s", &format!("{AT}.jwks_min_refresh"), problems),
    }
}

fn algorithms(raw: Option<Vec<String>>, problems: &mut Vec<Problem>) -> Vec<Algorithm> {
    let names = raw.unwrap_or_else(|| vec!["RS256".into(), "ES256".into()]);
    if names.is_empty() {
        push(problems, &format!("{AT}.algorithms"), "must list at least one algorithm".into());
    }
    let mut found = Vec::new();
    for name in names {
        match Algorithm::from_str(&name) {
            Ok(Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) => push(
                problems,
                &format!("{AT}.algorithms"),
                format!("`{name}` is symmetric: a key from a public JWKS must not verify tokens"),
            ),
            Ok(algorithm) => found.push(algorithm),
            Err(_) => push(
                problems,
                &format!("{AT}.algorithms"),
                format!("`{name}` is not one of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA"),
            ),
        }
    }
    found
}

fn claim(raw: Option<String>, default: &str, key: &str, problems: &mut Vec<Problem>) -> String {
    let name = raw.unwrap_or_else(|| default.to_string());
    if name.is_empty() {
        push(problems, &format!("{AT}.{key}"), "must name a claim".into());
    }
    name
}

fn required_url(raw: Option<String>, key: &str, problems: &mut Vec<Problem>) -> String {
    match raw {
        Some(url) => {
            check_url(&url, key, problems);
            url
        }
        None => {
            push(problems, AT, format!("missing `{key}` (this proxy's MCP endpoint URL, the token audience)"));
            String::new()
        }
    }
}

fn check_url(url: &str, key: &str, problems: &mut Vec<Problem>) {
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some() => {}
        _ => push(problems, &format!("{AT}.{key}"), format!("`{url}` is not an http(s) URL")),
    }
}
