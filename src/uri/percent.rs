//! Percent-encoding, as [`super::normalize`] needs it: raw text refused or encoded (controls,
//! whitespace and backslashes refused; non-ASCII and the ASCII characters RFC 3986 never allows
//! raw encoded), each component's escapes in one form (hex upper-cased, unreserved characters
//! decoded, an encoded `/` or a double encoding refused where they would change the path), and
//! the invisible formatting characters found in their encoded form.

use super::UriError;

/// Which component a percent-encoding is in: `/` and double encoding are refused only in the
/// authority and path.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Component {
    Authority,
    Path,
    Query,
}

/// Refuse controls, whitespace and backslashes; percent-encode non-ASCII and the ASCII
/// characters RFC 3986 never allows raw.
pub(super) fn encode_raw(uri: &str) -> Result<String, UriError> {
    let mut out = String::with_capacity(uri.len());
    for c in uri.chars() {
        if c.is_control() || c.is_whitespace() {
            return Err(UriError::ControlOrWhitespace);
        }
        if c == '\\' {
            return Err(UriError::Backslash);
        }
        if c.is_ascii() && !matches!(c, '"' | '<' | '>' | '^' | '`' | '{' | '|' | '}') {
            out.push(c);
            continue;
        }
        push_encoded_char(&mut out, c);
    }
    Ok(out)
}

/// Upper-case hex, decode unreserved characters, refuse what the module doc says.
pub(super) fn normalize_percent(text: &str, component: Component) -> Result<String, UriError> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            out.push(bytes[i] as char);
            i += 1;
            continue;
        }
        let byte = hex_pair(bytes.get(i + 1..i + 3)).ok_or(UriError::InvalidPercent)?;
        let structural = component != Component::Query;
        match byte {
            0x00..=0x1F | 0x7F => return Err(UriError::ControlOrWhitespace),
            b'\\' => return Err(UriError::Backslash),
            b'/' if structural => return Err(UriError::EncodedSlash),
            b'%' if structural && hex_pair(bytes.get(i + 3..i + 5)).is_some() => {
                return Err(UriError::DoubleEncoded);
            }
            b if is_unreserved(b) => out.push(b as char),
            b => push_encoded(&mut out, b),
        }
        i += 3;
    }
    Ok(out)
}

/// Does the normalised `uri` hold an invisible formatting character? Raw ones were encoded
/// by [`encode_raw`] and hex is upper-case by now, so the encoded UTF-8 forms are all to find.
pub(super) fn has_invisible(uri: &str) -> bool {
    const INVISIBLE: &[char] = &[
        '\u{200B}', '\u{200C}', '\u{200D}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}',
        '\u{202E}', '\u{2060}', '\u{2061}', '\u{2062}', '\u{2063}', '\u{2064}', '\u{2066}', '\u{2067}', '\u{2068}',
        '\u{2069}', '\u{FEFF}',
    ];
    (uri.contains("%E2%") || uri.contains("%EF%BB%BF"))
        && INVISIBLE.iter().any(|c| {
            let mut encoded = String::new();
            push_encoded_char(&mut encoded, *c);
            uri.contains(&encoded)
        })
}

fn hex_pair(pair: Option<&[u8]>) -> Option<u8> {
    let pair = pair?;
    let digit = |b: u8| (b as char).to_digit(16);
    Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8)
}

fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

fn push_encoded(out: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(HEX[usize::from(byte >> 4)] as char);
    out.push(HEX[usize::from(byte & 0xF)] as char);
}

/// `c` as its UTF-8 bytes, each percent-encoded.
fn push_encoded_char(out: &mut String, c: char) {
    let mut buffer = [0; 4];
    for byte in c.encode_utf8(&mut buffer).bytes() {
        push_encoded(out, byte);
    }
}
