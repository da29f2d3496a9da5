//! What each principal can see of the catalog, condensed to a digest, so that `list_changed`
//! goes only to hosts whose visible list (resources or templates) changed: a resource only bob
//! may see appearing upstream tells alice nothing.
//!
//! A digest covers every visible resource and template whole (URI, name, description, …), in
//! catalog order. It is computed at most once per principal per (catalog generation, policy
//! set) and shared by every host of that principal: registration and the broadcasts after a
//! catalog change or a policy reload all read the same memo.
//!
//! Invariant: a host hears `list_changed` when, and only when, the digest of its principal's
//! view differs from the one it last heard of (or registered with). Equal digests mean equal
//! visible lists, up to 64-bit hash collisions. Who is told is decided by
//! [`Fanout::tell_changed`], as for tools and prompts.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hasher};
use std::sync::{Arc, Mutex};

use super::access::Access;
use super::caller::Caller;
use crate::catalog::{Catalog, Snapshot};
use crate::fanout::{Fanout, Outgoing, OutletInfo};
use crate::policy::PolicySet;

/// The views service: what it needs (the catalog, the policy in force, the outlets) and the
/// last digest computed per principal. A cheap `Clone` handle.
#[derive(Clone)]
pub(crate) struct Views {
    catalog: Catalog,
    access: Access,
    fanout: Fanout,
    memo: Arc<Mutex<HashMap<String, Memo>>>,
}

struct Memo {
    generation: u64,
    policy: PolicySet,
    digest: u64,
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
        let news = |_: &OutletInfo, view: &u64, seen: &mut u64| {
            if view == seen {
                return Vec::new();
            }
            *seen = *view;
            vec![Outgoing::ListChanged]
        };
        self.fanout.tell_changed(|info| info.wants_list_changed, view, news)
    }

    /// The digest of what `principal` sees in `snapshot` under `policy`, from the memo when it
    /// was computed from the same two.
    fn view_digest(&self, snapshot: &Snapshot, policy: &PolicySet, principal: &str) -> u64 {
        let fresh = |memo: &Memo| memo.generation == snapshot.generation && memo.policy.same(policy);
        if let Some(memo) = self.memo.lock().expect("views lock").get(principal).filter(|m| fresh(m)) {
            return memo.digest;
        }
        let digest = compute_view_digest(snapshot, policy, principal);
        let memo = Memo { generation: snapshot.generation, policy: policy.clone(), digest };
        self.memo.lock().expect("views lock").insert(principal.to_string(), memo);
        digest
    }
}

fn compute_view_digest(snapshot: &Snapshot, policy: &PolicySet, principal: &str) -> u64 {
    let hasher = RefCell::new(DefaultHasher::new());
    let caller = Caller::new(principal, policy.clone());
    snapshot.any_resource(|resource| {
        if caller.may_see(&resource.uri) {
            hash_json(&mut hasher.borrow_mut(), b'r', resource);
        }
        false
    });
    snapshot.any_template(|template| {
        if caller.may_see_template(template) {
            hash_json(&mut hasher.borrow_mut(), b't', template);
        }
        false
    });
    hasher.into_inner().finish()
}

/// Add a list entry to `hasher` through its JSON form (what a host would be sent).
fn hash_json(hasher: &mut DefaultHasher, kind: u8, item: &impl serde::Serialize) {
    hasher.write_u8(kind);
    // Writing into a hasher cannot fail; an entry that cannot be serialised is not listed either.
    let _ = serde_json::to_writer(HashWriter(hasher), item);
}

struct HashWriter<'a>(&'a mut DefaultHasher);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
