//! Access tokens for an HTTP upstream (`[upstreams.auth]`), by OAuth 2.1 client credentials
//! or, for one principal's own upstream session, by RFC 8693 token exchange of a JWT of that
//! principal: for a host's call, prompt, read or completion (here or forwarded from another
//! replica), the JWT that request came with ([`SubjectToken`]); for what the session sends on
//! its own (its subscriptions, a 2026-07-28 listen stream, its stream, its handshake), the JWT
//! of the latest subscription request held on it ([`TokenSource::stand_for`]) while it is
//! accepted, else the principal's latest-expiring one ([`Subjects`]). Exchanged tokens are kept by the digest of the JWT they
//! were exchanged for, so a request never goes with a token exchanged for another JWT. Tokens
//! are fetched on first use, kept, and fetched anew before they expire — a quarter of their
//! lifetime (at most a minute) ahead — or when the upstream answers 401 to the token in use.
//! An exchanged token's lifetime ends no later than the JWT it was exchanged for is accepted.
//! One fetch at a time per upstream: callers that need a token while one is being fetched wait
//! for it (single flight) and share its outcome, its failure too. A fetch that does not succeed within its deadline fails the calls
//! waiting for it with a [`TokenFailure`], in our words; the next call tries again.
//!
//! The client authenticates with HTTP Basic (RFC 6749 §2.3.1: id and secret form-encoded),
//! the form body carries `grant_type=client_credentials` and the optional `scope` and
//! `audience`. An exchange carries `grant_type=urn:ietf:params:oauth:grant-type:token-exchange`,
//! the principal's JWT as `subject_token` with its `subject_token_type`,
//! `requested_token_type=…:access_token` and the optional `audience`, `resource` and `scope`;
//! with Basic authentication when the proxy has a client id, else none (a public client). A
//! principal with no JWT kept (a static token's, or an expired one) gets no exchange: its
//! request fails at once ([`TokenFailure::NoSubject`]). No redirects are followed. The forms, the
//! Basic header and the reading of a reply are the token endpoint's file (`token_endpoint.rs`).
//!
//! Invariant: a host's request that came with a JWT goes with a token exchanged for that JWT,
//! or with none; so does a subscription, made on its session after any other (see above). Neither the secret nor a token is logged, put in an error, or shown in `Debug`
//! output; a token endpoint's own error text is not passed on (only its bounded `error` code
//! goes to the log).

mod token_endpoint;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::auth::subjects::Subjects;
use crate::config::{ClientCredentials, TokenExchange, UpstreamConfig, UpstreamTransport, redact_url};
use crate::host::SubjectToken;

/// The longest a token fetch may take, whatever the upstream's request timeout.
const FETCH_AT_MOST: Duration = Duration::from_secs(10);
/// The most subject tokens whose exchanged tokens one source keeps.
const MAX_KEPT: usize = 32;
/// The most a token is refreshed ahead of its expiry.
const REFRESH_AHEAD_AT_MOST: Duration = Duration::from_secs(60);

/// Why no token could be had: a bounded set, shown to clients and in `/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TokenFailure {
    /// The token endpoint could not be reached (refused, reset, DNS, TLS).
    Unreachable,
    /// It did not answer within the deadline.
    TimedOut,
    /// It answered with this HTTP status (refused the credentials, or failed).
    Refused(u16),
    /// Its answer held no usable bearer token.
    Unusable,
    /// A token exchange, but the principal has no JWT to exchange (it authenticated with a
    /// static token, or its JWT expired).
    NoSubject,
}

