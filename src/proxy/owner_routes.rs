//! `[cluster]`: the routes an upstream takes to the sessions other replicas own, built from the
//! client between replicas (`crate::cluster::peers`), so that `upstream` never names the cluster.

use std::sync::Arc;

use crate::cluster::peers::{PeerClient, SessionOf};
use crate::cluster::session_pass::{self, Identity};
use crate::upstream::{Carried, OwnerAt, OwnerRoutes, Whose};

/// `[cluster]`: how an upstream reaches the sessions other replicas hold (their owners by
/// rendezvous hashing over the replicas alive) and the calls parked on them (the replica alive
/// a `requestState` names), each request under a pass sealed with the cluster's key, over the
/// client between replicas.
pub(super) fn owner_routes(forwarder: &PeerClient) -> OwnerRoutes {
    let owners = forwarder.clone();
    let owner_of = move |whose: &Whose<'_>| {
        let host = whose.host;
        let owner = owners.owner(SessionOf { principal: whose.principal, upstream: whose.upstream, host })?;
        Some(OwnerAt { replica: owner.replica, url: owner.url })
    };
    let replicas = forwarder.clone();
    let replica_at = move |id: &str| {
        let replica = replicas.replica(id)?;
        Some(OwnerAt { replica: replica.replica, url: replica.url })
    };
    let passes = forwarder.session_passes();
    let pass = move |to: &str, whose: &Whose<'_>, carried: &Carried<'_>| {
        let host = whose.host;
        let identity = Identity { principal: whose.principal.to_string(), upstream: whose.upstream.to_string(), host };
        passes.make(to, &identity, carried.subject, carried.kept_as)
    };
    OwnerRoutes {
        owner_of: Arc::new(owner_of),
        replica_at: Arc::new(replica_at),
        pass: Arc::new(pass),
        client: forwarder.client(),
        path: session_pass::PATH,
        header: session_pass::HEADER,
    }
}
