//! `[cluster]`: who keeps the answer of a 2025 host's call whose stream was cut, asked on the
//! session news channel, and the answer handed over through Redis. A replica resuming such a
//! stream (`resumed`) that keeps nothing of the call itself publishes `collect <call key>
//! <serving replica>`; every replica answers `kept <call key> <replica> <says>`:
//! - `running`: it keeps the call (the replica serving its stream, or the one running it for
//!   a serving replica that went away, `kept`); once the call ends, it seals the answer into
//!   Redis (`kept:<call key>:<replica>`, for [`KEPT_FOR`]) and says `answered`;
//! - `none`: it keeps nothing of it (or the call ended without an answer).
//!
//! The asking replica waits for these words (an event; a deadline only bounds the wait) and
//! decides: a keeper's answer, read from Redis, once it says `answered`; "not kept" when the
//! serving replica said `none` and no replica keeps it; "lost" when the serving replica said
//! nothing within [`ASK_WAIT`] (it died, or restarted: the asking replica is it) and no replica
//! keeps it, or when the keeper went away before answering. An answer is written to Redis only
//! when a host resumes a stream that asks for it, never for every call.
//!
//! Invariant: the answer in Redis is sealed, bound to its key; the asking replica hands it only
//! to a request of the principal whose call it was (the record names it, sealed).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::records::Records;
use crate::downstream::kept::{COLLECT_WAIT, KEPT_FOR, KeptCalls, KeptLine};

/// What session news calls a resumption's question: `collect <call key> <serving replica>`.
pub(crate) const COLLECT: &str = "collect";
/// What session news calls a replica's word on it: `kept <call key> <replica> <says>`.
pub(crate) const KEPT: &str = "kept";
/// How long the asking replica waits for the replica that served the stream to say a word.
const ASK_WAIT: Duration = Duration::from_secs(2);
/// Words for one question waiting to be read; past it they are dropped (the deadline decides).
const WORDS_QUEUE: usize = 64;

/// Asks for kept answers and answers such questions; a cheap `Clone`.
#[derive(Clone)]
pub(crate) struct Keepers {
    inner: Arc<Inner>,
}

struct Inner {
    records: Records,
    /// This replica's id.
    replica: String,
    kept: Arc<KeptCalls>,
    /// The questions this replica is waiting on, by call key.
    waiting: Mutex<HashMap<String, Vec<mpsc::Sender<Word>>>>,
}

/// What a resumption found of its call.
pub(crate) enum Found {
    /// An answer: its upstream, the answer, and whether the replica serving the stream kept it
    /// (as written for the host) rather than one that ran the call for it (as the upstream gave
    /// it).
    Kept { upstream: String, answer: KeptLine, written: bool },
    /// The serving replica lives and keeps no answer (it went out on the stream, or more than
    /// [`KEPT_FOR`] ago), nor does another; or the call ended without one.
    NotKept,
    /// This replica said nothing, or went away before answering: lost with it.
    Lost(String),
    /// Redis could not be reached: nobody could be asked.
    Unasked,
}

/// A kept answer as it is sealed into Redis.
#[derive(Serialize, Deserialize)]
struct KeptRecord {
    principal: String,
    upstream: String,
    written: bool,
    answer: KeptLine,
}

/// What a replica says of a call it was asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Says {
    Running,
    Answered,
    None,
}

/// A word heard for a question: a replica's, or that news was lost (words may be missing).
enum Word {
    Said { replica: String, says: Says },
    NewsLost,
}

/// A question being asked: who has yet to say a word, who keeps it, until when to wait.
struct Asking<'a> {
    principal: &'a str,
    key: &'a str,
    serving: &'a str,
    silent: HashSet<String>,
    keeper: Option<String>,
    serving_said_none: bool,
    until: Instant,
}

/// The words heard for a question; it is unregistered when this is dropped.
struct Waiting<'a> {
    keepers: &'a Keepers,
    key: &'a str,
    words: mpsc::Receiver<Word>,
}

impl Keepers {
    pub fn new(records: Records, replica: &str, kept: Arc<KeptCalls>) -> Self {
        let inner = Inner { records, replica: replica.to_string(), kept, waiting: Mutex::default() };
        Keepers { inner: Arc::new(inner) }
    }

