//! `[cluster]`: a host's answer reaches the replica that asked. A request this replica sends a
//! 2025 host (`sampling/createMessage`, `elicitation/create`, anything rmcp sends for a relayed
//! call) goes out with the id `<replica>.<n>` in place of rmcp's own, and is booked under `n`
//! with its session and rmcp's id. The host POSTs its answer as a new request, which the load
//! balancer may take to any replica:
//! - on the asking replica, the answer is taken if it came on the session that was asked, with
//!   rmcp's id put back;
//! - on another, it is published on the session news channel (`news`), as `answer <replica>
//!   <sealed>`: addressed to the asking replica, and sealed for it with the cluster's Redis
//!   key (bound to the channel and the addressee), together with the record key of the session
//!   it came on. Every replica hears it; the others drop it unread beyond the address, and the
//!   asking replica takes it on the same terms, as if it had come to it.
//!
//! Counters start at the time of start in microseconds, so an id is not reused across restarts.
//!
//! Invariant: an answer completes a request only if it came on the session that request was sent
//! to (a session id names its principal: the session gate checked it), and at most once; any
//! other answer is dropped, counted, and never reaches rmcp. No session id goes to Redis (the
//! record key, an HMAC of it, names the session), and no answer in clear.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rmcp::model::{
    ClientJsonRpcMessage, JsonRpcMessage, JsonRpcNotification, RequestId, ServerJsonRpcMessage, ServerNotification,
};
use rmcp::transport::streamable_http_server::session::SessionId;
use serde::{Deserialize, Serialize};

use super::ids::SessionIds;
use super::records::Records;
use crate::metrics::{AnswerOutcome, Metrics};

/// What session news calls a host's answer for another replica: `answer <replica> <sealed>`.
pub(crate) const ANSWER: &str = "answer";

/// Requests waiting for an answer, at most; past it the oldest is forgotten.
const MAX_ASKED: usize = 10_000;
/// A request not answered within this long is forgotten.
const ASKED_LIFETIME: Duration = Duration::from_secs(3600);

/// This replica's requests to hosts, and the way answers find them.
pub(crate) struct Answers {
    replica: String,
    next: AtomicU64,
    asked: Mutex<BTreeMap<u64, Asked>>,
    ids: SessionIds,
    records: Records,
    metrics: Metrics,
}

/// One request waiting for its answer.
struct Asked {
    session: SessionId,
    /// rmcp's own id of the request.
    id: RequestId,
    at: Instant,
}

/// A forwarded answer, as sealed for the asking replica.
#[derive(Serialize, Deserialize)]
struct Forwarded {
    /// The record key of the session the answer came on.
    session: String,
    answer: ClientJsonRpcMessage,
}

impl Answers {
    pub fn new(replica: &str, records: Records, metrics: Metrics) -> Self {
        let start = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
        Answers {
            replica: replica.to_owned(),
            next: AtomicU64::new(start),
            asked: Mutex::default(),
            ids: records.ids.clone(),
            records,
            metrics,
        }
    }

    /// `message` goes to the host of `session`: a request gets this replica's id, and is booked;
    /// a cancellation of one names it by that id (and the request is forgotten).
    pub fn ask(&self, session: &SessionId, message: &mut ServerJsonRpcMessage) {
        let request = match message {
            JsonRpcMessage::Request(request) => request,
            JsonRpcMessage::Notification(JsonRpcNotification {
                notification: ServerNotification::CancelledNotification(cancelled),
                ..
            }) => return self.cancelled(session, &mut cancelled.params.request_id),
            _ => return,
        };
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = std::mem::replace(&mut request.id, self.wire_id(n));
        let now = Instant::now();
        let mut asked = self.asked.lock().expect("asked lock");
        while asked.len() >= MAX_ASKED
            || asked.first_key_value().is_some_and(|(_, a)| now.saturating_duration_since(a.at) > ASKED_LIFETIME)
        {
            asked.pop_first();
        }
        asked.insert(n, Asked { session: session.clone(), id, at: now });
    }

    /// rmcp cancels its request `id` to the host of `session`: the host knows it by ours.
    fn cancelled(&self, session: &SessionId, id: &mut Option<RequestId>) {
        let Some(rmcp_id) = id.as_ref() else { return };
        let mut asked = self.asked.lock().expect("asked lock");
        let Some(n) = asked.iter().find(|(_, a)| a.session == *session && a.id == *rmcp_id).map(|(n, _)| *n) else {
            return;
        };
        asked.remove(&n);
        *id = Some(self.wire_id(n));
    }

