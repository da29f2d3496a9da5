//! An SSE stream read (a thin read's reply), split into events by the rules of rmcp's own SSE
//! parser (the `sse-stream` crate): the same events, the same errors, at a fraction of the cost. That parser
//! looks for line ends byte by byte and copies every field into an owned event; here lines are
//! found with `memchr` and only `data` is kept, the one field a read's reply is read for (the
//! other fields are still checked as rmcp checks them). Against server-everything that parser
//! was ~15k of a miss's ~150k instructions.
//!
//! The rules: lines end at LF, CR or CRLF (a CR ending one chunk and an LF starting the next are
//! one line end); a byte order mark before the first line is skipped; an empty line ends an
//! event if any field started one; every other line is `name:value` (one space after the colon
//! dropped) with `name` one of `data` (lines joined with LF), `event`, `id`, `retry` (a number)
//! or empty (a comment); `event`, `id` and `retry` at most once per event; an `id` holding NUL is
//! ignored; field values are UTF-8. A line without a colon or with another name is an error.

use memchr::memchr2;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Why a reply is not an SSE stream rmcp would read.
#[derive(Debug, PartialEq, Eq)]
pub enum SseError {
    /// A field value that is not UTF-8.
    Utf8,
    /// Any other broken line.
    Malformed,
}

/// The event being read: which fields it has had.
#[derive(Default)]
struct Event {
    data: Option<String>,
    event: bool,
    id: bool,
    retry: bool,
}

/// An SSE stream's parse, fed one chunk at a time.
pub struct Events {
    /// A line not yet ended, from earlier chunks.
    partial: Vec<u8>,
    /// Started by any field; ended (and handed out) by an empty line.
    current: Option<Event>,
    first_line: bool,
    /// The last chunk ended with CR: an LF starting the next one ends no further line.
    skip_leading_lf: bool,
}

impl Default for Events {
    fn default() -> Self {
        Self { partial: Vec::new(), current: None, first_line: true, skip_leading_lf: false }
    }
}

impl Events {
    /// Parse `bytes`, pushing every event it ends onto `ended` (its data, `None` for an event
    /// without a `data` field). On an error the events pushed so far are not to be used: rmcp's
    /// parser reports the error before any event of the same chunk.
    pub fn feed(&mut self, mut bytes: &[u8], ended: &mut Vec<Option<String>>) -> Result<(), SseError> {
        if std::mem::take(&mut self.skip_leading_lf) && bytes.first() == Some(&b'\n') {
            bytes = &bytes[1..];
        }
        while let Some(end) = memchr2(b'\n', b'\r', bytes) {
            if self.partial.is_empty() {
                self.line(&bytes[..end], ended)?;
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&bytes[..end]);
                let parsed = self.line(&line, ended);
                line.clear();
                self.partial = line;
                parsed?;
            }
            let delimiter = bytes[end];
            bytes = &bytes[end + 1..];
            if delimiter == b'\r' {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    None => self.skip_leading_lf = true,
                    Some(_) => {}
                }
            }
        }
        self.partial.extend_from_slice(bytes);
        Ok(())
    }

    fn line(&mut self, mut line: &[u8], ended: &mut Vec<Option<String>>) -> Result<(), SseError> {
        if std::mem::take(&mut self.first_line) {
            line = line.strip_prefix(BOM).unwrap_or(line);
        }
        if line.is_empty() {
            if let Some(event) = self.current.take() {
                ended.push(event.data);
            }
            return Ok(());
        }
        let colon = memchr::memchr(b':', line).ok_or(SseError::Malformed)?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_prefix(b" ").unwrap_or(value);
        let text = || std::str::from_utf8(value).map_err(|_| SseError::Utf8);
        match name {
            b"data" => {
                let value = text()?;
                match &mut self.current.get_or_insert_default().data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    data @ None => *data = Some(value.to_owned()),
                }
            }
            b"event" => {
                text()?;
                once(&mut self.current.get_or_insert_default().event)?;
            }
            b"id" if value.contains(&0) => {}
            b"id" => {
                text()?;
                once(&mut self.current.get_or_insert_default().id)?;
            }
            b"retry" => {
                text()?.trim_ascii().parse::<u64>().map_err(|_| SseError::Malformed)?;
                once(&mut self.current.get_or_insert_default().retry)?;
            }
            b"" => {} // a comment
            _ => return Err(SseError::Malformed),
        }
        Ok(())
    }
}

/// Mark a field seen; a second time in one event is an error.
fn once(seen: &mut bool) -> Result<(), SseError> {
    match std::mem::replace(seen, true) {
        true => Err(SseError::Malformed),
        false => Ok(()),
    }
}

#[cfg(test)]
#[path = "sse_parse_tests.rs"]
mod tests;
