//! The token endpoint's side of OAuth, as [`super::TokenSource`] speaks it: the form of a client
//! credentials request or of an RFC 8693 exchange, HTTP Basic authentication of the proxy's
//! client, and the reply read (bounded) into a bearer token and its lifetime, or into the
//! endpoint's bounded `error` code for the log.
//!
//! Invariant: the client's secret travels only in a sensitive `Authorization` header; an
//! endpoint's own error text is never kept, only its `error` code when it is a plain word.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::TokenFailure;
use crate::config::{ClientCredentials, TokenExchange};

/// The largest token endpoint reply read.
const MAX_REPLY_BYTES: usize = 64 * 1024;
/// How long a token without `expires_in` is kept (unless the upstream refuses it first).
const UNSTATED_LIFETIME: Duration = Duration::from_secs(3600);

/// Characters form-encoded in a request body and in Basic credentials (all but unreserved).
const FORM: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// One request to the token endpoint at `url` with `form`, authenticated as `client` when
/// there is one: the token it grants and its lifetime.
pub(super) async fn request(
    http: &reqwest::Client,
    url: &str,
    form: String,
    client: Option<&ClientCredentials>,
    upstream: &str,
) -> Result<(Arc<str>, Duration), TokenFailure> {
    let mut request = http
        .post(url)
        .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(http::header::ACCEPT, "application/json");
    if let Some(client) = client {
        request = request.header(http::header::AUTHORIZATION, basic(client)?);
    }
    let response = request.body(form).send().await.map_err(|_| TokenFailure::Unreachable)?;
    let status = response.status();
    let reply = read_bounded(response).await?;
    if !status.is_success() {
        let code = oauth_error_code(&reply);
        tracing::warn!(upstream = %upstream, status = status.as_u16(), error = code.as_deref().unwrap_or("-"), "the token endpoint refused the request");
        return Err(TokenFailure::Refused(status.as_u16()));
    }
    parse_token(&reply).ok_or(TokenFailure::Unusable)
}

/// The form of a client credentials request.
pub(super) fn client_credentials_form(config: &ClientCredentials) -> String {
    let mut body = String::from("grant_type=client_credentials");
    append(&mut body, &[("scope", &config.scope), ("audience", &config.audience)]);
    body
}

/// The form of an RFC 8693 exchange of `subject`.
pub(super) fn exchange_form(config: &TokenExchange, subject: &str) -> String {
    let mut body = format!(
        "grant_type={}&subject_token={}&subject_token_type={}&requested_token_type={}",
        utf8_percent_encode("urn:ietf:params:oauth:grant-type:token-exchange", FORM),
        utf8_percent_encode(subject, FORM),
        utf8_percent_encode(config.subject_token_type, FORM),
        utf8_percent_encode("urn:ietf:params:oauth:token-type:access_token", FORM),
    );
    append(&mut body, &[("audience", &config.audience), ("resource", &config.resource), ("scope", &config.scope)]);
    body
}

fn append(body: &mut String, fields: &[(&str, &Option<String>)]) {
    for (key, value) in fields {
        if let Some(value) = value {
            body.push_str(&format!("&{key}={}", utf8_percent_encode(value, FORM)));
        }
    }
}

/// `Authorization: Basic …` of the proxy's client (sensitive: never printed).
fn basic(config: &ClientCredentials) -> Result<http::HeaderValue, TokenFailure> {
    let basic = format!(
        "{}:{}",
        utf8_percent_encode(&config.client_id, FORM),
        utf8_percent_encode(config.client_secret.expose(), FORM)
    );
    let mut authorization =
        http::HeaderValue::from_str(&format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(basic)))
            .map_err(|_| TokenFailure::Unusable)?;
    authorization.set_sensitive(true);
    Ok(authorization)
}

async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, TokenFailure> {
    let mut reply = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|_| TokenFailure::Unreachable)? {
        if reply.len() + chunk.len() > MAX_REPLY_BYTES {
            return Err(TokenFailure::Unusable);
        }
        reply.extend_from_slice(&chunk);
    }
    Ok(reply)
}

/// `access_token` (of `token_type` Bearer) and its lifetime, from a token endpoint's reply.
fn parse_token(reply: &[u8]) -> Option<(Arc<str>, Duration)> {
    let reply: serde_json::Value = serde_json::from_slice(reply).ok()?;
    let token = reply.get("access_token")?.as_str().filter(|token| is_token68(token))?;
    if !reply.get("token_type")?.as_str()?.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let lifetime = match reply.get("expires_in") {
        None | Some(serde_json::Value::Null) => UNSTATED_LIFETIME,
        Some(seconds) => Duration::from_secs_f64(seconds.as_f64().filter(|s| s.is_finite() && *s >= 0.0)?.min(1e9)),
    };
    Some((token.into(), lifetime))
}

/// Whether `token` can travel as `Bearer <token>` (RFC 6750 b64token).
fn is_token68(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b))
}

/// The `error` code of an OAuth error reply, when it is a short plain word.
fn oauth_error_code(reply: &[u8]) -> Option<String> {
    let reply: serde_json::Value = serde_json::from_slice(reply).ok()?;
    let code = reply.get("error")?.as_str()?;
    (code.len() <= 64 && code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
        .then(|| code.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reply_is_read_with_its_lifetime() {
        let parse = |text: &str| parse_token(text.as_bytes()).map(|(token, life)| (token.to_string(), life));
        let s = Duration::from_secs;
        assert_eq!(
            parse(r#"{"access_token":"a.b-c","token_type":"Bearer","expires_in":60}"#),
            Some(("a.b-c".into(), s(60)))
        );
        assert_eq!(parse(r#"{"access_token":"t","token_type":"bearer"}"#), Some(("t".into(), UNSTATED_LIFETIME)));
        assert_eq!(parse(r#"{"access_token":"t","token_type":"mac","expires_in":60}"#), None);
        assert_eq!(parse(r#"{"access_token":"t t","token_type":"Bearer"}"#), None);
        assert_eq!(parse(r#"{"access_token":"t","token_type":"Bearer","expires_in":-1}"#), None);
        assert_eq!(parse(r#"{"token_type":"Bearer"}"#), None);
        assert_eq!(parse("not json"), None);
    }

    #[test]
    fn only_a_plain_oauth_error_code_is_kept() {
        assert_eq!(
            oauth_error_code(br#"{"error":"invalid_client","error_description":"x"}"#).as_deref(),
            Some("invalid_client")
        );
        assert_eq!(oauth_error_code(br#"{"error":"has spaces and secrets"}"#), None);
    }
}
