//! Counts that hold across the cluster: the per-principal in-flight call cap
//! (`server.max_calls_per_principal`). Each replica keeps its own count of what a principal has
//! in flight here in a field of its own of the hash `<prefix>calls:<principal tag>` (the field
//! is `<replica id>#<incarnation>`, the principal a keyed hash of its name). An admission is one
//! Lua script: it sums the fields of live replicas (their heartbeat key exists; a dead
//! replica's field is dropped, not counted), adds what this replica would hold, and writes this
//! replica's field only if the sum stays within the cap — so two replicas admitting at once
//! cannot both pass the last place.
//!
//! The `cluster-counts` task writes a count again whenever it changes here (a call ended), every
//! heartbeat for the counts that are not zero (they outlive a Redis that lost its data), and at
//! start clears the fields an earlier process with this replica id left behind.
//!
//! While Redis cannot be reached the cap is this replica's alone (the local count decides); the
//! counts are written again once it answers.
//!
//! Invariant: a count in Redis is never more than a replica's own count at some moment since
//! its last write, and every change here is written eventually (a failed write stays due).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use redis::{AsyncCommands, RedisResult, ScanOptions, Script};
use tokio::sync::Notify;

use super::{COMMAND_TIMEOUT, Cluster};
use crate::spine::Spine;

/// What is counted (the first part of the hash's key).
pub const CALLS: &str = "calls";

/// This replica's counts as Redis should hold them. A cheap `Clone`, made by [`Cluster`].
#[derive(Clone)]
pub struct ClusterCounts {
    inner: Arc<Inner>,
}

struct Inner {
    /// `<replica id>#<incarnation>`: this process's field in every hash.
    field: String,
    /// What this replica counts now, by hash key (zero counts are dropped once written).
    here: Mutex<HashMap<String, usize>>,
    /// Hash keys whose count changed since it was last written.
    due: Mutex<Vec<String>>,
    wake: Notify,
}

/// What an admission found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// Within the cap across the cluster; this replica's count is written.
    Yes,
    /// The live replicas hold the cap already.
    OverCap,
}

impl ClusterCounts {
    pub(super) fn new(replica_id: &str) -> Self {
        let incarnation = format!("{:016x}", rand::random::<u64>());
        let inner = Inner {
            field: format!("{replica_id}#{incarnation}"),
            here: Mutex::default(),
            due: Mutex::default(),
            wake: Notify::new(),
        };
        ClusterCounts { inner: Arc::new(inner) }
    }

    /// One more `what` of `principal` here (this replica then holds `here` of them, the new
    /// one included), if the live replicas together stay within `limit`. Whatever the answer,
    /// the caller then [`ClusterCounts::set`]s its count as it is (written after the script's).
    pub async fn admit(
        &self,
        cluster: &Cluster,
        what: &str,
        principal: &str,
        here: usize,
        limit: usize,
    ) -> RedisResult<Admitted> {
        let key = hash_key(cluster, what, principal);
        let script = Script::new(ADMIT);
        let mut invocation = script.key(&key);
        invocation
            .arg(&self.inner.field)
            .arg(here)
            .arg(limit)
            .arg(cluster.key(&["replica", ""]))
            .arg(cluster.replica_id())
            .arg(ttl_ms(cluster));
        let answer = match tokio::time::timeout(COMMAND_TIMEOUT, invocation.invoke_async::<i64>(&mut cluster.redis()))
            .await
        {
            Ok(answer) => answer,
            Err(_) => {
                cluster.note_timeout();
                return Err(redis::RedisError::from((redis::ErrorKind::Io, "no answer within the command timeout")));
            }
        };
        cluster.note(&answer);
        Ok(if answer? == 1 { Admitted::Yes } else { Admitted::OverCap })
    }

    /// This replica now holds `count` of `what` of `principal`: written soon (by the task).
    pub fn set(&self, cluster: &Cluster, what: &str, principal: &str, count: usize) {
        let key = hash_key(cluster, what, principal);
        self.inner.here.lock().expect("counts lock").insert(key.clone(), count);
        self.mark_due(key);
    }

    fn mark_due(&self, key: String) {
        self.mark_due_quietly(key);
        self.inner.wake.notify_one();
    }

    /// Write every count that is due (and, with `all`, every count that is not zero).
    async fn write(&self, cluster: &Cluster, all: bool) {
        let mut keys = std::mem::take(&mut *self.inner.due.lock().expect("counts lock"));
        if all {
            let here = self.inner.here.lock().expect("counts lock");
            let more: Vec<String> =
                here.iter().filter(|(key, count)| **count > 0 && !keys.contains(key)).map(|(k, _)| k.clone()).collect();
            keys.extend(more);
        }
        if keys.is_empty() {
            return;
        }
        let counts: Vec<(String, usize)> = {
            let here = self.inner.here.lock().expect("counts lock");
            keys.iter().map(|key| (key.clone(), here.get(key).copied().unwrap_or(0))).collect()
        };
        let mut pipe = redis::pipe();
        for (key, count) in &counts {
            if *count == 0 {
                pipe.hdel(key, &self.inner.field).ignore();
            } else {
                pipe.hset(key, &self.inner.field, *count).ignore().pexpire(key, ttl_ms(cluster) as i64).ignore();
            }
        }
        let written = tokio::time::timeout(COMMAND_TIMEOUT, pipe.query_async::<()>(&mut cluster.redis())).await;
        match written {
            Ok(result) => {
                cluster.note(&result);
                if result.is_ok() {
                    // Zero counts written are forgotten, unless they changed meanwhile.
                    let mut here = self.inner.here.lock().expect("counts lock");
                    let due = self.inner.due.lock().expect("counts lock");
                    here.retain(|key, count| *count > 0 || due.contains(key));
                    return;
                }
            }
            Err(_) => cluster.note_timeout(),
        }
        // Still due: written at the next try.
        for (key, _) in counts {
            self.mark_due_quietly(key);
        }
    }

