//! A minimal HTTP/1.1 client codec for the raw MCP hosts of `raw`: a request written from
//! prepared bytes in one `write`, and a response read into a buffer reused across replies.
//!
//! Invariant: a response counts only when it is framed completely — `Content-Length` bytes, or
//! a chunked body up to its last chunk and trailers (node servers such as server-everything and
//! npm mcp-proxy send chunked SSE replies), or, with neither, everything up to the close.
//! Bytes after a response stay buffered for the next one.

use anyhow::{Context, bail};
use tokio::io::{AsyncRead, AsyncReadExt};

/// What a raw host needs of a response head.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    /// `Content-Type: text/event-stream`.
    pub sse: bool,
    /// `Mcp-Session-Id`.
    pub session: Option<String>,
    /// The server ends the connection after this response.
    pub close: bool,
}

/// How a response's body is delimited.
enum Framing {
    Empty,
    Length(usize),
    Chunked,
    UntilClose,
}

/// Reads the responses of one connection.
#[derive(Default)]
pub struct Reader {
    buf: Vec<u8>,
    body: Vec<u8>,
}

impl Reader {
    /// The body of the last response read (de-chunked).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Forgets buffered bytes (a new connection).
    pub fn reset(&mut self) {
        self.buf.clear();
    }

    /// The next whole final response (1xx ones are skipped); `None` when the connection closed
    /// (or was reset) before any byte of it.
    pub async fn read<R: AsyncRead + Unpin>(&mut self, io: &mut R) -> anyhow::Result<Option<Head>> {
        loop {
            if let Some(head) = self.take(false)? {
                return Ok(Some(head));
            }
            if self.buf.capacity() - self.buf.len() < 4096 {
                self.buf.reserve(16 * 1024);
            }
            let read = match io.read_buf(&mut self.buf).await {
                Ok(read) => read,
                Err(error) if self.buf.is_empty() && error.kind() == std::io::ErrorKind::ConnectionReset => 0,
                Err(error) => return Err(error).context("read response"),
            };
            if read > 0 {
                continue;
            }
            if self.buf.is_empty() {
                return Ok(None);
            }
            return match self.take(true)? {
                Some(head) => Ok(Some(head)),
                None => bail!("connection closed inside a response ({} bytes)", self.buf.len()),
            };
        }
    }

    /// A final response parsed off the front of the buffer, if one is complete.
    fn take(&mut self, eof: bool) -> anyhow::Result<Option<Head>> {
        loop {
            let Some((head, used)) = parse(&self.buf, &mut self.body, eof)? else { return Ok(None) };
            self.buf.drain(..used);
            if head.status >= 200 {
                return Ok(Some(head));
            }
        }
    }
}

/// One response at the start of `buf`: its head and the bytes it spans, its body into `body`;
/// `None` while incomplete.
fn parse(buf: &[u8], body: &mut Vec<u8>, eof: bool) -> anyhow::Result<Option<(Head, usize)>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(buf).context("response head")? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial => return Ok(None),
    };
    let status = response.code.context("no status")?;
    let mut head = Head { status, close: response.version == Some(0), ..Head::default() };
    let (mut length, mut chunked) = (None, false);
    for header in response.headers.iter() {
        let value = std::str::from_utf8(header.value).context("header value is not UTF-8")?.trim();
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse::<usize>().context("Content-Length")?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().ends_with("chunked");
        } else if name.eq_ignore_ascii_case("content-type") {
            head.sse = value.to_ascii_lowercase().starts_with("text/event-stream");
        } else if name.eq_ignore_ascii_case("mcp-session-id") {
            head.session = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("connection") {
            head.close |= value.to_ascii_lowercase().contains("close");
        }
    }
    let framing = match (status, chunked, length) {
        (100..=199 | 204 | 304, _, _) => Framing::Empty,
        (_, true, _) => Framing::Chunked,
        (_, false, Some(length)) => Framing::Length(length),
        (_, false, None) => Framing::UntilClose,
    };
    body.clear();
    let rest = &buf[head_len..];
    let used = match framing {
        Framing::Empty => 0,
        Framing::Length(length) if rest.len() >= length => {
            body.extend_from_slice(&rest[..length]);
            length
        }
        Framing::Length(_) => return Ok(None),
        Framing::Chunked => match dechunk(rest, body)? {
            Some(used) => used,
            None => return Ok(None),
        },
        Framing::UntilClose if eof => {
            body.extend_from_slice(rest);
            head.close = true;
            rest.len()
        }
        Framing::UntilClose => return Ok(None),
    };
    Ok(Some((head, head_len + used)))
}

/// A chunked body at the start of `input` into `out`; the bytes it spans (through the last
/// chunk and the trailers), or `None` while incomplete.
fn dechunk(input: &[u8], out: &mut Vec<u8>) -> anyhow::Result<Option<usize>> {
    let mut pos = 0;
    loop {
        let Some(line) = line_at(input, pos) else { return Ok(None) };
        let size = line.split(|b| *b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(size).ok().map(str::trim).context("chunk size is not text")?;
        let size = usize::from_str_radix(size, 16).with_context(|| format!("chunk size {size:?}"))?;
        pos += line.len() + 2;
        if size == 0 {
            // Trailers, up to an empty line.
            loop {
                let Some(trailer) = line_at(input, pos) else { return Ok(None) };
                pos += trailer.len() + 2;
                if trailer.is_empty() {
                    return Ok(Some(pos));
                }
            }
        }
        let end = pos.checked_add(size).context("chunk size overflows")?;
        if input.len() < end + 2 {
            return Ok(None);
        }
        if &input[end..end + 2] != b"\r\n" {
            bail!("chunk of {size} bytes not followed by CRLF");
        }
        out.extend_from_slice(&input[pos..end]);
        pos = end + 2;
    }
}

/// The line starting at `pos` (without its CRLF), if complete.
fn line_at(input: &[u8], pos: usize) -> Option<&[u8]> {
    let rest = input.get(pos..)?;
    rest.windows(2).position(|w| w == b"\r\n").map(|end| &rest[..end])
}

/// The head of a `POST` (request line and headers, no `Content-Length`), prepared once.
pub fn post_head(path: &str, authority: &str, headers: &[(&str, &str)]) -> anyhow::Result<Vec<u8>> {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\n"
    );
    for (name, value) in headers {
        if value.bytes().any(|b| b.is_ascii_control()) {
            bail!("header {name}: control characters in {value:?}");
        }
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    Ok(head.into_bytes())
}

/// A whole request into `out`: `head`, its `Content-Length`, the body from `parts`.
pub fn request(out: &mut Vec<u8>, head: &[u8], parts: &[&[u8]]) {
    out.clear();
    out.extend_from_slice(head);
    let length: usize = parts.iter().map(|part| part.len()).sum();
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(decimal(length as u64, &mut [0; 20]));
    out.extend_from_slice(b"\r\n\r\n");
    for part in parts {
        out.extend_from_slice(part);
    }
}

/// `value` in decimal, written into `digits`.
pub fn decimal(mut value: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return &digits[start..];
        }
    }
}
