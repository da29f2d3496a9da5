//! The `ServerHandler` side of subscriptions: a legacy session's `resources/subscribe` and
//! `unsubscribe` (at most `server.max_subscriptions_per_session` URIs per session,
//! `server.max_subscriptions_per_principal` per principal), and a
//! 2026-07-28 listen stream, registered as an outlet for as long as its request lives.
//!
//! A listen stream is registered and its URIs subscribed in `accepted_subscription_filter`,
//! which rmcp calls on the request's task before it sends the acknowledgement; `listen`, on the
//! same task, then attaches rmcp's sink to the buffering outlet. So every update after the
//! acknowledgement reaches the host.
//!
//! Invariant: a session or listen stream subscribes no more than `server.max_subscriptions_per_session`
//! URIs, and one principal's together no more than `server.max_subscriptions_per_principal`
//! (both kept by the upstream subscriptions); its subscriptions end when it ends
//! (`Session`'s drop).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rmcp::model::{SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams};
use rmcp::service::{RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, ServerHandler};
use tokio::task;

use super::audited::Asked;
use super::outlets::{BufferedOutlet, ListenOutlet};
use super::shared::records::{Records, SubscribeRefused};
use super::{ProxyServer, Session, session_header};
use crate::audit::{self, Kind};
use crate::error::ProxyError;
use crate::fanout::{OutletInfo, OutletKind};
use crate::host::HostSession;
use crate::metrics::Hop;
use crate::protocol::{Era, method};
use crate::proxy::Caller;

