//! Unit tests of the relay book: attribution, tenancy, the HTTP guard's marks.

use super::*;
use futures::future::BoxFuture;
use rmcp::ErrorData;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult, LoggingLevel,
    LoggingMessageNotificationParam,
};
use serde_json::json;

/// A host that keeps the data of the log messages it is given.
#[derive(Default)]
pub(crate) struct Named(Mutex<Vec<String>>);

impl Named {
    pub(crate) fn heard(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl HostRelay for Named {
    fn sample(&self, _: CreateMessageRequestParams) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        Box::pin(async { Err(ErrorData::internal_error("unused", None)) })
    }
    fn elicit(&self, _: ElicitRequestParams) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
        Box::pin(async { Err(ErrorData::internal_error("unused", None)) })
    }
    fn log(&self, params: LoggingMessageNotificationParam) {
        assert!(params.meta.as_ref().is_none_or(|meta| !meta.0.0.contains_key(CALL_KEY)), "the mark is removed");
        self.0.lock().unwrap().push(params.data.as_str().unwrap_or_default().into());
    }
    fn log_level(&self) -> Option<LoggingLevel> {
        None
    }
}

fn name_of(found: Option<Arc<dyn HostRelay>>) -> Option<usize> {
    found.map(|relay| Arc::as_ptr(&relay) as *const () as usize)
}

#[test]
fn a_message_goes_only_to_the_call_it_names_and_an_unnamed_one_nowhere() {
    let counted = Arc::new(Mutex::new(Vec::new()));
    let book = {
        let counted = counted.clone();
        Arc::new(RelayBook::counted(move |kind| counted.lock().unwrap().push(kind)))
    };
    let (a, b): (Arc<dyn HostRelay>, Arc<dyn HostRelay>) = (Arc::new(Named::default()), Arc::new(Named::default()));
    let first = book.register(RequestId::Number(1), a.clone());
    assert!(book.find_for(&Origin::Unknown, "log").is_none(), "a lone call in flight is no evidence");
    book.book(RequestId::Number(2), Arc::downgrade(&b), Some(ProgressToken(NumberOrString::Number(7))));
    let second = book.register(RequestId::Number(2), b.clone());
    assert_eq!(name_of(book.find(&Origin::Call(RequestId::Number(2)))), name_of(Some(b.clone())));
    assert_eq!(name_of(book.find(&Origin::Call(RequestId::Number(1)))), name_of(Some(a)));
    let token = |n| Origin::Token(ProgressToken(NumberOrString::Number(n)));
    assert_eq!(name_of(book.find(&token(7))), name_of(Some(b)), "registering kept the claimed token");
    assert!(book.find_for(&token(1), "sampling").is_none(), "a request id is not a token");
    assert!(book.find_for(&Origin::Unassociated, "elicitation").is_none());
    assert!(book.find(&Origin::Call(RequestId::Number(3))).is_none());
    assert_eq!(*counted.lock().unwrap(), ["log", "sampling", "elicitation"]);
    drop((first, second));
    assert_eq!(book.len(), 0);
    assert!(book.find(&Origin::Call(RequestId::Number(2))).is_none());
    assert!(book.find(&token(7)).is_none());
}

/// A host call of a known principal.
struct Of(Arc<str>);

impl HostRelay for Of {
    fn sample(&self, _: CreateMessageRequestParams) -> BoxFuture<'static, Result<CreateMessageResult, ErrorData>> {
        Box::pin(async { Err(ErrorData::internal_error("unused", None)) })
    }
    fn elicit(&self, _: ElicitRequestParams) -> BoxFuture<'static, Result<ElicitResult, ErrorData>> {
        Box::pin(async { Err(ErrorData::internal_error("unused", None)) })
    }
    fn log(&self, _: LoggingMessageNotificationParam) {}
    fn log_level(&self) -> Option<LoggingLevel> {
        None
    }
    fn tenant(&self) -> Option<Arc<str>> {
        Some(self.0.clone())
    }
}

#[test]
fn an_unnamed_message_reaches_a_lone_call_only_while_one_principal_ever_called() {
    let book = Arc::new(RelayBook::default());
    let alice: Arc<dyn HostRelay> = Arc::new(Of("alice".into()));
    let first = book.register(RequestId::Number(1), alice.clone());
    assert_eq!(name_of(book.find(&Origin::Unknown)), name_of(Some(alice.clone())), "alice's own upstream");
    let again: Arc<dyn HostRelay> = Arc::new(Of("alice".into()));
    let second = book.register(RequestId::Number(2), again);
    assert!(book.find(&Origin::Unknown).is_none(), "two calls in flight: no evidence which");
    drop(second);
    assert_eq!(name_of(book.find(&Origin::Unknown)), name_of(Some(alice)));
    drop(first);
    let bob: Arc<dyn HostRelay> = Arc::new(Of("bob".into()));
    let _third = book.register(RequestId::Number(3), bob);
    assert!(book.find(&Origin::Unknown).is_none(), "alice's late message must not reach bob");
    assert!(book.find(&Origin::Unassociated).is_none());
}

