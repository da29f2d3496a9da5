//! MCP's HTTP headers: their names, the checks rmcp's streamable HTTP server makes of a request
//! head (and which the fast path must make identically to answer in its place), and the
//! headers an MCP client request carries (the thin read sends them as rmcp's client does).

use http::header::{ACCEPT, CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderValue};

/// A 2025-era session's id.
pub const SESSION_ID: &str = "mcp-session-id";
/// The negotiated (2025) or per-request (2026-07-28) protocol version.
pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// SEP-2243: the request's method.
pub const METHOD: &str = "mcp-method";
/// SEP-2243: the request's name (a read's URI).
pub const NAME: &str = "mcp-name";
/// SEP-2243: a tool argument as a header (`Mcp-Param-<name>`).
pub const PARAM_PREFIX: &str = "mcp-param-";
/// What every MCP header's (lower-case) name starts with.
pub const MCP_PREFIX: &str = "mcp-";
/// Sent on SSE replies so proxies in front do not buffer them.
pub const X_ACCEL_BUFFERING: &str = "x-accel-buffering";
/// JSON bodies.
pub const JSON: &str = "application/json";
/// SSE bodies.
pub const EVENT_STREAM: &str = "text/event-stream";
/// The `Accept` of an MCP client's POST, as rmcp's client sends it.
pub const CLIENT_ACCEPT: &str = "text/event-stream, application/json";
/// The prefix of a Base64-wrapped SEP-2243 value (`=?base64?<b64>?=`).
pub const BASE64_PREFIX: &str = "=?base64?";

/// The value of a header that may appear at most once: `Some(None)` when absent, `None` when
/// it appears twice or is not text (rmcp has an answer for those).
pub fn single<'a>(head: &'a HeaderMap, name: &str) -> Option<Option<&'a str>> {
    let mut values = head.get_all(name).iter();
    let Some(first) = values.next() else { return Some(None) };
    if values.next().is_some() {
        return None;
    }
    first.to_str().ok().map(Some)
}

/// The names of the request's `Mcp-*` headers.
pub fn mcp_names(head: &HeaderMap) -> impl Iterator<Item = &str> {
    head.keys().map(http::HeaderName::as_str).filter(|h| h.starts_with(MCP_PREFIX))
}

/// `Accept` lists both `application/json` and `text/event-stream` without parameters (a
/// weighted or otherwise parameterised range is left to rmcp's own reading).
pub fn accepts_json_and_sse(head: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in head.get_all(ACCEPT) {
        let Ok(value) = value.to_str() else { return false };
        for range in value.split(',') {
            let mut pieces = range.split(';');
            let essence = pieces.next().unwrap_or_default().trim();
            if pieces.next().is_some() {
                return false;
            }
            json |= essence.eq_ignore_ascii_case(JSON);
            sse |= essence.eq_ignore_ascii_case(EVENT_STREAM);
        }
    }
    json && sse
}

/// `Content-Type`'s media type, lower case, without parameters (empty when absent).
pub fn media_type(head: &HeaderMap) -> String {
    let content_type = head.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

/// `Content-Type` is JSON (any parameters).
pub fn content_type_is_json(head: &HeaderMap) -> bool {
    let content_type = head.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    content_type.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case(JSON)
}

/// Whether rmcp sends `value` as a SEP-2243 header as it is (printable ASCII, no leading or
/// trailing blank, not looking like the Base64 sentinel), and reads it back unchanged.
pub fn plain_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let padded = matches!(bytes.first(), Some(b' ' | b'\t')) || matches!(bytes.last(), Some(b' ' | b'\t'));
    let sentinel = value.starts_with(BASE64_PREFIX) && value.ends_with("?=");
    let printable = bytes.iter().all(|b| (0x20..=0x7e).contains(b));
    !value.is_empty() && printable && !padded && !sentinel
}

/// SEP-2243 headers of a 2026-07-28 request that plainly agree with its body: `Mcp-Method` is
/// the method, `Mcp-Name` the `name` verbatim (and a value rmcp reads as it is), no other
/// `Mcp-*` header but the version.
pub fn standard_headers_agree(head: &HeaderMap, method: &str, name: Option<&str>) -> bool {
    if mcp_names(head).any(|h| ![METHOD, NAME, PROTOCOL_VERSION].contains(&h)) {
        return false;
    }
    let named = single(head, NAME);
    single(head, METHOD) == Some(Some(method))
        && match name {
            Some(name) => named == Some(Some(name)) && plain_value(name),
            None => named.is_some_and(|n| n.is_none()),
        }
}

/// A 2025-era session request's `Mcp-*` headers are only the session id and the version.
pub fn only_session_headers(head: &HeaderMap) -> bool {
    mcp_names(head).all(|h| [SESSION_ID, PROTOCOL_VERSION].contains(&h))
}

