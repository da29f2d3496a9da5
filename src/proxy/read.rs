//! The reads capability: route → coherence (cache) → upstream → namespaced contents.
//!
//! The life of a `resources/read`, top to bottom in [`Reads::read`]: the caller's policy
//! snapshot decides the URI (denied or unknown → not found), split the namespace
//! (unknown → not found) → [`Coherence::read`] (a fresh entry: done) → on a miss, when the
//! upstream can notify and [`Coherence::load_subscription`] gives one (or a host subscribes the URI), wait
//! until the upstream acknowledged the subscription (so no change between the read and the
//! subscription can be missed; a refusal or no answer reads unwatched) → read upstream with its timeout →
//! namespace every `contents[*].uri` → coherence keeps it per the lifetime rules → contents
//! the principal may not see are removed → truthful `ttlMs` / `cacheScope`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CacheScope, ReadResourceResponse, ReadResourceResult, ResourceContents};

use super::access::Access;
use super::caller::Caller;
use crate::coherence::{Cached, Coherence, Loaded, Outcome, ReadRequest};
use crate::error::ProxyError;
use crate::metrics::{DenialAction, Metrics};
use crate::namespace;
use crate::upstream::{Registry, SubscribeOutcome, Upstream};

const SERVER_INFO_META_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// How long a cold read waits for its upstream subscription before reading unwatched.
pub(crate) const WATCH_WAIT: Duration = Duration::from_secs(2);

/// What a read produced.
#[derive(Debug, Clone)]
pub enum ReadAnswer {
    Result {
        result: ReadResourceResult,
        ttl: Duration,
        /// What is left of the kept entry's lifetime (zero when the result was not kept): on
        /// the request's span, never told to the host.
        kept_for: Duration,
        /// The `cacheScope` a host is told, decided with the reading caller's policy snapshot.
        scope: CacheScope,
        outcome: Outcome,
        /// `result.contents` as JSON, when they are exactly the cache entry's (none removed
        /// for this caller): a reply may carry these bytes instead of serialising the contents.
        contents_json: Option<Arc<str>>,
    },
    /// 2026-07-28 MRTR: the upstream needs input first; passed through, never cached.
    InputRequired(ReadResourceResponse),
}

/// The reads service, with what it uses.
pub(crate) struct Reads {
    /// Decides and routes the URI a host named.
    pub(super) access: Access,
    pub(super) upstreams: Registry,
    /// The read cache and its coherence.
    pub(super) cache: Coherence,
    pub(super) metrics: Metrics,
}

impl Reads {
    /// Read a namespaced URI for `caller`. The answer's `scope` is the one a host may be told,
    /// decided with the caller's policy snapshot (nothing downstream decides it again).
    pub(crate) async fn read(&self, caller: &Caller, uri: &str) -> Result<ReadAnswer, ProxyError> {
        let route = self.access.route(caller, uri, DenialAction::Read)?;
        let (name, original) = (route.upstream, route.original);
        // Gone since the route was decided (a reload removed it): like any unknown namespace.
        let upstream = &self.upstreams.get(&name).ok_or_else(|| ProxyError::not_found(uri))?;
        let read = if upstream.has_sessions() {
            // Boxed: a session's request is a large future, and a cached read's stays small.
            Box::pin(self.read_in_session(caller, upstream, &name, &original, uri)).await
        } else {
            let request = ReadRequest {
                upstream: &name,
                epoch: upstream.connection(),
                uri: &original,
                principal: caller.principal(),
                settings: &upstream.config().cache,
            };
            self.cache.read(request, || self.load(upstream, &name, &original, uri)).await
        };
        match read {
            Ok(Cached { mut result, ttl, kept_for, scope, outcome, contents_json }) => {
                // One read may carry several resources (a folder's entries, say): each must be
                // one this principal may see.
                let kept = result.contents.len();
                result.contents.retain(|content| caller.may_see(content_uri(content)));
                if result.contents.is_empty() {
                    return Err(ProxyError::not_found(uri));
                }
                // The entry's JSON stands for these contents only when none was removed.
                let contents_json = contents_json.filter(|_| result.contents.len() == kept);
                let scope = caller.downstream_scope(scope);
                let metrics = &self.metrics;
                match outcome {
                    Outcome::Hit | Outcome::Stale => metrics.cache_hit(&name),
                    // A coalesced read is counted with the load it waited on: a miss.
                    Outcome::Miss | Outcome::Coalesced | Outcome::Bypass => metrics.cache_miss(&name),
                }
                metrics.bytes_served(&name, served_bytes(&result));
                Ok(ReadAnswer::Result { result, ttl, kept_for, scope, outcome, contents_json })
            }
            Err(ProxyError::InputRequired(needs)) => {
                Ok(ReadAnswer::InputRequired(ReadResourceResponse::InputRequired(*needs)))
            }
            Err(ProxyError::NotFound { .. }) => Err(ProxyError::not_found(uri)),
            Err(other) => Err(other),
        }
    }