impl TokenFailure {
    /// A bounded label.
    pub fn kind(self) -> &'static str {
        match self {
            TokenFailure::Unreachable => "unreachable",
            TokenFailure::TimedOut => "timed_out",
            TokenFailure::Refused(_) => "refused",
            TokenFailure::Unusable => "unusable",
            TokenFailure::NoSubject => "no_subject_token",
        }
    }

    /// In our words, for a client and `/status`.
    pub fn describe(self) -> String {
        let what = match self {
            TokenFailure::Unreachable => "its token endpoint is unreachable".to_string(),
            TokenFailure::TimedOut => "its token endpoint did not answer in time".to_string(),
            TokenFailure::Refused(status) => {
                format!("its token endpoint refused the proxy's credentials (HTTP {status})")
            }
            TokenFailure::Unusable => "its token endpoint gave no usable bearer token".to_string(),
            TokenFailure::NoSubject => "it takes a token exchanged for the caller's own JWT, and this caller \
                                        did not authenticate with one (or it expired)"
                .to_string(),
        };
        format!("no access token for the upstream: {what}")
    }

    /// The number kept with the kind (the HTTP status of `Refused`, else 0).
    pub fn status(self) -> u16 {
        match self {
            TokenFailure::Refused(status) => status,
            _ => 0,
        }
    }

    /// The failure of `kind` and `status` (as [`TokenFailure::kind`] and
    /// [`TokenFailure::status`] gave them).
    pub fn from_parts(kind: &str, status: u16) -> Option<TokenFailure> {
        match kind {
            "unreachable" => Some(TokenFailure::Unreachable),
            "timed_out" => Some(TokenFailure::TimedOut),
            "refused" => Some(TokenFailure::Refused(status)),
            "unusable" => Some(TokenFailure::Unusable),
            "no_subject_token" => Some(TokenFailure::NoSubject),
            _ => None,
        }
    }
}

/// The tokens of `config`'s shared connection (and of its sessions that exchange nothing): by
/// the proxy's client credentials, when it has them.
pub(crate) fn shared_source(config: &UpstreamConfig) -> Option<TokenSource> {
    let UpstreamTransport::Http { ca, auth: Some(auth), .. } = &config.transport else { return None };
    let client = auth.client_credentials()?.clone();
    let roots = ca.as_ref().map(|ca| ca.certificates()).unwrap_or_default();
    Some(TokenSource::new(&config.name, Grant::ClientCredentials(client), config.request_timeout, roots))
}

/// The tokens of `principal`'s own sessions when `config` exchanges the principals' JWTs.
pub(crate) fn exchange_source(config: &UpstreamConfig, subjects: &Subjects, principal: &str) -> Option<TokenSource> {
    let UpstreamTransport::Http { ca, auth: Some(auth), .. } = &config.transport else { return None };
    let exchange = auth.token_exchange()?.clone();
    let roots = ca.as_ref().map(|ca| ca.certificates()).unwrap_or_default();
    let grant = Grant::Exchange { config: exchange, subjects: subjects.clone(), principal: principal.into() };
    Some(TokenSource::new(&config.name, grant, config.request_timeout, roots))
}

/// One upstream's tokens: a cheap `Clone` handle. A session's own handle
/// ([`TokenSource::for_session`]) shares the kept tokens and keeps the JWT its own requests go
/// with.
#[derive(Clone)]
pub(crate) struct TokenSource {
    inner: Arc<Inner>,
    /// The JWT of the latest subscription request held on the session (see the module doc).
    standing: Arc<std::sync::Mutex<Option<SubjectToken>>>,
}

/// How a token is obtained.
pub(crate) enum Grant {
    /// With the proxy's own client credentials.
    ClientCredentials(ClientCredentials),
    /// By exchanging the JWT a request came with, else `principal`'s latest, kept in
    /// `subjects`.
    Exchange { config: TokenExchange, subjects: Subjects, principal: Arc<str> },
}

impl Grant {
    fn token_url(&self) -> &str {
        match self {
            Grant::ClientCredentials(config) => &config.token_url,
            Grant::Exchange { config, .. } => &config.token_url,
        }
    }
}

struct Inner {
    upstream: String,
    grant: Grant,
    client: reqwest::Client,
    /// A fetch, with the wait for another caller's fetch, gives up after this.
    deadline: Duration,
    /// Held across a fetch: the single flight. What is kept for each subject token (by its
    /// digest; client credentials have one entry).
    current: Mutex<HashMap<[u8; 32], Kept>>,
    /// Fetches finished (read before waiting for `current`: one that finished meanwhile and
    /// failed fails the waiters too, rather than each asking again).
    fetches: AtomicU64,
}

/// The token kept for one subject, or why its last fetch failed (and the fetch count then).
#[derive(Default)]
struct Kept {
    token: Option<Token>,
    failure: Option<(TokenFailure, u64)>,
}

/// What a token is fetched for: its key in the book and, for an exchange, the subject token
/// and how long it is still accepted.
struct Subject {
    key: [u8; 32],
    exchanged: Option<(Arc<str>, Duration)>,
}

