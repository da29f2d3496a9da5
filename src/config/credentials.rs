//! `[upstreams.auth]`: how the proxy proves itself to an HTTP upstream, besides static
//! `headers`. One kind today, OAuth 2.1 client credentials (RFC 6749 §4.4): the proxy's own
//! client id and secret are exchanged at `token_url` for an access token, sent upstream as
//! `Authorization: Bearer …` (fetched, cached and refreshed by `upstream::credentials`).
//!
//! Invariant: a [`ClientCredentials`] that exists has an `https://` token URL (or `http://` to a
//! loopback address), a client id, and a secret read from a variable that was set; the secret
//! never shows in `Debug` output, problems or logs.

use std::collections::BTreeMap;
use std::fmt;

use figment::value::Value;
use serde::Deserialize;

use super::{Problem, push, redact_url, report_unknown, upstream};

/// OAuth 2.1 client credentials of one upstream.
#[derive(Clone, PartialEq)]
pub struct ClientCredentials {
    /// The authorization server's token endpoint.
    pub token_url: String,
    pub client_id: String,
    /// The client secret, read from `client_secret_env`.
    pub client_secret: ClientSecret,
    /// `scope` of the token request, if any.
    pub scope: Option<String>,
    /// `audience` of the token request (as Auth0, Keycloak and others take it), if any.
    pub audience: Option<String>,
}

impl fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("token_url", &redact_url(&self.token_url))
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret)
            .field("scope", &self.scope)
            .field("audience", &self.audience)
            .finish()
    }
}

/// A secret that prints as `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientSecret(String);