    /// The answer of `principal`'s call kept under `key` at another replica; `serving` served
    /// its stream. Waits while the call runs.
    pub async fn collect(&self, principal: &str, key: &str, serving: &str) -> Found {
        let mut waiting = self.wait_for(key);
        let me = &self.inner.replica;
        let silent = self.inner.records.cluster().replicas().into_iter().filter(|replica| replica != me).collect();
        let until = Instant::now() + ASK_WAIT;
        let mut asking = Asking { principal, key, serving, silent, keeper: None, serving_said_none: false, until };
        if self.inner.records.publish(format!("{COLLECT} {key} {serving}")).await.is_err() {
            return Found::Unasked;
        }
        let mut live = self.inner.records.cluster().live_replicas();
        loop {
            if let Some(found) = asking.decided() {
                return found;
            }
            tokio::select! {
                word = waiting.words.recv() => match word {
                    Some(word) => if let Some(found) = self.heard_word(&mut asking, word).await {
                        return found;
                    },
                    None => return asking.given_up(),
                },
                _ = tokio::time::sleep_until(asking.until) => return asking.given_up(),
                Ok(()) = live.changed(), if asking.keeper.is_some() => {
                    let replicas = self.inner.records.cluster().replicas();
                    if let Some(keeper) = asking.keeper.take_if(|keeper| !replicas.contains(keeper)) {
                        return Found::Lost(keeper);
                    }
                }
            }
        }
    }

    /// Session news `collect <call key> <serving replica>` (the part after `collect `): this
    /// replica says what it keeps of the call, and hands its answer over once it has it.
    pub fn asked(&self, news: &str) {
        let Some((key, serving)) = news.split_once(' ') else { return };
        let (keepers, key, serving) = (self.clone(), key.to_string(), serving.to_string());
        tokio::spawn(async move { keepers.answer_for(&key, &serving).await });
    }

    /// Session news `kept <call key> <replica> <says>` (the part after `kept `): handed to the
    /// questions waiting on that key here.
    pub fn heard(&self, news: &str) {
        let mut parts = news.split(' ');
        let (Some(key), Some(replica), Some(says), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        let says = match says {
            "running" => Says::Running,
            "answered" => Says::Answered,
            "none" => Says::None,
            _ => return,
        };
        self.tell(key, || Word::Said { replica: replica.to_string(), says });
    }

    /// Session news was lost: every question here reads what its keeper may have written.
    pub fn news_lost(&self) {
        let keys: Vec<String> = self.inner.waiting.lock().expect("waiting lock").keys().cloned().collect();
        for key in keys {
            self.tell(&key, || Word::NewsLost);
        }
    }

    fn tell(&self, key: &str, word: impl Fn() -> Word) {
        let waiting = self.inner.waiting.lock().expect("waiting lock");
        for waiter in waiting.get(key).into_iter().flatten() {
            if waiter.try_send(word()).is_err() {
                tracing::debug!("cluster: a word on a kept answer was dropped (its question is behind)");
            }
        }
    }

    /// What `word` decides of the question `asking`, if anything yet.
    async fn heard_word(&self, asking: &mut Asking<'_>, word: Word) -> Option<Found> {
        let (replica, says) = match word {
            // This replica heard its own question too: it checked what it keeps before asking.
            Word::Said { replica, .. } if replica == self.inner.replica => return None,
            Word::Said { replica, says } => (replica, says),
            Word::NewsLost => {
                let keeper = asking.keeper.clone()?;
                return self.read(asking, &keeper).await;
            }
        };
        asking.silent.remove(&replica);
        match says {
            Says::Running => {
                if asking.keeper.is_none() {
                    asking.keeper = Some(replica);
                    asking.until = Instant::now() + COLLECT_WAIT;
                }
                None
            }
            Says::Answered => self.read(asking, &replica).await,
            Says::None if asking.keeper.as_deref() == Some(&replica) => Some(Found::NotKept),
            Says::None => {
                asking.serving_said_none |= replica == asking.serving;
                None
            }
        }
    }

    /// The answer `replica` wrote for `asking`, if it is there, opens and is its principal's.
    async fn read(&self, asking: &Asking<'_>, replica: &str) -> Option<Found> {
        let plaintext = match self.inner.records.kept_answer((asking.key, replica)).await {
            Ok(plaintext) => plaintext?,
            Err(_) => return Some(Found::Unasked),
        };
        let Ok(record) = serde_json::from_slice::<KeptRecord>(&plaintext) else { return Some(Found::NotKept) };
        if record.principal != asking.principal {
            return Some(Found::NotKept);
        }
        Some(Found::Kept { upstream: record.upstream, answer: record.answer, written: record.written })
    }

    /// Say what this replica keeps of the call under `key` (its stream served by `serving`),
    /// and, when it keeps it, write its answer to Redis once the call ends.
    async fn answer_for(&self, key: &str, serving: &str) {
        let Some((principal, upstream, answer)) = self.inner.kept.whose(key) else {
            self.say(key, Says::None).await;
            return;
        };
        self.say(key, Says::Running).await;
        let says = match answer.wait(COLLECT_WAIT).await {
            Some(answer) => {
                let written = serving == self.inner.replica;
                let record = KeptRecord { principal, upstream, written, answer };
                let plaintext = serde_json::to_vec(&record).expect("a kept answer serialises");
                let me = self.inner.replica.as_str();
                match self.inner.records.keep_answer((key, me), &plaintext, KEPT_FOR).await {
                    Ok(()) => Says::Answered,
                    Err(_) => Says::None,
                }
            }
            None => Says::None,
        };
        self.say(key, says).await;
    }

    async fn say(&self, key: &str, says: Says) {
        let says = match says {
            Says::Running => "running",
            Says::Answered => "answered",
            Says::None => "none",
        };
        let news = format!("{KEPT} {key} {} {says}", self.inner.replica);
        if self.inner.records.publish(news).await.is_err() {
            tracing::debug!("cluster: a word on a kept answer could not be published (Redis down)");
        }
    }

    fn wait_for<'a>(&'a self, key: &'a str) -> Waiting<'a> {
        let (words_in, words) = mpsc::channel(WORDS_QUEUE);
        self.inner.waiting.lock().expect("waiting lock").entry(key.to_string()).or_default().push(words_in);
        Waiting { keepers: self, key, words }
    }
}

impl Asking<'_> {
    /// Decided without waiting further: nobody keeps it and every replica asked has spoken.
    fn decided(&self) -> Option<Found> {
        (self.keeper.is_none() && self.silent.is_empty()).then(|| self.given_up())
    }

