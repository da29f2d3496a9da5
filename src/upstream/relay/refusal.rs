//! Requests of the upstream relayed to a call's host, and the ones that got no answer there.
//!
//! A relayed request ([`Relayed`]) marks its call as waiting on its host until it is answered
//! (see `Lone::NotWaiting`). When the proxy refuses such a request — it names no call, the host
//! did not declare the capability — or the host answers it with an error, the call it was
//! attributed to (for one that names no call: every call in flight then) keeps the
//! [`Refusal`]. An upstream may fail its call over it, passing the refusal's code on
//! (-32602 for an unattributed request, which would read as "refused the tools/call
//! arguments"); the call's error then names the refusal instead (`offerings`).
//!
//! Invariant: a refusal names only what was refused and why, in the proxy's words: never the
//! request's content, never which principal or call it may have belonged to.

use std::sync::Arc;

use rmcp::model::RequestId;

use super::{HostRelay, Lone, Origin, RelayBook};

/// Why a request of the upstream got no answer from a call's host.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Refusal {
    /// It named no call in flight, so the proxy relayed it to nobody (`kind`: `sampling`,
    /// `elicitation`).
    Unattributed(&'static str),
    /// The calling host did not declare the capability.
    Undeclared(&'static str),
    /// The calling host (or its call's end) answered it with this error code.
    HostError(&'static str, i32),
}

impl Refusal {
    /// What happened, as the end of "the call failed after …", on `upstream`; for a request
    /// that named no call, what to set so that it is relayed.
    pub fn describe(&self, upstream: &str) -> String {
        match self {
            Refusal::Unattributed(kind) => format!(
                "the upstream asked for {kind} without naming its call, which the proxy does not relay on a \
                 shared stdio upstream once several principals called it (the request must carry the call's \
                 `_meta.progressToken`): set `session = \"per-principal\"` on upstream `{upstream}` to keep \
                 {kind} for every caller"
            ),
            Refusal::Undeclared(kind) => {
                format!("it asked the calling host for {kind}, which the host did not declare (capability `{kind}`)")
            }
            Refusal::HostError(kind, code) => {
                format!("its {kind} request got no answer from the calling host (error {code})")
            }
        }
    }
}

/// A request of the upstream on its way to the host of the call it belongs to. While it lives,
/// that call waits on its host.
pub(crate) struct Relayed {
    book: Arc<RelayBook>,
    call: RequestId,
    pub host: Arc<dyn HostRelay>,
}

impl Relayed {
    /// The call keeps `refusal` (for its error, should the upstream fail it).
    pub fn refused(&self, refusal: Refusal) {
        if let Some(booked) = self.book.calls.lock().expect("relay lock").get_mut(&self.call) {
            booked.refused = Some(refusal);
        }
    }
}

impl Drop for Relayed {
    fn drop(&mut self) {
        if let Some(booked) = self.book.calls.lock().expect("relay lock").get_mut(&self.call) {
            booked.asking = booked.asking.saturating_sub(1);
        }
    }
}

impl RelayBook {
    /// The call a request of this origin goes to (counted as waiting on its host until the
    /// [`Relayed`] is dropped). When there is none, every call in flight keeps that a `kind`
    /// of request was refused for naming no call.
    pub(crate) fn relay_request(self: &Arc<Self>, origin: &Origin, kind: &'static str) -> Option<Relayed> {
        let Some((call, host)) = self.find_call_for(origin, kind, Lone::NotWaiting) else {
            let mut calls = self.calls.lock().expect("relay lock");
            for booked in calls.values_mut().filter(|booked| booked.relay.strong_count() > 0) {
                booked.refused = Some(Refusal::Unattributed(kind));
            }
            return None;
        };
        if let Some(booked) = self.calls.lock().expect("relay lock").get_mut(&call) {
            booked.asking += 1;
        }
        Some(Relayed { book: self.clone(), call, host })
    }

    /// What the call of request `id` was refused, if anything.
    pub(crate) fn refusal_of(&self, id: &RequestId) -> Option<Refusal> {
        self.calls.lock().expect("relay lock").get(id).and_then(|booked| booked.refused.clone())
    }
}
