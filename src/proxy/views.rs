//! What each principal can see of the resource catalog, condensed to a digest, so that
//! `list_changed` goes only to hosts whose visible list (resources or templates) changed: a
//! resource only bob may see appearing upstream tells alice nothing. The scheme is the one of
//! every list (`crate::fanout`'s views; tools and prompts use it too).
//!
//! A digest covers every visible resource and template whole (URI, name, description, …), in
//! catalog order. It is computed at most once per principal per (catalog generation, policy
//! set) and shared by every host of that principal: registration and the broadcasts after a
//! catalog change or a policy reload all read the same memo.
//!
//! Invariant: a host hears `list_changed` when, and only when, the digest of its principal's
//! view differs from the one it last heard of (or registered with).

use std::sync::Arc;

use super::access::Access;
use super::caller::Caller;
use crate::catalog::{Catalog, Snapshot};
use crate::fanout::{Fanout, Listing, ViewDigest, ViewMemo};
use crate::policy::PolicySet;

/// The views service: what it needs (the catalog, the policy in force, the outlets) and the
/// last digest computed per principal. A cheap `Clone` handle.
#[derive(Clone)]
pub(crate) struct Views {
    catalog: Catalog,
    access: Access,
    fanout: Fanout,
    memo: Arc<ViewMemo<(u64, PolicySet)>>,
}

impl Views {
    pub(crate) fn new(catalog: Catalog, access: Access, fanout: Fanout) -> Self {
        Self { catalog, access, fanout, memo: Arc::default() }
    }

    /// The digest of what `principal` sees now.
    pub(crate) fn view_of(&self, principal: &str) -> u64 {
        self.view_digest(&self.catalog.snapshot(), &self.access.policy(), principal)
    }

    /// One `list_changed` to every host that wants it and whose principal's view changed since
    /// it last heard; how many were told.
    pub(crate) fn announce(&self) -> usize {
        let snapshot = self.catalog.snapshot();
        let policy = self.access.policy();
        let view = |principal: &str| self.view_digest(&snapshot, &policy, principal);
        self.fanout.tell_changed(Listing::Resources, view)
    }

    /// The digest of what `principal` sees in `snapshot` under `policy`, from the memo when it
    /// was computed from the same two.
    fn view_digest(&self, snapshot: &Snapshot, policy: &PolicySet, principal: &str) -> u64 {
        let fresh = |(generation, from): &(u64, PolicySet)| *generation == snapshot.generation && from.same(policy);
        let compute = || ((snapshot.generation, policy.clone()), compute_view_digest(snapshot, policy, principal));
        self.memo.digest((principal, Listing::Resources), fresh, compute)
    }
}

fn compute_view_digest(snapshot: &Snapshot, policy: &PolicySet, principal: &str) -> u64 {
    let mut digest = ViewDigest::default();
    let caller = Caller::new(principal, policy.clone());
    for (_, part) in snapshot.parts() {
        part.resources.iter().filter(|resource| caller.may_see(&resource.uri)).for_each(|r| digest.add(b'r', r));
    }
    for (_, part) in snapshot.parts() {
        part.templates.iter().filter(|template| caller.may_see_template(template)).for_each(|t| digest.add(b't', t));
    }
    digest.finish()
}
