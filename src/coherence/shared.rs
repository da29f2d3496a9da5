//! The shared tier: the read cache every replica of a cluster sees, in Redis. What a miss on one
//! replica loads fills it, so the others hit; an `updated` heard by any replica changes the
//! version every replica reads under, before that replica tells any host of it.
//!
//! Versions: per upstream a counter (`ctr`), a floor (raised when anything of the upstream may
//! have changed: a reconnect, lost events) and a record per notified URI (`rec`, a hash whose
//! fields are the URIs' names). The version of a URI is the highest of the floor and the records
//! of the URI and its parents (a change under a URI counts for it, as in [`crate::coherence`]).
//! Every number comes from the one counter, so a bump is always above anything handed out
//! before. None of these keys has a time to live (a Redis evicting only keys that have one,
//! `volatile-*`, never takes them); the records are bounded instead: past [`MAX_RECORDS`] for an
//! upstream its floor rises and they go, which costs hits, never freshness.
//!
//! Entries: a hash (`v`: the replica vouching for it, `b`: the entry) under
//! `e:<upstream>:<version>:<who>:<uri name>` (`who` is `-` for public results, the principal's
//! name for private ones), expiring with the entry's `keep_until`. A fill is kept only when the
//! version is still the one the read began under and Redis is still the one it began with
//! (`boot`, a token a Redis that lost its data no longer has): a load overtaken by an update is
//! never stored. An entry kept past its `ttlMs` because its upstream subscription is watched is
//! vouched for by the watching replica and is found only while that replica's heartbeat key
//! lives.
//!
//! Sealed: an entry is encrypted and authenticated (`crate::cluster::sealed`) under a key
//! derived from the cluster secret, bound to its Redis key and voucher, and Redis names URIs and
//! principals only by keyed digests (`RedisSeal::name`), in keys and in the records' fields
//! alike. A Redis reader learns no body, URI or principal; a Redis writer's entry (forged,
//! another cluster's, moved from another key or version, or an older release's in clear) does
//! not open: a miss, counted, loaded again, and the fill takes its place.
//!
//! Every read asks for the version first (one round trip): the local tier in front serves an
//! entry only under the version and boot Redis gave for this read, and only while Redis still
//! holds it, vouched. So no invalidation feed is needed for freshness, and none can be lost.
//! The same round trip claims the load when nothing is found (a lease, so one replica loads and
//! the others wait for its fill), and the fill lets go of it: a hit costs one round trip (and a
//! fetch of the entry the first time this replica serves it), a miss two.
//! A read's own calls (the look, the fetch, the fill) go on a socket the reading task drives
//! itself (`shared/sockets.rs`), not through the multiplexed connection, whose hand-overs to and
//! from its driver task cost a read more than Redis's work; the rest of the tier's calls (bumps,
//! floors, a waiting read's claim) go through the multiplexed connection.
//!
//! Redis unreachable (a call fails or takes longer than [`CALL_TIMEOUT`]): the tier is down,
//! reads go upstream and keep nothing; an `updated` that could not be recorded raises its
//! upstream's floor before the tier is trusted again. The housekeeping tick finds Redis back
//! ([`SharedTier::recover`]) at its first try after Redis answers again, though the shared
//! connection may not have seen Redis go (the looks saw it, on their own sockets), and closes
//! the look sockets left idle meanwhile: after a restart no read fails on one once the tier is up.
//! Invariant: a fill is stored only under the version, and boot, current when it is stored —
//! which is the one its read began under.
//!
//! The Lua scripts are in `shared/scripts.rs`, an entry's stored form in `shared/stored.rs`, the
//! tier's way back up in `shared/recovery.rs`.

mod recovery;
mod scripts;
mod sockets;
mod stored;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use self::scripts::Scripts;
use self::sockets::Sockets;
use self::stored::{decode, encode};
use super::generations::parents_of;
use crate::cache::Entry;
use crate::cluster::{Cluster, RedisSeal};
use crate::metrics::{Metrics, SealedKind, SharedCacheEvent};
use redis::aio::ConnectionManager;
use redis::{ConnectionInfo, FromRedisValue, RedisError, ScriptInvocation};
use tokio::time::error::Elapsed;

/// Longest a call to Redis may take before the tier counts as down.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(1);

/// Records (notified URIs) kept per upstream; past it the upstream's floor rises instead.
pub const MAX_RECORDS: u64 = 100_000;

/// URIs whose names (with their parents') are kept; past it they are all forgotten at once.
const MAX_CHAINS: usize = 4096;

