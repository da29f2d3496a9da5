//! A read result's contents as JSON, byte for byte what `serde_json::to_string` writes for them,
//! with strings escaped eight bytes at a time. serde_json looks at each byte of a string in turn;
//! a read's text is most of what a reply carries, so on a miss escaping it was ~18k of ~150k
//! instructions (an entry's JSON is made once, so a hit does not escape).
//!
//! Each content is written field by field in rmcp's order (`uri`, `mimeType` when set, `text`
//! or `blob`, `_meta` when set); the destructuring names every field, so a field rmcp adds fails
//! the build here rather than going missing. A kind of content this does not know, and `_meta`,
//! are written by serde_json.

use std::sync::Arc;

use rmcp::model::ResourceContents;

/// `contents` as the JSON a reply carries them in (serde_json's compact form, as rmcp writes).
pub fn contents_json(contents: &[ResourceContents]) -> Option<Arc<str>> {
    written(contents).map(Arc::from)
}

/// The same, as a `String` of its own (a reply's, not shared).
pub fn written(contents: &[ResourceContents]) -> Option<String> {
    let size: usize = contents.iter().map(size_hint).sum();
    let mut out = String::with_capacity(size + 2);
    out.push('[');
    for (n, content) in contents.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        write_content(&mut out, content).ok()?;
    }
    out.push(']');
    Some(out)
}

fn write_content(out: &mut String, content: &ResourceContents) -> serde_json::Result<()> {
    let (uri, mime_type, key, body, meta) = match content {
        ResourceContents::TextResourceContents { uri, mime_type, text, meta } => (uri, mime_type, "text", text, meta),
        ResourceContents::BlobResourceContents { uri, mime_type, blob, meta } => (uri, mime_type, "blob", blob, meta),
        other => {
            out.push_str(&serde_json::to_string(other)?);
            return Ok(());
        }
    };
    out.push_str("{\"uri\":");
    escaped(out, uri);
    if let Some(mime_type) = mime_type {
        out.push_str(",\"mimeType\":");
        escaped(out, mime_type);
    }
    out.push_str(",\"");
    out.push_str(key);
    out.push_str("\":");
    escaped(out, body);
    if let Some(meta) = meta {
        out.push_str(",\"_meta\":");
        out.push_str(&serde_json::to_string(meta)?);
    }
    out.push('}');
    Ok(())
}

fn size_hint(content: &ResourceContents) -> usize {
    match content {
        ResourceContents::TextResourceContents { uri, text, .. } => uri.len() + text.len() + text.len() / 16 + 64,
        ResourceContents::BlobResourceContents { uri, blob, .. } => uri.len() + blob.len() + 64,
        _ => 256,
    }
}

/// How serde_json escapes each byte: 0 not at all, `u` as `\u00XX`, else `\` and that byte.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// The bytes of `word` (little-endian) that are a control character, `"` or `\`: the high bit
/// of each such byte is set, and the lowest set bit always marks one (a byte above it may be
/// marked wrongly).
fn to_escape(word: u64) -> u64 {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGH;
    let zero = |word: u64| below(word, 1);
    below(word, 0x20) | zero(word ^ (ONES * u64::from(b'"'))) | zero(word ^ (ONES * u64::from(b'\\')))
}

/// `text` as a JSON string, escaped as serde_json escapes it.
fn escaped(out: &mut String, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push('"');
    let (mut start, mut at) = (0, 0);
    while at < bytes.len() {
        if let Some(word) = bytes.get(at..at + 8) {
            let marked = to_escape(u64::from_le_bytes(word.try_into().expect("eight bytes")));
            if marked == 0 {
                at += 8;
                continue;
            }
            at += marked.trailing_zeros() as usize / 8;
        }
        let byte = bytes[at];
        let escape = ESCAPE[usize::from(byte)];
        at += 1;
        if escape == 0 {
            continue;
        }
        // The escaped byte is ASCII, so both ends are character boundaries.
        out.push_str(&text[start..at - 1]);
        match escape {
            b'u' => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
            other => {
                out.push('\\');
                out.push(char::from(other));
            }
        }
        start = at;
    }
    out.push_str(&text[start..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use rmcp::model::MetaObject;
    use serde_json::json;

    use super::*;

    #[test]
    fn every_byte_and_some_text_is_escaped_as_serde_json_escapes_it() {
        let mut samples: Vec<String> = (0u8..=0x7f).map(|b| char::from(b).to_string()).collect();
        let every: String = (0u8..=0x7f).map(char::from).collect();
        samples.push(every.clone());
        samples.push(every.repeat(3));
        samples.push("# Title\n\n\"quoted\" \\ back\tslash — é ü 日本 🦀\r\n".repeat(20));
        samples.push("plain text with nothing to escape, long enough for several words".into());
        samples.push(String::new());
        // Each special byte at every place in and around an eight-byte word.
        for special in ['"', '\\', '\n', '\u{1}', '\u{1f}', '\u{7f}', 'é'] {
            for at in 0..17 {
                let mut text: String = "abcdefghijklmnopq".into();
                text.insert(at, special);
                samples.push(text);
            }
        }
        for text in samples {
            let mut ours = String::new();
            escaped(&mut ours, &text);
            assert_eq!(ours, serde_json::to_string(&text).unwrap(), "{text:?}");
        }
    }

    #[test]
    fn contents_are_the_json_serde_json_writes_for_them() {
        let mut note = serde_json::Map::new();
        note.insert("note".into(), json!({"text": "", "n": 1}));
        let meta = MetaObject(note);
        let text = |mime: Option<&str>, meta: Option<MetaObject>| ResourceContents::TextResourceContents {
            uri: "fx+a://doc/\"1\"".into(),
            mime_type: mime.map(Into::into),
            text: "line one\nline \"two\"\t\u{0}".into(),
            meta,
        };
        let blob = |mime: Option<&str>, meta: Option<MetaObject>| ResourceContents::BlobResourceContents {
            uri: "fx+a://bin".into(),
            mime_type: mime.map(Into::into),
            blob: "AAEC/w==".into(),
            meta,
        };
        let lists = [
            vec![],
            vec![text(Some("text/markdown"), None)],
            vec![text(None, Some(meta.clone())), blob(Some("image/png"), Some(meta.clone()))],
            vec![blob(None, None), text(Some("text/plain"), Some(meta)), text(None, None)],
        ];
        for contents in lists {
            let expected = serde_json::to_string(&contents).unwrap();
            assert_eq!(contents_json(&contents).as_deref(), Some(expected.as_str()));
        }
    }
}