impl ClientSecret {
    /// The secret itself, for the token request only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ClientSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[derive(Debug, Deserialize, Default, Clone)]
pub(super) struct RawUpstreamAuth {
    kind: Option<String>,
    token_url: Option<String>,
    client_id: Option<String>,
    client_secret_env: Option<String>,
    scope: Option<String>,
    audience: Option<String>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

/// `[upstreams.auth]` of the upstream at `at` (an HTTP one whose static headers are
/// `headers`), every problem into `problems`.
pub(super) fn validate_auth(
    at: &str,
    raw: RawUpstreamAuth,
    headers: &BTreeMap<String, String>,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Option<ClientCredentials> {
    let at = format!("{at}.auth");
    report_unknown(&at, &raw.unknown, problems);
    match raw.kind.as_deref() {
        Some("client_credentials") => {}
        Some(other) => push(problems, &format!("{at}.kind"), format!("`{other}` is not \"client_credentials\"")),
        None => push(problems, &at, "missing `kind` (\"client_credentials\")".into()),
    }
    if headers.keys().any(|name| name.eq_ignore_ascii_case("authorization")) {
        push(problems, &at, "both `auth` and an `Authorization` header are set: keep one".into());
    }
    let token_url = token_url(&at, raw.token_url, problems);
    let client_id = raw.client_id.filter(|id| !id.is_empty());
    if client_id.is_none() {
        push(problems, &format!("{at}.client_id"), "missing (the proxy's client id at the token endpoint)".into());
    }
    let client_secret = client_secret(&at, raw.client_secret_env, lookup, problems);
    Some(ClientCredentials {
        token_url: token_url?,
        client_id: client_id?,
        client_secret: client_secret?,
        scope: raw.scope.filter(|s| !s.is_empty()),
        audience: raw.audience.filter(|a| !a.is_empty()),
    })
}

/// `https://`, or `http://` to a loopback address (a token travels over it).
fn token_url(at: &str, url: Option<String>, problems: &mut Vec<Problem>) -> Option<String> {
    let at = format!("{at}.token_url");
    let Some(text) = url else {
        push(problems, &at, "missing (the authorization server's token endpoint)".into());
        return None;
    };
    let shown = redact_url(&text);
    let Ok(url) = reqwest::Url::parse(&text) else {
        push(problems, &at, format!("`{shown}` is not a URL"));
        return None;
    };
    let host = url.host_str().unwrap_or_default();
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    match url.scheme() {
        "https" if !host.is_empty() => Some(text),
        "http" if loopback => Some(text),
        "http" => {
            push(problems, &at, format!("`{shown}` must be https:// (http:// only to a loopback address)"));
            None
        }
        _ => {
            push(problems, &at, format!("`{shown}` is not an https:// URL"));
            None
        }
    }
}

fn client_secret(
    at: &str,
    name: Option<String>,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Option<ClientSecret> {
    let at = format!("{at}.client_secret_env");
    let Some(name) = name else {
        push(problems, &at, "missing (the variable holding the client secret)".into());
        return None;
    };
    if !upstream::is_variable_name(&name) {
        push(problems, &at, format!("`{name}` is not a variable name like CLIENT_SECRET"));
        return None;
    }
    match lookup(&name).filter(|secret| !secret.is_empty()) {
        Some(secret) => Some(ClientSecret(secret)),
        None => {
            push(problems, &at, format!("environment variable `{name}` is not set"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, UpstreamTransport};

    fn upstream(name: &str, extra: &str, auth: &str) -> String {
        format!(
            "[[upstreams]]\nname = \"{name}\"\nurl = \"https://{name}.example/mcp\"\n{extra}\n[upstreams.auth]\n{auth}\n"
        )
    }

    const GOOD: &str = "kind = \"client_credentials\"\ntoken_url = \"https://id.example/token\"\nclient_id = \"proxy\"\nclient_secret_env = \"PROXY_SECRET\"\nscope = \"mcp:read\"";

    #[test]
    fn client_credentials_are_read_and_the_secret_is_never_printed() {
        let lookup = |name: &str| (name == "PROXY_SECRET").then(|| "s3cret-value".to_string());
        let config = Config::from_toml(&upstream("docs", "", GOOD), std::path::Path::new("."), &lookup).unwrap();
        let UpstreamTransport::Http { auth: Some(auth), .. } = &config.upstreams[0].transport else { panic!() };
        assert_eq!((auth.client_id.as_str(), auth.scope.as_deref()), ("proxy", Some("mcp:read")));
        assert_eq!(auth.client_secret.expose(), "s3cret-value");
        assert!(!format!("{config:?}").contains("s3cret-value"));
    }

    #[test]
    fn every_auth_problem_is_reported_at_once() {
        let text = [
            upstream("unset", "", GOOD),
            upstream("both", "headers = { Authorization = \"Bearer x\" }", &GOOD.replace("PROXY_SECRET", "SET")),
            upstream("plain", "", "kind = \"client_credentials\"\ntoken_url = \"http://id.example/token\"\nclient_id = \"p\"\nclient_secret_env = \"SET\""),
            upstream("broken", "", "kind = \"token_exchange\"\ntoken_url = \"not a url\"\nclient_secret_env = \"bad name\"\ncolour = 1"),
            "[[upstreams]]\nname = \"child\"\ncommand = \"x\"\n[upstreams.auth]\nkind = \"client_credentials\"\n".into(),
        ]
        .concat();
        let lookup = |name: &str| (name == "SET").then(|| "v".to_string());
        let problems = Config::from_toml(&text, std::path::Path::new("."), &lookup).unwrap_err().problems;
        let shown: Vec<String> = problems.iter().map(|p| format!("{}: {}", p.at, p.message)).collect();
        let expect = [
            ("upstreams[0] (unset).auth.client_secret_env", "environment variable `PROXY_SECRET` is not set"),
            ("upstreams[1] (both).auth", "both `auth` and an `Authorization` header"),
            ("upstreams[2] (plain).auth.token_url", "must be https://"),
            ("upstreams[3] (broken).auth.colour", "unknown key"),
            ("upstreams[3] (broken).auth.kind", "is not \"client_credentials\""),
            ("upstreams[3] (broken).auth.token_url", "is not a URL"),
            ("upstreams[3] (broken).auth.client_id", "missing"),
            ("upstreams[3] (broken).auth.client_secret_env", "is not a variable name"),
            ("upstreams[4] (child).auth", "applies only to `url` upstreams"),
        ];
        for (at, says) in expect {
            assert!(problems.iter().any(|p| p.at == at && p.message.contains(says)), "{at}: {says} in {shown:#?}");
        }
        assert_eq!(problems.len(), expect.len(), "{shown:#?}");
    }
}