impl ProxyServer {
    pub(super) async fn subscriptions_subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.check_principal(&context.extensions, method::RESOURCES_SUBSCRIBE)?;
        let started = Instant::now();
        let subscriber = self.session(&context.peer);
        self.seen(&context.extensions);
        if let (Some(records), Some(session)) = (&self.records, session_header(&context.extensions)) {
            let (answer, notes) = audit::scope::noting(self.subscribe_shared(records, session, &request.uri)).await;
            let kind = (Kind::Subscribe, method::RESOURCES_SUBSCRIBE);
            self.audit_subscription(notes, kind, &context, started, &request.uri, stored_outcome(&answer));
            return self.record_stored(method::RESOURCES_SUBSCRIBE, started, answer);
        }
        // The caps (per session, per principal) are kept with the holds themselves.
        let host = host_session(self.host_key().unwrap_or(subscriber), &context);
        let caller = self.caller().with_subject(super::subject_of(&context.extensions));
        let (answer, notes) =
            audit::scope::noting_sync(|| self.proxy.subscribe(&caller, subscriber, &request.uri, Some(host)));
        let kind = (Kind::Subscribe, method::RESOURCES_SUBSCRIBE);
        self.audit_subscription(notes, kind, &context, started, &request.uri, crate::metrics::outcome(&answer));
        self.record(method::RESOURCES_SUBSCRIBE, started, answer)
    }

    pub(super) async fn subscriptions_unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.check_principal(&context.extensions, method::RESOURCES_UNSUBSCRIBE)?;
        let started = Instant::now();
        let subscriber = self.session(&context.peer);
        if let (Some(records), Some(session)) = (&self.records, session_header(&context.extensions)) {
            let (answer, notes) = audit::scope::noting(self.unsubscribe_shared(records, session, &request.uri)).await;
            let kind = (Kind::Unsubscribe, method::RESOURCES_UNSUBSCRIBE);
            self.audit_subscription(notes, kind, &context, started, &request.uri, stored_outcome(&answer));
            return self.record_stored(method::RESOURCES_UNSUBSCRIBE, started, answer);
        }
        let (answer, notes) =
            audit::scope::noting_sync(|| self.proxy.unsubscribe(&self.caller(), subscriber, &request.uri));
        let kind = (Kind::Unsubscribe, method::RESOURCES_UNSUBSCRIBE);
        self.audit_subscription(notes, kind, &context, started, &request.uri, crate::metrics::outcome(&answer));
        self.record(method::RESOURCES_UNSUBSCRIBE, started, answer)
    }

    /// A subscribe's or unsubscribe's audit events.
    fn audit_subscription(
        &self,
        notes: audit::scope::Notes,
        (kind, method): (Kind, &'static str),
        context: &RequestContext<RoleServer>,
        started: Instant,
        uri: &str,
        outcome: &'static str,
    ) {
        self.proxy
            .audit()
            .request(notes, || Asked::of(&self.principal, context, started).event(kind, method, outcome).uri(uri));
    }

    /// A `[cluster]` subscribe's or unsubscribe's answer, counted in the metrics (Redis could not
    /// be reached: an error).
    fn record_stored(
        &self,
        method: &'static str,
        started: Instant,
        answer: Result<Result<(), ProxyError>, ErrorData>,
    ) -> Result<(), ErrorData> {
        match answer {
            Ok(answer) => self.record(method, started, answer),
            Err(error) => {
                self.proxy.metrics().downstream_request(method, "error", started.elapsed(), self.hop());
                Err(error)
            }
        }
    }

    /// `[cluster]`: the subscription goes into the session's record, under the URI the proxy
    /// keeps it under on one process (`Proxy::subscription_uri`: normalised; unknown and
    /// forbidden URIs are not found), within `server.max_subscriptions_per_session`, and
    /// `server.max_subscriptions_per_principal` over the principal's live sessions on every
    /// replica; the replica serving the session's GET stream holds it (see `shared::streams`).
    /// The outer error: Redis could not be reached.
    async fn subscribe_shared(
        &self,
        records: &Records,
        session: &str,
        uri: &str,
    ) -> Result<Result<(), ProxyError>, ErrorData> {
        let kept_as = match self.proxy.subscription_uri(&self.caller(), uri) {
            Ok(kept_as) => kept_as,
            Err(error) => return Ok(Err(error)),
        };
        let server = &self.proxy.config().server;
        let (limit, principal_limit) = (server.max_subscriptions_per_session, server.max_subscriptions_per_principal);
        let recorded = records
            .subscribe(session, (&self.principal, &kept_as), (limit, principal_limit))
            .await
            .map_err(store_error)?;
        Ok(recorded.map_err(|refused| match refused {
            SubscribeRefused::NoSession => ProxyError::not_found(uri),
            SubscribeRefused::Full => ProxyError::SubscriptionLimit {
                subscriber: "this session",
                limit,
                setting: "server.max_subscriptions_per_session",
            },
            SubscribeRefused::PrincipalFull => ProxyError::SubscriptionLimit {
                subscriber: "this principal",
                limit: principal_limit,
                setting: "server.max_subscriptions_per_principal",
            },
        }))
    }

    /// `[cluster]`: the subscription leaves the session's record, under the URI it was kept
    /// under (`Proxy::subscription_uri`); an unknown or forbidden URI is not found, as on one
    /// process. The outer error: Redis could not be reached.
    async fn unsubscribe_shared(
        &self,
        records: &Records,
        session: &str,
        uri: &str,
    ) -> Result<Result<(), ProxyError>, ErrorData> {
        let kept_as = match self.proxy.subscription_uri(&self.caller(), uri) {
            Ok(kept_as) => kept_as,
            Err(error) => return Ok(Err(error)),
        };
        records.unsubscribe(session, &kept_as).await.map_err(store_error)?;
        Ok(Ok(()))
    }

    pub(super) fn subscriptions_accepted_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        // One policy snapshot decides what the stream may hold and subscribes it, with the
        // request's own JWT.
        let started = Instant::now();
        let caller = self.caller().with_subject(self.request_subject.clone());
        let (candidate, notes) = audit::scope::noting_sync(|| self.listen_candidate(&caller, requested));
        // What rmcp acknowledges: the candidate cut to what was requested and advertised.
        let advertised = requested.supported_by(&self.get_info().capabilities);
        let accepted = requested.intersection(&candidate).intersection(&advertised);
        if let Some(request_task) = task::try_id() {
            let (session, outlet) = self.open_listen(&caller, &accepted);
            let pending = PendingListen { accepted, session, outlet };
            // A stale entry of an earlier task with this id (its acknowledgement failed) goes.
            self.pending_listens.0.lock().expect("pending listens lock").insert(request_task, pending);
        }
        self.proxy.audit().request(notes, || {
            let asked =
                Asked { principal: &self.principal, era: Some(Era::Modern), session: None, request: None, started };
            let mut event = asked.event(Kind::Listen, method::SUBSCRIPTIONS_LISTEN, "ok");
            event.uris = candidate.resource_subscriptions.clone();
            event
        });
        Some(candidate)
    }

    fn listen_candidate(&self, caller: &Caller, requested: &SubscriptionFilter) -> SubscriptionFilter {
        let mut accepted = SubscriptionFilter::new();
        accepted.resources_list_changed = requested.resources_list_changed.filter(|wanted| *wanted);
        accepted.tools_list_changed = requested.tools_list_changed.filter(|wanted| *wanted);
        accepted.prompts_list_changed = requested.prompts_list_changed.filter(|wanted| *wanted);
        accepted.resource_subscriptions = requested
            .resource_subscriptions
            .as_ref()
            .map(|uris| {
                // A listen stream holds at most `server.max_subscriptions_per_session` URIs, and
                // no more than its principal has room for; the accepted filter tells the host which.
                let mut uris = self.proxy.subscribable(caller, uris);
                let room = self.proxy.subscription_room(caller);
                uris.truncate(self.proxy.config().server.max_subscriptions_per_session.min(room));
                uris
            })
            .filter(|uris| !uris.is_empty());
        accepted
    }

    /// Registers a listen stream's outlet and subscribes its URIs; the holds go with the
    /// returned `Session`.
    fn open_listen(&self, caller: &Caller, accepted: &SubscriptionFilter) -> (Session, Arc<BufferedOutlet>) {
        let info = OutletInfo {
            principal: self.principal.to_string(),
            kind: OutletKind::ListenStream,
            wants_list_changed: accepted.resources_list_changed == Some(true),
            wants_tools_list_changed: accepted.tools_list_changed == Some(true),
            wants_prompts_list_changed: accepted.prompts_list_changed == Some(true),
            host_key: Default::default(),
        };
        let outlet = Arc::new(BufferedOutlet::new());
        let subscriber = self.proxy.register_outlet(info, outlet.clone());
        let session = Session { proxy: self.proxy.clone(), id: subscriber, _counted: None };
        for uri in accepted.resource_subscriptions.iter().flatten() {
            if let Err(error) = self.proxy.subscribe(caller, subscriber, uri, None) {
                tracing::debug!(uri, error = %error, "listen URI not held");
            }
        }
        (session, outlet)
    }

    /// The stream `accepted_subscription_filter` opened on this task, if it is the one rmcp
    /// acknowledged; else a new one.
    fn take_listen(&self, accepted: &SubscriptionFilter) -> (Session, Arc<BufferedOutlet>) {
        let pending = task::try_id().and_then(|request_task| {
            self.pending_listens.0.lock().expect("pending listens lock").remove(&request_task)
        });
        match pending {
            Some(pending) if pending.accepted == *accepted => (pending.session, pending.outlet),
            _ => {
                tracing::debug!(principal = %self.principal, "listen stream not opened before its acknowledgement");
                self.open_listen(&self.caller().with_subject(self.request_subject.clone()), accepted)
            }
        }
    }

    pub(super) async fn subscriptions_listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        // Released however this ends: returned, or dropped with its request.
        let (_held, outlet) = self.take_listen(context.accepted());
        let _counted = self.proxy.metrics().downstream_session(self.transport, Era::Modern);
        let hop = Hop::new(Some(crate::protocol::MODERN_VERSION), self.transport);
        self.proxy.metrics().downstream_request(method::SUBSCRIPTIONS_LISTEN, "ok", std::time::Duration::ZERO, hop);
        outlet.attach(Box::new(ListenOutlet(context.sink().clone()))).await;
        if self.records.is_some() {
            self.announce_listened(&context).await;
        }
        // Returning ends the stream with its final result: at shutdown, before rmcp stops.
        tokio::select! {
            _ = context.cancelled() => {}
            _ = self.closing.cancelled() => tracing::debug!(principal = %self.principal, "listen stream closed for shutdown"),
        }
        Ok(())
    }
}

