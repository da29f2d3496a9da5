//! A 2025 session's record in Redis, so any replica can serve it: who opened it (the principal),
//! its `initialize` parameters (protocol version, client capabilities and info — what rmcp
//! replays to re-create the session), its `logging/setLevel` and its subscriptions. No token
//! or secret is in it, and it is named by an HMAC of the session id, never the id. What it says
//! is sealed (`crate::cluster::sealed`, each value bound to its key and field): the principal,
//! the `initialize` parameters, the level and each subscribed URI (as the proxy keeps it,
//! normalised: `Proxy::subscription_uri`; a field named by the URI's keyed digest). A value
//! that does not open is missing: a record whose principal or parameters do not open is no
//! session (the host starts a new one), a URI that does not open is not held; each is counted.
//!
//! Keys (under the cluster's prefix): `session:<k>` (a hash), `session:<k>:held` (a hash: URI
//! name → sealed URI),
//! `sessions` and `sessions:<principal key>` (sorted sets of live records by expiry: the
//! cluster-wide session caps; the per-principal subscription cap counts the subscriptions of the
//! principal's records listed there). A record lives `server.session_idle_timeout` after its last
//! request seen (`server.subscribed_session_idle_timeout` while it holds subscriptions): the
//! idle reaping of the cluster is Redis's expiry. Changes of a session that other replicas act
//! on (its end, its subscriptions, its log level) are published on `sessions:news`, the one
//! channel of session news, as is what one replica says to another about a session's requests
//! (a host's answer, sealed for the replica that asked: `answers`; who keeps a lost stream's
//! answer: `keepers`). Such an answer, once asked for, is kept at `kept:<call key>:<replica>`,
//! sealed, for a minute.
//!
//! Invariant: the two sorted sets list exactly the live records, each scored by its expiry:
//! every script that sets a record's lifetime (`ADMIT`, `TOUCH`, `SUBSCRIBE`) moves its score
//! to the new expiry and keeps both sets alive for the longest a record lives, so the caps count
//! what the single-process book would.

#![allow(deprecated)] // Logging is deprecated by SEP-2577 but still in the 2025 era.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, RedisResult, Script};
use rmcp::model::{InitializeRequestParams, LoggingLevel};
use rmcp::transport::streamable_http_server::session::{SessionState, SessionStore, SessionStoreError};

use super::ids::SessionIds;
use crate::cluster::keys::label;
use crate::cluster::{COMMAND_TIMEOUT, Cluster};
use crate::metrics::SealedKind;

mod scripts;

use scripts::{ADMIT, END, SUBSCRIBE, TOUCH};

/// What `news` says of a session.
pub(crate) const ENDED: &str = "ended";
pub(crate) const SUBSCRIPTIONS: &str = "subscriptions";
/// `level <record key> <level as JSON>`: the session's `logging/setLevel`.
pub(crate) const LEVEL: &str = "level";

/// A session's record as read back.
#[derive(Debug, Clone, Default)]
pub(crate) struct Record {
    /// The session's id.
    pub session: String,
    pub principal: String,
    pub level: Option<LoggingLevel>,
    pub subscriptions: Vec<String>,
}

/// Why a subscription was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubscribeRefused {
    /// The record is gone (the session ended).
    NoSession,
    /// The session holds `server.max_subscriptions_per_session` URIs.
    Full,
    /// The principal's live sessions hold `server.max_subscriptions_per_principal` URIs.
    PrincipalFull,
}

/// Why a new session was not admitted (the caps are cluster-wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    Admitted,
    OverTotal,
    OverPrincipal,
}

/// The records of this cluster's sessions. A cheap `Clone`.
#[derive(Clone)]
pub(crate) struct Records {
    cluster: Cluster,
    pub ids: SessionIds,
    idle: Duration,
    subscribed_idle: Duration,
}

