//! Plain `http://` upstreams: the thin read's exchange on hyper's connection-level HTTP/1.1
//! client, with a few kept-alive connections of its own.
//!
//! A connection is driven by the task that uses it: while a request is in flight (and while
//! its reply body is read) the same task polls the connection's future alongside, so a read
//! costs no hand-off to a connection task and no cross-thread wake-up. An idle connection is
//! polled by nobody; taking it from the pool polls it until it is ready (a connection the
//! upstream closed meanwhile ends there and is dropped), and a request that fails on a reused
//! connection before its reply's head is sent once more on a new one (reads are idempotent).
//! A body dropped before its end (the answer was found on an SSE stream, or the read was
//! abandoned) is read to its end by a task of its own, bounded in time and size, and its
//! connection kept only then.
//!
//! Not used (reqwest stays) when the URL is not plain `http://`, carries credentials, or a proxy
//! is configured in the environment (reqwest would honour it).

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Idle connections kept at most.
const IDLE: usize = 8;
/// How long a dropped body's rest is waited for before its connection is closed instead.
const DRAIN_FOR: Duration = Duration::from_secs(2);

type Driver = Pin<Box<Connection<TokioIo<TcpStream>, Full<Bytes>>>>;

/// One connection: the request handle and the connection's future (`None` once it ended).
struct Link {
    send: SendRequest<Full<Bytes>>,
    conn: Option<Driver>,
}

impl Link {
    fn alive(&self) -> bool {
        self.conn.is_some() && !self.send.is_closed()
    }
}

/// Await `future` while driving the connection `conn`.
async fn drive<F: Future>(conn: &mut Option<Driver>, future: F) -> F::Output {
    let mut future = pin!(future);
    poll_fn(|cx| {
        if let Some(driver) = conn.as_mut()
            && driver.as_mut().poll(cx).is_ready()
        {
            *conn = None;
        }
        future.as_mut().poll(cx)
    })
    .await
}

/// Why a request failed (never with the URL).
pub(crate) type WireError = Box<dyn std::error::Error + Send + Sync>;

/// The kept-alive connections to one plain `http://` upstream URL.
pub(crate) struct Plain {
    /// `host:port` to connect to.
    address: String,
    host: HeaderValue,
    /// The request target (path and query).
    target: Uri,
    idle: Mutex<Vec<Link>>,
}

impl Plain {
    /// For `url` when it can be served here (see the module doc).
    pub fn new(url: &str) -> Option<Arc<Self>> {
        const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];
        if PROXY_VARS.iter().any(|var| std::env::var_os(var).is_some_and(|v| !v.is_empty())) {
            return None;
        }
        let uri: Uri = url.parse().ok()?;
        let authority = uri.authority()?;
        if uri.scheme_str() != Some("http") || authority.as_str().contains('@') {
            return None;
        }
        let port = authority.port_u16().unwrap_or(80);
        let address = format!("{}:{port}", authority.host());
        let host = HeaderValue::from_str(authority.as_str()).ok()?;
        let target = uri.path_and_query().map_or("/", |p| p.as_str()).parse().ok()?;
        Some(Arc::new(Self { address, host, target, idle: Mutex::default() }))
    }

    /// POST `body` with `headers`; the reply's head, and its body to read.
    pub async fn post(self: &Arc<Self>, headers: &HeaderMap, body: Bytes) -> Result<Reply, WireError> {
        while let Some(mut link) = self.checkout() {
            if drive(&mut link.conn, link.send.ready()).await.is_err() || !link.alive() {
                continue;
            }
            let request = self.request(headers, body.clone());
            match drive(&mut link.conn, link.send.send_request(request)).await {
                Ok(response) => return Ok(self.reply(link, response)),
                // Sent on a connection the upstream had closed: once more on a new one.
                Err(_) => break,
            }
        }
        let stream = TcpStream::connect(&self.address).await?;
        let _ = stream.set_nodelay(true);
        let (send, conn) = http1::handshake(TokioIo::new(stream)).await?;
        let mut link = Link { send, conn: Some(Box::pin(conn)) };
        let response = drive(&mut link.conn, link.send.send_request(self.request(headers, body))).await?;
        Ok(self.reply(link, response))
    }

    fn request(&self, headers: &HeaderMap, body: Bytes) -> Request<Full<Bytes>> {
        let mut request = Request::post(self.target.clone()).body(Full::new(body)).expect("a valid request");
        *request.headers_mut() = headers.clone();
        request.headers_mut().insert(http::header::HOST, self.host.clone());
        request
    }

    fn reply(self: &Arc<Self>, link: Link, response: Response<Incoming>) -> Reply {
        let (parts, incoming) = response.into_parts();
        let body = Body { open: Some((incoming, link)), pool: self.clone(), ended: false };
        Reply { status: parts.status, headers: parts.headers, body }
    }

    fn checkout(&self) -> Option<Link> {
        self.idle.lock().expect("pool lock").pop()
    }

    fn checkin(&self, link: Link) {
        if link.alive() {
            let mut idle = self.idle.lock().expect("pool lock");
            if idle.len() < IDLE {
                idle.push(link);
            }
        }
    }
}

/// A reply's head and body.
pub(crate) struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
}

/// A reply body, read while driving its connection.
pub(crate) struct Body {
    /// `None` once handed back or dropped.
    open: Option<(Incoming, Link)>,
    pool: Arc<Plain>,
    ended: bool,
}

impl Body {
    /// The next piece of the body; `None` at its end.
    pub async fn chunk(&mut self) -> Option<Result<Bytes, hyper::Error>> {
        let (incoming, link) = self.open.as_mut()?;
        loop {
            match drive(&mut link.conn, incoming.frame()).await {
                None => {
                    self.ended = true;
                    return None;
                }
                Some(Err(error)) => return Some(Err(error)),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if !data.is_empty() => return Some(Ok(data)),
                    _ => {} // empty, or trailers
                },
            }
        }
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        let Some((mut incoming, mut link)) = self.open.take() else { return };
        if self.ended {
            return self.pool.checkin(link);
        }
        // Often the rest (an SSE stream's last chunk) is already here.
        let waker = futures::task::noop_waker();
        let now = pin!(drain(&mut link, &mut incoming)).poll(&mut Context::from_waker(&waker));
        match now {
            Poll::Ready(true) => self.pool.checkin(link),
            Poll::Ready(false) => {}
            Poll::Pending => {
                let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
                let pool = self.pool.clone();
                runtime.spawn(async move {
                    if let Ok(true) = tokio::time::timeout(DRAIN_FOR, drain(&mut link, &mut incoming)).await {
                        pool.checkin(link);
                    }
                });
            }
        }
    }
}

/// Read `incoming` to its end (at most a few MiB); whether it ended cleanly.
async fn drain(link: &mut Link, incoming: &mut Incoming) -> bool {
    const MAX: usize = 4 << 20;
    let mut seen = 0;
    loop {
        match drive(&mut link.conn, incoming.frame()).await {
            None => return true,
            Some(Err(_)) => return false,
            Some(Ok(frame)) => {
                seen += frame.data_ref().map_or(0, Bytes::len);
                if seen > MAX {
                    return false;
                }
            }
        }
    }
}
