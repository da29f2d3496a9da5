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
    /// Keys older than this are fetched again (in the background) on the next request.
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
    // Defaulted from the issuer (an https URL in OAuth); checked when written out.
    let authorization_servers = raw.authorization_servers.unwrap_or_else(|| vec![issuer.clone()]);
    for server in authorization_servers.iter().filter(|server| !server.is_empty()) {
        check_url(server, "authorization_servers", problems);
    }
    if authorization_servers.is_empty() {
        push(problems, &format!("{AT}.authorization_servers"), "must list at least one authorization server".into());
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{AuthMode, Config};

    fn load(text: &str) -> Result<Config, Vec<String>> {
        Config::from_toml(text, Path::new("/etc/proxy"), &|_| None)
            .map_err(|e| e.problems.into_iter().map(|p| format!("{}: {}", p.at, p.message)).collect())
    }

    #[test]
    fn a_minimal_jwt_section_gets_the_documented_defaults() {
        let config = load(
            "[auth]\nmode = \"bearer\"\n[auth.jwt]\nresource = \"https://p.example/mcp\"\n\
             issuer = \"https://id.example\"\njwks_file = \"jwks.json\"\n",
        )
        .expect("valid");
        assert_eq!(config.auth.mode, AuthMode::Bearer);
        assert!(config.auth.tokens.is_empty(), "JWT alone is enough for bearer mode");
        let jwt = config.auth.jwt.expect("jwt");
        assert_eq!(jwt.audiences, ["https://p.example/mcp"]);
        assert_eq!(jwt.authorization_servers, ["https://id.example"]);
        assert_eq!(jwt.jwks, JwksSource::File("/etc/proxy/jwks.json".into()));
        assert_eq!(jwt.algorithms, [Algorithm::RS256, Algorithm::ES256]);
        assert_eq!(jwt.leeway, Duration::from_secs(30));
        assert_eq!((jwt.principal_claim.as_str(), jwt.groups_claim), ("sub", None));
        assert_eq!((jwt.jwks_refresh, jwt.jwks_min_refresh), (Duration::from_secs(300), Duration::from_secs(30)));
    }

    #[test]
    fn every_jwt_problem_is_reported_at_once() {
        let problems = load(
            "[auth]\nmode = \"none\"\n[auth.jwt]\nresource = \"proxy\"\njwks_url = \"ftp://x\"\n\
             jwks_file = \"k.json\"\nalgorithms = [\"HS256\", \"none\", \"RS256\"]\nleeway = \"10m\"\n\
             principal_claim = \"\"\njwks_refresh = \"soon\"\ncolour = 1\n",
        )
        .expect_err("invalid");
        let expected = [
            "auth.jwt.colour: unknown key",
            "auth.jwt.resource: `proxy` is not an http(s) URL",
            "auth.jwt: missing `issuer` (the `iss` every token must carry)",
            "auth.jwt: needs exactly one of `jwks_url`, `jwks_file`",
            "auth.jwt.leeway: must be at most 5m",
            "auth.jwt.algorithms: `HS256` is symmetric: a key from a public JWKS must not verify tokens",
            "auth.jwt.algorithms: `none` is not one of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA",
            "auth.jwt.principal_claim: must name a claim",
            "auth.jwt.jwks_refresh: `soon` is not a duration like 250ms, 30s, 5m, 1h",
            "auth.mode: [auth.jwt] is set but mode is \"none\": set mode = \"bearer\"",
        ];
        for line in expected {
            assert!(problems.contains(&line.to_string()), "missing {line:?} in {problems:#?}");
        }
        assert_eq!(problems.len(), expected.len(), "{problems:#?}");
    }
}
