//! Each connection's transport, tapped once ([`Tapped`]) for what belongs to a routed call:
//! - as a request is written, what it claims is booked before the upstream can answer it: its
//!   progress token is replaced by one of the connection's own (random prefix, see
//!   `ProgressRoutes`), its progress outlet is booked under it (`progress`), its host's relay
//!   under its request id and that token (`relay`);
//! - as messages are read, `notifications/progress` and `notifications/message` are taken out
//!   and handed to their call right there, before anything read after them — the call's own
//!   answer included — reaches rmcp. rmcp runs each notification callback in a task of its own
//!   and passes an answer to its waiting caller at once, so a message passed on from a callback
//!   could arrive after its call was over (and be dropped).
//!
//! Invariant: progress and log messages the upstream sent before a call's answer are with that
//! call's outlet or relay before the call returns; the tap never waits (outlets and relays take
//! a message or drop it).

#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.

use std::sync::Arc;

use rmcp::model::{JsonRpcMessage, JsonRpcNotification, ServerNotification};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use super::progress::ProgressRoutes;
use super::relay::RelayBook;

/// Where a connection's calls' messages go.
#[derive(Clone)]
pub(crate) struct Taps {
    pub progress: ProgressRoutes,
    pub relays: Arc<RelayBook>,
    /// Streamable HTTP: a call's log messages carry the guard's mark; stdio: they carry nothing.
    pub over_http: bool,
}

/// A transport tapped with [`Taps`] (see the module doc).
pub(crate) struct Tapped<T> {
    transport: T,
    taps: Taps,
}

impl Taps {
    pub fn on<T>(&self, transport: T) -> Tapped<T> {
        Tapped { transport, taps: self.clone() }
    }

    /// A request's progress token is made the connection's own, and what the request claims is
    /// booked, before it is written.
    fn claim(&self, item: &mut TxJsonRpcMessage<RoleClient>) {
        let JsonRpcMessage::Request(request) = item else { return };
        self.progress.stamp(request);
        self.progress.claim(request);
        self.relays.claim(request);
    }

    /// A notification for a call goes to it (`None`); any other comes back.
    fn take(&self, notification: ServerNotification) -> Option<ServerNotification> {
        match notification {
            ServerNotification::ProgressNotification(progress) => self.progress.deliver(progress.params),
            ServerNotification::LoggingMessageNotification(log) => self.relays.deliver_log(log, self.over_http),
            notification => return Some(notification),
        }
        None
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Tapped<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        mut item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.taps.claim(&mut item);
        self.transport.send(item)
    }

    /// The next message that is not a call's progress or log message; those read on the way
    /// are delivered first.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            match self.transport.receive().await? {
                JsonRpcMessage::Notification(JsonRpcNotification { jsonrpc, notification }) => {
                    if let Some(notification) = self.taps.take(notification) {
                        return Some(JsonRpcMessage::Notification(JsonRpcNotification { jsonrpc, notification }));
                    }
                }
                message => return Some(message),
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.transport.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{HostRelay, ProgressOutlet};
    use crate::upstream::progress::ProgressClaim;
    use crate::upstream::relay::tests::Named;
    use crate::upstream::relay::{CALL_KEY, RelayClaim};
    use rmcp::model::{GetMeta, ProgressNotificationParam, ProgressToken, RequestId};
    use serde_json::json;
    use std::sync::Mutex;

    /// An upstream connection's incoming side, scripted; what is sent goes nowhere.
    struct Script(std::collections::VecDeque<serde_json::Value>);

    impl Transport<RoleClient> for Script {
        type Error = std::io::Error;

        fn send(&mut self, _: TxJsonRpcMessage<RoleClient>) -> impl Future<Output = Result<(), Self::Error>> + 'static {
            std::future::ready(Ok(()))
        }

