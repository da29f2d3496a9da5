//! `[cluster]`: several replicas behind a load balancer, sharing what must be shared through
//! Redis 7 / Valkey 8. [`Cluster`] is the handle made once at start: this replica's id, the
//! keys derived from the cluster secret (`keys`), the Redis connection (one reconnecting
//! multiplexed connection, RESP3; the shared cache's look, on every clustered read, goes on
//! sockets of its own, `coherence/shared/sockets.rs`), Redis's health as this replica sees it (a watch), and the
//! replicas seen alive (`heartbeat`: a key per replica with a time to live, renewed every
//! `cluster.heartbeat`), the seal of what it keeps in Redis (`sealed`: cache entries and
//! session records, encrypted and bound to their keys), this replica's counts that hold across the
//! cluster (`counts`: the per-principal in-flight call cap), and the pass on each request to a
//! replica's session endpoint (`session_pass`, sealed under a derived key).
//!
//! What needs no Redis keeps working while it is unreachable: cursors and `requestState`s are
//! sealed with derived keys, so any replica opens them without asking anyone. Redis's state is
//! in `/status`, `/readyz` (200 unless `ready_without_redis = false`) and the metrics
//! `mcp_proxy_cluster_*`; the connection comes back by itself (each heartbeat tries).
//!
//! Invariant: the cluster secret, the keys derived from it and the Redis password never reach
//! Redis, a log line, `/status` or a metric; Redis is shown only by its redacted URL. Every key
//! this process writes to Redis starts with [`Cluster::key`]'s prefix, which names the cluster
//! (not the secret).

pub mod counts;
mod heartbeat;
pub mod keys;
mod owners;
pub mod peer_tls;
pub mod peers;
pub mod sealed;
pub mod session_pass;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionInfo, IntoConnectionInfo, ProtocolVersion, RedisError, RedisResult};
use serde::Serialize;
use tokio::sync::watch;

pub use self::counts::{Admitted, ClusterCounts};
pub use self::keys::ClusterKeys;
pub use self::owners::Owner;
pub use self::sealed::RedisSeal;
use crate::config::{ClusterConfig, redact_urls_in};
use crate::metrics::Metrics;
use crate::spine::Spine;

/// How long one Redis command may take before it counts as a failure.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// A cheap `Clone` handle on this replica's place in the cluster.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    replica_id: String,
    keys: ClusterKeys,
    /// Seals what this replica keeps in Redis (`sealed`).
    seal: RedisSeal,
    /// `mcp-proxy:<namespace>:`: every key of this cluster in Redis starts so.
    prefix: String,
    connection_info: ConnectionInfo,
    redis: ConnectionManager,
    redis_url_redacted: String,
    health: watch::Sender<RedisHealth>,
    /// Replica ids seen alive at the last successful heartbeat (this one included), sorted.
    replicas: Mutex<Vec<String>>,
    /// Where replicas are reached (`owners`): this one's, and the others' from their heartbeats.
    addresses: owners::Addresses,
    /// How many replicas are seen alive (this one included), as it changes.
    live: watch::Sender<usize>,
    counts: ClusterCounts,
    config: ClusterConfig,
    metrics: Metrics,
}

/// Redis as this replica sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RedisHealth {
    pub state: RedisState,
    /// The last failure, in words (no URL beyond its redacted form, no password).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When `state` last changed, seconds since the Unix epoch.
    pub since_unix: u64,
    /// Failed Redis commands so far (heartbeats and others).
    pub failures: u64,
    /// Times Redis came back after being down.
    pub recoveries: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisState {
    /// Not reached yet (the first heartbeat has not answered).
    Connecting,
    Up,
    Down,
}

/// The cluster in `/status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterReport {
    /// This replica's id.
    pub replica: String,
    /// Replica ids seen alive at the last heartbeat that reached Redis (this one included).
    pub replicas: Vec<String>,
    /// Of those, the ones that can be reached by the others (they may hold per-principal
    /// upstream sessions; see `owners`).
    pub reachable: Vec<String>,
    pub redis: RedisHealth,
    /// The Redis URL, redacted.
    pub redis_url: String,
    /// `/readyz` stays 200 while Redis is down.
    pub ready_without_redis: bool,
}

