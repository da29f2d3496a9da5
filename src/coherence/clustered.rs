//! Reads and invalidations when the cache is shared by a cluster's replicas: Redis (see
//! `shared`) says the version and whether a vouched entry exists, the local store in front
//! serves it when it holds that very entry (keyed by Redis's boot token and the version), else
//! it is fetched; a miss loads once per key on this replica and fills Redis only if no update
//! overtook the load. An entry found past its lifetime (Redis keeps it for `stale_if_error`) is
//! set aside and served, marked stale, only when that load fails for the upstream's trouble, as
//! on one process. Redis down: reads go upstream and nothing is kept (the local store is
//! emptied: nothing in it is vouched for any more).
//! Invariant: a read is served from either tier only under the version Redis gave it.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::CacheScope;

use super::admission::{self, Cached, Loaded};
use super::flight::{LoadError, answered, too_slow};
use super::shared::{Found, Look, SharedTier, Slot};
use super::{Coherence, Inner, ReadRequest};
use crate::cache::{Entry, Key, Outcome};
use crate::config::UpstreamCache;
use crate::error::ProxyError;
use crate::metrics::{InvalidationCause, SharedCacheEvent};

/// Longest a read waits for another replica's load of the same key (then it loads itself).
const LEASE_WAIT: Duration = Duration::from_secs(5);
/// How often a waiting read looks whether that load was stored.
const LEASE_POLL: Duration = Duration::from_millis(10);

impl Coherence {
    /// The shared tier, when this replica is part of a cluster.
    pub fn shared_tier(&self) -> Option<&Arc<SharedTier>> {
        self.inner.shared.as_ref()
    }

    /// `upstream` said `uri` changed: drop it here and raise its version for every replica
    /// (awaited: only then may subscribers be told). Returns how many local entries that drops.
    pub async fn invalidate_everywhere(&self, upstream: &str, uri: &str) -> usize {
        let dropped = self.invalidate(upstream, uri);
        if let Some(tier) = &self.inner.shared
            && tier.bump(upstream, uri).await.is_err()
        {
            self.inner.forget_local();
        }
        dropped
    }

    /// Anything of `upstream` may have changed: every key of it changes here and for every
    /// replica. Returns how many local entries that drops.
    pub async fn invalidate_upstream_everywhere(&self, upstream: &str) -> u64 {
        let dropped = self.invalidate_upstream(upstream);
        if let Some(tier) = &self.inner.shared
            && tier.raise_floor(upstream).await.is_err()
        {
            self.inner.forget_local();
        }
        dropped
    }

    pub(super) async fn read_clustered<F, Fut>(
        &self,
        tier: &Arc<SharedTier>,
        request: ReadRequest<'_>,
        load: F,
    ) -> Result<Cached, ProxyError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Loaded, ProxyError>>,
    {
        // Whose key a load fills (and claims in the look, when there is nothing to serve).
        let known_public = self.inner.public.get(request.upstream, request.uri).unwrap_or(false);
        let loads_as = (!known_public).then_some(request.principal);
        let slot = Slot { upstream: request.upstream, uri: request.uri, principal: loads_as };
        let look = match tier.is_up() {
            true => tier.look(&slot, request.principal, self.inner.max_load).await.ok(),
            false => None,
        };
        let Some(look) = look else {
            self.inner.forget_local();
            return bypass(load).await;
        };
        let (shared, private) = keys(&request, &look);
        let found = match look.found {
            Found::Shared => Some(&shared),
            Found::Private => Some(&private),
            Found::Nowhere => None,
        };
        if let Some(key) = found {
            match self.inner.found(tier, key, &look).await {
                Ok(Some(cached)) => return Ok(cached),
                Ok(None) => {}
                Err(()) => return bypass(load).await,
            }
        }
        // Nothing vouched for in Redis: whatever this replica holds under these keys is not.
        self.inner.store.remove(&shared).await;
        self.inner.store.remove(&private).await;
        self.inner.metrics.shared_cache(SharedCacheEvent::Miss);
        let fallback = self.inner.take_stale(&shared, &private);
        let flight = if known_public { shared.clone() } else { private };
        let (inner, tier, settings) = (self.inner.clone(), tier.clone(), request.settings.clone());
        let principal: Arc<str> = request.principal.into();
        // Set when this reader's own load runs; left unset, it waited on another's.
        let ran = AtomicBool::new(false);
        let ran_here = &ran;
        let attempt = Box::pin(self.inner.store.load_once(flight.clone(), async move {
            ran_here.store(true, Ordering::Relaxed);
            // Another replica loading this very key: its fill is waited for, not read again.
            let claimed = inner.claim_or_wait(&tier, &flight, &look, &principal).await?;
            let loaded = inner.load_and_fill(&tier, flight.clone(), shared, &look, &settings, load).await;
            // A kept fill let go of the claim in the same script.
            let kept = matches!(loaded, Ok(_) | Err(LoadError::StoredShared(_)));
            if claimed && !kept {
                tier.release(&slot_of(&flight), &look).await;
            }
            loaded
        }));
        let attempt = attempt.await;
        answered(attempt, !ran.load(Ordering::Relaxed)).or_else(|failure| self.inner.stale_or(fallback, &failure))
    }
}

