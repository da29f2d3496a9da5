//! Finding the top-level `id` (and whether there is a top-level `method`) of a JSON-RPC
//! message that cannot be parsed: too large to hold, not UTF-8, or broken further on. The
//! scan is fed the bytes as they come and keeps a few dozen bytes of state, so a line of any
//! size can be scanned without holding it.

use rmcp::model::RequestId;

/// The longest key that matters (`method`), and the most of an id value that is kept.
const KEY_BYTES: usize = 8;
const VALUE_BYTES: usize = 80;

/// A scan in progress.
#[derive(Debug, Default)]
pub(crate) struct TopLevelScan {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The string being read at depth 1 (a key, perhaps), up to `KEY_BYTES + 1` bytes.
    key: Vec<u8>,
    /// The last string at depth 1, when nothing but whitespace followed it yet.
    last_key: Option<Vec<u8>>,
    /// The raw value after `"id":`, while it is being read.
    value: Option<Vec<u8>>,
    id: Option<RequestId>,
    has_method: bool,
}

impl TopLevelScan {
    /// Scan the next bytes of the message.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if let Some(value) = self.value.as_mut()
                && value.len() < VALUE_BYTES
            {
                value.push(byte);
            }
            if self.in_string {
                self.in_string_byte(byte);
            } else {
                self.structural_byte(byte);
            }
        }
    }

    /// The top-level id found (the first, if several) and whether a top-level `method` was.
    pub fn finish(mut self) -> (Option<RequestId>, bool) {
        self.end_value();
        (self.id, self.has_method)
    }

    fn in_string_byte(&mut self, byte: u8) {
        match byte {
            _ if self.escaped => self.escaped = false,
            b'\\' => self.escaped = true,
            b'"' => {
                self.in_string = false;
                if self.depth == 1 && self.value.is_none() {
                    self.last_key = Some(std::mem::take(&mut self.key));
                }
            }
            _ => {}
        }
        if self.in_string && self.depth == 1 && self.key.len() <= KEY_BYTES {
            self.key.push(byte);
        }
    }

    fn structural_byte(&mut self, byte: u8) {
        match byte {
            b'"' => {
                self.in_string = true;
                self.key.clear();
            }
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 0 {
                    self.end_value();
                }
            }
            b':' if self.depth == 1 => match self.last_key.take().as_deref() {
                Some(b"id") if self.id.is_none() => self.value = Some(Vec::new()),
                Some(b"method") => self.has_method = true,
                _ => {}
            },
            b',' if self.depth == 1 => {
                self.end_value();
                self.last_key = None;
            }
            _ if byte.is_ascii_whitespace() => {}
            _ => self.last_key = None,
        }
    }

    fn end_value(&mut self) {
        if let Some(value) = self.value.take() {
            self.id = self.id.take().or_else(|| value_id(&value));
        }
    }
}

/// A JSON-RPC id at the start of `raw` (the bytes after the colon).
fn value_id(raw: &[u8]) -> Option<RequestId> {
    let end = raw.iter().position(|b| !b.is_ascii()).unwrap_or(raw.len());
    let text = std::str::from_utf8(&raw[..end]).ok()?.trim_start();
    if let Some(string) = text.strip_prefix('"') {
        let end = string.find('"')?;
        return Some(RequestId::String(string[..end].into()));
    }
    let end = text.find(|c: char| !(c.is_ascii_digit() || c == '-')).unwrap_or(text.len());
    text[..end].parse().ok().map(RequestId::Number)
}

/// Scan a whole byte string.
pub(crate) fn scan(bytes: &[u8]) -> (Option<RequestId>, bool) {
    let mut scan = TopLevelScan::default();
    scan.feed(bytes);
    scan.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &[u8], id: Option<RequestId>, method: bool) {
        assert_eq!(scan(line), (id.clone(), method), "{}", String::from_utf8_lossy(line));
        // Fed in pieces of every size, the answer is the same.
        for piece in 1..line.len().min(9) {
            let mut scan = TopLevelScan::default();
            line.chunks(piece).for_each(|chunk| scan.feed(chunk));
            assert_eq!(scan.finish(), (id.clone(), method), "pieces of {piece}");
        }
    }

    #[test]
    fn ids_are_found_in_broken_cut_off_and_tail_first_lines() {
        check(br#"{"jsonrpc":"2.0","id":7,"result":{"contents":[{"text":"xxxxx"#, Some(RequestId::Number(7)), false);
        check(br#"{"result":{"id":1,"x":"\"id\":2"},"id":"abc"}"#, Some(RequestId::String("abc".into())), false);
        check(
            br#"{"result":{"contents":[{"text":"xx"}]},"jsonrpc":"2.0","id":42}"#,
            Some(RequestId::Number(42)),
            false,
        );
        check(b"{\"id\":3,\"result\":\"\xff\xfe\"}", Some(RequestId::Number(3)), false);
        check(b"{\"result\":\"\xff\xfe\" , \"id\" : 9 }", Some(RequestId::Number(9)), false);
        check(br#"{"jsonrpc":"2.0","method":"notifications/x","params":{"id":4}"#, None, true);
        check(br#"{"value":"id","x":{"id":5}}"#, None, false);
        check(b"not json at all", None, false);
    }
}
