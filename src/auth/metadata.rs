//! OAuth 2.0 Protected Resource Metadata (RFC 9728) for `[auth.jwt]`: the document at
//! `/.well-known/oauth-protected-resource` (and its path-suffixed forms, `…/mcp` and the
//! resource URI's own path), and the `WWW-Authenticate` challenge of a 401 that points at it.
//!
//! Invariant: the metadata holds configuration only (no key, no token), and is served without
//! authentication — a client reads it to learn where to get a token.

use axum::Json;
use axum::routing::get;
use serde_json::{Value, json};

use crate::config::JwtConfig;

/// The well-known prefix (RFC 9728 §3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The metadata document.
pub fn document(config: &JwtConfig) -> Value {
    let mut document = json!({
        "resource": config.resource,
        "authorization_servers": config.authorization_servers,
        "bearer_methods_supported": ["header"],
    });
    if !config.scopes_supported.is_empty() {
        document["scopes_supported"] = json!(config.scopes_supported);
    }
    document
}

/// The metadata URL for `resource`: the well-known prefix between its authority and its path
/// (`https://h/mcp` → `https://h/.well-known/oauth-protected-resource/mcp`).
pub fn metadata_url(resource: &str) -> String {
    match reqwest::Url::parse(resource) {
        Ok(url) => {
            let path = url.path().trim_end_matches('/');
            format!("{}{WELL_KNOWN}{path}", url.origin().ascii_serialization())
        }
        Err(_) => WELL_KNOWN.to_string(),
    }
}

/// The routes serving the document: the bare prefix, `…/mcp`, and `…<resource path>`.
pub fn routes(config: &JwtConfig) -> axum::Router {
    let body = document(config);
    let mut paths = vec![WELL_KNOWN.to_string(), format!("{WELL_KNOWN}/mcp")];
    if let Ok(url) = reqwest::Url::parse(&config.resource) {
        let suffixed = format!("{WELL_KNOWN}{}", url.path().trim_end_matches('/'));
        if !paths.contains(&suffixed) {
            paths.push(suffixed);
        }
    }
    let mut router = axum::Router::new();
    for path in paths {
        let body = body.clone();
        router = router.route(&path, get(move || async move { Json(body) }));
    }
    router
}

/// The `WWW-Authenticate` value of a 401: the metadata URL, and `error="invalid_token"` when a
/// token was presented (RFC 6750 §3.1) — without a token the request simply lacked one.
pub fn challenge(resource_metadata: &str, token_presented: bool) -> String {
    if token_presented {
        format!("Bearer error=\"invalid_token\", resource_metadata=\"{resource_metadata}\"")
    } else {
        format!("Bearer resource_metadata=\"{resource_metadata}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_puts_the_well_known_prefix_before_the_resource_path() {
        let cases = [
            ("https://p.example/mcp", "https://p.example/.well-known/oauth-protected-resource/mcp"),
            (
                "https://p.example:8443/team/mcp/",
                "https://p.example:8443/.well-known/oauth-protected-resource/team/mcp",
            ),
            ("https://p.example", "https://p.example/.well-known/oauth-protected-resource"),
        ];
        for (resource, expected) in cases {
            assert_eq!(metadata_url(resource), expected, "{resource}");
        }
    }
}
