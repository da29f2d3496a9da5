//! Which replica holds a per-principal upstream session: rendezvous (highest random weight)
//! hashing of (upstream, principal) — of (upstream, principal, host session key) for a
//! per-host one — over the replicas seen alive that can be reached — each
//! replica's heartbeat carries the URL the others reach it at (`cluster.advertise_url`, or the
//! listen address once bound). Every replica with the same view picks the same owner; when a
//! replica leaves, only the sessions it owned move, each to the next in its own order.
//!
//! Invariant: the owner is chosen among replicas seen alive at the last heartbeat that have an
//! address; this replica counts only when it has one too. Pure choice, no IO.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use super::Cluster;

/// Another replica, where a request for a session it holds goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub replica: String,
    /// Its MCP listener, `http://host:port` (`https://` with `peer_tls`; no path).
    pub url: String,
}

/// This replica's address and the others' (from their heartbeats).
pub(super) struct Addresses {
    own: Mutex<Option<String>>,
    others: Mutex<BTreeMap<String, String>>,
}

impl Addresses {
    pub(super) fn new(own: Option<String>) -> Self {
        Self { own: Mutex::new(own), others: Mutex::default() }
    }
}

impl Cluster {
    /// The replica holding `principal`'s session of `upstream` (its host session `host`'s, for
    /// a per-host one): `None` when it is this one.
    pub fn owner_of(&self, upstream: &str, principal: &str, host: Option<u64>) -> Option<Owner> {
        let candidates = self.candidates();
        let weighed = |id: &String| (weight(id, upstream, principal, host), id.clone());
        let (id, url) = candidates.into_iter().max_by_key(|(id, _)| weighed(id))?;
        (id != self.replica_id()).then_some(Owner { replica: id, url })
    }

    /// Every other replica seen alive that can be reached, with its address.
    pub fn others(&self) -> Vec<Owner> {
        let me = self.replica_id();
        let others = self.candidates().into_iter().filter(|(id, _)| id != me);
        others.map(|(replica, url)| Owner { replica, url }).collect()
    }

    /// The replicas seen alive that the others can reach (this one included when it can be).
    pub fn reachable(&self) -> Vec<String> {
        self.candidates().into_iter().map(|(id, _)| id).collect()
    }

    /// `(replica, url)` of every replica seen alive with an address.
    fn candidates(&self) -> Vec<(String, String)> {
        let own = self.advertised();
        let others = self.inner.addresses.others.lock().expect("addresses lock").clone();
        let me = self.replica_id();
        let address = |id: &String| match id.as_str() {
            id if id == me => own.clone(),
            id => others.get(id).filter(|url| !url.is_empty()).cloned(),
        };
        self.replicas().into_iter().filter_map(|id| Some((address(&id)?, id))).map(|(url, id)| (id, url)).collect()
    }

    /// The URL the others reach this replica at, when it has one.
    pub fn advertised(&self) -> Option<String> {
        self.inner.addresses.own.lock().expect("addresses lock").clone()
    }

    /// The listener is bound at `local`: without `advertise_url`, the others reach this replica
    /// there when it names an address (not `0.0.0.0` or `::`), over `https://` with `peer_tls`.
    pub fn listening_at(&self, local: SocketAddr) {
        let scheme = if self.peer_tls().is_some() { "https" } else { "http" };
        let mut own = self.inner.addresses.own.lock().expect("addresses lock");
        if own.is_none() && !local.ip().is_unspecified() {
            *own = Some(format!("{scheme}://{local}"));
        }
    }

    /// The addresses the last heartbeat found (`(replica, url)`; empty: none).
    pub(super) fn set_addresses(&self, replicas: &[(String, String)]) {
        let others = replicas.iter().filter(|(id, _)| id != self.replica_id()).cloned().collect();
        *self.inner.addresses.others.lock().expect("addresses lock") = others;
    }
}

/// The weight of `replica` for (upstream, principal, host): the first 8 bytes of a SHA-256 over
/// them, length-prefixed (the host, when there is one, as its 8 bytes).
fn weight(replica: &str, upstream: &str, principal: &str, host: Option<u64>) -> u64 {
    let mut hash = Sha256::new();
    for part in [replica, upstream, principal] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    if let Some(host) = host {
        hash.update(host.to_be_bytes());
    }
    let digest = hash.finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::weight;

    fn owner<'a>(replicas: &[&'a str], upstream: &str, principal: &str) -> &'a str {
        replicas.iter().copied().max_by_key(|id| (weight(id, upstream, principal, None), *id)).expect("one")
    }

    #[test]
    fn a_leaving_replica_moves_only_the_sessions_it_owned() {
        let all = ["replica-0", "replica-1", "replica-2"];
        let principals: Vec<String> = (0..300).map(|i| format!("principal-{i}")).collect();
        let mut owned = [0usize; 3];
        for principal in &principals {
            let before = owner(&all, "mem", principal);
            owned[all.iter().position(|id| *id == before).expect("listed")] += 1;
            let after = owner(&["replica-0", "replica-2"], "mem", principal);
            if before != "replica-1" {
                assert_eq!(before, after, "{principal} moved though its owner stayed");
            }
            assert_ne!(after, "replica-1");
        }
        assert!(owned.iter().all(|&n| n > 50), "spread over the replicas: {owned:?}");
        assert_ne!(weight("a", "b", "c", None), weight("a", "bc", "", None), "parts cannot run into each other");
        assert_ne!(weight("a", "b", "c", None), weight("a", "b", "c", Some(0)), "a host session has its own owner");
    }
}