struct Token {
    value: Arc<str>,
    refresh_at: Instant,
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSource").field("upstream", &self.inner.upstream).finish_non_exhaustive()
    }
}

impl TokenSource {
    /// Tokens for `upstream` by `grant`; `request_timeout` bounds each fetch (to at most
    /// half of it, and at most 10 s), `roots` are the upstream's extra CA certificates.
    pub fn new(upstream: &str, grant: Grant, request_timeout: Duration, roots: Vec<reqwest::Certificate>) -> Self {
        let deadline = (request_timeout / 2).min(FETCH_AT_MOST);
        let client = crate::crypto::http_client()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(deadline)
            .tls_certs_merge(roots)
            .build()
            .expect("a reqwest client with these settings and checked roots builds");
        let inner = Inner {
            upstream: upstream.to_string(),
            grant,
            client,
            deadline,
            current: Mutex::default(),
            fetches: AtomicU64::new(0),
        };
        Self { inner: Arc::new(inner), standing: Arc::default() }
    }

    /// The handle of one upstream session: the same kept tokens, and no JWT its own requests
    /// go with until a subscription is held on it.
    pub fn for_session(&self) -> Self {
        Self { inner: self.inner.clone(), standing: Arc::default() }
    }

    /// What the session sends on its own (subscriptions, a listen stream) goes from now on with
    /// a token exchanged for `subject`, the JWT of the subscription request just held on it.
    pub fn stand_for(&self, subject: &SubjectToken) {
        *self.standing.lock().expect("standing subject lock") = Some(subject.clone());
    }

    /// Whether its tokens are exchanged for a principal's JWT.
    pub fn is_exchange(&self) -> bool {
        matches!(self.inner.grant, Grant::Exchange { .. })
    }

    /// A token to send now: the one kept while it is fresh, else a new one; exchanged (when it
    /// is an exchange) for the JWT the session stands for, else the principal's latest.
    pub async fn token(&self) -> Result<Arc<str>, TokenFailure> {
        self.token_for(None).await
    }

    /// A token to send now for a request that came with `given` (a host's JWT): exchanged for
    /// that one, never another of the principal's; without one, as [`Self::token`].
    pub async fn token_for(&self, given: Option<&SubjectToken>) -> Result<Arc<str>, TokenFailure> {
        self.within_deadline(async {
            let subject = self.subject(given)?;
            let before = self.inner.fetches.load(Ordering::Acquire);
            let mut book = self.inner.current.lock().await;
            let kept = kept_for(&mut book, subject.key);
            if let Some(token) = kept.token.as_ref().filter(|token| Instant::now() < token.refresh_at) {
                return Ok(token.value.clone());
            }
            self.fetch_unless_failed_since(before, kept, &subject).await
        })
        .await
    }

    /// A token to replace `refused`, which the upstream answered 401 to (for a request that
    /// came with `given`, as [`Self::token_for`]): a new one, unless another caller already
    /// replaced it.
    pub async fn replace_for(&self, given: Option<&SubjectToken>, refused: &str) -> Result<Arc<str>, TokenFailure> {
        self.within_deadline(async {
            let subject = self.subject(given)?;
            let before = self.inner.fetches.load(Ordering::Acquire);
            let mut book = self.inner.current.lock().await;
            let kept = kept_for(&mut book, subject.key);
            if let Some(token) = kept.token.as_ref().filter(|token| &*token.value != refused) {
                return Ok(token.value.clone());
            }
            tracing::info!(upstream = %self.inner.upstream, "the upstream refused its access token; fetching a new one");
            self.fetch_unless_failed_since(before, kept, &subject).await
        })
        .await
    }

    /// What a token is for: the request's JWT when it came with one, else the JWT the session
    /// stands for while it is accepted, else the principal's latest (an exchange), or the
    /// proxy's own client (client credentials).
    fn subject(&self, given: Option<&SubjectToken>) -> Result<Subject, TokenFailure> {
        let Grant::Exchange { subjects, principal, .. } = &self.inner.grant else {
            return Ok(Subject { key: [0; 32], exchanged: None });
        };
        let standing = || {
            let standing = self.standing.lock().expect("standing subject lock");
            standing.as_ref().and_then(|subject| Some((subject.token().clone(), subject.rest()?)))
        };
        let (token, rest) = match given {
            Some(given) => (given.token().clone(), given.rest().ok_or(TokenFailure::NoSubject)?),
            None => standing().or_else(|| subjects.latest_with_rest(principal)).ok_or(TokenFailure::NoSubject)?,
        };
        Ok(Subject { key: Sha256::digest(token.as_bytes()).into(), exchanged: Some((token, rest)) })
    }

