//! The accept loop both HTTP listeners (`/mcp` and the admin listener) run instead of
//! `axum::serve`, which has no header timeout and no connection cap, the `Host` values they
//! accept and the `Origin`s that are a listener's own. It sits below both (`downstream`,
//! `admin`), so neither imports the other.
//!
//! Invariants:
//! - the caps leave file descriptors for upstreams, folder files and the admin listener,
//!   whatever the process's limit ([`fds`]);
//! - at most [`ConnectionLimits::max_connections`] hosts' connections are open per listener
//!   (one more may wait, accepted, for a place): at the cap a newcomer makes room by closing the
//!   oldest connection that has not yet sent a whole request head (`listener/unproven.rs`: a
//!   slowloris cannot keep fresh clients waiting); when every connection has sent one, further
//!   clients wait in the kernel's backlog until a connection closes. On the `/mcp` listener of a
//!   replica, other replicas' connections have [`PEER_CONNECTIONS`] places of their own beside
//!   the hosts' (`listener/kinds.rs`): a connection takes a place of its kind at its first
//!   request, and one waiting for a host's place is still closable for room;
//! - with TLS between replicas, a connection that opens with a TLS handshake is another
//!   replica's once its certificate is verified (its requests carry [`VerifiedPeer`]); a plain
//!   one is a host's;
//! - a connection must deliver a complete request head within
//!   [`ConnectionLimits::header_read_timeout`] — its first request and every keep-alive request
//!   after it — or it is closed (slowloris, idle half-open connections);
//! - a connection speaks HTTP/1.1, or HTTP/2 when it opens with HTTP/2's preface (prior
//!   knowledge, `h2c`: the other replicas send every request to one replica over one
//!   such connection); an HTTP/2 connection carries at most [`MAX_STREAMS`] requests at once and
//!   is proven by its first request, like an HTTP/1.1 one;
//! - every accepted socket has `TCP_NODELAY`: replies written in pieces (SSE frames) leave at
//!   once instead of waiting ~40 ms for the peer's delayed ACK (Nagle's algorithm);
//! - a connection's task is polled again in place when it wakes itself (`listener/repoll.rs`):
//!   hyper's body channel does so on every request with a body, which tokio would otherwise
//!   treat as a yield and answer by waking an idle worker.

pub mod fds;
pub mod kinds;
mod repoll;
mod unproven;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use self::kinds::{Admitting, Places, Seat};
pub use self::kinds::{Kind, OpenConnections, PEER_CONNECTIONS, Peers, VerifiedPeer};
use self::unproven::Unproven;

/// Requests open at once on one HTTP/2 connection (hyper's default is 200): the forwarded
/// requests and subscription holds of every principal from one replica to another share one.
pub const MAX_STREAMS: u32 = 4096;

/// `Host` values a listener on `local` accepts: loopback names, its own address, `extra`.
pub fn allowed_hosts(local: std::net::SocketAddr, extra: &[String]) -> Vec<String> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
    hosts.push(local.ip().to_string());
    hosts.extend(extra.iter().cloned());
    hosts
}

/// The origins of a listener bound to `local` itself — what a browser sends as `Origin` for a
/// page loaded from this listener (same-origin): `http://<ip>:<port>` (`http://[<ip>]:<port>`
/// for IPv6), and when the listener answers on loopback (bound to a loopback address, or to
/// every address) `http://localhost:<port>`, `http://127.0.0.1:<port>` and
/// `http://[::1]:<port>`. The port is the bound one: with port 0 they are known only after
/// bind. Any other port, scheme or name is another origin.
pub fn own_origins(local: std::net::SocketAddr) -> Vec<String> {
    let port = local.port();
    let mut origins = vec![format!("http://{}", std::net::SocketAddr::new(local.ip(), port))];
    if local.ip().is_loopback() || local.ip().is_unspecified() {
        for name in ["localhost", "127.0.0.1", "[::1]"] {
            let origin = format!("http://{name}:{port}");
            if !origins.contains(&origin) {
                origins.push(origin);
            }
        }
    }
    origins
}

/// Per-listener connection limits, from `[server]`.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

impl ConnectionLimits {
    /// The `/mcp` listener's.
    pub fn of(server: &crate::config::ServerConfig) -> Self {
        Self { max_connections: server.max_connections, header_read_timeout: server.header_read_timeout }
    }

    /// The admin listener's (its own share of file descriptors, see [`fds`]).
    pub fn admin(server: &crate::config::ServerConfig) -> Self {
        Self { max_connections: server.admin_max_connections, header_read_timeout: server.header_read_timeout }
    }
}