    /// What the question comes to when no more words are awaited.
    fn given_up(&self) -> Found {
        match (&self.keeper, self.serving_said_none) {
            (Some(keeper), _) => Found::Lost(keeper.clone()),
            (None, true) => Found::NotKept,
            (None, false) => Found::Lost(self.serving.to_string()),
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.words.close();
        let mut waiting = self.keepers.inner.waiting.lock().expect("waiting lock");
        if let Some(waiters) = waiting.get_mut(self.key) {
            waiters.retain(|waiter| !waiter.is_closed());
            if waiters.is_empty() {
                waiting.remove(self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a question comes to, in a word: `kept`, `not kept`, `lost <replica>`, `unasked`, or
    /// `waiting` while it is not decided.
    fn word_of(found: Option<Found>) -> String {
        match found {
            None => "waiting".into(),
            Some(Found::Kept { .. }) => "kept".into(),
            Some(Found::NotKept) => "not kept".into(),
            Some(Found::Lost(replica)) => format!("lost {replica}"),
            Some(Found::Unasked) => "unasked".into(),
        }
    }

    fn check(silent: &[&str], keeper: Option<&str>, serving_said_none: bool, expected: (&str, &str)) {
        let asking = Asking {
            principal: "alice",
            key: "k",
            serving: "r0",
            silent: silent.iter().map(|replica| replica.to_string()).collect(),
            keeper: keeper.map(str::to_string),
            serving_said_none,
            until: Instant::now(),
        };
        let (decided, given_up) = (word_of(asking.decided()), word_of(Some(asking.given_up())));
        assert_eq!((decided.as_str(), given_up.as_str()), expected, "{silent:?} {keeper:?} {serving_said_none}");
    }

    #[test]
    fn a_question_is_decided_once_every_replica_spoke_and_lost_only_when_the_serving_one_did_not() {
        // (who has not spoken, who keeps it, the serving replica said none) → (decided now, at the deadline)
        check(&[], None, true, ("not kept", "not kept"));
        check(&[], None, false, ("lost r0", "lost r0"));
        check(&["r0"], None, false, ("waiting", "lost r0"));
        check(&["r2"], None, true, ("waiting", "not kept"));
        check(&[], Some("r1"), true, ("waiting", "lost r1"));
        check(&["r0"], Some("r1"), false, ("waiting", "lost r1"));
    }
}
