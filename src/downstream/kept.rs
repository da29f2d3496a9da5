//! `[cluster]`: the answers of 2025 hosts' calls kept for a resumption on another replica. A
//! host whose request stream is cut (its connection dropped, or the replica serving it died)
//! resumes it with `Last-Event-ID` on whichever replica the balancer picks (`shared::resumed`),
//! which asks on the session news channel who keeps the call's answer under its key (derived
//! from the session and the request id, the same on every replica; `shared::keepers`). Two
//! replicas may keep it:
//! - the replica serving the host's stream, for each `tools/call` and `prompts/get` on it
//!   ([`KeptCalls::stream_opened`], [`KeptCalls::answering`]): its answer as it was written
//!   for the host, kept for [`KEPT_FOR`] after the call ended. Even one that went out on the
//!   stream is kept: a balancer between host and replica hears of a host that went away only
//!   when a write to it fails, so the replica may write the whole answer to a host that is gone
//!   (such answers are the first to make room when [`MAX_KEPT`] are kept);
//! - the replica running such a call for the serving one (the owner of a per-principal or
//!   per-host upstream session, [`KeptCalls::run`]): the call runs on to its end here whatever
//!   becomes of the forwarded reply (unless the serving replica cancels it: `owned`), and its
//!   answer, as the upstream gave it, is kept for [`KEPT_FOR`] when nobody took it (the serving
//!   replica went away).
//!
//! Invariant: a kept answer is handed only to a request of the principal whose call it is, at
//! most [`MAX_KEPT`] calls are kept at once (past it a call runs as before, ending with its
//! reply or stream), none outlives [`KEPT_FOR`] after its call (and stream) ended, and one kept under a
//! stream's key on the replica serving that stream is that stream's own answer, already
//! written for its host (no other replica keeps one under that key for that stream).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::{oneshot, watch};

use crate::cluster::peers::Answer;
use crate::error::{ProxyError, RemoteError};
use crate::tools::Ran;

/// A kept call's answer, or its error, as the replica keeping it has it.
pub(super) type KeptLine = Result<Answer, RemoteError>;

/// How long an answer is kept after its call ended (a served call's: and its stream).
pub(super) const KEPT_FOR: Duration = Duration::from_secs(60);
/// How long a resumption waits for a kept call to end.
pub(super) const COLLECT_WAIT: Duration = Duration::from_secs(600);
/// Calls kept (running or answered) at once.
pub(super) const MAX_KEPT: usize = 1024;

/// The calls served here, or run here for other replicas, by key; shared behind an `Arc`.
#[derive(Default)]
pub(super) struct KeptCalls {
    calls: Mutex<HashMap<String, Kept>>,
}

/// A kept call's answer, once it ended.
pub(super) struct KeptAnswer(watch::Receiver<Option<KeptLine>>);

impl KeptAnswer {
    /// The answer: at once when the call is over, else when it ends (waiting at most `wait`).
    pub async fn wait(mut self, wait: Duration) -> Option<KeptLine> {
        let ended = tokio::time::timeout(wait, self.0.wait_for(Option::is_some)).await.ok()?.ok()?;
        ended.clone()
    }
}

/// One call: whose, on which upstream, its answer once it ended, and until when it is kept
/// (none: while it runs or its reply or stream may still take it).
struct Kept {
    principal: String,
    upstream: String,
    answer: watch::Receiver<Option<KeptLine>>,
    until: Option<Instant>,
    /// A call whose host's stream is served here.
    served: Option<Served>,
}

/// A served call's way in for its answer, until its handler takes it; whether its stream
/// ended, and whether its answer went out on it then.
struct Served {
    answering: Option<watch::Sender<Option<KeptLine>>>,
    ended: bool,
    delivered: bool,
}

/// The stream of a call booked by [`KeptCalls::stream_opened`]: when it is dropped, the call's
/// answer is kept [`KEPT_FOR`] from then (or from the answer), among the first to make room
/// when it went out on the stream ([`StreamKept::delivered`]).
pub(super) struct StreamKept {
    calls: Arc<KeptCalls>,
    key: String,
    delivered: bool,
}

