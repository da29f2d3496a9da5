//! The read path: route → cache → upstream → namespaced contents.
//!
//! The life of a `resources/read`: split the namespace (unknown → not found) → the cache
//! (hit: done) → on a miss, when the upstream can notify and the watch cap allows, subscribe
//! upstream first and wait until that is in place (so no change between the read and the
//! subscription can be missed) → read upstream with its timeout → namespace every
//! `contents[*].uri` → keep it per the lifetime rules → answer with truthful `ttlMs` /
//! `cacheScope`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CacheScope, ReadResourceResponse, ReadResourceResult, ResourceContents};

use super::Proxy;
use super::watches::WatchBook;
use crate::cache::{CacheHooks, Cached, Loaded, Outcome, Removal};
use crate::error::ProxyError;
use crate::metrics::{DenialAction, EvictionCause, InvalidationCause, Metrics};
use crate::namespace;
use crate::subscriptions::HolderId;
use crate::upstream::Upstream;

const SERVER_INFO_META_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// How long a cold read waits for its upstream subscription before reading unwatched.
const WATCH_WAIT: Duration = Duration::from_secs(2);

/// What a read produced.
#[derive(Debug, Clone)]
pub enum ReadAnswer {
    Result {
        result: ReadResourceResult,
        ttl: Duration,
        scope: CacheScope,
        outcome: Outcome,
    },
    /// 2026-07-28 MRTR: the upstream needs input first; passed through, never cached.
    InputRequired(ReadResourceResponse),
}

impl Proxy {
    /// Read a namespaced URI for `principal`.
    pub async fn read(&self, principal: &str, uri: &str) -> Result<ReadAnswer, ProxyError> {
        let super::access::Route { upstream: name, original } = self.route_for(principal, uri, DenialAction::Read)?;
        let upstream = &self.inner.upstreams[&name];
        let load = || self.load(upstream, &name, &original, uri);
        match self.inner.cache.read(&name, upstream.connection(), &original, principal, load).await {
            Ok(Cached { mut result, ttl, scope, outcome }) => {
                // One read may carry several resources (a folder's entries, say): each must be
                // one this principal may see.
                let policy = self.policy();
                result.contents.retain(|content| self.visible(&policy, principal, content_uri(content)));
                if result.contents.is_empty() {
                    return Err(ProxyError::not_found(uri));
                }
                let metrics = &self.inner.metrics;
                match outcome {
                    Outcome::Hit | Outcome::Stale => metrics.cache_hit(&name),
                    Outcome::Miss | Outcome::Bypass => metrics.cache_miss(&name),
                }
                metrics.bytes_served(&name, served_bytes(&result));
                Ok(ReadAnswer::Result { result, ttl, scope, outcome })
            }
            Err(ProxyError::InputRequired(needs)) => {
                Ok(ReadAnswer::InputRequired(ReadResourceResponse::InputRequired(*needs)))
            }
            Err(ProxyError::NotFound { .. }) => Err(ProxyError::not_found(uri)),
            Err(other) => Err(other),
        }
    }

    /// One upstream read, watched when it can be.
    async fn load(&self, upstream: &Upstream, name: &str, original: &str, uri: &str) -> Result<Loaded, ProxyError> {
        let cache = &self.inner.cache;
        let mut watched = cache.config().enabled && upstream.can_notify() && cache.may_watch(name, original);
        if watched {
            self.inner.watches.hold(self.inner.cache_holder, name, original);
            watched = upstream.wait_watching(original, WATCH_WAIT).await;
            if !watched {
                tracing::debug!(upstream = name, uri, "subscription not in place in time; caching unwatched");
                cache.release_if_unused(name, original);
            }
        }
        let loaded = match upstream.read(original).await {
            Ok(ReadResourceResponse::Complete(mut result)) => {
                for content in &mut result.contents {
                    namespace_content(name, uri, content);
                }
                // The upstream's own identity is not ours to pass on.
                if let Some(meta) = result.meta.as_mut() {
                    meta.remove(SERVER_INFO_META_KEY);
                }
                return Ok(Loaded { result, watched, trusted: upstream.config().trust_notifications });
            }
            Ok(ReadResourceResponse::InputRequired(needs)) => Err(ProxyError::InputRequired(Box::new(needs))),
            Ok(_) => {
                Err(ProxyError::UpstreamFailed { upstream: name.to_string(), reason: "unknown read response".into() })
            }
            Err(error) => Err(error),
        };
        // Nothing will be cached: the subscription taken for it must not stay behind.
        if watched {
            cache.release_if_unused(name, original);
        }
        loaded
    }
}

/// The size of what a read serves: text as UTF-8, blobs decoded.
fn served_bytes(result: &ReadResourceResult) -> u64 {
    let size = |content: &ResourceContents| match content {
        ResourceContents::TextResourceContents { text, .. } => text.len(),
        ResourceContents::BlobResourceContents { blob, .. } => {
            let padding = blob.bytes().rev().take_while(|b| *b == b'=').count();
            (blob.len() / 4 * 3).saturating_sub(padding)
        }
        _ => 0,
    };
    result.contents.iter().map(size).sum::<usize>() as u64
}

fn content_uri(content: &ResourceContents) -> &str {
    match content {
        ResourceContents::TextResourceContents { uri, .. } | ResourceContents::BlobResourceContents { uri, .. } => uri,
        _ => "",
    }
}

/// Put a content's URI into the namespace of the upstream it came from. A content URI without
/// a scheme cannot be namespaced: it is presented as the URI that was read.
fn namespace_content(upstream: &str, requested: &str, content: &mut ResourceContents) {
    if let ResourceContents::TextResourceContents { uri, .. } | ResourceContents::BlobResourceContents { uri, .. } =
        content
    {
        *uri = namespace::namespaced(upstream, uri).unwrap_or_else(|| requested.to_string());
    }
}

/// The cache's hold on upstream subscriptions goes through the same book as the hosts'.
pub(super) struct CacheWatch {
    pub book: Arc<WatchBook>,
    pub holder: HolderId,
    pub metrics: Metrics,
}

impl CacheHooks for CacheWatch {
    fn hold(&self, upstream: &str, uri: &str) {
        self.book.hold(self.holder, upstream, uri);
    }

    fn release(&self, upstream: &str, uri: &str) {
        self.book.release(self.holder, upstream, uri);
    }

    fn inserted(&self, upstream: &str) {
        self.metrics.cache_insert(upstream);
    }

    fn removed(&self, cause: Removal) {
        match cause {
            Removal::Size => self.metrics.cache_eviction(EvictionCause::Size),
            Removal::Expired => self.metrics.cache_eviction(EvictionCause::Expired),
            Removal::Invalidated => {}
        }
    }

    fn superseded(&self) {
        self.metrics.cache_invalidation(InvalidationCause::UpdatedDuringLoad, 1);
    }
}
