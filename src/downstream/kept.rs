//! `[cluster]`: the answers of calls this replica runs for another one, kept when that replica
//! goes away before it is answered. A 2025 host's `tools/call` (or `prompts/get`) on an upstream
//! session owned here comes from the replica serving the host's stream; when that replica dies
//! (`kill -9`), the host resumes its stream on another replica (`shared::resumed`), which asks
//! every replica for the call's answer under its key (derived from the session and the request
//! id, the same on every replica). The call runs on to its end here whatever becomes of the
//! forwarded reply, and its answer is kept for [`KEPT_FOR`] when nobody took it.
//!
//! Invariant: a kept answer is handed only to a request of the principal whose call it is, at
//! most [`MAX_KEPT`] are kept at once (past it a call runs as before, ending with its reply),
//! and none outlives [`KEPT_FOR`] after its call ended.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio::sync::{oneshot, watch};

use crate::cluster::forward::{Line, RemoteError};
use crate::error::ProxyError;
use crate::tools::Ran;

/// How long an answer nobody took is kept after its call ended.
pub(super) const KEPT_FOR: Duration = Duration::from_secs(60);
/// How long a resumption waits for a kept call to end.
pub(super) const COLLECT_WAIT: Duration = Duration::from_secs(600);
/// Calls kept (running or answered) at once.
pub(super) const MAX_KEPT: usize = 1024;

/// The calls run here for other replicas, by key; a cheap handle behind an `Arc`.
#[derive(Default)]
pub(super) struct KeptCalls {
    calls: Mutex<HashMap<String, Kept>>,
}

/// A kept call's answer, once it ended.
pub(super) struct KeptAnswer(watch::Receiver<Option<Line>>);

impl KeptAnswer {
    /// The answer: at once when the call is over, else when it ends (waiting at most `wait`).
    pub async fn wait(mut self, wait: Duration) -> Option<Line> {
        let ended = tokio::time::timeout(wait, self.0.wait_for(Option::is_some)).await.ok()?.ok()?;
        ended.clone()
    }
}

/// One call: whose, on which upstream, its answer once it ended, and until when it is kept
/// (none: while it runs or its reply may still take it).
struct Kept {
    principal: String,
    upstream: String,
    answer: watch::Receiver<Option<Line>>,
    until: Option<Instant>,
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
        let kept = Kept { principal: principal.to_string(), upstream: upstream.to_string(), answer, until: None };
        if !self.begin(&key, kept) {
            return Box::pin(call);
        }
        let (to_reply, reply) = oneshot::channel();
        let calls = self.clone();
        tokio::spawn(async move {
            let ran = call.await;
            let line = match &ran {
                Ok(answer) => Line::Answer(answer.clone()),
                Err(error) => Line::Error(RemoteError::of(error)),
            };
            let _ = answered.send(Some(line));
            let taken = to_reply.send(ran).is_ok();
            calls.ended(&key, taken);
        });
        let upstream = upstream.to_string();
        Box::pin(async move {
            reply.await.unwrap_or_else(|_| {
                Err(ProxyError::UpstreamFailed { upstream, reason: "the call ended without an answer".into() })
            })
        })
    }

    /// `principal`'s call kept under `key`: its upstream, and its answer to wait for; `None`
    /// when none of `principal`'s is kept here.
    pub fn find(&self, key: &str, principal: &str) -> Option<(String, KeptAnswer)> {
        let calls = self.calls.lock().expect("kept calls lock");
        let kept = calls.get(key).filter(|kept| kept.principal == principal)?;
        Some((kept.upstream.clone(), KeptAnswer(kept.answer.clone())))
    }

    /// Book `kept` under `key`, unless full or booked already; the stale ones go first.
    fn begin(&self, key: &str, kept: Kept) -> bool {
        let mut calls = self.calls.lock().expect("kept calls lock");
        let now = Instant::now();
        calls.retain(|_, kept| kept.until.is_none_or(|until| until > now));
        if calls.len() >= MAX_KEPT || calls.contains_key(key) {
            return false;
        }
        calls.insert(key.to_string(), kept);
        true
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::forward::Answer;
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
        assert!(matches!(line, Line::Answer(Answer::Tool(_))), "{line:?}");
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
}