impl Records {
    pub fn new(cluster: Cluster, idle: Duration, subscribed_idle: Duration) -> Self {
        let ids = SessionIds::new(cluster.keys().derive(label::SESSION_ID));
        Self { cluster, ids, idle, subscribed_idle }
    }

    /// The channel replicas hear each other's session news on.
    pub fn news_channel(&self) -> String {
        self.cluster.key(&["sessions", "news"])
    }

    /// Publish `news` on the session news channel.
    pub async fn publish(&self, news: String) -> RedisResult<()> {
        let _: i64 = self.run(self.redis().publish(self.news_channel(), news)).await?;
        Ok(())
    }

    /// `plaintext` sealed as news of kind `what` for replica `to` alone (base64: news is text).
    pub fn seal_news(&self, what: &str, to: &str, plaintext: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(self.cluster.seal().seal((&self.news_channel(), what, to), plaintext))
    }

    /// What `sealed` says, if it was sealed as news of kind `what` for replica `to` by this
    /// cluster (counted when it was not).
    pub fn open_news(&self, what: &str, to: &str, sealed: &str) -> Option<Vec<u8>> {
        let (channel, sealed) = (self.news_channel(), URL_SAFE_NO_PAD.decode(sealed).unwrap_or_default());
        self.cluster.seal().open(SealedKind::SessionNews, (&channel, what, to), &sealed)
    }

    /// Keep `plaintext`, the answer of the call under `call_key` as `replica` keeps it, sealed,
    /// for `ttl`.
    pub async fn keep_answer(
        &self,
        (call_key, replica): (&str, &str),
        plaintext: &[u8],
        ttl: Duration,
    ) -> RedisResult<()> {
        let key = self.cluster.key(&["kept", call_key, replica]);
        let sealed = self.cluster.seal().seal((&key, "", ""), plaintext);
        let _: () = self.run(self.redis().pset_ex(&key, sealed, ms(ttl))).await?;
        Ok(())
    }