impl Cluster {
    /// The handle for `config`; connects lazily (nothing waits for Redis here).
    pub fn new(config: &ClusterConfig, metrics: Metrics) -> Result<Cluster, RedisError> {
        let keys = ClusterKeys::new(config.secret.expose().as_bytes());
        let prefix = format!("mcp-proxy:{}:", keys.namespace());
        let connection_info = connection_info(config)?;
        // `rediss://` makes its TLS config from rustls's process default.
        crate::crypto::install();
        let client = redis::Client::open(connection_info.clone())?;
        let redis = ConnectionManager::new_lazy_with_config(client, manager_config(config.heartbeat))?;
        let (health, _) = watch::channel(RedisHealth {
            state: RedisState::Connecting,
            last_error: None,
            since_unix: unix_now(),
            failures: 0,
            recoveries: 0,
        });
        metrics.cluster_replica(&config.replica_id);
        let inner = Inner {
            replica_id: config.replica_id.clone(),
            seal: RedisSeal::new(&keys, metrics.clone()),
            keys,
            prefix,
            connection_info,
            redis,
            redis_url_redacted: config.redis_url_redacted(),
            health,
            replicas: Mutex::new(vec![config.replica_id.clone()]),
            addresses: owners::Addresses::new(config.advertise_url.clone()),
            live: watch::Sender::new(1),
            counts: ClusterCounts::new(&config.replica_id),
            config: config.clone(),
            metrics,
        };
        Ok(Cluster { inner: Arc::new(inner) })
    }

    /// TLS between replicas, when set (`peer_tls`).
    pub fn peer_tls(&self) -> Option<&crate::config::PeerTls> {
        self.inner.config.peer_tls.as_ref()
    }

    /// Start the `cluster-heartbeat` task on `spine` (it removes this replica's key on shutdown)
    /// and the `cluster-counts` task.
    pub fn start(&self, spine: &Spine) {
        heartbeat::spawn(self.clone(), spine);
        counts::spawn(self.clone(), spine);
    }

    /// This replica's counts that hold across the cluster.
    pub fn counts(&self) -> &ClusterCounts {
        &self.inner.counts
    }

    /// How many replicas are seen alive (this one included), now and as it changes.
    pub fn live_replicas(&self) -> watch::Receiver<usize> {
        self.inner.live.subscribe()
    }

    pub fn replica_id(&self) -> &str {
        &self.inner.replica_id
    }

    pub fn keys(&self) -> &ClusterKeys {
        &self.inner.keys
    }

    /// Seals and opens what this replica keeps in Redis (cache entries, session records).
    pub fn seal(&self) -> &RedisSeal {
        &self.inner.seal
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.inner.config
    }

    /// The Redis key `mcp-proxy:<cluster>:<part>:<part>…`.
    pub fn key(&self, parts: &[&str]) -> String {
        let mut key = self.inner.prefix.clone();
        key.push_str(&parts.join(":"));
        key
    }

    /// The shared connection (multiplexed: clone it freely; it reconnects by itself). Report
    /// what a command did with [`Cluster::note`].
    pub fn redis(&self) -> ConnectionManager {
        self.inner.redis.clone()
    }

    /// Where Redis is and how it is entered (address, database, credentials): for a connection
    /// of one's own.
    pub fn connection_info(&self) -> &ConnectionInfo {
        &self.inner.connection_info
    }

    /// Another connection to the same Redis, for what needs one of its own (a RESP3 push
    /// sender for pub/sub, say).
    pub async fn connect(&self, config: ConnectionManagerConfig) -> RedisResult<ConnectionManager> {
        let client = redis::Client::open(self.inner.connection_info.clone())?;
        ConnectionManager::new_with_config(client, config).await
    }

    /// Redis answered at the last try.
    pub fn redis_up(&self) -> bool {
        self.inner.health.borrow().state == RedisState::Up
    }

