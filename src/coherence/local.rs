//! The read path of one process (no `[cluster]`): a fresh entry of the shared or the
//! principal's key is a hit; else one load per key, flown under the shared key once the URI is
//! known public; an expired entry is set aside and served, marked stale, only when the load
//! fails for the upstream's trouble (`stale_if_error`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rmcp::model::CacheScope;

use super::admission::{self, Cached, Loaded};
use super::flight::{LoadError, answered, too_slow};
use super::{Coherence, ReadRequest};
use crate::cache::Key;
use crate::error::ProxyError;

impl Coherence {
    /// Read through the local store: a fresh entry, or `load` — which concurrent readers of
    /// the same key share.
    pub(super) async fn read_local<F, Fut>(&self, request: ReadRequest<'_>, load: F) -> Result<Cached, ProxyError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Loaded, ProxyError>>,
    {
        let (shared, private) = self.keys(&request);
        let now = Instant::now();
        for key in [&shared, &private] {
            if let Some(entry) = self.inner.store.get(key).await {
                if entry.fresh_until > now {
                    return Ok(admission::hit(&entry, now));
                }
                self.inner.set_aside(key.clone(), entry);
                self.inner.store.remove(key).await;
            }
        }
        let fallback = self.inner.take_stale(&shared, &private);
        let known_public = self.inner.public.get(request.upstream, request.uri).unwrap_or(false);
        let flight = if known_public { shared.clone() } else { private };
        let (inner, settings) = (self.inner.clone(), request.settings.clone());
        let max_load = self.inner.max_load;
        // Set when this reader's own load runs; left unset, it waited on another's.
        let ran = AtomicBool::new(false);
        let ran_here = &ran;
        tracing::debug!(upstream = request.upstream, "read waits for its entry's load (its own or another's)");
        // Boxed: the load (an upstream read through rmcp) is a large future, and a hit, which
        // never gets here, would otherwise carry its size — moved into every box the request's
        // futures are put in on the way (the HTTP middlewares), at every hit.
        let attempt = Box::pin(self.inner.store.load_once(flight.clone(), async move {
            ran_here.store(true, Ordering::Relaxed);
            // A load of this URI that ended between this request's look-up and this flight
            // kept its entry under the shared key before it told of it (see `remember_scope`):
            // found there, it is served without reading upstream again.
            if let Some(entry) = inner.store.get(&shared).await.filter(|entry| entry.fresh_until > Instant::now()) {
                return Err(LoadError::FoundShared(entry));
            }
            let loaded = match tokio::time::timeout(max_load, load()).await {
                Ok(loaded) => loaded.map_err(LoadError::Failed)?,
                Err(_) => return Err(LoadError::Failed(too_slow(&flight))),
            };
            let entry = inner.keep(&flight, inner.admit(&flight, &settings, loaded, true)?);
            if flight.principal.is_some() && entry.scope == CacheScope::Public {
                // Public after all: keep it once, under the shared key, before saying so —
                // later readers then find it there instead of loading again.
                inner.store.insert(shared, entry.clone()).await;
                inner.remember_scope(&flight, &entry);
                return Err(LoadError::StoredShared(entry));
            }
            inner.remember_scope(&flight, &entry);
            Ok(entry)
        }));
        let attempt = attempt.await;
        answered(attempt, !ran.load(Ordering::Relaxed)).or_else(|failure| self.inner.stale_or(fallback, &failure))
    }

    fn keys(&self, request: &ReadRequest<'_>) -> (Key, Key) {
        let generation = self.inner.generations.current(request.upstream, request.uri);
        let shared = Key {
            upstream: request.upstream.into(),
            epoch: request.epoch,
            uri: request.uri.into(),
            generation,
            principal: None,
        };
        let private = Key { principal: Some(request.principal.into()), ..shared.clone() };
        (shared, private)
    }
}
