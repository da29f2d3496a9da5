//! A read's sockets: connections to Redis that the reading task drives itself. A read's call
//! (the look, the one round trip of every clustered read; the fetch of an entry; the fill of a
//! miss) takes an idle socket, writes its command, reads the reply and puts the socket back, all
//! on the reading task. Through the cluster's multiplexed connection the same command is handed
//! to that connection's driver task and its reply handed back through a oneshot: two wake-ups of other tasks (often on the other worker thread) per
//! call, and a second timer (its response timeout) under the tier's own. On a 2-core machine
//! those hand-overs were most of what a clustered hit cost beyond Redis's own work.
//!
//! Plain `redis://` over TCP only: a socket is opened (with `AUTH` and `SELECT` when the URL
//! asks for them) when none is idle, at most [`SOCKETS`] at once, and closed when an exchange on
//! it did not end with a whole reply (an error, a call given up by its timeout mid-reply): the
//! next call opens another. The idle ones are closed when the tier comes back up
//! ([`Sockets::close_idle`], from `SharedTier::recover`): one left idle while the tier was down
//! may be to a Redis that has gone since, and would fail a read and take the tier down again.
//! So after Redis restarts, the calls under way when it went fail (the tier down), and none
//! after the tier is found up. `rediss://` has none: its reads' calls, and calls while all
//! [`SOCKETS`] are busy, go through the multiplexed connection.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use redis::aio::ConnectionLike;
use redis::{Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder;

/// Most sockets open at once (idle or in use): past it a read's call goes through the multiplexed
/// connection, which pipelines.
pub const SOCKETS: usize = 16;

/// A read socket's name in Redis (`CLIENT LIST`).
pub const NAME: &str = "mcp-proxy-look";

/// A read's sockets to one Redis.
pub(super) struct Sockets {
    address: (String, u16),
    db: i64,
    /// `AUTH`, `SELECT` (as the URL says) and `CLIENT SETNAME`, sent on each new socket.
    setup: Vec<Cmd>,
    idle: Mutex<Vec<Socket>>,
    open: AtomicUsize,
}

/// A place among the open sockets, held by one caller, with its socket once open: a Redis
/// connection its caller drives. Dropped, the socket goes back among the idle ones when its
/// last exchange ended with a whole reply; else it is closed.
pub(super) struct Held<'a> {
    sockets: &'a Sockets,
    socket: Option<Socket>,
    clean: bool,
}

/// One socket, its reply bytes read so far, and the parser over them.
struct Socket {
    stream: TcpStream,
    buffer: BytesMut,
    codec: redis::ValueCodec,
}

impl Sockets {
    /// The sockets for `info`, when they can serve it (plain TCP; not TLS, not a Unix socket).
    pub(super) fn for_redis(info: &ConnectionInfo) -> Option<Sockets> {
        let ConnectionAddr::Tcp(host, port) = info.addr() else { return None };
        let settings = info.redis_settings();
        let mut setup = Vec::new();
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(username) = settings.username() {
                auth.arg(username);
            }
            setup.push(auth.arg(password).clone());
        }
        if settings.db() != 0 {
            setup.push(redis::cmd("SELECT").arg(settings.db()).clone());
        }
        setup.push(redis::cmd("CLIENT").arg("SETNAME").arg(NAME).clone());
        let address = (host.clone(), *port);
        Some(Sockets { address, db: settings.db(), setup, idle: Mutex::default(), open: AtomicUsize::new(0) })
    }

    /// An idle socket, or the place to open one; `None` when all [`SOCKETS`] are in use.
    pub(super) fn hold(&self) -> Option<Held<'_>> {
        let socket = self.idle.lock().expect("idle sockets lock").pop();
        if socket.is_none() && self.open.fetch_add(1, Ordering::AcqRel) >= SOCKETS {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Held { sockets: self, socket, clean: true })
    }

    /// Close the idle sockets; the next calls open new ones.
    pub(super) fn close_idle(&self) {
        let closed = std::mem::take(&mut *self.idle.lock().expect("idle sockets lock"));
        self.open.fetch_sub(closed.len(), Ordering::AcqRel);
    }

    async fn connect(&self) -> RedisResult<Socket> {
        let stream = TcpStream::connect((self.address.0.as_str(), self.address.1)).await?;
        stream.set_nodelay(true)?;
        let mut socket = Socket { stream, buffer: BytesMut::with_capacity(512), codec: Default::default() };
        for command in &self.setup {
            socket.ask(command).await?;
        }
        Ok(socket)
    }
}

impl Held<'_> {
    /// `command`'s reply, on this caller's socket.
    async fn ask(&mut self, command: &Cmd) -> RedisResult<Value> {
        self.clean = false;
        let socket = match &mut self.socket {
            Some(socket) => socket,
            None => self.socket.insert(self.sockets.connect().await?),
        };
        let reply = socket.ask(command).await;
        // A whole reply, an error of Redis's included, leaves the socket fit for the next.
        self.clean = reply.as_ref().map_or_else(|error| matches!(error.kind(), ErrorKind::Server(_)), |_| true);
        reply
    }
}

impl ConnectionLike for Held<'_> {
    fn req_packed_command<'a>(&'a mut self, command: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.ask(command))
    }

    fn req_packed_commands<'a>(&'a mut self, _: &'a Pipeline, _: usize, _: usize) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async { Err(RedisError::from((ErrorKind::Client, "a look socket takes no pipeline"))) })
    }

    fn get_db(&self) -> i64 {
        self.sockets.db
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        match self.socket.take() {
            Some(socket) if self.clean => self.sockets.idle.lock().expect("idle sockets lock").push(socket),
            // Closed (or never opened): its place is free.
            _ => {
                self.sockets.open.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl Socket {
    /// Write `command`, read its one reply (Redis's error as an `Err`).
    async fn ask(&mut self, command: &Cmd) -> RedisResult<Value> {
        self.stream.write_all(&command.get_packed_command()).await?;
        loop {
            if let Some(value) = self.codec.decode(&mut self.buffer)? {
                return value.extract_error();
            }
            if self.stream.read_buf(&mut self.buffer).await? == 0 {
                return Err(RedisError::from(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)));
            }
        }
    }
}