/// A `[cluster]` subscribe's or unsubscribe's outcome: `store_unavailable` when Redis could
/// not be reached.
fn stored_outcome(answer: &Result<Result<(), ProxyError>, ErrorData>) -> &'static str {
    match answer {
        Ok(answer) => crate::metrics::outcome(answer),
        Err(_) => "store_unavailable",
    }
}

/// Redis could not be reached for a session's record.
fn store_error(error: redis::RedisError) -> ErrorData {
    tracing::warn!(error = %error, "cluster: a session's subscriptions could not be recorded");
    ErrorData::internal_error("the cluster's session store (Redis) cannot be reached; retry later", None)
}

impl ProxyServer {
    /// `[cluster]`: a listen stream may be one a host reopened after the replica serving it
    /// died, and a change may have come while no replica watched its URIs for it: once each URI
    /// is acknowledged upstream again, the host is sent one `updated` for it (a spurious one on
    /// a first open).
    async fn announce_listened(&self, context: &SubscriptionContext) {
        let uris = context.accepted().resource_subscriptions.clone().unwrap_or_default();
        if uris.is_empty() {
            return;
        }
        let caller = self.caller();
        let watched = uris.iter().map(|uri| self.proxy.wait_subscribed(&caller, uri, ANNOUNCE_WAIT));
        let acknowledged = futures::future::join_all(watched).await.into_iter().filter(|held| *held).count();
        tracing::debug!(principal = %self.principal, uris = uris.len(), acknowledged, "cluster: listen stream announced");
        for uri in uris {
            if context.sink().notify_resource_updated(uri).await.is_err() {
                return;
            }
        }
    }
}

/// How long a reopened listen stream waits for its URIs' upstreams before announcing them.
const ANNOUNCE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Listen streams opened before their acknowledgement, by the task of their request.
#[derive(Default)]
pub(super) struct PendingListens(Mutex<HashMap<task::Id, PendingListen>>);

pub(super) struct PendingListen {
    /// The filter rmcp will acknowledge, as computed before it did.
    accepted: SubscriptionFilter,
    session: Session,
    outlet: Arc<BufferedOutlet>,
}

#[cfg(test)]
mod tests;

/// The 2025 host session keyed `key` of `context`, with what its host declared (a per-host
/// upstream session is opened declaring only that).
fn host_session(key: u64, context: &RequestContext<RoleServer>) -> HostSession {
    let capabilities = context.peer.peer_info().map(|info| info.capabilities.clone()).unwrap_or_default();
    HostSession { id: key, sampling: capabilities.sampling.is_some(), elicitation: capabilities.elicitation.is_some() }
}