/// Serve `app` over HTTP/1.1 and HTTP/2 (prior knowledge) on `listener` until `shutdown`; then
/// stop accepting and wait for open connections to finish their current exchange. With
/// `peers` (the `/mcp` listener of a replica), other replicas' connections are counted apart
/// from hosts' ([`kinds`]); `open` is told how many of each kind are open.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    peers: Option<Peers>,
    open: Option<OpenConnections>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let places = Places::new(limits.max_connections, peers.is_some(), open);
    let permits = Arc::new(Semaphore::new(places.total()));
    let unproven = Unproven::default();
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    builder.http2().timer(TokioTimer::new()).max_concurrent_streams(MAX_STREAMS);
    let mut waiting = None;
    loop {
        let Some(permit) = next_place(&permits, &listener, &unproven, &mut waiting, &shutdown).await else { break };
        let (stream, peer) = match waiting.take() {
            Some(accepted) => accepted,
            None => tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // EMFILE and friends: back off briefly instead of spinning on the error.
                        tracing::warn!(error = %error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = shutdown.cancelled() => break,
            },
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(error = %error, peer = %peer, "TCP_NODELAY not set");
        }
        let place = Arc::new(unproven.enter());
        let evicted = place.evicted.clone();
        let service = Admitting {
            inner: TowerToHyperService::new(app.clone()),
            place,
            seat: Arc::new(Seat::new(places.clone())),
            peers: peers.clone(),
            verified: false,
        };
        let (builder, watcher) = (builder.clone(), graceful.watcher());
        let tls = peers.as_ref().and_then(|peers| peers.tls.clone());
        let header_read_timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            let ended = match tls {
                None => {
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    unproven::until_evicted(repoll::Repoll::new(watcher.watch(connection)), evicted).await
                }
                Some(acceptor) => {
                    let opening = opens_with_tls(acceptor, stream, header_read_timeout, service);
                    match unproven::until_evicted(opening, evicted.clone()).await.flatten() {
                        Some(Opened::Tls(stream, service)) => {
                            let connection = builder.serve_connection(TokioIo::new(stream), service);
                            unproven::until_evicted(repoll::Repoll::new(watcher.watch(connection)), evicted).await
                        }
                        Some(Opened::Plain(stream, service)) => {
                            let connection = builder.serve_connection(TokioIo::new(stream), service);
                            unproven::until_evicted(repoll::Repoll::new(watcher.watch(connection)), evicted).await
                        }
                        None => Some(Ok(())),
                    }
                }
            };
            match ended {
                Some(Err(error)) => tracing::debug!(error = %error, peer = %peer, "connection ended with an error"),
                Some(Ok(())) => {}
                None => tracing::debug!(peer = %peer, "connection without a request head closed to make room"),
            }
            drop(permit);
        });
    }
    graceful.shutdown().await;
    Ok(())
}

/// A connection on a listener with TLS between replicas, once its first byte said which.
enum Opened {
    /// A TLS handshake that verified another replica's certificate: seated as a peer's.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>, Admitting),
    /// Plain HTTP: a host's (never seated as a peer's).
    Plain(TcpStream, Admitting),
}

/// Which a connection opens with, within `timeout`: a TLS handshake (its first byte 0x16), done
/// with `acceptor` (which verifies the peer's certificate), or plain HTTP. `None`: it sent
/// nothing in time, its handshake failed, or no peer's place is left.
async fn opens_with_tls(
    acceptor: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    timeout: Duration,
    mut service: Admitting,
) -> Option<Opened> {
    const HANDSHAKE: u8 = 0x16;
    let opening = async {
        let mut first = [0u8; 1];
        let read = stream.peek(&mut first).await.ok()?;
        if read == 0 || first[0] != HANDSHAKE {
            return Some(Opened::Plain(stream, service));
        }
        match acceptor.accept(stream).await {
            Ok(stream) => {
                if !service.seat.peer() {
                    tracing::debug!(
                        "listener: every place of other replicas' connections is taken; a replica's closed"
                    );
                    return None;
                }
                service.verified = true;
                service.place.proven();
                Some(Opened::Tls(Box::new(stream), service))
            }
            Err(error) => {
                tracing::debug!(error = %error, "a TLS handshake between replicas failed");
                None
            }
        }
    };
    tokio::time::timeout(timeout, opening).await.ok().flatten()
}

/// A place for the next connection. At the cap, a client that arrives meanwhile is accepted
/// into `waiting` and the oldest unproven connection is closed for it. `None` at shutdown.
async fn next_place(
    permits: &Arc<Semaphore>,
    listener: &TcpListener,
    unproven: &Unproven,
    waiting: &mut Option<(tokio::net::TcpStream, std::net::SocketAddr)>,
    shutdown: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    if let Ok(permit) = permits.clone().try_acquire_owned() {
        return Some(permit);
    }
    tokio::select! {
        permit = permits.clone().acquire_owned() => return Some(permit.expect("the semaphore is never closed")),
        accepted = listener.accept() => match accepted {
            Ok(accepted) => {
                *waiting = Some(accepted);
                unproven.evict_oldest();
            }
            Err(error) => tracing::warn!(error = %error, "accept failed"),
        },
        _ = shutdown.cancelled() => return None,
    }
    tokio::select! {
        permit = permits.clone().acquire_owned() => Some(permit.expect("the semaphore is never closed")),
        _ = shutdown.cancelled() => None,
    }
}

#[cfg(test)]
mod tests {
    use super::own_origins;

    fn check(local: &str, expected: &[&str]) {
        let local: std::net::SocketAddr = local.parse().expect("a socket address");
        assert_eq!(own_origins(local), expected, "bound to {local}");
    }

    #[test]
    fn own_origins_are_the_bound_address_and_loopback_names_when_on_loopback() {
        let loopback = ["http://127.0.0.1:8080", "http://localhost:8080", "http://[::1]:8080"];
        check("127.0.0.1:8080", &loopback);
        check("[::1]:8080", &["http://[::1]:8080", "http://localhost:8080", "http://127.0.0.1:8080"]);
        check(
            "127.0.0.2:8080",
            &["http://127.0.0.2:8080", "http://localhost:8080", "http://127.0.0.1:8080", "http://[::1]:8080"],
        );
        check("0.0.0.0:81", &["http://0.0.0.0:81", "http://localhost:81", "http://127.0.0.1:81", "http://[::1]:81"]);
        check("[::]:81", &["http://[::]:81", "http://localhost:81", "http://127.0.0.1:81", "http://[::1]:81"]);
        check("10.1.2.3:8080", &["http://10.1.2.3:8080"]);
        check("[2001:db8::7]:443", &["http://[2001:db8::7]:443"]);
    }
}
