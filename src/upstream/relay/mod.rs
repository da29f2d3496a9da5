//! What an upstream sends *for* a routed call, relayed to the host that made it: the
//! server-to-client requests `sampling/createMessage` and `elicitation/create`, and its
//! `notifications/message` (logging).
//!
//! An upstream connection is shared by every host, so each such message is attributed to the
//! call it belongs to before it goes anywhere:
//! - streamable HTTP: the upstream sends them on the SSE response stream of the POST that
//!   carried the call. rmcp marks a request arriving there with that POST's request id
//!   (`InboundStreamOrigin`); the HTTP guard (`http`) marks a notification arriving there with
//!   [`CALL_KEY`] in its `_meta` (and removes that key from whatever arrives elsewhere, so an
//!   upstream cannot name a call itself).
//! - stdio (and the in-process folder server): there is no per-request stream, and SEP-2260
//!   defines no wire field for the association. A message is relayed only when it names its
//!   call itself: `_meta.progressToken` set to the progress token the proxy gave that call
//!   (taken out before the message goes on; a token that names no call in flight counts as
//!   none: rmcp stamps a token of its own on every request). Anything else is refused (a request) or dropped
//!   (a log message), counted in `mcp_proxy_relay_unattributed_total` and logged at debug —
//!   never guessed: "the only call in flight" is not evidence, since a message the upstream
//!   sends after one host's call has answered would land on another host's call. The one
//!   exception keeps a single-principal setup whole (a `serve --stdio` host, one user): while
//!   every call the upstream was ever sent came from one principal, an unnamed message goes to
//!   that principal's lone call in flight — it cannot be another principal's. A request goes
//!   to the one call whose host is not being asked something already, when the others are: a
//!   host that never answers holds its own call, not every call of its principal there.
//! - A request the proxy refuses, or the host answers with an error, is kept by its call
//!   (`refusal`), whose error names it should the upstream fail the call over it.
//!
//! Each routed call claims relaying for its host's [`HostRelay`] ([`RelayClaim`] in the request's
//! extensions); the connection's transport is tapped (`tap`), which books the claim under
//! the upstream request's id as the request is written — before the upstream can send anything
//! for it — and the call's [`RelayTicket`] takes it out of the [`RelayBook`] when the call is over.
//!
//! Log messages are handed to their call's host by that same tap, the moment they
//! are read, before anything read after them reaches rmcp — the call's own answer included. rmcp
//! runs each notification callback in a task of its own, and passes an answer to its waiting
//! caller at once, so a log message passed on from the callback could arrive after the call was
//! over (and be dropped): the last message before an answer was lost now and then under load.
//! A log message that came on no call's stream (an HTTP listen stream, or a resumed stream,
//! whose marks the guard removes) goes to no host at all, whether or not calls are in flight.
//!
//! Invariant: a relayed request or notification reaches only the host whose call it belongs to,
//! and only while that call is in flight; nothing unattributed is relayed to a principal other
//! than the only one the upstream has served; a log message the
//! upstream sent on a call's stream before its answer is in that call's relay before the call
//! returns.

#![allow(deprecated)] // Sampling and logging are deprecated by SEP-2577 but still in the 2025 era.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use rmcp::model::{
    ClientRequest, Extensions, GetExtensions, GetMeta, JsonObject, JsonRpcRequest, LoggingMessageNotification,
    NotificationMetaObject, NumberOrString, ProgressToken, RequestId, RequestMetaObject,
};
use rmcp::service::InboundStreamOrigin;

use crate::host::HostRelay;

mod refusal;

pub(crate) use refusal::{Refusal, Relayed};

/// The request `_meta` key by which a 2026-07-28 request opts in to log messages of at least
/// that level (there is no `logging/setLevel` in that era).
const LOG_LEVEL_KEY: &str = "io.modelcontextprotocol/logLevel";

/// The `_meta` key the HTTP guard puts on a notification that arrived on the response stream
/// of a call's POST: the upstream request id of that call. Never passed on.
pub(crate) const CALL_KEY: &str = "io.github.mcp-resource-proxy/call";

/// The `_meta` key by which a message of a stdio upstream names its call: the progress token
/// of the call's request.
const PROGRESS_TOKEN_KEY: &str = "progressToken";