impl Inner {
    /// Read upstream, admit, fill Redis (only if no update overtook the load). `Ok` and
    /// `Err(StoredShared)`: kept, and the fill let go of `flight`'s claim in the same script.
    async fn load_and_fill<F, Fut>(
        &self,
        tier: &SharedTier,
        flight: Key,
        shared: Key,
        look: &Look,
        settings: &UpstreamCache,
        load: F,
    ) -> Result<Arc<Entry>, LoadError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Loaded, ProxyError>>,
    {
        let loaded = match tokio::time::timeout(self.max_load, load()).await {
            Ok(loaded) => loaded.map_err(LoadError::Failed)?,
            Err(_) => return Err(LoadError::Failed(too_slow(&flight))),
        };
        let vouched = loaded.subscription.is_some();
        let admitted = self.admit(&flight, settings, loaded, false)?;
        let public_after_all = flight.principal.is_some() && admitted.entry.scope == CacheScope::Public;
        let target = if public_after_all { &shared } else { &flight };
        // Not stored: dropped unkept (its subscription let go of, nothing counted).
        match tier.fill((&slot_of(target), &slot_of(&flight)), look, &admitted.entry, vouched).await {
            Ok(true) => {}
            Ok(false) => {
                self.metrics.cache_invalidation(InvalidationCause::UpdatedDuringLoad, 1);
                return Err(LoadError::Uncacheable(Box::new(not_kept(&admitted.entry))));
            }
            Err(_) => {
                self.forget_local();
                return Err(LoadError::Uncacheable(Box::new(not_kept(&admitted.entry))));
            }
        }
        let entry = self.keep(&flight, admitted);
        if public_after_all {
            self.store.insert(shared, entry.clone()).await;
            self.remember_scope(&flight, &entry);
            return Err(LoadError::StoredShared(entry));
        }
        self.remember_scope(&flight, &entry);
        Ok(entry)
    }

