//! Progress of the proxy's calls, in order with their answers. Each connection's transport is
//! tapped (`tap`): a `tools/call` that claims its progress ([`ProgressClaim`]) is registered in
//! the connection's [`ProgressRoutes`] as it is written, and a `notifications/progress` goes to
//! its call's [`ProgressOutlet`] the moment it is read, before anything read after it — the
//! call's own answer included — reaches rmcp (which runs each notification callback in a task of
//! its own, so progress passed on from there can fall behind the answer).
//!
//! Invariant: progress the upstream sent before a call's answer is in that call's outlet before
//! the call returns; progress reaches only the call whose token it carries, on the connection the
//! call went out on; the tap never waits (an outlet takes progress or drops it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use rmcp::model::{
    ClientRequest, GetExtensions, GetMeta, JsonRpcRequest, NumberOrString, ProgressNotificationParam, ProgressToken,
};

use crate::host::ProgressOutlet;

/// Put on a request (its extensions) that wants its progress: the tap registers the outlet under
/// the token rmcp gave the request as the request is written, before the upstream can answer.
/// Weak: the call owns its outlet, and progress stops reaching it when the call is over.
#[derive(Clone)]
pub(crate) struct ProgressClaim(pub Weak<dyn ProgressOutlet>);

/// One connection's calls that want their progress, by the token their request carries on the
/// wire (one per request on a connection, so two hosts' calls never share one).
///
/// rmcp numbers a request's progress token after its request id, and rmcp-based servers stamp
/// their own counter the same way on what they send, so a number could name another host's call
/// by chance. The tokens the upstream sees are therefore this connection's random prefix and
/// rmcp's token ([`ProgressRoutes::on_wire`]): nothing the upstream did not read from a request
/// of ours names one of our calls.
#[derive(Clone)]
pub(crate) struct ProgressRoutes {
    calls: Arc<Mutex<HashMap<ProgressToken, Weak<dyn ProgressOutlet>>>>,
    prefix: Arc<str>,
}

impl Default for ProgressRoutes {
    fn default() -> ProgressRoutes {
        let prefix = format!("{:032x}", rand::random::<u128>()).into();
        ProgressRoutes { calls: Arc::default(), prefix }
    }
}

impl ProgressRoutes {
    /// The token a request whose rmcp token is `token` carries to the upstream.
    pub fn on_wire(&self, token: &ProgressToken) -> ProgressToken {
        let local = match &token.0 {
            NumberOrString::Number(n) => format!("n{n}"),
            NumberOrString::String(s) => format!("s{s}"),
        };
        ProgressToken(NumberOrString::String(format!("{}.{local}", self.prefix).into()))
    }

    /// A request is written: its progress token (rmcp's) becomes the one of [`Self::on_wire`].
    pub(super) fn stamp(&self, request: &mut JsonRpcRequest<ClientRequest>) {
        let meta = request.request.get_meta_mut();
        if let Some(token) = meta.get_progress_token() {
            meta.set_progress_token(self.on_wire(&token));
        }
    }

    /// Progress for `token` goes to `outlet` while the outlet lives; calls that are over are
    /// forgotten on the way.
    fn register(&self, token: ProgressToken, outlet: Weak<dyn ProgressOutlet>) {
        let mut calls = self.calls.lock().expect("progress lock");
        calls.retain(|_, outlet| outlet.strong_count() > 0);
        calls.insert(token, outlet);
    }

    /// The call whose rmcp token is `token` is over: forget it.
    pub fn forget(&self, token: &ProgressToken) {
        self.calls.lock().expect("progress lock").remove(&self.on_wire(token));
    }

    /// A `tools/call` that claims its progress is registered before it is written.
    pub(super) fn claim(&self, request: &JsonRpcRequest<ClientRequest>) {
        let ClientRequest::CallToolRequest(call) = &request.request else { return };
        let Some(ProgressClaim(outlet)) = call.extensions().get::<ProgressClaim>() else { return };
        if let Some(token) = request.request.get_meta().get_progress_token() {
            self.register(token, outlet.clone());
        }
    }

    /// Progress the upstream sent: to its call, if one of ours waits for it (else dropped).
    pub(super) fn deliver(&self, progress: ProgressNotificationParam) {
        let calls = self.calls.lock().expect("progress lock");
        if let Some(outlet) = calls.get(&progress.progress_token).and_then(Weak::upgrade) {
            // `send` never waits, so holding the lock is short.
            outlet.send(progress);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.calls.lock().expect("progress lock").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Collect(Mutex<Vec<f64>>);

    impl ProgressOutlet for Collect {
        fn send(&self, progress: ProgressNotificationParam) {
            self.0.lock().unwrap().push(progress.progress);
        }
    }

    fn progress(token: i64, value: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(token)), value)
    }

    #[test]
    fn progress_goes_only_to_its_call_while_the_call_waits() {
        let routes = ProgressRoutes::default();
        let other_connection = ProgressRoutes::default();
        let outlet = Arc::new(Collect(Mutex::default()));
        let weak = Arc::downgrade(&(outlet.clone() as Arc<dyn ProgressOutlet>));
        let (six, seven) = (ProgressToken(NumberOrString::Number(6)), ProgressToken(NumberOrString::Number(7)));
        routes.register(routes.on_wire(&six), weak);
        routes.deliver(ProgressNotificationParam::new(routes.on_wire(&six), 1.0));
        other_connection.deliver(ProgressNotificationParam::new(routes.on_wire(&six), 2.0));
        routes.deliver(ProgressNotificationParam::new(routes.on_wire(&seven), 3.0));
        routes.deliver(progress(6, 5.0));
        assert_eq!(*outlet.0.lock().unwrap(), [1.0], "only the token on the wire, on its connection");
        routes.forget(&six);
        assert_eq!(routes.len(), 0);
        routes.deliver(ProgressNotificationParam::new(routes.on_wire(&six), 4.0));
        assert_eq!(*outlet.0.lock().unwrap(), [1.0]);
    }

    #[test]
    fn tokens_on_the_wire_are_the_connections_own() {
        let (routes, other) = (ProgressRoutes::default(), ProgressRoutes::default());
        let one = ProgressToken(NumberOrString::Number(1));
        assert_ne!(routes.on_wire(&one), one, "not rmcp's number");
        assert_ne!(routes.on_wire(&one), other.on_wire(&one), "another connection's differ");
        assert_eq!(routes.on_wire(&one), routes.on_wire(&one));
        let text = ProgressToken(NumberOrString::String("1".into()));
        assert_ne!(routes.on_wire(&one), routes.on_wire(&text), "a number and a string stay apart");
    }

    #[test]
    fn a_call_that_is_over_gets_no_progress_and_is_forgotten() {
        let routes = ProgressRoutes::default();
        let outlet: Arc<dyn ProgressOutlet> = Arc::new(Collect(Mutex::default()));
        routes.register(ProgressToken(NumberOrString::Number(1)), Arc::downgrade(&outlet));
        drop(outlet);
        routes.deliver(progress(1, 1.0));
        let live: Arc<dyn ProgressOutlet> = Arc::new(Collect(Mutex::default()));
        routes.register(ProgressToken(NumberOrString::Number(2)), Arc::downgrade(&live));
        assert_eq!(routes.len(), 1);
    }
}
