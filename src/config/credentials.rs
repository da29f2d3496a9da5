//! `[upstreams.auth]`: how the proxy proves itself to an HTTP upstream, besides static
//! `headers`, as an [`UpstreamAuth`] of two kinds. `client_credentials`, OAuth 2.1 client
//! credentials (RFC 6749 §4.4): the proxy's own client id and secret are exchanged at
//! `token_url` for an access token, sent upstream as `Authorization: Bearer …`.
//! `token_exchange`, RFC 8693: each principal's own JWT is exchanged at `token_url` for a token
//! for this upstream (`audience`, `resource`, `scope`), sent on that principal's own upstream
//! session — so it needs `session = "per-principal"` or `"per-host"`; the client id and secret
//! are optional there (they authenticate the exchange, and the shared connection gets its
//! tokens with them; without them it sends none). Tokens are fetched, cached and refreshed by
//! `upstream::credentials`.
//!
//! Invariant: an [`UpstreamAuth`] that exists has an `https://` token URL (or `http://` to a
//! loopback address); a [`ClientCredentials`] has a client id and a secret read from a variable
//! that was set; the secret never shows in `Debug` output, problems or logs.

use std::collections::BTreeMap;
use std::fmt;

use figment::value::Value;
use serde::Deserialize;

use super::{Problem, Secret, push, redact_url, report_unknown, upstream};

/// `[upstreams.auth]` of one upstream.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamAuth {
    ClientCredentials(ClientCredentials),
    /// Boxed: it is the larger by far.
    TokenExchange(Box<TokenExchange>),
}

impl UpstreamAuth {
    /// The proxy's own client credentials, if it has them: the shared connection's tokens.
    pub fn client_credentials(&self) -> Option<&ClientCredentials> {
        match self {
            UpstreamAuth::ClientCredentials(client) => Some(client),
            UpstreamAuth::TokenExchange(exchange) => exchange.client.as_ref(),
        }
    }

    /// Its token exchange, when each principal's JWT is exchanged.
    pub fn token_exchange(&self) -> Option<&TokenExchange> {
        match self {
            UpstreamAuth::TokenExchange(exchange) => Some(exchange.as_ref()),
            UpstreamAuth::ClientCredentials(_) => None,
        }
    }
}

/// RFC 8693 token exchange of one upstream: a principal's JWT for a token of this upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenExchange {
    /// The authorization server's token endpoint.
    pub token_url: String,
    /// The proxy's own client there, if it has one: it authenticates each exchange (HTTP Basic)
    /// and gets the shared connection's tokens (with the same `scope` and `audience`).
    pub client: Option<ClientCredentials>,
    /// `subject_token_type`: `urn:ietf:params:oauth:token-type:access_token` (the default) or
    /// `…:jwt`.
    pub subject_token_type: &'static str,
    pub audience: Option<String>,
    /// `resource` (RFC 8707), an absolute URI, if any.
    pub resource: Option<String>,
    pub scope: Option<String>,
}

/// The subject token types a principal's JWT may be presented as.
pub const SUBJECT_TOKEN_TYPES: [(&str, &str); 2] = [
    ("access_token", "urn:ietf:params:oauth:token-type:access_token"),
    ("jwt", "urn:ietf:params:oauth:token-type:jwt"),
];