    /// An answer a host POSTed here on `session`: what to hand rmcp (its id rmcp's again), or
    /// nothing (it was forwarded, or dropped).
    pub async fn route(&self, session: &SessionId, message: ClientJsonRpcMessage) -> Option<ClientJsonRpcMessage> {
        let Some((replica, n)) = answer_id(&message).and_then(parse) else {
            tracing::debug!("an answer to no request of this cluster was dropped");
            self.count(AnswerOutcome::Dropped);
            return None;
        };
        if replica == self.replica {
            let answer = self.take(n, |asked| asked.session == *session, message)?;
            self.count(AnswerOutcome::Local);
            return Some(answer);
        }
        let forwarded = Forwarded { session: self.ids.record_key(session), answer: message };
        let body = serde_json::to_vec(&forwarded).expect("a JSON-RPC message serialises");
        let news = format!("{ANSWER} {replica} {}", self.records.seal_news(ANSWER, &replica, &body));
        let published = self.records.publish(news).await;
        match published {
            Ok(()) if self.records.cluster().replicas().contains(&replica) => self.count(AnswerOutcome::Forwarded),
            _ => {
                tracing::debug!(replica = %replica, "an answer for a replica not seen alive (or Redis down) was dropped");
                self.count(AnswerOutcome::Unheard);
            }
        }
        None
    }

    /// Session news `answer <replica> <sealed>` (`news`, the part after `answer `): the session
    /// and answer to hand rmcp, if it is addressed to this replica and a request of that
    /// session waits for it. One addressed to another replica is left unread.
    pub fn open(&self, news: &str) -> Option<(SessionId, ClientJsonRpcMessage)> {
        let (to, sealed) = news.split_once(' ')?;
        if to != self.replica {
            return None;
        }
        let Some(body) = self.records.open_news(ANSWER, to, sealed) else {
            self.count(AnswerOutcome::Dropped);
            return None;
        };
        let Ok(Forwarded { session, answer }) = serde_json::from_slice::<Forwarded>(&body) else {
            self.count(AnswerOutcome::Dropped);
            return None;
        };
        let Some((replica, n)) = answer_id(&answer).and_then(parse) else {
            self.count(AnswerOutcome::Dropped);
            return None;
        };
        if replica != self.replica {
            self.count(AnswerOutcome::Dropped);
            return None;
        }
        let mut asking = None;
        let answer = self.take(
            n,
            |asked| {
                let same = self.ids.record_key(&asked.session) == session;
                asking = same.then(|| asked.session.clone());
                same
            },
            answer,
        )?;
        Some((asking?, answer))
    }

    /// A forwarded answer [`Answers::open`] gave was taken by its session here (`false`: the
    /// session has closed since).
    pub fn handed(&self, taken: bool) {
        self.count(if taken { AnswerOutcome::Delivered } else { AnswerOutcome::Dropped });
    }

    /// The request booked under `n`, if `matches` it: forgotten, and `answer` given its id.
    fn take(
        &self,
        n: u64,
        matches: impl FnOnce(&Asked) -> bool,
        mut answer: ClientJsonRpcMessage,
    ) -> Option<ClientJsonRpcMessage> {
        let id = {
            let mut asked = self.asked.lock().expect("asked lock");
            match asked.get(&n) {
                Some(waiting) if matches(waiting) => asked.remove(&n).map(|asked| asked.id),
                _ => None,
            }
        };
        let Some(id) = id else {
            tracing::debug!("an answer no request of this session waits for was dropped");
            self.count(AnswerOutcome::Dropped);
            return None;
        };
        match &mut answer {
            JsonRpcMessage::Response(response) => response.id = id,
            JsonRpcMessage::Error(error) => error.id = Some(id),
            _ => {}
        }
        Some(answer)
    }

    /// The id the host knows request `n` by.
    fn wire_id(&self, n: u64) -> RequestId {
        RequestId::String(format!("{}.{n}", self.replica).into())
    }

    fn count(&self, outcome: AnswerOutcome) {
        self.metrics.cluster_answer(&self.replica, outcome);
    }
}

/// The id an answer names.
fn answer_id(message: &ClientJsonRpcMessage) -> Option<&RequestId> {
    match message {
        JsonRpcMessage::Response(response) => Some(&response.id),
        JsonRpcMessage::Error(error) => error.id.as_ref(),
        _ => None,
    }
}

/// `<replica>.<n>` → (replica, n).
fn parse(id: &RequestId) -> Option<(String, u64)> {
    let RequestId::String(id) = id else { return None };
    let (replica, n) = id.rsplit_once('.')?;
    if replica.is_empty() || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((replica.to_owned(), n.parse().ok()?))
}

#[cfg(test)]
mod tests {
    #![allow(deprecated)] // Sampling is deprecated by SEP-2577 but still in the 2025 era.

    use rmcp::model::{ClientResult, CreateMessageResult, JsonRpcResponse, JsonRpcVersion2_0, SamplingMessage};
    use rmcp::model::{CreateMessageRequest, CreateMessageRequestParams, ServerRequest};

