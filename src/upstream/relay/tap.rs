//! The transport side of the relay (see `super`): each connection's transport is wrapped so
//! that a routed request's relay is booked as the request is written, and a log message is
//! handed to its call's host the moment it is read — before anything read after it, the call's
//! answer included, reaches rmcp.

#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.

use std::sync::Arc;

use rmcp::model::{GetExtensions, JsonRpcMessage, JsonRpcNotification, ServerNotification};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use super::{RelayBook, RelayClaim};

/// A transport whose incoming log messages go straight to their call's host (see the module
/// doc), and whose outgoing routed requests book their [`RelayClaim`].
pub(crate) struct Relayed<T> {
    transport: T,
    relays: Arc<RelayBook>,
    /// Streamable HTTP: a call's messages carry the guard's mark; stdio: they carry nothing.
    over_http: bool,
}

impl<T> Relayed<T> {
    pub fn new(transport: T, relays: Arc<RelayBook>, over_http: bool) -> Self {
        Relayed { transport, relays, over_http }
    }

    /// A request that claims relaying is booked before it is written.
    fn claim(&self, item: &TxJsonRpcMessage<RoleClient>) {
        let JsonRpcMessage::Request(request) = item else { return };
        if let Some(RelayClaim(relay)) = request.request.extensions().get::<RelayClaim>() {
            self.relays.book(request.id.clone(), relay.clone());
        }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Relayed<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.claim(&item);
        self.transport.send(item)
    }

    /// The next message that is not a log message; log messages read on the way are relayed.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            match self.transport.receive().await? {
                JsonRpcMessage::Notification(JsonRpcNotification { jsonrpc, notification }) => match notification {
                    ServerNotification::LoggingMessageNotification(log) => self.relays.deliver_log(log, self.over_http),
                    notification => {
                        return Some(JsonRpcMessage::Notification(JsonRpcNotification { jsonrpc, notification }));
                    }
                },
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
    use crate::upstream::relay::tests::Named;
    use crate::upstream::relay::{CALL_KEY, HostRelay};
    use rmcp::model::RequestId;
    use serde_json::json;

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

    /// A `tools/call` as rmcp writes it, with a claim for `relay` when given.
    fn call(id: i64, relay: Option<&Arc<Named>>) -> TxJsonRpcMessage<RoleClient> {
        let mut request = rmcp::model::CallToolRequest::new(rmcp::model::CallToolRequestParams::new("t"));
        if let Some(relay) = relay {
            let relay: Arc<dyn HostRelay> = relay.clone();
            request.extensions.insert(RelayClaim(Arc::downgrade(&relay)));
        }
        JsonRpcMessage::request(rmcp::model::ClientRequest::CallToolRequest(request), RequestId::Number(id))
    }

    fn log_of(data: &str, call: Option<i64>) -> serde_json::Value {
        let meta = call.map_or(json!({}), |call| json!({CALL_KEY: call}));
        json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": data, "_meta": meta}})
    }

    #[tokio::test]
    async fn log_messages_reach_their_call_before_anything_read_after_them() {
        let book = Arc::new(RelayBook::default());
        let (a, b) = (Arc::new(Named::default()), Arc::new(Named::default()));
        let answer = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}});
        let script =
            [log_of("a1", Some(1)), log_of("b1", Some(2)), log_of("nobody", None), answer, log_of("a2", Some(1))];
        let mut transport = Relayed::new(Script(script.into()), book.clone(), true);
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
    async fn over_stdio_a_log_message_goes_only_to_a_lone_call_and_marks_count_for_nothing() {
        let book = Arc::new(RelayBook::default());
        let a = Arc::new(Named::default());
        let script = [log_of("alone", None), log_of("forged", Some(9))];
        let mut transport = Relayed::new(Script(script.into()), book.clone(), false);
        let _a = book.register(RequestId::Number(1), a.clone());
        assert!(transport.receive().await.is_none());
        assert_eq!(a.heard(), ["alone", "forged"], "a lone call takes what is unattributed");
        let b = Arc::new(Named::default());
        let _b = book.register(RequestId::Number(2), b.clone());
        let mut transport = Relayed::new(Script([log_of("two", None)].into()), book.clone(), false);
        assert!(transport.receive().await.is_none());
        assert_eq!((a.heard().len(), b.heard().len()), (2, 0), "two calls: ambiguous, dropped");
    }
}