#[test]
fn the_guard_marks_notifications_of_a_call_and_unmarks_all_others() {
    let check = |mut message: serde_json::Value, call: Option<RequestId>, expected: serde_json::Value| {
        mark_notification(&mut message, call.as_ref());
        assert_eq!(message, expected);
    };
    let log = |meta: serde_json::Value| json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x", "_meta": meta}});
    let bare = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}});
    check(bare.clone(), Some(RequestId::Number(4)), log(json!({CALL_KEY: 4})));
    check(log(json!({CALL_KEY: 9, "k": 1})), Some(RequestId::Number(4)), log(json!({CALL_KEY: 4, "k": 1})));
    check(log(json!({CALL_KEY: 9})), None, bare.clone());
    check(log(json!({CALL_KEY: 9, "k": 1})), None, log(json!({"k": 1})));
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {}});
    check(request.clone(), Some(RequestId::Number(4)), request);
}

#[test]
fn a_notifications_origin_is_read_and_taken_out() {
    let mut meta = NotificationMetaObject::default();
    meta.0.0.insert(CALL_KEY.into(), json!("s-1"));
    meta.0.0.insert("k".into(), json!(1));
    meta.0.0.insert(PROGRESS_TOKEN_KEY.into(), json!(5));
    let origin = notification_origin(Some(&mut meta.clone()), true);
    assert_eq!(origin, Origin::Call(RequestId::String("s-1".into())), "over HTTP the stream decides");
    let origin = notification_origin(Some(&mut meta), false);
    assert_eq!(origin, Origin::Token(ProgressToken(NumberOrString::Number(5))), "over stdio the token");
    assert_eq!(meta.0.0.keys().collect::<Vec<_>>(), ["k"], "both taken out");
    assert_eq!(notification_origin(Some(&mut meta), true), Origin::Unassociated);
    assert_eq!(notification_origin(Some(&mut meta), false), Origin::Unknown);
    assert_eq!(notification_origin(None, false), Origin::Unknown);
}

#[test]
fn a_claim_whose_call_is_over_relays_nothing() {
    let book = Arc::new(RelayBook::default());
    let gone: Arc<dyn HostRelay> = Arc::new(Named::default());
    book.book(RequestId::Number(1), Arc::downgrade(&gone), None);
    drop(gone);
    assert!(book.find(&Origin::Call(RequestId::Number(1))).is_none());
    assert!(book.find(&Origin::Unknown).is_none());
    let live: Arc<dyn HostRelay> = Arc::new(Named::default());
    let _ticket = book.register(RequestId::Number(2), live);
    assert_eq!(book.len(), 1, "forgotten on the way");
}

#[test]
fn an_unnamed_request_skips_a_call_whose_host_is_being_asked() {
    let book = Arc::new(RelayBook::default());
    let (parked, other): (Arc<dyn HostRelay>, Arc<dyn HostRelay>) =
        (Arc::new(Of("alice".into())), Arc::new(Of("alice".into())));
    let _first = book.register(RequestId::Number(1), parked.clone());
    let asking = book.relay_request(&Origin::Unknown, "sampling").expect("the lone call");
    assert_eq!(name_of(Some(asking.host.clone())), name_of(Some(parked.clone())));
    let _second = book.register(RequestId::Number(2), other.clone());
    let next = book.relay_request(&Origin::Unknown, "sampling").expect("the call not waiting");
    assert_eq!(name_of(Some(next.host.clone())), name_of(Some(other)), "not the call that waits on its host");
    assert!(book.find(&Origin::Unknown).is_none(), "a log message still needs the lone call");
    drop(next);
    assert!(book.relay_request(&Origin::Unknown, "sampling").is_some(), "the other call is free again");
    drop(asking);
    assert!(book.relay_request(&Origin::Unknown, "sampling").is_none(), "two calls, neither waiting: no evidence");
    let stamped = Origin::Token(ProgressToken(NumberOrString::Number(99)));
    assert!(book.relay_request(&stamped, "sampling").is_none(), "a token naming no call is as unnamed");
}

#[test]
fn a_refusal_is_kept_by_its_call_and_an_unattributed_one_by_every_call() {
    let book = Arc::new(RelayBook::default());
    let (alice, bob): (Arc<dyn HostRelay>, Arc<dyn HostRelay>) =
        (Arc::new(Of("alice".into())), Arc::new(Of("bob".into())));
    let _first = book.register(RequestId::Number(1), alice);
    let relayed = book.relay_request(&Origin::Unknown, "elicitation").expect("the only principal's lone call");
    relayed.refused(Refusal::Undeclared("elicitation"));
    assert_eq!(book.refusal_of(&RequestId::Number(1)), Some(Refusal::Undeclared("elicitation")));
    drop(relayed);
    let _second = book.register(RequestId::Number(2), bob);
    assert!(book.relay_request(&Origin::Unknown, "sampling").is_none(), "two principals");
    for id in [1, 2] {
        assert_eq!(book.refusal_of(&RequestId::Number(id)), Some(Refusal::Unattributed("sampling")));
    }
    let said = Refusal::Unattributed("sampling").describe("fx");
    assert!(said.contains("without naming its call") && !said.contains("alice") && !said.contains("bob"), "{said}");
    assert!(said.contains("set `session = \"per-principal\"` on upstream `fx`"), "says what to set: {said}");
}