    /// Record the outcome of a Redis command: health, metrics, a log line when the state turns.
    pub fn note<T>(&self, result: &RedisResult<T>) {
        match result {
            Ok(_) => self.mark_up(),
            Err(error) => self.mark_down(&describe(error)),
        }
    }

    /// A Redis command did not answer within its time.
    pub fn note_timeout(&self) {
        self.mark_down("no answer within the command timeout");
    }

    /// Replica ids seen alive at the last successful heartbeat (this one included), sorted.
    pub fn replicas(&self) -> Vec<String> {
        self.inner.replicas.lock().expect("replicas lock").clone()
    }

    /// What `/status` shows.
    pub fn report(&self) -> ClusterReport {
        ClusterReport {
            replica: self.inner.replica_id.clone(),
            replicas: self.replicas(),
            reachable: self.reachable(),
            redis: self.inner.health.borrow().clone(),
            redis_url: self.inner.redis_url_redacted.clone(),
            ready_without_redis: self.inner.config.ready_without_redis,
        }
    }

    fn set_replicas(&self, mut replicas: Vec<String>) {
        if !replicas.contains(&self.inner.replica_id) {
            replicas.push(self.inner.replica_id.clone());
        }
        replicas.sort();
        replicas.dedup();
        self.inner.metrics.cluster_replicas(&self.inner.replica_id, replicas.len());
        let live = replicas.len();
        self.inner.live.send_if_modified(|seen| std::mem::replace(seen, live) != live);
        *self.inner.replicas.lock().expect("replicas lock") = replicas;
    }

    fn mark_up(&self) {
        let turned = self.inner.health.send_if_modified(|health| {
            if health.state == RedisState::Up {
                return false;
            }
            if health.state == RedisState::Down {
                health.recoveries += 1;
            }
            health.state = RedisState::Up;
            health.since_unix = unix_now();
            true
        });
        if turned {
            self.inner.metrics.cluster_redis_up(&self.inner.replica_id, true);
            tracing::info!(redis = %self.inner.redis_url_redacted, "cluster: Redis is up");
        }
    }

    fn mark_down(&self, error: &str) {
        let mut turned = false;
        self.inner.health.send_modify(|health| {
            health.failures += 1;
            health.last_error = Some(error.to_string());
            if health.state != RedisState::Down {
                health.state = RedisState::Down;
                health.since_unix = unix_now();
                turned = true;
            }
        });
        self.inner.metrics.cluster_redis_failure(&self.inner.replica_id);
        if turned {
            self.inner.metrics.cluster_redis_up(&self.inner.replica_id, false);
            tracing::warn!(redis = %self.inner.redis_url_redacted, error, "cluster: Redis is unreachable");
        }
    }
}

impl ClusterReport {
    /// Whether Redis's state keeps this replica out of the pool.
    pub fn keeps_unready(&self) -> bool {
        !self.ready_without_redis && self.redis.state != RedisState::Up
    }
}

/// `redis_url` with the password from `password_env` and RESP3.
fn connection_info(config: &ClusterConfig) -> RedisResult<ConnectionInfo> {
    let info = config.redis_url.expose().into_connection_info()?;
    let mut settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
    if let Some(password) = &config.redis_password {
        settings = settings.set_password(password.expose());
    }
    Ok(info.set_redis_settings(settings))
}

/// Reconnect quickly and give up on a command soon: the heartbeat retries every interval.
fn manager_config(heartbeat: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(heartbeat.min(Duration::from_secs(1)))
        .set_connection_timeout(Some(COMMAND_TIMEOUT))
        .set_response_timeout(Some(COMMAND_TIMEOUT))
}

/// A Redis error in words: its kind and text, any URL in it redacted.
fn describe(error: &RedisError) -> String {
    redact_urls_in(&error.to_string()).chars().take(300).collect()
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// What the unit tests of the modules that keep something in Redis share.
#[cfg(test)]
pub(crate) mod tests {
    pub(crate) mod redis_server;
}