/// The handler's side of a call booked by [`KeptCalls::stream_opened`]: its answer goes in
/// with [`Answering::answered`]; dropped without one, the call is not kept.
pub(super) struct Answering {
    calls: Arc<KeptCalls>,
    key: String,
    answer: Option<watch::Sender<Option<KeptLine>>>,
}

impl KeptCalls {
    /// Run `call` (of `principal` on `upstream`, kept under `key`) to its end whether or not
    /// its reply is still read; what it ran, for the reply. Past [`MAX_KEPT`] (or under a key
    /// kept already) it runs as any call does, ending with its reply.
    pub fn run(
        self: &Arc<Self>,
        key: String,
        (principal, upstream): (&str, &str),
        call: impl Future<Output = Ran> + Send + 'static,
    ) -> BoxFuture<'static, Ran> {
        let (answered, answer) = watch::channel(None);
        let (principal, upstream) = (principal.to_string(), upstream.to_string());
        let kept = Kept { principal, upstream: upstream.clone(), answer, until: None, served: None };
        if !self.begin(&key, kept) {
            return Box::pin(call);
        }
        let (to_reply, reply) = oneshot::channel();
        let calls = self.clone();
        tokio::spawn(async move {
            let ran = call.await;
            let _ = answered.send(Some(line_of(&ran)));
            let taken = to_reply.send(ran).is_ok();
            calls.ended(&key, taken);
        });
        Box::pin(async move {
            reply.await.unwrap_or_else(|_| {
                Err(ProxyError::UpstreamFailed { upstream, reason: "the call ended without an answer".into() })
            })
        })
    }

    /// A 2025 host's call or prompt whose request stream this replica serves opens, under
    /// `key`: booked before its handler runs, which gives its answer ([`KeptCalls::answering`]),
    /// kept from the stream's end. `None` past [`MAX_KEPT`] or under a key kept already (then
    /// it is not kept).
    pub fn stream_opened(self: &Arc<Self>, key: String) -> Option<StreamKept> {
        let (answering, answer) = watch::channel(None);
        let served = Served { answering: Some(answering), ended: false, delivered: false };
        // Nobody's until its handler says whose it is (`find` skips it).
        let kept =
            Kept { principal: String::new(), upstream: String::new(), answer, until: None, served: Some(served) };
        self.begin(&key, kept).then(|| StreamKept { calls: self.clone(), key, delivered: false })
    }

    /// The handler of the call booked under `key` (its stream opened here) takes it as
    /// `principal`'s on `upstream` (empty when it names none); `None` when none is booked.
    pub fn answering(self: &Arc<Self>, key: &str, (principal, upstream): (&str, &str)) -> Option<Answering> {
        let mut calls = self.calls.lock().expect("kept calls lock");
        let kept = calls.get_mut(key)?;
        let answer = kept.served.as_mut()?.answering.take()?;
        (kept.principal, kept.upstream) = (principal.to_string(), upstream.to_string());
        Some(Answering { calls: self.clone(), key: key.to_string(), answer: Some(answer) })
    }

    /// `principal`'s call kept under `key`: its upstream, and its answer to wait for; `None`
    /// when none of `principal`'s is kept here.
    pub fn find(&self, key: &str, principal: &str) -> Option<(String, KeptAnswer)> {
        let (whose, upstream, answer) = self.whose(key)?;
        (whose == principal).then_some((upstream, answer))
    }

    /// The call kept under `key`, whoever's: its principal, its upstream and its answer to wait
    /// for (the replica that asks for it checks the principal); `None` when none is kept here.
    pub fn whose(&self, key: &str) -> Option<(String, String, KeptAnswer)> {
        let calls = self.calls.lock().expect("kept calls lock");
        let claimed = |kept: &&Kept| kept.served.as_ref().is_none_or(|served| served.answering.is_none());
        let kept = calls.get(key).filter(claimed)?;
        Some((kept.principal.clone(), kept.upstream.clone(), KeptAnswer(kept.answer.clone())))
    }

    /// Book `kept` under `key`, unless full or booked already; the stale ones go first, then,
    /// when full, the oldest answer that went out on its stream.
    fn begin(&self, key: &str, kept: Kept) -> bool {
        let mut calls = self.calls.lock().expect("kept calls lock");
        let now = Instant::now();
        calls.retain(|_, kept| kept.until.is_none_or(|until| until > now));
        if calls.len() >= MAX_KEPT {
            let delivered =
                calls.iter().filter(|(_, kept)| kept.served.as_ref().is_some_and(|served| served.delivered));
            let oldest = delivered.min_by_key(|(_, kept)| kept.until).map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                calls.remove(&oldest);
            }
        }
        if calls.len() >= MAX_KEPT || calls.contains_key(key) {
            return false;
        }
        calls.insert(key.to_string(), kept);
        true
    }

    /// The stream of the served call under `key` ended, its answer gone out on it
    /// (`delivered`) or not (cut): kept for [`KEPT_FOR`] after its answer; one not answered yet
    /// waits for its handler at most as long as a resumption would wait for it.
    fn stream_ended(&self, key: &str, delivered: bool) {
        let mut calls = self.calls.lock().expect("kept calls lock");
        let Some(kept) = calls.get_mut(key) else { return };
        let Some(served) = kept.served.as_mut() else { return };
        if served.answering.is_some() {
            // No handler took it (a request refused before it ran): nothing to keep.
            calls.remove(key);
            return;
        }
        (served.ended, served.delivered) = (true, delivered);
        let answered = kept.answer.borrow().is_some();
        if !delivered {
            tracing::debug!(
                answered,
                "cluster: a call's stream was cut before its answer went out; the answer is kept"
            );
        }
        kept.until = Some(Instant::now() + if answered { KEPT_FOR } else { COLLECT_WAIT });
    }

    /// The served call under `key` was answered: kept for [`KEPT_FOR`] from now when its stream
    /// ended already, else from its stream's end.
    fn served_answered(&self, key: &str) {
        let mut calls = self.calls.lock().expect("kept calls lock");
        if let Some(kept) = calls.get_mut(key)
            && kept.served.as_ref().is_some_and(|served| served.ended)
        {
            kept.until = Some(Instant::now() + KEPT_FOR);
        }
    }

    /// The served call under `key` will not be answered: forgotten.
    fn unanswered(&self, key: &str) {
        let mut calls = self.calls.lock().expect("kept calls lock");
        if calls.get(key).is_some_and(|kept| kept.served.is_some()) {
            calls.remove(key);
        }
    }

    /// The call under `key` ended: forgotten when its reply took the answer, else kept for
    /// [`KEPT_FOR`].
    fn ended(&self, key: &str, taken: bool) {
        let mut calls = self.calls.lock().expect("kept calls lock");
        match taken {
            true => {
                calls.remove(key);
            }
            false => {
                if let Some(kept) = calls.get_mut(key) {
                    kept.until = Some(Instant::now() + KEPT_FOR);
                }
            }
        }
    }
}