    /// The answer of the call under `call_key` as `replica` keeps it, if it is there and opens.
    pub async fn kept_answer(&self, (call_key, replica): (&str, &str)) -> RedisResult<Option<Vec<u8>>> {
        let key = self.cluster.key(&["kept", call_key, replica]);
        let sealed: Option<Vec<u8>> = self.run(self.redis().get(&key)).await?;
        Ok(sealed.and_then(|sealed| self.cluster.seal().open(SealedKind::KeptAnswer, (&key, "", ""), &sealed)))
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Enter a session `principal` just opened, within the cluster-wide caps.
    pub async fn admit(
        &self,
        session: &str,
        principal: &str,
        max_total: usize,
        max_principal: usize,
    ) -> RedisResult<Admission> {
        let record = self.record_key(session);
        let principal_key = self.ids.principal_key(principal);
        let script = Script::new(ADMIT);
        let mut invocation = script.key(&record);
        invocation
            .key(self.cluster.key(&["sessions"]))
            .key(self.cluster.key(&["sessions", &principal_key]))
            .arg(self.seal(&record, "principal", principal.as_bytes()))
            .arg(&principal_key)
            .arg(now_ms())
            .arg(now_ms() + ms(self.idle))
            .arg(ms(self.idle))
            .arg(max_total)
            .arg(max_principal)
            .arg(self.longest_life());
        let answer: i64 = self.run(invocation.invoke_async(&mut self.redis())).await?;
        Ok(match answer {
            0 => Admission::Admitted,
            1 => Admission::OverTotal,
            _ => Admission::OverPrincipal,
        })
    }

    /// The record of `session`, if it lives.
    pub async fn load(&self, session: &str) -> RedisResult<Option<Record>> {
        let record = self.record_key(session);
        let held = subscribed_key(&record);
        let mut redis = self.redis();
        let (fields, subscriptions): (HashMap<String, Vec<u8>>, HashMap<String, Vec<u8>>) =
            self.run(redis::pipe().hgetall(&record).hgetall(&held).query_async(&mut redis)).await?;
        let open = |field: &str| fields.get(field).and_then(|sealed| self.open(&record, field, sealed));
        let Some(principal) = open("principal") else { return Ok(None) };
        let level = open("level").and_then(|level| serde_json::from_str(&level).ok());
        let subscriptions = subscriptions.iter().filter_map(|(name, sealed)| self.open(&held, name, sealed)).collect();
        Ok(Some(Record { session: session.to_string(), principal, level, subscriptions }))
    }

    /// Does `session`'s record live?
    pub async fn exists(&self, session: &str) -> RedisResult<bool> {
        let record = self.record_key(session);
        let mut redis = self.redis();
        self.run(redis.exists(&record)).await
    }

    /// `session` was active: its record lives on from now.
    pub async fn touch(&self, session: &str) -> RedisResult<bool> {
        let record = self.record_key(session);
        let script = Script::new(TOUCH);
        let mut invocation = script.key(&record);
        invocation
            .key(subscribed_key(&record))
            .key(self.cluster.key(&["sessions"]))
            .key(self.cluster.key(&["sessions", ""]))
            .arg(now_ms())
            .arg(ms(self.idle))
            .arg(ms(self.subscribed_idle))
            .arg(self.longest_life());
        let alive: i64 = self.run(invocation.invoke_async(&mut self.redis())).await?;
        Ok(alive == 1)
    }

    /// The session's `logging/setLevel`: kept in its record, and every replica holding the
    /// session is told (its handler there filters by it from then on).
    pub async fn set_level(&self, session: &str, level: LoggingLevel) -> RedisResult<()> {
        let record = self.record_key(session);
        let level = serde_json::to_string(&level).unwrap_or_default();
        let news = format!("{LEVEL} {} {level}", self.ids.record_key(session));
        let mut redis = self.redis();
        let mut pipe = redis::pipe();
        pipe.hset(&record, "level", self.seal(&record, "level", level.as_bytes())).publish(self.news_channel(), news);
        let _: (i64, i64) = self.run(pipe.query_async(&mut redis)).await?;
        Ok(())
    }

    /// Add `uri` to the session's subscriptions (at most `max`; at most `max_principal` in all
    /// of its principal's live sessions), and tell the replicas.
    pub async fn subscribe(
        &self,
        session: &str,
        (principal, uri): (&str, &str),
        (max, max_principal): (usize, usize),
    ) -> RedisResult<Result<(), SubscribeRefused>> {
        let record = self.record_key(session);
        let (held, name) = (subscribed_key(&record), self.cluster.seal().name(uri));
        let script = Script::new(SUBSCRIBE);
        let mut invocation = script.key(&record);
        invocation
            .key(&held)
            .key(self.cluster.key(&["sessions", &self.ids.principal_key(principal)]))
            .key(self.cluster.key(&["sessions"]))
            .arg(&name)
            .arg(max)
            .arg(ms(self.subscribed_idle))
            .arg(self.news_channel())
            .arg(format!("{SUBSCRIPTIONS} {}", self.ids.record_key(session)))
            .arg(max_principal)
            .arg(now_ms())
            .arg(self.seal(&held, &name, uri.as_bytes()))
            .arg(self.longest_life());
        let answer: i64 = self.run(invocation.invoke_async(&mut self.redis())).await?;
        Ok(match answer {
            -1 => Err(SubscribeRefused::NoSession),
            -2 => Err(SubscribeRefused::Full),
            -3 => Err(SubscribeRefused::PrincipalFull),
            _ => Ok(()),
        })
    }

    /// Remove `uri` from the session's subscriptions, and tell the replicas.
    pub async fn unsubscribe(&self, session: &str, uri: &str) -> RedisResult<()> {
        let record = self.record_key(session);
        let mut redis = self.redis();
        let news = format!("{SUBSCRIPTIONS} {}", self.ids.record_key(session));
        let mut pipe = redis::pipe();
        pipe.hdel(subscribed_key(&record), self.cluster.seal().name(uri)).publish(self.news_channel(), news);
        let _: (i64, i64) = self.run(pipe.query_async(&mut redis)).await?;
        Ok(())
    }

    /// The session ended: its record goes, and every replica holding it is told.
    pub async fn end(&self, session: &str) -> RedisResult<()> {
        let record = self.record_key(session);
        let script = Script::new(END);
        let mut invocation = script.key(&record);
        invocation
            .key(subscribed_key(&record))
            .key(self.cluster.key(&["sessions"]))
            .key(self.cluster.key(&["sessions", ""]))
            .arg(self.news_channel())
            .arg(format!("{ENDED} {}", self.ids.record_key(session)));
        let _: i64 = self.run(invocation.invoke_async(&mut self.redis())).await?;
        Ok(())
    }

    /// The full Redis key of `session`'s record.
    fn record_key(&self, session: &str) -> String {
        self.cluster.key(&["session", &self.ids.record_key(session)])
    }

    /// The longest a record lives, in ms: how long the sorted sets of records live after each
    /// change of a record's lifetime (so neither expires under a record it lists), and how long
    /// a new record lives until it is admitted.
    fn longest_life(&self) -> u64 {
        ms(self.idle.max(self.subscribed_idle))
    }

    fn redis(&self) -> ConnectionManager {
        self.cluster.redis()
    }

    /// `plaintext` sealed for `field` of the Redis key `key`.
    fn seal(&self, key: &str, field: &str, plaintext: &[u8]) -> Vec<u8> {
        self.cluster.seal().seal((key, field, ""), plaintext)
    }

    /// What `sealed` says, if it opens for `field` of `key` (counted when it does not).
    fn open(&self, key: &str, field: &str, sealed: &[u8]) -> Option<String> {
        self.cluster.seal().open_text(SealedKind::SessionRecord, (key, field, ""), sealed)
    }

    /// One command within the cluster's command timeout, its outcome noted in Redis's health.
    async fn run<T>(&self, command: impl Future<Output = RedisResult<T>>) -> RedisResult<T> {
        let result = match tokio::time::timeout(COMMAND_TIMEOUT, command).await {
            Ok(result) => result,
            Err(_) => {
                self.cluster.note_timeout();
                return Err(redis::RedisError::from((redis::ErrorKind::Io, "no answer within the command timeout")));
            }
        };
        self.cluster.note(&result);
        result
    }
}

/// rmcp keeps a session's `initialize` parameters here, and replays them on a replica that
/// is asked for a session it does not hold (the session gate has checked the id and the
/// principal by then).
#[async_trait::async_trait]
impl SessionStore for Records {
    async fn load(&self, session: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let record = self.record_key(session);
        let mut redis = self.redis();
        let init: Option<Vec<u8>> = self.run(redis.hget(&record, "init")).await?;
        let Some(init) = init.and_then(|sealed| self.open(&record, "init", &sealed)) else { return Ok(None) };
        let params: InitializeRequestParams = serde_json::from_str(&init)?;
        Ok(Some(SessionState::new(params)))
    }

    async fn store(&self, session: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let record = self.record_key(session);
        let init = serde_json::to_string(&state.initialize_params)?;
        let init = self.seal(&record, "init", init.as_bytes());
        let mut redis = self.redis();
        let mut pipe = redis::pipe();
        pipe.hset(&record, "init", init).pexpire(&record, self.longest_life() as i64);
        let _: (i64, i64) = self.run(pipe.query_async(&mut redis)).await?;
        Ok(())
    }

    async fn delete(&self, session: &str) -> Result<(), SessionStoreError> {
        Ok(self.end(session).await?)
    }
}

/// The key of the URIs a session's record holds.
fn subscribed_key(record: &str) -> String {
    format!("{record}:held")
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn ms(duration: Duration) -> u64 {
    duration.as_millis().max(1) as u64
}

#[cfg(test)]
mod tests;