    /// Hold the claim of `flight`'s load (true: the look took it, or takes it now), or wait
    /// while another replica holds it: its fill, once in Redis, is served (`Err(FoundShared)`).
    /// A claim of this replica's is this load's (its reader joined this load). Gives up waiting
    /// (false: load here) when the claim goes without a fill, the version moves on, Redis fails,
    /// or after [`LEASE_WAIT`].
    async fn claim_or_wait(
        &self,
        tier: &SharedTier,
        flight: &Key,
        look: &Look,
        principal: &str,
    ) -> Result<bool, LoadError> {
        let slot = slot_of(flight);
        let deadline = Instant::now() + self.max_load.min(LEASE_WAIT);
        let mut seen = *look;
        loop {
            if seen.claimed {
                return Ok(true);
            }
            // Found by the look, gone before it was fetched: nothing claimed it yet.
            if !seen.leased {
                match tier.claim(&slot, look, self.max_load).await {
                    Ok(false) => {}
                    Ok(true) => return Ok(true),
                    Err(_) => return Ok(false),
                }
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            // Redis has no wait for a key to appear: look again shortly.
            tokio::time::sleep(LEASE_POLL).await;
            let Ok(now) = tier.look(&slot, principal, self.max_load).await else { return Ok(false) };
            if (now.boot, now.version) != (look.boot, look.version) {
                return Ok(false);
            }
            let who = match now.found {
                Found::Nowhere => {
                    seen = now;
                    continue;
                }
                Found::Shared => None,
                Found::Private => Some(principal),
            };
            let found = Key { principal: who.map(Arc::from), ..flight.clone() };
            match tier.fetch(&slot_of(&found), look.version).await {
                Ok(Some(entry)) if entry.fresh_until > Instant::now() => {
                    let entry = Arc::new(entry);
                    self.store.insert(found, entry.clone()).await;
                    return Err(LoadError::FoundShared(entry));
                }
                _ => return Ok(false),
            }
        }
    }

    /// Redis holds a vouched entry under `key`: served from the local store when it has it,
    /// else fetched. `Ok(None)`: gone or expired meanwhile; `Err`: Redis is down.
    async fn found(&self, tier: &SharedTier, key: &Key, look: &Look) -> Result<Option<Cached>, ()> {
        let now = Instant::now();
        if let Some(entry) = self.store.get(key).await.filter(|entry| entry.fresh_until > now) {
            self.metrics.shared_cache(SharedCacheEvent::LocalHit);
            return Ok(Some(admission::hit(&entry, now)));
        }
        let slot = Slot { upstream: &key.upstream, uri: &key.uri, principal: key.principal.as_deref() };
        let fetched = tier.fetch(&slot, look.version).await.map_err(|_| self.forget_local())?;
        let Some(entry) = fetched.map(Arc::new) else { return Ok(None) };
        if entry.fresh_until <= Instant::now() {
            // Kept past its lifetime for `stale_if_error`, under the version Redis gave.
            self.set_aside(key.clone(), entry);
            return Ok(None);
        }
        self.store.insert(key.clone(), entry.clone()).await;
        Ok(Some(admission::hit(&entry, Instant::now())))
    }

    /// Redis cannot vouch for anything now: the local store is emptied.
    fn forget_local(&self) {
        self.store.clear();
        self.stale.lock().expect("stale lock").clear();
    }
}

/// Where `key` lives in the shared tier.
fn slot_of(key: &Key) -> Slot<'_> {
    Slot { upstream: &key.upstream, uri: &key.uri, principal: key.principal.as_deref() }
}

/// The keys of a read under what Redis said: its boot token as the epoch, the version as the
/// generation.
fn keys(request: &ReadRequest<'_>, look: &Look) -> (Key, Key) {
    let shared = Key {
        upstream: request.upstream.into(),
        epoch: look.boot,
        uri: request.uri.into(),
        generation: look.version,
        principal: None,
    };
    let private = Key { principal: Some(request.principal.into()), ..shared.clone() };
    (shared, private)
}

/// A result loaded but not kept: passed on, with nothing promised to the host.
fn not_kept(entry: &Entry) -> Cached {
    let scope = admission::told_scope(&entry.result);
    let (ttl, kept_for) = (Duration::ZERO, Duration::ZERO);
    Cached { result: entry.result.clone(), ttl, kept_for, scope, outcome: Outcome::Miss, contents_json: None }
}

/// Read upstream, keep nothing.
async fn bypass<F, Fut>(load: F) -> Result<Cached, ProxyError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Loaded, ProxyError>>,
{
    let loaded = Box::pin(load()).await?;
    let scope = admission::told_scope(&loaded.result);
    let (ttl, kept_for, outcome) = (Duration::ZERO, Duration::ZERO, Outcome::Bypass);
    Ok(Cached { ttl, kept_for, scope, result: loaded.result, outcome, contents_json: None })
}

#[cfg(test)]
mod tests;