    /// A read of an upstream with sessions per principal or per host: on the principal's own
    /// session (with `[cluster]`, over MCP on the replica holding it: the upstream decides), never cached (what a session shows
    /// may be its own), so never served to another principal; the host is told `ttlMs` 0,
    /// `private`.
    async fn read_in_session(
        &self,
        caller: &Caller,
        upstream: &Upstream,
        name: &str,
        original: &str,
        uri: &str,
    ) -> Result<Cached, ProxyError> {
        let answer = upstream.session_for(caller.principal(), None).await?.read_as(original, caller.subject()).await?;
        let result = presented(name, uri, answer)?;
        let (ttl, kept_for, scope, outcome) = (Duration::ZERO, Duration::ZERO, CacheScope::Private, Outcome::Bypass);
        Ok(Cached { result, ttl, kept_for, scope, outcome, contents_json: None })
    }

    /// Wait (at most `timeout`) until the upstream of a namespaced URI `caller` may see has
    /// acknowledged its subscription; false when it refused, did not answer in time, cannot
    /// notify, or the URI is not the caller's to see.
    pub(crate) async fn wait_subscribed(&self, caller: &Caller, uri: &str, timeout: Duration) -> bool {
        let Ok(route) = self.access.route(caller, uri, DenialAction::Subscribe) else { return false };
        let Some(upstream) = self.upstreams.get(&route.upstream) else { return false };
        // On a per-principal upstream the subscription is on the caller's own session, not the shared one.
        let subscribed = upstream.wait_session_subscribed(caller.principal(), None, &route.original, timeout);
        upstream.can_notify() && matches!(subscribed.await, SubscribeOutcome::Acknowledged)
    }

    /// One upstream read, watched when the upstream acknowledges the subscription first.
    async fn load(&self, upstream: &Upstream, name: &str, original: &str, uri: &str) -> Result<Loaded, ProxyError> {
        let coherence = &self.cache;
        let settings = &upstream.config().cache;
        let can_notify = upstream.can_notify();
        let mut subscription = can_notify.then(|| coherence.load_subscription(name, original, settings)).flatten();
        // A URI a host subscribed to is waited for too, a load subscription or not (its results may not be
        // kept): a read after a subscribe then shows the upstream as of its acknowledgement.
        if subscription.is_some() || (can_notify && upstream.wants_subscribed(original)) {
            match upstream.wait_subscribed(original, WATCH_WAIT).await {
                SubscribeOutcome::Acknowledged => {}
                SubscribeOutcome::Refused => {
                    tracing::debug!(upstream = name, uri, "subscription refused; caching unwatched");
                    coherence.refused(name, original);
                    subscription = None;
                }
                SubscribeOutcome::NotInTime => {
                    tracing::debug!(upstream = name, uri, "subscription not in place in time; caching unwatched");
                    subscription = None;
                }
            }
        }
        // Dropping the load subscription (a failed read, or one not kept) lets the subscription go.
        let result = presented(name, uri, upstream.read_as(original, None).await?)?;
        Ok(Loaded { result, subscription })
    }
}

/// What upstream `name` answered to a read of `uri` (namespaced), as the proxy presents it: its
/// contents namespaced, without the upstream's own identity; an `input_required` as an error.
fn presented(name: &str, uri: &str, answer: ReadResourceResponse) -> Result<ReadResourceResult, ProxyError> {
    match answer {
        ReadResourceResponse::Complete(mut result) => {
            namespace_contents(name, uri, &mut result.contents);
            if let Some(meta) = result.meta.as_mut() {
                meta.remove(SERVER_INFO_META_KEY);
            }
            Ok(result)
        }
        ReadResourceResponse::InputRequired(needs) => Err(ProxyError::InputRequired(Box::new(needs))),
        _ => Err(ProxyError::UpstreamFailed { upstream: name.to_string(), reason: "unknown read response".into() }),
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

/// Put every content's URI into the namespace of the upstream it came from. A content whose
/// URI has no scheme (or is empty) cannot be namespaced, so no policy could judge it: alone, it
/// is the resource that was read (and judged) and is presented as `requested`; among several,
/// it could be anything, and is dropped.
fn namespace_contents(upstream: &str, requested: &str, contents: &mut Vec<ResourceContents>) {
    let alone = contents.len() == 1;
    contents.retain_mut(|content| {
        let (ResourceContents::TextResourceContents { uri, .. } | ResourceContents::BlobResourceContents { uri, .. }) =
            content
        else {
            return false;
        };
        match namespace::namespaced(upstream, uri) {
            Some(namespaced) => *uri = namespaced,
            None if alone => *uri = requested.to_string(),
            None => {
                tracing::debug!(upstream, uri = %uri, "content without a scheme in a multi-content read dropped");
                return false;
            }
        }
        true
    });
}