/// How a message from the upstream can be attributed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Origin {
    /// It arrived on the response stream of this upstream request.
    Call(RequestId),
    /// It names the call by the progress token the proxy gave it (`_meta.progressToken`).
    Token(ProgressToken),
    /// It arrived where no call's stream is (an HTTP listen stream).
    Unassociated,
    /// The transport has no per-request streams (stdio) and the message names no call.
    Unknown,
}

impl Origin {
    /// The attribution found in either of two places of one message (each is searched).
    pub fn or(self, other: Origin) -> Origin {
        match self {
            Origin::Call(_) | Origin::Token(_) => self,
            _ => other,
        }
    }
}

/// The calls in flight on one upstream that relay, by upstream request id. Weak: the call's
/// [`RelayTicket`] owns its relay, so a claim written after its call was dropped relays nothing.
#[derive(Default)]
pub(crate) struct RelayBook {
    calls: Mutex<HashMap<RequestId, Booked>>,
    /// Told the kind (`log`, `sampling`, `elicitation`) of each message that belongs to no call
    /// in flight (for the metric).
    unattributed: Option<Box<dyn Fn(&'static str) + Send + Sync>>,
    /// Whose calls this upstream has been sent since it was booked first.
    tenancy: Mutex<Tenancy>,
}

/// The principals whose calls one upstream has been sent, as far as relaying needs to know.
#[derive(Default, Clone, PartialEq)]
enum Tenancy {
    #[default]
    Nobody,
    /// Every call so far came from this principal.
    One(Arc<str>),
    /// Calls of two principals, or of one whose principal was not known.
    Several,
}

impl Tenancy {
    fn with(self, tenant: Option<Arc<str>>) -> Tenancy {
        match (self, tenant) {
            (_, None) | (Tenancy::Several, _) => Tenancy::Several,
            (Tenancy::Nobody, Some(tenant)) => Tenancy::One(tenant),
            (Tenancy::One(one), Some(tenant)) if one == tenant => Tenancy::One(one),
            (Tenancy::One(_), Some(_)) => Tenancy::Several,
        }
    }
}

/// One call in flight: its host's relay and the progress token its request carried.
struct Booked {
    relay: Weak<dyn HostRelay>,
    token: Option<ProgressToken>,
    /// Requests of the upstream relayed to this call's host and not answered yet.
    asking: usize,
    /// The last request of the upstream the proxy could not get answered while this call was
    /// in flight (the call's error names it, `refusal`).
    refused: Option<Refusal>,
}

/// Which call in flight a message that names none may go to (single-principal upstreams only).
#[derive(Clone, Copy)]
enum Lone {
    /// Only the one call in flight (log messages).
    Only,
    /// The one call in flight, or else the one call whose host is not being asked something
    /// (requests: see [`RelayBook::lone_call_of_the_only_tenant`]).
    NotWaiting,
}

/// Put on a routed request (its extensions): the connection's tap books it under the request's id as the
/// request is written.
#[derive(Clone)]
pub(crate) struct RelayClaim(pub Weak<dyn HostRelay>);

/// A call's hold on its relay; dropping it (the call is over) unbooks the call.
pub(crate) struct RelayTicket {
    book: Arc<RelayBook>,
    id: RequestId,
    _relay: Arc<dyn HostRelay>,
}

impl RelayBook {
    /// A book that tells `unattributed` the kind of each message it cannot attribute.
    pub fn counted(unattributed: impl Fn(&'static str) + Send + Sync + 'static) -> Self {
        Self { calls: Mutex::default(), unattributed: Some(Box::new(unattributed)), tenancy: Mutex::default() }
    }

    /// What the upstream sends for request `id` (or naming `token`) goes to `relay` while it
    /// lives; calls that are over are forgotten on the way.
    fn book(&self, id: RequestId, relay: Weak<dyn HostRelay>, token: Option<ProgressToken>) {
        let tenant = relay.upgrade().and_then(|relay| relay.tenant());
        {
            let mut tenancy = self.tenancy.lock().expect("tenancy lock");
            *tenancy = std::mem::take(&mut *tenancy).with(tenant);
        }
        let mut calls = self.calls.lock().expect("relay lock");
        calls.retain(|_, booked| booked.relay.strong_count() > 0);
        let booked =
            calls.entry(id).or_insert_with(|| Booked { relay: relay.clone(), token: None, asking: 0, refused: None });
        booked.relay = relay;
        booked.token = token.or_else(|| booked.token.take());
    }

    /// The call of request `id` is in flight with `relay` until the ticket is dropped. Its
    /// claim is usually booked already (as the request was written); this books it when not.
    pub fn register(self: &Arc<Self>, id: RequestId, relay: Arc<dyn HostRelay>) -> RelayTicket {
        self.book(id.clone(), Arc::downgrade(&relay), None);
        RelayTicket { book: self.clone(), id, _relay: relay }
    }

    /// The host a message of this origin goes to, if it can be attributed.
    #[cfg(test)]
    pub fn find(&self, origin: &Origin) -> Option<Arc<dyn HostRelay>> {
        self.find_call(origin, Lone::Only).map(|(_, host)| host)
    }

    /// The call a message of this origin belongs to and its host, if it can be attributed;
    /// `lone` says which call an unnamed one may go to.
    fn find_call(&self, origin: &Origin, lone: Lone) -> Option<(RequestId, Arc<dyn HostRelay>)> {
        let calls = self.calls.lock().expect("relay lock");
        let live = |(id, booked): (&RequestId, &Booked)| booked.relay.upgrade().map(|host| (id.clone(), host));
        match origin {
            Origin::Call(id) => calls.get_key_value(id).and_then(live),
            // A token that names no call names nothing: rmcp stamps one of its own on every
            // request a server sends, so such a request is as unnamed as one without.
            Origin::Token(token) => match calls.iter().find(|(_, booked)| booked.token.as_ref() == Some(token)) {
                Some(named) => live(named),
                None => self.lone_call_of_the_only_tenant(&calls, lone),
            },
            Origin::Unassociated => None,
            Origin::Unknown => self.lone_call_of_the_only_tenant(&calls, lone),
        }
    }

    /// A message that names no call (stdio) goes to the lone call in flight only when every
    /// call this upstream was ever sent came from one principal: then it cannot be another
    /// principal's, even if it is late. With two principals (or one unknown) it goes nowhere.
    /// With [`Lone::NotWaiting`], a call whose host has yet to answer a request relayed to it
    /// does not count when another call is in flight: a host that never answers holds only its
    /// own call, not every other call of its principal on this upstream.
    fn lone_call_of_the_only_tenant(
        &self,
        calls: &HashMap<RequestId, Booked>,
        lone: Lone,
    ) -> Option<(RequestId, Arc<dyn HostRelay>)> {
        if !matches!(*self.tenancy.lock().expect("tenancy lock"), Tenancy::One(_)) {
            return None;
        }
        let live: Vec<_> =
            calls.iter().filter_map(|(id, booked)| Some((id, booked, booked.relay.upgrade()?))).collect();
        let only = |mut candidates: Vec<(&RequestId, &Booked, Arc<dyn HostRelay>)>| {
            let (id, _, host) = candidates.pop().filter(|_| candidates.is_empty())?;
            Some((id.clone(), host))
        };
        match lone {
            Lone::NotWaiting if live.len() > 1 => only(live.into_iter().filter(|(_, b, _)| b.asking == 0).collect()),
            _ => only(live),
        }
    }

    /// [`RelayBook::find`], counting and logging a `kind` of message that finds no call.
    pub fn find_for(&self, origin: &Origin, kind: &'static str) -> Option<Arc<dyn HostRelay>> {
        self.find_call_for(origin, kind, Lone::Only).map(|(_, host)| host)
    }

    /// [`RelayBook::find_call`], counting and logging a `kind` of message that finds no call.
    fn find_call_for(
        &self,
        origin: &Origin,
        kind: &'static str,
        lone: Lone,
    ) -> Option<(RequestId, Arc<dyn HostRelay>)> {
        let found = self.find_call(origin, lone);
        if found.is_none() {
            tracing::debug!(
                ?origin,
                kind,
                "a message from the upstream that belongs to no call in flight; not relayed"
            );
            if let Some(count) = &self.unattributed {
                count(kind);
            }
        }
        found
    }

    /// A request that claims relaying is booked before it is written, with its progress token.
    pub(super) fn claim(&self, request: &JsonRpcRequest<ClientRequest>) {
        if let Some(RelayClaim(relay)) = request.request.extensions().get::<RelayClaim>() {
            let token = request.request.get_meta().get_progress_token();
            self.book(request.id.clone(), relay.clone(), token);
        }
    }

    /// A log message the upstream sent: to the host of its call, if it can be attributed
    /// (else dropped). Never waits (`HostRelay::log` does not).
    pub(super) fn deliver_log(&self, mut log: LoggingMessageNotification, over_http: bool) {
        let extension_meta = log.extensions.get_mut::<NotificationMetaObject>();
        let metas = [log.params.meta.as_mut(), extension_meta];
        let origins = metas.into_iter().map(|meta| notification_origin(meta, over_http));
        let origin = origins.reduce(Origin::or).unwrap_or(Origin::Unknown);
        let mut params = log.params;
        params.meta = params.meta.filter(|meta| !meta.0.0.is_empty());
        if let Some(host) = self.find_for(&origin, "log") {
            host.log(params);
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.calls.lock().expect("relay lock").len()
    }
}

impl Drop for RelayTicket {
    fn drop(&mut self) {
        self.book.calls.lock().expect("relay lock").remove(&self.id);
    }
}

/// A routed request's `_meta` for a 2026-07-28 upstream (`modern`): the calling host's log
/// level, so the upstream sends log messages for the call at all.
pub(crate) fn request_meta(modern: bool, relay: Option<&Arc<dyn HostRelay>>) -> Option<RequestMetaObject> {
    let level = relay.and_then(|relay| relay.log_level()).filter(|_| modern)?;
    let mut meta = RequestMetaObject::default();
    meta.0.0.insert(LOG_LEVEL_KEY.into(), serde_json::to_value(level).expect("a level serialises"));
    Some(meta)
}

/// The origin of a request: the marker rmcp's HTTP transport puts on it; without one (stdio),
/// the progress token its `meta` names, if any.
pub(crate) fn request_origin(extensions: &Extensions, meta: &RequestMetaObject) -> Origin {
    match extensions.get::<InboundStreamOrigin>() {
        Some(InboundStreamOrigin::OutboundRequest(id)) => Origin::Call(id.clone()),
        Some(InboundStreamOrigin::Unassociated) => Origin::Unassociated,
        None => meta.get_progress_token().map_or(Origin::Unknown, Origin::Token),
    }
}

/// The origin of a notification on an HTTP connection (`over_http`), from the guard's
/// [`CALL_KEY`]; on stdio, from the progress token it names (`progressToken`), taken out of
/// `meta`. The guard's key is taken out of `meta` either way.
pub(crate) fn notification_origin(meta: Option<&mut NotificationMetaObject>, over_http: bool) -> Origin {
    let Some(meta) = meta else {
        return if over_http { Origin::Unassociated } else { Origin::Unknown };
    };
    let tagged = meta.0.0.remove(CALL_KEY);
    if !over_http {
        let token = meta.0.0.remove(PROGRESS_TOKEN_KEY);
        return match token.and_then(|value| serde_json::from_value::<NumberOrString>(value).ok()) {
            Some(token) => Origin::Token(ProgressToken(token)),
            None => Origin::Unknown,
        };
    }
    match tagged.and_then(|value| serde_json::from_value::<NumberOrString>(value).ok()) {
        Some(id) => Origin::Call(id),
        None => Origin::Unassociated,
    }
}

/// A notification's `params._meta` after the guard: [`CALL_KEY`] set to `call` when it arrived
/// on that call's stream, removed otherwise. Other messages are left alone.
pub(crate) fn mark_notification(message: &mut serde_json::Value, call: Option<&RequestId>) {
    let is_notification = message.get("method").is_some() && message.get("id").is_none();
    let Some(params) = message.get_mut("params").and_then(|p| p.as_object_mut()).filter(|_| is_notification) else {
        return;
    };
    let meta = params.entry("_meta").or_insert_with(|| serde_json::Value::Object(JsonObject::new()));
    let Some(meta) = meta.as_object_mut() else { return };
    meta.remove(CALL_KEY);
    if let Some(call) = call {
        meta.insert(CALL_KEY.into(), serde_json::to_value(call).expect("a request id serialises"));
    } else if meta.is_empty() {
        params.remove("_meta");
    }
}

#[cfg(test)]
pub(super) mod tests;