/// Where an entry was found for a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    Nowhere,
    Shared,
    Private,
}

/// What Redis says about a read before it is served.
#[derive(Debug, Clone, Copy)]
pub struct Look {
    /// Which Redis this is (changes when Redis lost its data).
    pub boot: u64,
    /// The URI's version.
    pub version: u64,
    pub found: Found,
    /// Nothing found, and another replica is loading the URI at this version (it holds the
    /// claim): its fill is waited for.
    pub leased: bool,
    /// Nothing found, and this replica holds the claim of the load: taken by this look, or
    /// left by a reader here that joined another load of the same key.
    pub claimed: bool,
}

/// Redis did not answer (in time): the tier is down.
#[derive(Debug, Clone, Copy)]
pub struct Down;

/// One read's place in the shared tier.
pub struct Slot<'a> {
    pub upstream: &'a str,
    pub uri: &'a str,
    /// `None` for the shared key, the principal for a private one.
    pub principal: Option<&'a str>,
}

/// Where the tier lives in Redis and who this replica is there.
pub struct Place {
    /// Every key of the tier starts so.
    pub prefix: String,
    /// A replica `r` is alive while the key `<replicas><r>` exists (the cluster's heartbeat).
    pub replicas: String,
    pub replica: String,
    /// Seals entries and names URIs and principals (the cluster's).
    pub seal: RedisSeal,
}

/// The connection and its state; cheap to share behind the coherence layer's `Arc`.
pub struct SharedTier {
    connection: ConnectionManager,
    /// The look's own sockets (`shared/sockets.rs`); `None` for a Redis they cannot reach.
    sockets: Option<Sockets>,
    prefix: String,
    replicas: String,
    replica: String,
    seal: RedisSeal,
    /// The boot token this process offers when Redis has none.
    offered_boot: u64,
    up: AtomicBool,
    /// Upstreams whose change could not be recorded: their floors rise before the tier is up.
    pending: Mutex<BTreeSet<String>>,
    metrics: Metrics,
    scripts: Scripts,
    /// The names of a URI and its parents ([`SharedTier::chain`]), by URI.
    chains: Mutex<HashMap<Box<str>, Arc<[String]>>>,
}

impl SharedTier {
    /// A tier over `connection` (a reconnecting one) to the Redis of `info`, at `place`. Down
    /// until [`SharedTier::recover`] first reaches Redis.
    pub fn new((connection, info): (ConnectionManager, &ConnectionInfo), place: Place, metrics: Metrics) -> Self {
        metrics.set_shared_cache_up(false);
        Self {
            connection,
            sockets: Sockets::for_redis(info),
            prefix: place.prefix,
            replicas: place.replicas,
            replica: place.replica,
            seal: place.seal,
            offered_boot: rand::random::<u64>() >> 1,
            up: AtomicBool::new(false),
            pending: Mutex::default(),
            metrics,
            scripts: Scripts::new(),
            chains: Mutex::default(),
        }
    }

    /// The tier of `cluster`: its connection, keys under its prefix, vouches checked against
    /// its heartbeat keys.
    pub fn for_cluster(cluster: &Cluster, metrics: &Metrics) -> Self {
        let place = Place {
            prefix: cluster.key(&["cache", ""]),
            replicas: cluster.key(&["replica", ""]),
            replica: cluster.replica_id().to_string(),
            seal: cluster.seal().clone(),
        };
        Self::new((cluster.redis(), cluster.connection_info()), place, metrics.clone())
    }

    /// Whether the tier answered last time (reads use it only then).
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// The version of `slot`'s URI and where a vouched entry of it is, for a read by
    /// `principal`. When there is none and no replica claims its load, the load of `slot`'s key
    /// is claimed for this replica, for `lasting`, in the same round trip.
    pub async fn look(&self, slot: &Slot<'_>, principal: &str, lasting: Duration) -> Result<Look, Down> {
        let chain = self.chain(slot.uri);
        let mut call = self.scripts.look.prepare_invoke();
        call.arg(&self.prefix).arg(slot.upstream).arg(self.offered_boot.to_string());
        call.arg(self.who(Some(principal))).arg(&chain[0]).arg(&self.replicas);
        call.arg(self.who(slot.principal)).arg(&self.replica).arg(lasting.as_millis().max(1).to_string());
        call.arg(&chain[..]);
        let (boot, version, found, lease): (String, u64, u8, u8) = self.call(self.driven(&call)).await?;
        let found = match found {
            1 => Found::Shared,
            2 => Found::Private,
            _ => Found::Nowhere,
        };
        let boot = boot.parse().unwrap_or(0);
        Ok(Look { boot, version, found, leased: lease == 1, claimed: lease == 2 })
    }

