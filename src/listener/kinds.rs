//! Hosts' connections and other replicas' on the `/mcp` listener (`[cluster]`), counted apart:
//! `server.max_connections` is the hosts' alone, and the other replicas have
//! [`PEER_CONNECTIONS`] places of their own beside it, so neither starves the other.
//!
//! A connection is seated at its first request: as another replica's when that request's head
//! is one ([`Peers::is_peer`]: the session endpoint with a right pass) or, with TLS between
//! replicas, as soon as its handshake verified the peer's certificate; else as a host's, which
//! waits for a host's place before its request is served (still closable for room meanwhile,
//! like a connection that has sent nothing). A replica's connection finding no peer's place
//! left is seated as a host's.
//!
//! Invariant: a seated connection holds exactly one place, of its kind, until it closes; the
//! counts told ([`OpenConnections`]) are the places held.

use std::sync::{Arc, Mutex};

use axum::Router;
use futures::future::{BoxFuture, Either};
use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::service::TowerToHyperService;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::unproven::Place;

/// Connections of other replicas open at once on one listener, beside the hosts' cap: one per
/// other replica is enough (each sends everything over one HTTP/2 connection).
pub const PEER_CONNECTIONS: usize = 32;

/// Whose a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Host,
    Peer,
}

impl Kind {
    /// A bounded label.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Host => "host",
            Kind::Peer => "peer",
        }
    }
}

/// How the `/mcp` listener tells other replicas' connections from hosts' (`[cluster]`).
#[derive(Clone)]
pub struct Peers {
    /// Whether a request's head is another replica's (its pass right: checked on the head).
    pub is_peer: IsPeer,
    /// TLS between replicas: a connection that opens with a TLS handshake is another replica's,
    /// its certificate verified; a plain one is then never seated as one.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

/// Whether a request (its target and headers) is another replica's.
pub type IsPeer = Arc<dyn Fn(&http::Uri, &http::HeaderMap) -> bool + Send + Sync>;

/// Told the number of connections of a kind open, at each change.
pub type OpenConnections = Arc<dyn Fn(Kind, usize) + Send + Sync>;

/// A request that came over a TLS connection whose peer certificate the cluster's CA verified
/// (a request extension).
#[derive(Debug, Clone, Copy)]
pub struct VerifiedPeer;

/// The places of one listener's connections, by kind.
#[derive(Clone)]
pub(super) struct Places {
    hosts: Arc<Semaphore>,
    host_max: usize,
    peers: Arc<Semaphore>,
    peer_max: usize,
    open: Option<OpenConnections>,
}

impl Places {
    /// `max_connections` hosts' places, and [`PEER_CONNECTIONS`] peers' when there are peers.
    pub(super) fn new(max_connections: usize, with_peers: bool, open: Option<OpenConnections>) -> Self {
        let peer_max = if with_peers { PEER_CONNECTIONS } else { 0 };
        let places = Self {
            hosts: Arc::new(Semaphore::new(max_connections)),
            host_max: max_connections,
            peers: Arc::new(Semaphore::new(peer_max)),
            peer_max,
            open,
        };
        places.tell(Kind::Host);
        if with_peers {
            places.tell(Kind::Peer);
        }
        places
    }

    /// Connections open at once, of every kind.
    pub(super) fn total(&self) -> usize {
        self.host_max + self.peer_max
    }

    fn tell(&self, kind: Kind) {
        let Some(open) = &self.open else { return };
        let held = match kind {
            Kind::Host => self.host_max - self.hosts.available_permits(),
            Kind::Peer => self.peer_max - self.peers.available_permits(),
        };
        open(kind, held);
    }
}

/// One connection's place of its kind, once it is seated; gives it back when dropped.
pub(super) struct Seat {
    places: Places,
    held: Mutex<Option<(Kind, OwnedSemaphorePermit)>>,
    seated: tokio::sync::OnceCell<Kind>,
}

impl Seat {
    pub(super) fn new(places: Places) -> Self {
        Self { places, held: Mutex::new(None), seated: tokio::sync::OnceCell::new() }
    }

    /// Seat the connection as a peer's, if a peer's place is left; false (nothing held) if not.
    pub(super) fn peer(&self) -> bool {
        let Ok(permit) = self.places.peers.clone().try_acquire_owned() else { return false };
        self.hold(Kind::Peer, permit);
        let _ = self.seated.set(Kind::Peer);
        true
    }

    /// Seat the connection at its first request: as a peer's when `peer` and a place is left,
    /// else as a host's, waiting for a host's place. Later requests find it seated.
    pub(super) async fn at_request(&self, peer: bool) -> Kind {
        *self
            .seated
            .get_or_init(|| async {
                if peer && let Ok(permit) = self.places.peers.clone().try_acquire_owned() {
                    self.hold(Kind::Peer, permit);
                    return Kind::Peer;
                }
                if peer {
                    tracing::debug!(
                        "listener: every place of other replicas' connections is taken; seated as a host's"
                    );
                }
                let permit = self.places.hosts.clone().acquire_owned().await.expect("the semaphore is never closed");
                self.hold(Kind::Host, permit);
                Kind::Host
            })
            .await
    }

    fn hold(&self, kind: Kind, permit: OwnedSemaphorePermit) {
        *self.held.lock().expect("seat lock") = Some((kind, permit));
        self.places.tell(kind);
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let held = self.held.lock().expect("seat lock").take();
        if let Some((kind, permit)) = held {
            drop(permit);
            self.places.tell(kind);
        }
    }
}

/// The service of one connection: seats it at its first request, marks it proven once seated
/// (no longer closable for room), and marks a verified replica's requests ([`VerifiedPeer`]).
pub(super) struct Admitting {
    pub inner: TowerToHyperService<Router>,
    pub place: Arc<Place>,
    pub seat: Arc<Seat>,
    pub peers: Option<Peers>,
    /// The connection's TLS handshake verified another replica's certificate.
    pub verified: bool,
}

type Inner = TowerToHyperService<Router>;
type Answer = <Inner as Service<http::Request<Incoming>>>::Response;
type Failure = <Inner as Service<http::Request<Incoming>>>::Error;
type Answering = <Inner as Service<http::Request<Incoming>>>::Future;

impl Service<http::Request<Incoming>> for Admitting {
    type Response = Answer;
    type Error = Failure;
    type Future = Either<Answering, BoxFuture<'static, Result<Answer, Failure>>>;

    fn call(&self, mut request: http::Request<Incoming>) -> Self::Future {
        if self.verified {
            request.extensions_mut().insert(VerifiedPeer);
        }
        if self.seat.seated.initialized() {
            return Either::Left(self.inner.call(request));
        }
        // With TLS between replicas, only a verified connection is a replica's.
        let peer = self
            .peers
            .as_ref()
            .is_some_and(|peers| peers.tls.is_none() && (peers.is_peer)(request.uri(), request.headers()));
        let (inner, place, seat) = (self.inner.clone(), self.place.clone(), self.seat.clone());
        Either::Right(Box::pin(async move {
            seat.at_request(peer).await;
            place.proven();
            inner.call(request).await
        }))
    }
}