    use std::sync::Arc;

    use super::*;
    use crate::cluster::Cluster;
    use crate::config::{ClusterConfig, Secret};

    fn answers(replica: &str) -> Answers {
        let config = ClusterConfig {
            redis_url: Secret::new("redis://127.0.0.1:1/0"),
            redis_password: None,
            secret: Secret::new("a cluster secret of at least 32 bytes"),
            replica_id: replica.to_owned(),
            heartbeat: Duration::from_secs(1),
            replica_ttl: Duration::from_secs(3),
            ready_without_redis: true,
            advertise_url: None,
            peer_tls: None,
        };
        let metrics = Metrics::new();
        let cluster = Cluster::new(&config, metrics.clone()).expect("a cluster handle");
        let records = Records::new(cluster, Duration::from_secs(60), Duration::from_secs(60));
        Answers::new(replica, records, metrics)
    }

    /// rmcp's request `id`, as sent: its id on the wire.
    fn asked(answers: &Answers, session: &SessionId, id: i64) -> RequestId {
        let params = CreateMessageRequestParams::new(vec![SamplingMessage::user_text("hi")], 10);
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        let mut message = ServerJsonRpcMessage::request(request, RequestId::Number(id));
        answers.ask(session, &mut message);
        let JsonRpcMessage::Request(request) = message else { unreachable!() };
        request.id
    }

    fn answer(id: RequestId) -> ClientJsonRpcMessage {
        let result = CreateMessageResult::new(SamplingMessage::assistant_text("yes"), "m".into());
        JsonRpcMessage::Response(JsonRpcResponse {
            jsonrpc: JsonRpcVersion2_0,
            id,
            result: ClientResult::CreateMessageResult(Box::new(result)),
        })
    }

    fn check(route: Option<ClientJsonRpcMessage>, expected: Option<RequestId>) {
        assert_eq!(route.as_ref().and_then(answer_id).cloned(), expected);
    }

    #[tokio::test]
    async fn an_answer_completes_its_request_once_and_only_on_the_session_asked() {
        let answers = answers("replica-0");
        let (mine, other): (SessionId, SessionId) = (Arc::from("mine"), Arc::from("other"));
        let wire = asked(&answers, &mine, 4);
        assert!(matches!(&wire, RequestId::String(id) if id.starts_with("replica-0.")), "{wire:?}");
        check(answers.route(&other, answer(wire.clone())).await, None);
        check(answers.route(&mine, answer(RequestId::Number(4))).await, None);
        check(answers.route(&mine, answer(wire.clone())).await, Some(RequestId::Number(4)));
        check(answers.route(&mine, answer(wire)).await, None);
        assert_ne!(asked(&answers, &mine, 5), asked(&answers, &mine, 5), "ids are not reused");
    }

    #[tokio::test]
    async fn an_answer_on_the_news_is_read_only_by_the_replica_it_is_sealed_and_addressed_to() {
        let (asking, other) = (answers("replica-0"), answers("replica-1"));
        let session: SessionId = Arc::from("mine");
        let wire = asked(&asking, &session, 4);
        let forwarded = Forwarded { session: asking.ids.record_key(&session), answer: answer(wire) };
        let body = serde_json::to_vec(&forwarded).expect("serialises");
        let sealed_for = |to: &str| other.records.seal_news(ANSWER, to, &body);
        assert!(other.open(&format!("replica-0 {}", sealed_for("replica-0"))).is_none(), "left unread elsewhere");
        assert!(asking.open(&format!("replica-1 {}", sealed_for("replica-1"))).is_none(), "addressed to another");
        assert!(asking.open(&format!("replica-0 {}", sealed_for("replica-1"))).is_none(), "sealed for another");
        assert!(asking.open("replica-0 eyJpbi1jbGVhciI6MX0").is_none(), "not sealed");
        let news = format!("replica-0 {}", sealed_for("replica-0"));
        let (to, taken) = asking.open(&news).expect("the asking replica takes it");
        assert_eq!(to, session);
        check(Some(taken), Some(RequestId::Number(4)));
        assert!(asking.open(&news).is_none(), "once");
    }

    #[test]
    fn only_a_replica_and_a_counter_parse() {
        let id = |s: &str| RequestId::String(s.into());
        assert_eq!(parse(&id("replica-0.17")), Some(("replica-0".to_owned(), 17)));
        assert_eq!(parse(&id("a.b.c.9")), Some(("a.b.c".to_owned(), 9)));
        for bad in ["17", ".17", "r.", "r.+1", "r.-1", "r.1x", "r.99999999999999999999999"] {
            assert_eq!(parse(&id(bad)), None, "{bad}");
        }
        assert_eq!(parse(&RequestId::Number(3)), None);
    }
}