/// Put the per-request headers of an MCP client's POST into `head`: `Accept`, `Content-Type`,
/// and (`standard`: the peer speaks SEP-2243) `Mcp-Method` and `Mcp-Name`. `None` when a value
/// cannot be a header value.
pub fn set_client_request(head: &mut HeaderMap, standard: bool, method: &str, name: Option<&str>) -> Option<()> {
    head.insert(ACCEPT, HeaderValue::from_static(CLIENT_ACCEPT));
    head.insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
    if standard {
        head.insert(METHOD, HeaderValue::from_str(method).ok()?);
        if let Some(name) = name {
            head.insert(NAME, HeaderValue::from_str(name).ok()?);
        }
    }
    Some(())
}

/// The `Host` values rmcp accepts (`StreamableHttpServerConfig::allowed_hosts`), each parsed
/// once: rmcp's rule is applied to every request, and parsing every allowed entry again per
/// request was a large part of checking a head.
pub struct AllowedHosts(Vec<AllowedHost>);

/// One allowed entry as rmcp reads it: an authority (a host, maybe with a port), or, when it
/// does not parse as one (`::1`), the text itself compared as a host name.
enum AllowedHost {
    Authority { host: String, port: Option<u16> },
    Name(String),
}

impl AllowedHosts {
    pub fn new(hosts: &[String]) -> Self {
        let parsed = hosts.iter().map(|allowed| allowed.trim()).filter(|allowed| !allowed.is_empty());
        Self(
            parsed
                .map(|allowed| match http::uri::Authority::try_from(allowed) {
                    Ok(a) => AllowedHost::Authority { host: a.host().to_string(), port: a.port_u16() },
                    Err(_) => AllowedHost::Name(allowed.to_string()),
                })
                .collect(),
        )
    }

    /// rmcp's `Host` rule (host equal, port equal when the allowed entry names one), exactly.
    pub fn allow(&self, head: &HeaderMap) -> bool {
        let Some(host) = head.get(HOST).and_then(|v| v.to_str().ok()) else { return false };
        let Ok(authority) = http::uri::Authority::try_from(host) else { return false };
        let name = authority.host();
        self.0.iter().any(|allowed| match allowed {
            AllowedHost::Authority { host, port } => {
                same_host(host, name) && port.is_none_or(|p| authority.port_u16() == Some(p))
            }
            AllowedHost::Name(allowed) => same_host(allowed, name),
        })
    }
}

/// Host names equal without their IPv6 brackets, ASCII case ignored (rmcp lowercases both).
fn same_host(a: &str, b: &str) -> bool {
    fn bare(host: &str) -> &str {
        host.trim_matches('[').trim_matches(']')
    }
    bare(a).eq_ignore_ascii_case(bare(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `Host` rule with the allowed entries parsed once answers as parsing them per request
    /// did (rmcp's rule: host equal without brackets and ASCII case, port equal when the entry
    /// names one; an entry that is no authority compared as a name), for a table of both.
    #[test]
    fn allowed_hosts_parsed_once_answer_as_parsed_per_request() {
        fn per_request(host: &str, hosts: &[String]) -> bool {
            let Ok(authority) = http::uri::Authority::try_from(host) else { return false };
            hosts.iter().any(|allowed| {
                let allowed = allowed.trim();
                if allowed.is_empty() {
                    return false;
                }
                match http::uri::Authority::try_from(allowed) {
                    Ok(a) => {
                        super::same_host(a.host(), authority.host())
                            && a.port_u16().is_none_or(|p| authority.port_u16() == Some(p))
                    }
                    Err(_) => super::same_host(allowed, authority.host()),
                }
            })
        }
        let allowed: Vec<String> =
            ["localhost", "127.0.0.1", "::1", "[::1]", " Example.COM:8443 ", "", "10.0.0.1"].map(String::from).to_vec();
        let parsed = AllowedHosts::new(&allowed);
        let hosts = [
            "localhost",
            "LOCALHOST:80",
            "127.0.0.1:8080",
            "[::1]:9",
            "[::1]",
            "example.com:8443",
            "example.com",
            "example.com:443",
            "evil.example",
            "10.0.0.1:1",
            "10.0.0.2",
            "",
            "::1",
            "a b",
        ];
        for host in hosts {
            let mut headers = http::HeaderMap::new();
            let Ok(value) = http::HeaderValue::from_str(host) else { continue };
            headers.insert(http::header::HOST, value);
            assert_eq!(parsed.allow(&headers), per_request(host, &allowed), "Host: {host:?}");
        }
        assert!(!parsed.allow(&http::HeaderMap::new()), "no Host at all");
    }

    /// Which URIs rmcp sends as an `Mcp-Name` as they are (else Base64-wrapped).
    #[test]
    fn only_plain_printable_uris_go_in_a_header_as_they_are() {
        for (uri, plain) in [
            ("fx://fx/item/1", true),
            ("demo://resource/static/document/a.md", true),
            ("file:///a b.md", true),
            (" lead", false),
            ("trail\t", false),
            ("ünï", false),
            ("=?base64?abc?=", false),
            ("", false),
        ] {
            assert_eq!(plain_value(uri), plain, "{uri}");
        }
    }
}
