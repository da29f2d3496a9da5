//! The authority in its one spelling (no user info, the host lower-cased without a trailing
//! `.`, the port without leading zeros or gone when empty), and the URI without its port that
//! deny globs also judge (see the module doc of [`super`]).

use super::UriError;
use super::percent::{Component, normalize_percent};

/// `host[:port]` in its one spelling (see the module doc): no user info; the host lower-cased,
/// without a trailing `.`; the port without leading zeros, or gone when empty.
pub(super) fn normalize_authority(raw: &str) -> Result<String, UriError> {
    let text = normalize_percent(raw, Component::Authority)?;
    if text.contains('@') {
        return Err(UriError::UserInfo);
    }
    let (host, port) = split_port(&text)?;
    let mut host = lowercase_outside_escapes(host);
    if !host.starts_with('[') && host.ends_with('.') {
        host.pop();
        if host.is_empty() || host.ends_with('.') {
            return Err(UriError::AmbiguousHost);
        }
    }
    Ok(match port {
        Some(port) => format!("{host}:{port}"),
        None => host,
    })
}

/// The host and the port (digits, leading zeros dropped; `None` when absent or empty) of an
/// authority without user info. An IP literal (`[…]`) keeps its colons.
fn split_port(authority: &str) -> Result<(&str, Option<&str>), UriError> {
    let host_end = match authority.strip_prefix('[') {
        Some(literal) => literal.find(']').map(|end| end + 2).ok_or(UriError::AmbiguousHost)?,
        None => authority.find(':').unwrap_or(authority.len()),
    };
    let (host, rest) = authority.split_at(host_end);
    let port = match rest.strip_prefix(':') {
        None if rest.is_empty() => return Ok((host, None)),
        None => return Err(UriError::InvalidPort),
        Some(port) => port,
    };
    if port.is_empty() {
        return Ok((host, None));
    }
    let digits = port.trim_start_matches('0');
    let in_range = digits.len() <= 5 && digits.parse::<u32>().unwrap_or(0) <= 65535;
    if !port.bytes().all(|b| b.is_ascii_digit()) || !in_range {
        return Err(UriError::InvalidPort);
    }
    let port = if digits.is_empty() { "0" } else { digits };
    Ok((host, Some(port)))
}

/// The URI with its authority's port removed, when it has one: deny globs judge this form too
/// (see `policy`), because a default port is unknowable for a custom scheme and many
/// upstreams resolve a URI by its host alone. `uri` must be normalised.
pub fn without_port(uri: &str) -> Option<String> {
    let (scheme, rest) = uri.split_once(':')?;
    let after = rest.strip_prefix("//")?;
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let authority = &after[..end];
    let host_end = match authority.strip_prefix('[') {
        Some(literal) => literal.find(']')? + 2,
        None => authority.find(':')?,
    };
    if host_end >= authority.len() {
        return None;
    }
    Some(format!("{scheme}://{}{}", &authority[..host_end], &after[end..]))
}

/// Lower-case letters, but not the hex digits of `%XX` (those stay upper-case).
fn lowercase_outside_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut escape = 0;
    for c in text.chars() {
        if c == '%' {
            escape = 2;
            out.push(c);
        } else if escape > 0 {
            escape -= 1;
            out.push(c);
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}
