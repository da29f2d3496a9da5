//! One HTTP/1.1 exchange written and read by hand over a fresh TCP connection, so a request
//! head is exactly what the case says (no `Host` at all, a header twice, a chunked body) and a
//! reply is seen whole: status, every header in order, the body bytes after transfer decoding.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one exchange may take; a hang fails the test.
const EXCHANGE_DEADLINE: Duration = Duration::from_secs(20);

/// A request: headers in order (the test adds none), the body, whether it is sent chunked.
#[derive(Debug, Clone)]
pub struct RawRequest {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub chunked: bool,
}

/// A reply as it crossed the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct RawReply {
    pub status: u16,
    /// Names lower case, in the order sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// POST `request` to `path` at `address` and read the whole reply.
pub async fn exchange(address: &str, path: &str, request: &RawRequest) -> anyhow::Result<RawReply> {
    let exchange = async {
        let mut stream = TcpStream::connect(address).await?;
        stream.write_all(&encode(path, request)).await?;
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).await?;
        decode(&bytes)
    };
    tokio::time::timeout(EXCHANGE_DEADLINE, exchange).await.context("the exchange hung")?
}

fn encode(path: &str, request: &RawRequest) -> Vec<u8> {
    let mut head = format!("POST {path} HTTP/1.1\r\n");
    for (name, value) in &request.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("Connection: close\r\n");
    if request.chunked {
        head.push_str("Transfer-Encoding: chunked\r\n\r\n");
        let mut bytes = head.into_bytes();
        if !request.body.is_empty() {
            bytes.extend_from_slice(format!("{:x}\r\n", request.body.len()).as_bytes());
            bytes.extend_from_slice(&request.body);
            bytes.extend_from_slice(b"\r\n");
        }
        bytes.extend_from_slice(b"0\r\n\r\n");
        bytes
    } else {
        head.push_str(&format!("Content-Length: {}\r\n\r\n", request.body.len()));
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&request.body);
        bytes
    }
}

fn decode(bytes: &[u8]) -> anyhow::Result<RawReply> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").context("no end of head")?;
    let head = std::str::from_utf8(&bytes[..end]).context("a head that is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().context("no status line")?;
    let status = status_line.split(' ').nth(1).context("no status")?.parse()?;
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line.split_once(':').context("a header line without a colon")?;
        headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
    let rest = &bytes[end + 4..];
    let chunked = headers.iter().any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked { dechunk(rest)? } else { rest.to_vec() };
    if let Some((_, length)) = headers.iter().find(|(n, _)| n == "content-length") {
        ensure!(length.parse::<usize>()? == body.len(), "content-length {length} but {} bytes", body.len());
    }
    Ok(RawReply { status, headers, body })
}

fn dechunk(mut rest: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").context("a chunk size without its line end")?;
        let size = std::str::from_utf8(&rest[..line_end])?.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16).context("a chunk size")?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            bail!("a chunk cut short");
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}