    fn mark_due_quietly(&self, key: String) {
        let mut due = self.inner.due.lock().expect("counts lock");
        if !due.contains(&key) {
            due.push(key);
        }
    }

    /// Clear the fields an earlier process with this replica id left in the count hashes.
    async fn clear_earlier(&self, cluster: &Cluster) -> RedisResult<()> {
        let mut scanning = cluster.redis();
        let scan = ScanOptions::default().with_pattern(cluster.key(&[CALLS, "*"])).with_count(500).with_type("hash");
        let mut keys = scanning.scan_options::<String>(scan).await?;
        let mut redis = cluster.redis();
        let script = Script::new(CLEAR_EARLIER);
        while let Some(key) = keys.next_item().await {
            let mut invocation = script.key(key?);
            invocation.arg(format!("{}#", cluster.replica_id())).arg(&self.inner.field);
            let _: i64 = invocation.invoke_async(&mut redis).await?;
        }
        Ok(())
    }
}

/// What the `cluster-counts` loop waits for.
enum Event {
    /// A count changed here.
    Changed,
    /// A heartbeat went by: every count not zero is written again.
    Beat,
    Shutdown,
}

/// Start the `cluster-counts` task.
pub(super) fn spawn(cluster: Cluster, spine: &Spine) {
    let shutdown = spine.shutdown();
    let counts = cluster.counts().clone();
    spine.spawn("cluster-counts", async move {
        let mut cleared = false;
        let mut beat = tokio::time::interval(cluster.config().heartbeat);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let event = tokio::select! {
                _ = shutdown.cancelled() => Event::Shutdown,
                () = counts.inner.wake.notified() => Event::Changed,
                _ = beat.tick() => Event::Beat,
            };
            match event {
                Event::Changed => counts.write(&cluster, false).await,
                Event::Beat => {
                    if !cleared && cluster.redis_up() {
                        cleared = tokio::time::timeout(COMMAND_TIMEOUT * 5, counts.clear_earlier(&cluster))
                            .await
                            .is_ok_and(|cleared| cleared.is_ok());
                    }
                    counts.write(&cluster, true).await;
                }
                Event::Shutdown => break,
            }
        }
        // Leaving: this replica counts nothing any more (best effort; its heartbeat key goes
        // too, and a field of a replica without one is not counted).
        for count in counts.inner.here.lock().expect("counts lock").values_mut() {
            *count = 0;
        }
        let keys: Vec<String> = counts.inner.here.lock().expect("counts lock").keys().cloned().collect();
        for key in keys {
            counts.mark_due_quietly(key);
        }
        counts.write(&cluster, false).await;
    });
}

/// `<prefix><what>:<principal tag>`.
fn hash_key(cluster: &Cluster, what: &str, principal: &str) -> String {
    cluster.key(&[what, &cluster.keys().principal_tag(principal)])
}

/// A count hash lives while some replica renews it (each heartbeat).
fn ttl_ms(cluster: &Cluster) -> u64 {
    (cluster.config().replica_ttl * 2).as_millis().max(1) as u64
}

/// KEYS: the count hash; ARGV: this replica's field, its count with the new one, the cap, the
/// replica keys' prefix, this replica's id, the hash's ttl. 1 admitted (and written), 0 not.
const ADMIT: &str = r"
local total = tonumber(ARGV[2])
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local field = fields[i]
  if field ~= ARGV[1] then
    local replica = string.match(field, '^(.*)#')
    if replica and replica ~= ARGV[5] and redis.call('EXISTS', ARGV[4] .. replica) == 1 then
      total = total + (tonumber(fields[i + 1]) or 0)
    else
      -- a dead replica's, or an earlier process's of this replica id
      redis.call('HDEL', KEYS[1], field)
    end
  end
end
if total > tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
";

/// KEYS: a count hash; ARGV: `<this replica id>#`, this process's field. Drops the fields of
/// earlier processes with this replica id.
const CLEAR_EARLIER: &str = r"
local fields = redis.call('HKEYS', KEYS[1])
local dropped = 0
for _, field in ipairs(fields) do
  if field ~= ARGV[2] and string.sub(field, 1, string.len(ARGV[1])) == ARGV[1] then
    redis.call('HDEL', KEYS[1], field)
    dropped = dropped + 1
  end
end
return dropped
";
