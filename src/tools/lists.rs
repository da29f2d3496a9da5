//! The merged tool and prompt lists, one path over the kind ([`Listed`]): a page for a caller
//! (decided with its policy snapshot, its icons and `_meta` judged, with the catalog's sealed
//! cursors), and what a principal sees of either as a digest, so that only hosts whose visible
//! list changed hear `tools/list_changed` or `prompts/list_changed` (the one scheme of
//! `crate::fanout`, as for resources).

use rmcp::model::{Prompt, Tool};

use super::catalog::{Listed, UpstreamOfferings};
use super::names::{self, Naming};
use super::{Tools, own, rewrite};
use crate::catalog::{Paged, Snapshot};
use crate::error::ProxyError;
use crate::fanout::{Listing, ViewDigest};
use crate::metrics::DenialAction;
use crate::policy::PolicySet;

/// What a principal's digest of a list was computed from: the catalog's generation and the
/// policy set.
pub(super) struct ViewFrom {
    generation: u64,
    policy: PolicySet,
}

impl Tools {
    /// Tell hosts whose visible tools or prompts changed since they last heard (after a change
    /// of the catalog or of the policy); how many were told.
    pub fn announce(&self) -> usize {
        let snapshot = self.inner.catalog.snapshot();
        let policy = self.policy();
        let tell = |listing| {
            let view = |principal: &str| self.view_of(&snapshot, &policy, (principal, listing));
            self.inner.fanout.tell_changed(listing, view)
        };
        tell(Listing::Tools) + tell(Listing::Prompts)
    }

    /// The digest of what `principal` sees of the tools or of the prompts now (what a host
    /// registers with).
    pub fn view_now(&self, principal: &str, listing: Listing) -> u64 {
        self.view_of(&self.inner.catalog.snapshot(), &self.policy(), (principal, listing))
    }

    /// May `principal` use the tool or prompt a host sees as `presented`? A refusal is counted as
    /// a policy denial of `counted`, when given (a list entry hidden, a call refused), under the
    /// policy file that decided it.
    pub(super) fn allowed(
        &self,
        policy: &PolicySet,
        principal: &str,
        naming: Naming,
        offering: names::Offering,
        presented: &str,
        counted: Option<DenialAction>,
    ) -> bool {
        if policy.is_allow_all() {
            return true;
        }
        let decision = naming
            .origin(presented)
            .map(|(upstream, name)| policy.decide(principal, &names::policy_uri(offering, upstream, name)));
        let allowed = decision.as_ref().is_some_and(|decision| decision.allowed);
        if let (false, Some(action)) = (allowed, counted) {
            let file = decision.and_then(|decision| decision.file);
            self.inner.metrics.policy_denied(action, file.as_deref());
        }
        allowed
    }

    /// One page of the merged tool or prompt list, decided with `policy`, the snapshot
    /// `principal`'s request took once. `host`: the host session asking, when it is one (its
    /// per-host upstream sessions' own lists are its lists).
    pub fn list<T: Listed>(
        &self,
        (principal, host): (&str, Option<u64>),
        policy: &PolicySet,
        cursor: Option<&str>,
    ) -> Result<Paged<T>, ProxyError> {
        let snapshot = self.snapshot_for(principal, host);
        let naming = snapshot.naming();
        let list = Some(DenialAction::List);
        let visible = |entry: &T| self.allowed(policy, principal, naming, T::OFFERING, entry.name(), list);
        let mut page = snapshot.page_for(
            &self.inner.cursor_key,
            (principal, T::LIST),
            (cursor, self.inner.page_size),
            T::entries,
            visible,
        )?;
        let resources = self.inner.resources.snapshot();
        for entry in &mut page.items {
            if let (Some(icons), Some((upstream, _))) = (entry.icons().take(), naming.origin(entry.name())) {
                let links = rewrite::Links::new(upstream, &resources, policy, principal);
                *entry.icons() = rewrite::icons_for(&links, Some(icons));
            }
            *entry.meta() = entry.meta().take().map(|meta| rewrite::meta_for(meta, policy, principal));
        }
        Ok(page)
    }

    /// The digest of what `principal` sees of `listing` in `snapshot` under `policy` (the
    /// bridge's tools too, when on), from the memo when it was computed from the same two.
    fn view_of(
        &self,
        snapshot: &Snapshot<UpstreamOfferings>,
        policy: &PolicySet,
        (principal, listing): (&str, Listing),
    ) -> u64 {
        let fresh = |from: &ViewFrom| from.generation == snapshot.generation && from.policy.same(policy);
        let compute = || {
            let digest = match listing {
                Listing::Prompts => self.digest_of::<Prompt>(snapshot, policy, principal),
                _ => self.digest_of::<Tool>(snapshot, policy, principal),
            };
            (ViewFrom { generation: snapshot.generation, policy: policy.clone() }, digest)
        };
        self.inner.views.digest((principal, listing), fresh, compute)
    }

    fn digest_of<T: Listed>(&self, snapshot: &Snapshot<UpstreamOfferings>, policy: &PolicySet, principal: &str) -> u64 {
        let mut digest = ViewDigest::default();
        let naming = snapshot.naming();
        for entry in snapshot.all::<T>() {
            if self.allowed(policy, principal, naming, T::OFFERING, entry.name(), None) {
                digest.add(b'e', entry);
            }
        }
        if self.inner.bridge && T::LISTING == Listing::Tools {
            let allowed =
                |name: &&&str| policy.is_allow_all() || policy.decide(principal, &own::policy_uri(name)).allowed;
            own::BRIDGE_TOOLS.iter().filter(allowed).for_each(|name| digest.add(b'o', name));
        }
        digest.finish()
    }
}
