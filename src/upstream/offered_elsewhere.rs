//! `[cluster]`: the own tools and prompts of a session another replica holds. A per-principal
//! or per-host session lives on one replica (`crate::cluster::owners`); once it says its tools
//! or prompts changed, it lists them as its own ([`Upstream::own_offerings`]) and its hosts list
//! and call as it lists — wherever their requests land. So the owner tells every other replica
//! what the session lists now ([`Call::Offered`](crate::cluster::forward::Call::Offered)), when
//! it changes and when the session closes (it lists none of its own then); each keeps it for
//! the session's hosts there and tells them `tools/list_changed` or `prompts/list_changed`. A
//! replica that was not told (it started later, or could not be reached) asks the owner the
//! first time a host there lists or calls ([`Call::Offerings`](crate::cluster::forward::Call::Offerings)),
//! answering with the shared connection's lists until the answer comes, and its hosts are told
//! when it brings lists of the session's own.
//!
//! Invariant: what is kept was said by the replica that owned the session when it said it, and
//! counts only while that replica still owns it (a session that moved starts again with the
//! shared connection's lists, as a new session does). At most [`KEPT_AT_MOST`] sessions' are
//! kept (a host session's go when it ends); one dropped is asked for again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Offered, Upstream, UpstreamEvent};
use crate::cluster::forward::{Answer, Call, HostOf, OwnLists, SessionOf};

/// How long after an unanswered question the owner is asked again.
const ASK_AGAIN: Duration = Duration::from_secs(5);
/// Sessions whose own lists are kept at most; past it, what says nothing of its own (asked
/// again when needed) goes first, then everything.
const KEPT_AT_MOST: usize = 10_000;

/// What this replica knows of the own lists of sessions other replicas hold.
#[derive(Default)]
pub(super) struct OwnListsElsewhere {
    kept: Mutex<HashMap<Whose, Kept>>,
}

/// A principal, and its host session for a per-host upstream's session.
type Whose = (Arc<str>, Option<u64>);

struct Kept {
    /// The replica that said it (or was asked).
    owner: String,
    offered: Option<Arc<Offered>>,
    /// Asked and not answered yet (or the question failed) since then.
    asked: Option<Instant>,
}

impl Upstream {
    /// `[cluster]`: what `principal`'s session (host session `host`'s) lists as its own when
    /// another replica holds it — `Some(None)` while it lists none of its own, or before the
    /// owner answered (asked now); `None` when it is this replica's.
    pub(super) fn own_offerings_elsewhere(&self, principal: &str, host: Option<u64>) -> Option<Option<Arc<Offered>>> {
        let forwarder = self.follows_owner()?;
        let of = self.session_named(principal, host);
        let owner = forwarder.owner(of)?;
        let whose = (principal.into(), of.host.map(|host| host.key));
        let mut kept = self.inner.own_elsewhere.kept.lock().expect("own lists lock");
        let known = kept.get(&whose).filter(|known| known.owner == owner.replica);
        if let Some(known) = known
            && known.asked.is_none_or(|asked| asked.elapsed() < ASK_AGAIN)
        {
            return Some(known.offered.clone());
        }
        let offered = known.and_then(|known| known.offered.clone());
        if kept.len() >= KEPT_AT_MOST && !kept.contains_key(&whose) {
            kept.retain(|_, known| known.offered.is_some());
            if kept.len() >= KEPT_AT_MOST {
                kept.clear();
            }
        }
        kept.insert(
            whose,
            Kept { owner: owner.replica.clone(), offered: offered.clone(), asked: Some(Instant::now()) },
        );
        drop(kept);
        if let Some((spine, _)) = self.launch() {
            let (upstream, forwarder, principal) = (self.clone(), forwarder.clone(), Arc::<str>::from(principal));
            spine.spawn(format!("own-lists:{}", self.name()), async move {
                let of = upstream.session_named(&principal, host);
                let timeout = upstream.config().request_timeout;
                let answer = forwarder.send(&owner, of, Call::Offerings, timeout).await;
                match answer {
                    Ok(Answer::Offerings(lists)) => upstream.offered_elsewhere(&principal, host, &owner.replica, lists),
                    _ => tracing::debug!(
                        upstream = upstream.name(),
                        "cluster: the owner did not say a session's own lists"
                    ),
                }
            });
        }
        Some(offered)
    }

    /// `[cluster]`: replica `from`, which holds `principal`'s session (host session `host`'s),
    /// says what it lists as its own now (`lists`): kept, and its hosts here told when their
    /// lists changed.
    pub fn offered_elsewhere(&self, principal: &str, host: Option<u64>, from: &str, lists: Option<OwnLists>) {
        let host = self.session_named(principal, host).host.map(|host| host.key);
        let offered = lists.map(|lists| Arc::new(Offered { tools: lists.tools, prompts: lists.prompts }));
        let kept = Kept { owner: from.to_string(), offered: offered.clone(), asked: None };
        let before = {
            let mut own = self.inner.own_elsewhere.kept.lock().expect("own lists lock");
            own.insert((principal.into(), host), kept).and_then(|before| before.offered)
        };
        let (tools, prompts) = match (before.as_deref(), offered.as_deref()) {
            (None, None) => (false, false),
            (Some(before), Some(now)) => (before.tools != now.tools, before.prompts != now.prompts),
            _ => (true, true),
        };
        let Some(events) = self.inner.events.lock().expect("events lock").clone() else { return };
        if tools || prompts {
            let upstream = self.name().to_string();
            let principal = principal.into();
            events.send(UpstreamEvent::SessionOfferingsChanged { upstream, principal, host, tools, prompts });
        }
    }

    /// The owner's answer to [`Call::Offerings`]: what `principal`'s session here (host session
    /// `host`'s) lists as its own; none when it lists none of its own or none is open.
    pub fn own_lists_here(&self, principal: &str, host: Option<u64>) -> Option<OwnLists> {
        let offered = self.own_offerings_here(principal, host)?;
        Some(OwnLists { tools: offered.tools.clone(), prompts: offered.prompts.clone() })
    }

    /// What `principal`'s session (host session `host`'s) lists as its own changed here: when
    /// this replica holds it, every other one is told.
    pub fn share_own_offerings(&self, principal: &str, host: Option<u64>) {
        let Some(forwarder) = self.follows_owner() else { return };
        if forwarder.owner(self.session_named(principal, host)).is_some() {
            return;
        }
        let Some((spine, _)) = self.launch() else { return };
        let (upstream, forwarder, principal) = (self.clone(), forwarder.clone(), Arc::<str>::from(principal));
        spine.spawn(format!("own-lists:{}", self.name()), async move {
            let lists = upstream.own_lists_here(&principal, host);
            forwarder.tell_others(upstream.session_named(&principal, host), lists).await;
        });
    }

    /// Host session `host` ended: what was kept of its sessions' own lists goes.
    pub(super) fn forget_own_elsewhere(&self, host: u64) {
        let mut kept = self.inner.own_elsewhere.kept.lock().expect("own lists lock");
        kept.retain(|(_, kept_host), _| *kept_host != Some(host));
    }

    /// Session `principal`'s (host session `host`'s, on a per-host upstream), by its key.
    fn session_named<'a>(&'a self, principal: &'a str, host: Option<u64>) -> SessionOf<'a> {
        self.forwarded_as(principal, host.map(|key| HostOf { key, sampling: false, elicitation: false }))
    }
}