    /// A new token, unless a fetch finished after `before` (fetches counted) and failed: its
    /// failure is the caller's too (the single flight shares failures as well as tokens).
    async fn fetch_unless_failed_since(
        &self,
        before: u64,
        current: &mut Kept,
        subject: &Subject,
    ) -> Result<Arc<str>, TokenFailure> {
        if let Some((failure, at)) = current.failure
            && at > before
        {
            return Err(failure);
        }
        self.fetch_into(current, subject).await
    }

    async fn within_deadline(
        &self,
        work: impl Future<Output = Result<Arc<str>, TokenFailure>>,
    ) -> Result<Arc<str>, TokenFailure> {
        let outcome = tokio::time::timeout(self.inner.deadline, work).await.unwrap_or(Err(TokenFailure::TimedOut));
        if let Err(failure) = outcome {
            tracing::warn!(
                upstream = %self.inner.upstream,
                token_url = %redact_url(self.inner.grant.token_url()),
                failure = failure.kind(),
                status = failure.status(),
                "no access token for the upstream"
            );
        }
        outcome
    }

    async fn fetch_into(&self, current: &mut Kept, subject: &Subject) -> Result<Arc<str>, TokenFailure> {
        current.token = None;
        let started = Instant::now();
        let fetched = self.fetch(subject).await;
        let count = self.inner.fetches.fetch_add(1, Ordering::AcqRel) + 1;
        let (value, lifetime) = match fetched {
            Ok(fetched) => fetched,
            Err(failure) => {
                current.failure = Some((failure, count));
                return Err(failure);
            }
        };
        let ahead = (lifetime / 4).min(REFRESH_AHEAD_AT_MOST);
        let token = Token { value: value.clone(), refresh_at: started + lifetime.saturating_sub(ahead) };
        tracing::debug!(upstream = %self.inner.upstream, lifetime_s = lifetime.as_secs_f64(), "fetched an access token");
        *current = Kept { token: Some(token), failure: None };
        Ok(value)
    }

    /// One token request for `subject`: the token and its lifetime.
    async fn fetch(&self, subject: &Subject) -> Result<(Arc<str>, Duration), TokenFailure> {
        // An exchanged token is not used past the instant the proxy stops accepting the JWT it
        // was exchanged for: the principal's authority ends there, whatever the server says.
        let mut subject_rest = None;
        let (form, client) = match (&self.inner.grant, &subject.exchanged) {
            (Grant::ClientCredentials(config), _) => (token_endpoint::client_credentials_form(config), Some(config)),
            (Grant::Exchange { config, .. }, Some((token, rest))) => {
                subject_rest = Some(*rest);
                (token_endpoint::exchange_form(config, token), config.client.as_ref())
            }
            (Grant::Exchange { .. }, None) => return Err(TokenFailure::NoSubject),
        };
        let url = self.inner.grant.token_url();
        let (token, lifetime) =
            token_endpoint::request(&self.inner.client, url, form, client, &self.inner.upstream).await?;
        Ok((token, subject_rest.map_or(lifetime, |rest| lifetime.min(rest))))
    }
}

/// The entry of `key` in `book`, after the entries whose token is stale are dropped (and, past
/// [`MAX_KEPT`], the one to be refreshed first): a principal's JWTs come and go.
fn kept_for(book: &mut HashMap<[u8; 32], Kept>, key: [u8; 32]) -> &mut Kept {
    let now = Instant::now();
    book.retain(|kept_key, kept| *kept_key == key || kept.token.as_ref().is_some_and(|token| now < token.refresh_at));
    if book.len() > MAX_KEPT {
        let first = book.iter().filter(|(kept_key, _)| **kept_key != key).min_by_key(|(_, kept)| kept.refresh_at());
        if let Some(first) = first.map(|(first, _)| *first) {
            book.remove(&first);
        }
    }
    book.entry(key).or_default()
}

impl Kept {
    fn refresh_at(&self) -> Option<Instant> {
        self.token.as_ref().map(|token| token.refresh_at)
    }
}

#[cfg(test)]
mod tests;