    /// The entry stored for `slot` at `version`, if it is there and opens (one that does not
    /// is counted and is no entry: the read loads, and its fill takes the place).
    pub async fn fetch(&self, slot: &Slot<'_>, version: u64) -> Result<Option<Entry>, Down> {
        let key = self.entry_key(slot, version);
        let mut get = redis::cmd("HMGET");
        get.arg(&key).arg("v").arg("b");
        let (voucher, body): (Option<String>, Option<Vec<u8>>) = self.call(self.driven_query(&get)).await?;
        let (Some(voucher), Some(body)) = (voucher, body) else { return Ok(None) };
        let opened = self.seal.open_text(SealedKind::CacheEntry, (&key, "b", &voucher), &body);
        let entry = opened.and_then(|body| decode(&body));
        if entry.is_some() {
            self.metrics.shared_cache(SharedCacheEvent::Hit);
        }
        Ok(entry)
    }

    /// Keep `entry` for `slot` when `version` (of `boot`) is still current; `vouched` when it
    /// lives past its `ttlMs` only because this replica watches its upstream subscription.
    /// Kept, the claim of the load of `loaded_as` (the key it was loaded under: `slot`'s, or a
    /// principal's whose result was public after all) is let go of. `Ok(false)`: an update
    /// overtook the load, not kept.
    pub async fn fill(
        &self,
        (slot, loaded_as): (&Slot<'_>, &Slot<'_>),
        look: &Look,
        entry: &Entry,
        vouched: bool,
    ) -> Result<bool, Down> {
        let now = Instant::now();
        let keep_ms = entry.keep_until.saturating_duration_since(now).as_millis().max(1);
        let voucher = if vouched { self.replica.as_str() } else { "" };
        // Sealed for the key the script writes (the version is checked there to be this one).
        let key = self.entry_key(slot, look.version);
        let body = self.seal.seal((&key, "b", voucher), encode(entry, now).as_bytes());
        let mut call = self.scripts.fill.prepare_invoke();
        call.arg(&self.prefix).arg(slot.upstream).arg(look.boot.to_string()).arg(look.version);
        let chain = self.chain(slot.uri);
        call.arg(self.who(slot.principal))
            .arg(&chain[0])
            .arg(voucher)
            .arg(body)
            .arg(keep_ms.to_string())
            .arg(self.who(loaded_as.principal))
            .arg(&chain[..]);
        let kept: u8 = self.call(self.driven(&call)).await?;
        self.metrics.shared_cache(match kept {
            1 => SharedCacheEvent::Fill,
            _ => SharedCacheEvent::FillOvertaken,
        });
        Ok(kept == 1)
    }

    /// Claim the load of `slot` at `look`'s version for `lasting` (one replica loads, the
    /// others wait for its fill), when the look did not. True when this replica got it.
    pub async fn claim(&self, slot: &Slot<'_>, look: &Look, lasting: Duration) -> Result<bool, Down> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.lease_key(slot, look.version)).arg(&self.replica).arg("NX").arg("PX");
        cmd.arg(lasting.as_millis().max(1).to_string());
        let mut connection = self.connection.clone();
        let answer: Option<String> = self.call(cmd.query_async(&mut connection)).await?;
        Ok(answer.is_some())
    }

    /// Let go of a claim whose load was not stored (a stored fill lets go of it itself).
    pub async fn release(&self, slot: &Slot<'_>, look: &Look) {
        let mut connection = self.connection.clone();
        let mut del = redis::cmd("DEL");
        del.arg(self.lease_key(slot, look.version));
        let _ = self.call(del.query_async::<()>(&mut connection)).await;
    }

    /// `uri` of `upstream` (and everything under it) changed, for every replica. When Redis
    /// cannot be told, the upstream's floor rises before the tier is used again.
    pub async fn bump(&self, upstream: &str, uri: &str) -> Result<(), Down> {
        // Known down: no wait on a call that would time out (the event loop awaits this).
        if !self.is_up() {
            self.pending.lock().expect("pending lock").insert(upstream.to_string());
            return Err(Down);
        }
        let mut call = self.scripts.bump.prepare_invoke();
        call.arg(&self.prefix).arg(upstream).arg(self.seal.name(uri)).arg(MAX_RECORDS);
        let mut connection = self.connection.clone();
        match self.call::<u64>(call.invoke_async(&mut connection)).await {
            Ok(_) => {
                self.metrics.shared_cache(SharedCacheEvent::Invalidation);
                Ok(())
            }
            Err(down) => {
                self.pending.lock().expect("pending lock").insert(upstream.to_string());
                Err(down)
            }
        }
    }

