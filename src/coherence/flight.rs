//! A single-flight load, as both read paths (local and clustered) run it: admission of what it
//! loaded (kept or not, for how long, under which key), how it ended when it did not keep an
//! entry of its own ([`LoadError`]), what that means to each reader waiting on it, and the
//! expired entry served instead when it failed for the upstream's trouble (`stale_if_error`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::CacheScope;

use super::admission::{self, Cached, Loaded, lifetime};
use super::cache_subscriptions::LoadSubscription;
use super::{Inner, SCOPE_KNOWN_FOR, UNKEPT_FOR};
use crate::cache::{Entry, Key, Outcome};
use crate::config::UpstreamCache;
use crate::error::ProxyError;
use crate::metrics::InvalidationCause;
use crate::wire::contents_json::contents_json;

/// A loaded entry admitted to the cache, not yet kept ([`Inner::keep`]).
pub(super) struct Admitted {
    pub(super) entry: Arc<Entry>,
    subscription: Option<LoadSubscription>,
}

/// How a single-flight load ended when it did not hand back the entry it kept.
pub(super) enum LoadError {
    /// Loaded fine, but not to be kept (too big, ttl 0, superseded by an update).
    Uncacheable(Box<Cached>),
    /// Loaded under a principal's key, found public, and kept under the shared key instead.
    StoredShared(Arc<Entry>),
    /// Not loaded: a load that finished meanwhile had kept a fresh entry under the shared key.
    FoundShared(Arc<Entry>),
    Failed(ProxyError),
}

/// What a finished single-flight load means to each reader of it: a miss (the entry it kept, or
/// kept under the shared key), a hit (found meanwhile), the uncacheable answer, or the failure.
/// A reader whose own load never ran (`joined`: it waited on another reader's) was coalesced.
pub(super) fn answered<E: std::ops::Deref<Target = Entry>>(
    attempt: Result<E, Arc<LoadError>>,
    joined: bool,
) -> Result<Cached, ProxyError> {
    let coalesced = |cached: Cached| match joined {
        true => Cached { outcome: Outcome::Coalesced, ..cached },
        false => cached,
    };
    answered_alone(attempt).map(coalesced)
}

fn answered_alone<E: std::ops::Deref<Target = Entry>>(
    attempt: Result<E, Arc<LoadError>>,
) -> Result<Cached, ProxyError> {
    let miss = |entry: &Entry| Cached { outcome: Outcome::Miss, ..admission::hit(entry, Instant::now()) };
    match attempt {
        Ok(entry) => Ok(miss(&entry)),
        Err(error) => match &*error {
            LoadError::StoredShared(entry) => Ok(miss(entry)),
            LoadError::FoundShared(entry) => Ok(admission::hit(entry, Instant::now())),
            LoadError::Uncacheable(cached) => Ok((**cached).clone()),
            LoadError::Failed(failure) => Err(failure.clone()),
        },
    }
}

pub(super) fn too_slow(key: &Key) -> ProxyError {
    ProxyError::UpstreamFailed { upstream: key.upstream.to_string(), reason: "the read took too long".into() }
}