impl StreamKept {
    /// The call's answer went out on its stream.
    pub fn delivered(&mut self) {
        self.delivered = true;
    }

    /// The stream did not open: nothing is kept.
    pub fn forget(self) {
        self.calls.unanswered(&self.key);
    }
}

impl Drop for StreamKept {
    fn drop(&mut self) {
        self.calls.stream_ended(&self.key, self.delivered);
    }
}

impl Answering {
    /// The call's answer (or error) as its handler gives it to the host.
    pub fn answered(mut self, line: KeptLine) {
        if let Some(answer) = self.answer.take() {
            answer.send_replace(Some(line));
            self.calls.served_answered(&self.key);
        }
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        if self.answer.is_some() {
            self.calls.unanswered(&self.key);
        }
    }
}

/// How a call's answer or error is kept.
pub(super) fn line_of(ran: &Ran) -> KeptLine {
    match ran {
        Ok(answer) => Ok(answer.clone()),
        Err(error) => Err(RemoteError::of(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::CallToolResult;

    fn answered() -> Ran {
        Ok(Answer::Tool(CallToolResult::success(vec![])))
    }

    #[tokio::test]
    async fn a_call_whose_reply_went_away_runs_on_and_its_answer_is_kept_for_its_principal_only() {
        let calls = Arc::new(KeptCalls::default());
        let (go, wait) = oneshot::channel::<()>();
        let reply = calls.run("k".into(), ("alice", "ev"), async move {
            let _ = wait.await;
            answered()
        });
        drop(reply);
        assert!(calls.find("k", "bob").is_none(), "another principal's");
        assert!(calls.find("other", "alice").is_none(), "another key");
        let (upstream, answer) = calls.find("k", "alice").expect("kept while it runs");
        assert_eq!(upstream, "ev");
        go.send(()).expect("the call waits");
        let line = answer.wait(Duration::from_secs(5)).await.expect("its answer once it ends");
        assert!(matches!(line, Ok(Answer::Tool(_))), "{line:?}");
        let (_, again) = calls.find("k", "alice").expect("kept after it ended");
        assert!(again.wait(Duration::from_secs(5)).await.is_some());
    }

    #[tokio::test]
    async fn an_answer_its_reply_took_is_not_kept() {
        let calls = Arc::new(KeptCalls::default());
        assert!(calls.run("k".into(), ("alice", "ev"), async { answered() }).await.is_ok());
        for _ in 0..1000 {
            if calls.find("k", "alice").is_none() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(calls.find("k", "alice").is_none());
    }

    #[tokio::test]
    async fn a_served_calls_answer_is_kept_whether_or_not_it_went_out_on_its_stream() {
        let calls = Arc::new(KeptCalls::default());
        let stream = calls.stream_opened("cut".into()).expect("booked");
        assert!(calls.find("cut", "").is_none(), "nobody's until its handler takes it");
        let answering = calls.answering("cut", ("alice", "ev")).expect("its handler");
        assert!(calls.answering("cut", ("alice", "ev")).is_none(), "taken once");
        drop(stream);
        assert!(calls.find("cut", "bob").is_none(), "another principal's");
        let (upstream, answer) = calls.find("cut", "alice").expect("kept while it runs, its stream cut");
        assert_eq!(upstream, "ev");
        answering.answered(line_of(&answered()));
        assert!(matches!(answer.wait(Duration::from_secs(5)).await, Some(Ok(Answer::Tool(_)))));
        assert!(calls.find("cut", "alice").is_some(), "kept after it was answered");

        let mut stream = calls.stream_opened("out".into()).expect("booked");
        calls.answering("out", ("alice", "ev")).expect("its handler").answered(line_of(&answered()));
        stream.delivered();
        drop(stream);
        assert!(calls.find("out", "alice").is_some(), "kept though it went out: its host may be gone");

        let stream = calls.stream_opened("dropped".into()).expect("booked");
        drop(calls.answering("dropped", ("alice", "ev")).expect("its handler"));
        assert!(calls.find("dropped", "alice").is_none(), "a handler gone without an answer keeps nothing");
        drop(stream);
    }

    #[test]
    fn when_full_the_oldest_answer_that_went_out_makes_room() {
        let calls = Arc::new(KeptCalls::default());
        for n in 0..MAX_KEPT {
            let key = format!("k{n}");
            let mut stream = calls.stream_opened(key.clone()).expect("room");
            calls.answering(&key, ("alice", "ev")).expect("its handler").answered(line_of(&answered()));
            if n > 0 {
                stream.delivered();
            }
        }
        assert!(calls.stream_opened("next".into()).is_some(), "room made");
        assert!(calls.find("k0", "alice").is_some(), "the cut one stays");
        let gone = (1..MAX_KEPT).filter(|n| calls.find(&format!("k{n}"), "alice").is_none()).count();
        assert_eq!(gone, 1, "one that went out made room");
    }
}