        async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
            Some(serde_json::from_value(self.0.pop_front()?).expect("a server message"))
        }

        async fn close(&mut self) -> Result<(), Self::Error> {
            Ok(())
        }
    }

    struct Collect(Mutex<Vec<f64>>);

    impl ProgressOutlet for Collect {
        fn send(&self, progress: ProgressNotificationParam) {
            self.0.lock().unwrap().push(progress.progress);
        }
    }

    fn taps(relays: &Arc<RelayBook>, over_http: bool) -> Taps {
        Taps { progress: ProgressRoutes::default(), relays: relays.clone(), over_http }
    }

    /// A `tools/call` as rmcp writes it (progress token = id), with a claim for `relay` when given.
    fn call(id: i64, relay: Option<&Arc<Named>>) -> TxJsonRpcMessage<RoleClient> {
        let mut request = rmcp::model::CallToolRequest::new(rmcp::model::CallToolRequestParams::new("t"));
        if let Some(relay) = relay {
            let relay: Arc<dyn HostRelay> = relay.clone();
            request.extensions.insert(RelayClaim(Arc::downgrade(&relay)));
        }
        let mut request = rmcp::model::ClientRequest::CallToolRequest(request);
        request.get_meta_mut().set_progress_token(ProgressToken(RequestId::Number(id)));
        JsonRpcMessage::request(request, RequestId::Number(id))
    }

    fn log_of(data: &str, call: Option<i64>) -> serde_json::Value {
        let meta = call.map_or(json!({}), |call| json!({CALL_KEY: call}));
        json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": data, "_meta": meta}})
    }

    /// The token the upstream saw on request `id` of the connection `taps` serve.
    fn on_wire(taps: &Taps, id: i64) -> serde_json::Value {
        serde_json::to_value(taps.progress.on_wire(&ProgressToken(RequestId::Number(id)))).unwrap()
    }

    fn progress_of(token: serde_json::Value, progress: f64) -> serde_json::Value {
        json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": progress}})
    }

    #[tokio::test]
    async fn log_messages_reach_their_call_before_anything_read_after_them() {
        let book = Arc::new(RelayBook::default());
        let (a, b) = (Arc::new(Named::default()), Arc::new(Named::default()));
        let answer = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}});
        let script =
            [log_of("a1", Some(1)), log_of("b1", Some(2)), log_of("nobody", None), answer, log_of("a2", Some(1))];
        let mut transport = taps(&book, true).on(Script(script.into()));
        let unclaimed = call(3, None);
        for request in [call(1, Some(&a)), call(2, Some(&b)), unclaimed] {
            transport.send(request).await.unwrap();
        }
        assert_eq!(book.len(), 2, "claims are booked as the requests are written");
        let keep: [Arc<dyn HostRelay>; 2] = [a.clone(), b.clone()];
        let (first, _second) = (
            book.register(RequestId::Number(1), keep[0].clone()),
            book.register(RequestId::Number(2), keep[1].clone()),
        );
        let read = transport.receive().await.expect("the answer");
        assert!(matches!(read, JsonRpcMessage::Response(_)), "log messages are not passed on: {read:?}");
        assert_eq!((a.heard(), b.heard()), (vec!["a1".to_string()], vec!["b1".to_string()]), "before the answer");
        drop(first);
        assert!(transport.receive().await.is_none());
        assert_eq!(a.heard(), ["a1"], "the call is over: nothing more");
    }

    #[tokio::test]
    async fn over_stdio_a_log_message_goes_only_to_the_call_its_progress_token_names() {
        let book = Arc::new(RelayBook::default());
        let (a, b) = (Arc::new(Named::default()), Arc::new(Named::default()));
        let named = |data: &str, token: serde_json::Value| {
            json!({"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {"level": "info", "data": data, "_meta": {"progressToken": token}}})
        };
        let taps = taps(&book, false);
        let script = [
            log_of("unnamed", None),
            log_of("forged", Some(1)),
            named("stamped", json!(1)),
            named("mine", on_wire(&taps, 1)),
            named("late", on_wire(&taps, 9)),
        ];
        let mut transport = taps.on(Script(script.into()));
        transport.send(call(1, Some(&a))).await.unwrap();
        let _a = book.register(RequestId::Number(1), a.clone());
        assert!(transport.receive().await.is_none());
        assert_eq!(a.heard(), ["mine"], "a lone call takes only what names it");
        let _b = book.register(RequestId::Number(2), b.clone());
        assert!(b.heard().is_empty());
    }

    #[tokio::test]
    async fn progress_reaches_its_call_before_anything_read_after_it_and_other_notifications_pass() {
        let book = Arc::new(RelayBook::default());
        let outlet = Arc::new(Collect(Mutex::default()));
        let answer = json!({"jsonrpc": "2.0", "id": 5, "result": {"content": []}});
        let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
        let taps = taps(&book, true);
        let (five, six) = (on_wire(&taps, 5), on_wire(&taps, 6));
        let script = [progress_of(five.clone(), 1.0), progress_of(json!(5), 7.0), progress_of(six, 9.0), changed];
        let script = script.into_iter().chain([progress_of(five, 2.0), answer]);
        let mut transport = taps.on(Script(script.collect()));
        let mut claimed = call(5, None);
        if let JsonRpcMessage::Request(request) = &mut claimed
            && let rmcp::model::ClientRequest::CallToolRequest(call) = &mut request.request
        {
            let weak = Arc::downgrade(&(outlet.clone() as Arc<dyn ProgressOutlet>));
            call.extensions.insert(ProgressClaim(weak));
        }
        transport.send(claimed).await.unwrap();
        let read = transport.receive().await.expect("the list change");
        assert!(matches!(read, JsonRpcMessage::Notification(_)), "other notifications pass: {read:?}");
        assert_eq!(*outlet.0.lock().unwrap(), [1.0], "only its own token's");
        let read = transport.receive().await.expect("the answer");
        assert!(matches!(read, JsonRpcMessage::Response(_)), "{read:?}");
        assert_eq!(*outlet.0.lock().unwrap(), [1.0, 2.0], "before the answer");
    }
}