impl Inner {
    /// Decide whether a loaded result is kept, and for how long: the entry to keep, kept once
    /// [`Self::keep`] is given it (the shared tier stores it first, and may not).
    /// `local_generation`: whether the flight's generation is this process's (else the shared
    /// tier's, which checks it when storing).
    pub(super) fn admit(
        &self,
        flight: &Key,
        settings: &UpstreamCache,
        loaded: Loaded,
        local_generation: bool,
    ) -> Result<Admitted, LoadError> {
        let Loaded { result, subscription } = loaded;
        let ttl = lifetime(&self.config, settings, result.ttl_ms, subscription.is_some());
        let (upstream, uri) = (&*flight.upstream, &*flight.uri);
        match ttl.is_zero() {
            true => self.unkept.set(upstream, uri, (), Instant::now() + self.config.max_ttl.min(UNKEPT_FOR)),
            false => self.unkept.remove(upstream, uri),
        }
        let mut entry = admission::entry(&self.config, result, ttl);
        let public = entry.scope == CacheScope::Public;
        let superseded = local_generation && self.generations.current(upstream, uri) != flight.generation;
        let shareable = public || flight.principal.is_some();
        if ttl.is_zero() || u64::from(entry.bytes) > self.config.max_entry_bytes || superseded || !shareable {
            self.remember_scope(flight, &entry);
            if superseded {
                self.metrics.cache_invalidation(InvalidationCause::UpdatedDuringLoad, 1);
            }
            let (outcome, ttl) = match superseded {
                true => (Outcome::Miss, Duration::ZERO),
                false => (Outcome::Bypass, admission::told_ttl(entry.result.ttl_ms, ttl)),
            };
            let scope = admission::told_scope(&entry.result);
            let kept_for = Duration::ZERO;
            let cached = Cached { result: entry.result, ttl, kept_for, scope, outcome, contents_json: None };
            return Err(LoadError::Uncacheable(Box::new(cached)));
        }
        entry.contents_json = contents_json(&entry.result.contents);
        Ok(Admitted { entry: Arc::new(entry), subscription })
    }

    /// `admitted` (by `flight`'s load) is kept: its subscription stays while the entry lives,
    /// and it is counted. Dropped instead, its subscription is let go of and nothing is counted.
    pub(super) fn keep(&self, flight: &Key, admitted: Admitted) -> Arc<Entry> {
        let Admitted { entry, subscription } = admitted;
        if let Some(subscription) = subscription {
            subscription.keep_until(entry.keep_until);
        }
        self.metrics.cache_insert(&flight.upstream);
        entry
    }

    /// Remember whether `entry`'s URI answers the same to everyone, so later loads fly under
    /// the shared key. Told only once the entry is stored where such loads look for it: a load
    /// that learnt "public" before the entry was there would read upstream a second time.
    pub(super) fn remember_scope(&self, flight: &Key, entry: &Entry) {
        let public = entry.scope == CacheScope::Public;
        let until = entry.keep_until.max(Instant::now() + SCOPE_KNOWN_FOR);
        self.public.set(&flight.upstream, &flight.uri, public, until);
    }

    /// Set `entry` aside under `key`: past its lifetime, but kept for `stale_if_error` should the
    /// load that replaces it fail.
    pub(super) fn set_aside(&self, key: Key, entry: Arc<Entry>) {
        self.stale.lock().expect("stale lock").insert(key, entry);
    }

    /// The entry set aside under `shared` or `private`, if any (taken out: a successful load
    /// replaces it; a failed one puts it back).
    pub(super) fn take_stale(&self, shared: &Key, private: &Key) -> Option<(Key, Arc<Entry>)> {
        let mut stale = self.stale.lock().expect("stale lock");
        stale.retain(|_, entry| entry.keep_until > Instant::now());
        [shared, private].into_iter().find_map(|key| stale.remove(key).map(|entry| (key.clone(), entry)))
    }

    /// A load failed with `failure`: for the upstream's trouble, the entry set aside (`fallback`),
    /// marked stale, while it is kept; else the failure.
    pub(super) fn stale_or(
        &self,
        fallback: Option<(Key, Arc<Entry>)>,
        failure: &ProxyError,
    ) -> Result<Cached, ProxyError> {
        let upstream_trouble = matches!(
            failure,
            ProxyError::UpstreamDown { .. } | ProxyError::UpstreamTimeout { .. } | ProxyError::UpstreamFailed { .. }
        );
        match fallback {
            Some((key, entry)) if upstream_trouble && entry.keep_until > Instant::now() => {
                let (ttl, kept_for) = (Duration::ZERO, Duration::ZERO);
                let cached =
                    Cached { outcome: Outcome::Stale, ttl, kept_for, ..admission::hit(&entry, Instant::now()) };
                // Still the best there is while the upstream is in trouble.
                self.set_aside(key, entry);
                Ok(cached)
            }
            _ => Err(failure.clone()),
        }
    }
}