    /// Anything of `upstream` may have changed: every version of it rises, for every replica.
    pub async fn raise_floor(&self, upstream: &str) -> Result<(), Down> {
        let result = match self.is_up() {
            true => self.raise(upstream).await,
            false => Err(Down),
        };
        if result.is_err() {
            self.pending.lock().expect("pending lock").insert(upstream.to_string());
        }
        result
    }

    async fn raise(&self, upstream: &str) -> Result<(), Down> {
        let mut call = self.scripts.raise.prepare_invoke();
        call.arg(&self.prefix).arg(upstream);
        let mut connection = self.connection.clone();
        self.call::<u64>(call.invoke_async(&mut connection)).await?;
        self.metrics.shared_cache(SharedCacheEvent::FloorRaised);
        Ok(())
    }

    fn lease_key(&self, slot: &Slot<'_>, version: u64) -> String {
        let (who, chain) = (self.who(slot.principal), self.chain(slot.uri));
        format!("{}lease:{}:{version}:{who}:{}", self.prefix, slot.upstream, chain[0])
    }

    fn entry_key(&self, slot: &Slot<'_>, version: u64) -> String {
        let (who, chain) = (self.who(slot.principal), self.chain(slot.uri));
        format!("{}e:{}:{version}:{who}:{}", self.prefix, slot.upstream, chain[0])
    }

    /// The names (keyed digests) of `uri` and of its parents, each once, `uri`'s first: worked
    /// out once per URI (a read asks for them at every look), not at every read.
    fn chain(&self, uri: &str) -> Arc<[String]> {
        if let Some(chain) = self.chains.lock().expect("chains lock").get(uri) {
            return chain.clone();
        }
        let mut seen = BTreeSet::new();
        let chain: Arc<[String]> =
            parents_of(uri).filter(|parent| seen.insert(*parent)).map(|parent| self.seal.name(parent)).collect();
        let mut chains = self.chains.lock().expect("chains lock");
        if chains.len() >= MAX_CHAINS {
            chains.clear();
        }
        chains.insert(uri.into(), chain.clone());
        chain
    }

    /// Whose an entry is in its key: `-` for everyone, else the principal's keyed name (no
    /// principal's name goes to Redis).
    fn who(&self, principal: Option<&str>) -> String {
        match principal {
            None => "-".to_string(),
            Some(principal) => self.seal.name(principal),
        }
    }

    /// `call` on a socket this task drives (`shared/sockets.rs`), or through the multiplexed
    /// connection when there is none to be had.
    async fn driven<T: FromRedisValue>(&self, call: &ScriptInvocation<'_>) -> Result<T, RedisError> {
        if let Some(mut held) = self.sockets.as_ref().and_then(Sockets::hold) {
            return call.invoke_async(&mut held).await;
        }
        call.invoke_async(&mut self.connection.clone()).await
    }

    /// `query` as [`SharedTier::driven`] sends a script.
    async fn driven_query<T: FromRedisValue>(&self, query: &redis::Cmd) -> Result<T, RedisError> {
        if let Some(mut held) = self.sockets.as_ref().and_then(Sockets::hold) {
            return query.query_async(&mut held).await;
        }
        query.query_async(&mut self.connection.clone()).await
    }

    /// One call with the timeout; a failure counts the tier down.
    async fn call<T>(&self, call: impl Future<Output = Result<T, RedisError>>) -> Result<T, Down> {
        self.settle(tokio::time::timeout(CALL_TIMEOUT, call).await)
    }

    /// A call's outcome: its answer, or (Redis's error, no answer in time) the tier down.
    fn settle<T>(&self, outcome: Result<Result<T, RedisError>, Elapsed>) -> Result<T, Down> {
        let error = match outcome {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(error)) => error.to_string(),
            Err(_) => "no answer in time".to_string(),
        };
        self.metrics.shared_cache(SharedCacheEvent::Error);
        if self.up.swap(false, Ordering::AcqRel) {
            tracing::warn!(error = %error, "the shared cache tier is unreachable; reads go upstream until it is back");
            self.metrics.set_shared_cache_up(false);
        }
        Err(Down)
    }
}