/// OAuth 2.1 client credentials of one upstream.
#[derive(Clone, PartialEq)]
pub struct ClientCredentials {
    /// The authorization server's token endpoint.
    pub token_url: String,
    pub client_id: String,
    /// The client secret, read from `client_secret_env`.
    pub client_secret: Secret,
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

#[derive(Debug, Deserialize, Default, Clone)]
pub(super) struct RawUpstreamAuth {
    kind: Option<String>,
    token_url: Option<String>,
    client_id: Option<String>,
    client_secret_env: Option<String>,
    scope: Option<String>,
    audience: Option<String>,
    resource: Option<String>,
    subject_token_type: Option<String>,
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
) -> Option<UpstreamAuth> {
    let at = format!("{at}.auth");
    report_unknown(&at, &raw.unknown, problems);
    if headers.keys().any(|name| name.eq_ignore_ascii_case("authorization")) {
        push(problems, &at, "both `auth` and an `Authorization` header are set: keep one".into());
    }
    const KINDS: &str = "\"client_credentials\" or \"token_exchange\"";
    match raw.kind.as_deref() {
        Some("client_credentials") => {
            for (key, set) in
                [("resource", raw.resource.is_some()), ("subject_token_type", raw.subject_token_type.is_some())]
            {
                if set {
                    push(problems, &format!("{at}.{key}"), "applies only to `kind = \"token_exchange\"`".into());
                }
            }
            let token_url = token_url(&at, raw.token_url, problems);
            let client = client(&at, raw.client_id, raw.client_secret_env, true, lookup, problems);
            let (token_url, (client_id, client_secret)) = (token_url?, client?);
            let (scope, audience) = (non_empty(raw.scope), non_empty(raw.audience));
            Some(UpstreamAuth::ClientCredentials(ClientCredentials {
                token_url,
                client_id,
                client_secret,
                scope,
                audience,
            }))
        }
        Some("token_exchange") => {
            token_exchange(&at, raw, lookup, problems).map(|exchange| UpstreamAuth::TokenExchange(Box::new(exchange)))
        }
        Some(other) => {
            push(problems, &format!("{at}.kind"), format!("`{other}` is not {KINDS}"));
            None
        }
        None => {
            push(problems, &at, format!("missing `kind` ({KINDS})"));
            None
        }
    }
}

fn token_exchange(
    at: &str,
    raw: RawUpstreamAuth,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Option<TokenExchange> {
    let token_url = token_url(at, raw.token_url, problems);
    let optional = raw.client_id.is_none() && raw.client_secret_env.is_none();
    let client = if optional {
        Some(None)
    } else {
        client(at, raw.client_id, raw.client_secret_env, false, lookup, problems).map(Some)
    };
    let subject_token_type = match raw.subject_token_type.as_deref() {
        None => Some(SUBJECT_TOKEN_TYPES[0].1),
        Some(given) => {
            let found = SUBJECT_TOKEN_TYPES.iter().find(|(short, urn)| given == *short || given == *urn);
            if found.is_none() {
                push(
                    problems,
                    &format!("{at}.subject_token_type"),
                    format!("`{given}` is not \"access_token\" or \"jwt\""),
                );
            }
            found.map(|(_, urn)| *urn)
        }
    };
    let resource = non_empty(raw.resource);
    if let Some(resource) = &resource
        && reqwest::Url::parse(resource).is_err()
    {
        push(problems, &format!("{at}.resource"), format!("`{}` is not an absolute URI", redact_url(resource)));
    }
    let (token_url, client, subject_token_type) = (token_url?, client?, subject_token_type?);
    let (scope, audience) = (non_empty(raw.scope), non_empty(raw.audience));
    let client = client.map(|(client_id, client_secret)| ClientCredentials {
        token_url: token_url.clone(),
        client_id,
        client_secret,
        scope: scope.clone(),
        audience: audience.clone(),
    });
    Some(TokenExchange { token_url, client, subject_token_type, audience, resource, scope })
}

/// The client id and secret: required (`client_credentials`), or both or neither.
fn client(
    at: &str,
    id: Option<String>,
    secret_env: Option<String>,
    required: bool,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Option<(String, Secret)> {
    let client_id = id.filter(|id| !id.is_empty());
    if client_id.is_none() {
        let why = if required {
            "missing (the proxy's client id at the token endpoint)"
        } else {
            "missing (set with `client_secret_env`, or neither)"
        };
        push(problems, &format!("{at}.client_id"), why.into());
    }
    let client_secret = client_secret(at, secret_env, lookup, problems);
    Some((client_id?, client_secret?))
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|value| !value.is_empty())
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
) -> Option<Secret> {
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
        Some(secret) => Some(Secret::new(secret)),
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
        let auth = auth.client_credentials().unwrap();
        assert_eq!((auth.client_id.as_str(), auth.scope.as_deref()), ("proxy", Some("mcp:read")));
        assert_eq!(auth.client_secret.expose(), "s3cret-value");
        assert!(!format!("{config:?}").contains("s3cret-value"));
    }

    #[test]
    fn a_token_exchange_is_read_with_or_without_a_client() {
        let lookup = |name: &str| (name == "PROXY_SECRET").then(|| "s3cret-value".to_string());
        let exchange = "kind = \"token_exchange\"\ntoken_url = \"http://127.0.0.1:9/token\"\naudience = \"docs\"\nresource = \"https://docs.example/mcp\"\nsubject_token_type = \"jwt\"";
        let with_client = format!("{exchange}\nclient_id = \"proxy\"\nclient_secret_env = \"PROXY_SECRET\"");
        let text = [
            upstream("public", "session = \"per-principal\"", exchange),
            upstream("confidential", "session = \"per-host\"", &with_client),
        ]
        .concat();
        let config = Config::from_toml(&text, std::path::Path::new("."), &lookup).unwrap();
        let exchanges: Vec<_> = config
            .upstreams
            .iter()
            .map(|u| match &u.transport {
                UpstreamTransport::Http { auth: Some(auth), .. } => auth.token_exchange().unwrap().clone(),
                _ => panic!(),
            })
            .collect();
        assert_eq!(exchanges[0].subject_token_type, "urn:ietf:params:oauth:token-type:jwt");
        assert_eq!(exchanges[0].resource.as_deref(), Some("https://docs.example/mcp"));
        assert!(exchanges[0].client.is_none());
        let client = exchanges[1].client.as_ref().unwrap();
        assert_eq!((client.client_id.as_str(), client.audience.as_deref()), ("proxy", Some("docs")));
        assert!(!format!("{config:?}").contains("s3cret-value"));
    }

    #[test]
    fn every_auth_problem_is_reported_at_once() {
        let text = [
            upstream("unset", "", GOOD),
            upstream("both", "headers = { Authorization = \"Bearer x\" }", &GOOD.replace("PROXY_SECRET", "SET")),
            upstream("plain", "", "kind = \"client_credentials\"\ntoken_url = \"http://id.example/token\"\nclient_id = \"p\"\nclient_secret_env = \"SET\""),
            upstream("broken", "", "kind = \"token_exchange\"\ntoken_url = \"not a url\"\nclient_secret_env = \"bad name\"\ncolour = 1"),
            upstream("odd", "", "kind = \"magic\""),
            upstream("shared", "", "kind = \"token_exchange\"\ntoken_url = \"https://id.example/token\""),
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
            ("upstreams[3] (broken).auth.token_url", "is not a URL"),
            ("upstreams[3] (broken).auth.client_id", "missing"),
            ("upstreams[3] (broken).auth.client_secret_env", "is not a variable name"),
            ("upstreams[4] (odd).auth.kind", "is not \"client_credentials\" or \"token_exchange\""),
            ("upstreams[5] (shared).auth.kind", "needs `session = \"per-principal\"` or `\"per-host\"`"),
            ("upstreams[6] (child).auth", "applies only to `url` upstreams"),
        ];
        for (at, says) in expect {
            assert!(problems.iter().any(|p| p.at == at && p.message.contains(says)), "{at}: {says} in {shown:#?}");
        }
        assert_eq!(problems.len(), expect.len(), "{shown:#?}");
    }
}
