//! The signing keys of `[auth.jwt]`: a JWKS read from a file or fetched over HTTP(S), cached,
//! refreshed when older than `jwks_refresh` and when a token names a `kid` not in the cache.
//!
//! Invariant: at most one fetch per `jwks_min_refresh`, whatever tokens arrive — a client
//! sending random `kid`s cannot make the proxy hammer the JWKS URL. Fetches are single-flight
//! (one lock held across the fetch), and the keys sit behind another lock that is never held
//! across one: a token whose key is known is checked at once, whatever fetch is under way.
//! A failed fetch keeps the keys already known. A cache that is merely old is refreshed in the
//! background; only an empty cache or an unknown `kid` makes a request wait for the fetch (at
//! most `FETCH_TIMEOUT`). A fetch follows no redirect and stops reading at `MAX_JWKS_BYTES`.
//! Only asymmetric keys are kept: an `oct` key or a key marked `use = "enc"` is skipped, and
//! key material in a token's header (`jwk`, `jku`) is never looked at.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

use crate::config::JwksSource;

/// A JWKS larger than this is refused.
const MAX_JWKS_BYTES: usize = 1 << 20;
/// One fetch may take this long.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// The cached keys; a cheap `Clone` handle shared by every request of one listener.
#[derive(Clone)]
pub struct KeyStore {
    inner: Arc<Inner>,
}

struct Inner {
    source: JwksSource,
    refresh: Duration,
    min_refresh: Duration,
    client: reqwest::Client,
    /// The keys; never held across an await.
    state: Mutex<State>,
    /// Held across a fetch a request waits for: one at a time.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    keys: Vec<Key>,
    /// The last successful fetch.
    fetched: Option<Instant>,
    /// The last fetch attempted, successful or not.
    attempted: Option<Instant>,
}

/// One usable public key.
struct Key {
    kid: Option<String>,
    algorithm: Option<Algorithm>,
    key: Arc<DecodingKey>,
}

impl KeyStore {
    pub fn new(source: JwksSource, refresh: Duration, min_refresh: Duration) -> KeyStore {
        let client = crate::crypto::http_client()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        let inner =
            Inner { source, refresh, min_refresh, client, state: Mutex::default(), fetching: Default::default() };
        KeyStore { inner: Arc::new(inner) }
    }

    /// The key for a token signed with `algorithm` under `kid`. A stale cache is refreshed in
    /// the background; an unknown `kid` (or an empty cache) waits for one fetch — both at most
    /// once per `min_refresh`.
    pub async fn key_for(&self, kid: Option<&str>, algorithm: Algorithm) -> Option<Arc<DecodingKey>> {
        if let Some(key) = self.known_or_refresh(kid, algorithm) {
            return Some(key);
        }
        let _flight = self.inner.fetching.lock().await;
        {
            let mut state = self.inner.lock();
            if let Some(key) = state.find(kid, algorithm) {
                return Some(key);
            }
            if !self.inner.may_fetch(&state) {
                return None;
            }
            state.attempted = Some(Instant::now());
        }
        let fetched = self.inner.fetch().await;
        let mut state = self.inner.lock();
        self.inner.install(&mut state, fetched);
        state.find(kid, algorithm)
    }

    /// The key when it is known, starting a background refresh when the cache is stale.
    fn known_or_refresh(&self, kid: Option<&str>, algorithm: Algorithm) -> Option<Arc<DecodingKey>> {
        let inner = &self.inner;
        let mut state = inner.lock();
        let stale = state.fetched.is_none_or(|at| at.elapsed() >= inner.refresh);
        if stale && !state.keys.is_empty() && inner.may_fetch(&state) {
            state.attempted = Some(Instant::now());
            let store = self.clone();
            tokio::spawn(async move { store.refresh_in_background().await });
        }
        state.find(kid, algorithm)
    }

    /// Fetch while requests go on with the keys known; install the result.
    async fn refresh_in_background(&self) {
        let fetched = self.inner.fetch().await;
        let mut state = self.inner.lock();
        self.inner.install(&mut state, fetched);
    }
}

impl Inner {
    fn may_fetch(&self, state: &State) -> bool {
        state.attempted.is_none_or(|at| at.elapsed() >= self.min_refresh)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("JWKS lock")
    }

    fn install(&self, state: &mut State, fetched: Result<Vec<Key>, String>) {
        match fetched {
            Ok(keys) => {
                tracing::debug!(keys = keys.len(), "JWKS loaded");
                state.keys = keys;
                state.fetched = Some(Instant::now());
            }
            Err(error) => tracing::warn!(error = %error, "cannot load the JWKS; keeping the keys known"),
        }
    }

    async fn fetch(&self) -> Result<Vec<Key>, String> {
        let bytes = match &self.source {
            JwksSource::File(path) => {
                tokio::fs::read(path).await.map_err(|e| format!("reading {}: {e}", path.display()))?
            }
            JwksSource::Url(url) => self.download(url).await?,
        };
        if bytes.len() > MAX_JWKS_BYTES {
            return Err(format!("the JWKS is larger than {MAX_JWKS_BYTES} bytes"));
        }
        parse_jwks(&bytes)
    }

    async fn download(&self, url: &str) -> Result<Vec<u8>, String> {
        let response = self.client.get(url).send().await.map_err(|e| format!("fetching {url}: {e}"))?;
        if response.status().is_redirection() {
            let status = response.status();
            return Err(format!("fetching {url}: HTTP {status}; redirects are not followed (set the final URL)"));
        }
        if !response.status().is_success() {
            return Err(format!("fetching {url}: HTTP {}", response.status()));
        }
        if response.content_length().is_some_and(|length| length > MAX_JWKS_BYTES as u64) {
            return Err(format!("the JWKS is larger than {MAX_JWKS_BYTES} bytes"));
        }
        // Read in chunks, so a body without a (truthful) length stops at the limit.
        let mut bytes = Vec::new();
        let mut response = response;
        while let Some(chunk) = response.chunk().await.map_err(|e| format!("fetching {url}: {e}"))? {
            if bytes.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(format!("the JWKS is larger than {MAX_JWKS_BYTES} bytes"));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }
}

impl State {
    /// A key with this `kid` (any key when the token names none) that can verify `algorithm`.
    fn find(&self, kid: Option<&str>, algorithm: Algorithm) -> Option<Arc<DecodingKey>> {
        self.keys
            .iter()
            .filter(|key| kid.is_none() || key.kid.as_deref() == kid)
            .filter(|key| key.algorithm.is_none_or(|a| a == algorithm))
            .find(|key| key.key.family() == algorithm.family())
            .map(|key| key.key.clone())
    }
}

/// `{"keys": [...]}` → the usable keys; a key this proxy cannot use is skipped, not fatal.
fn parse_jwks(bytes: &[u8]) -> Result<Vec<Key>, String> {
    #[derive(serde::Deserialize)]
    struct Set {
        keys: Vec<serde_json::Value>,
    }
    let set: Set = serde_json::from_slice(bytes).map_err(|e| format!("the JWKS is not a JSON key set: {e}"))?;
    let mut keys = Vec::new();
    for value in set.keys {
        let Ok(jwk) = serde_json::from_value::<Jwk>(value) else { continue };
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_) | AlgorithmParameters::Other(_))
            || matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption))
        {
            continue;
        }
        let algorithm = jwk.common.key_algorithm.and_then(|a| Algorithm::try_from(a).ok());
        if let Ok(key) = DecodingKey::from_jwk(&jwk) {
            keys.push(Key { kid: jwk.common.key_id.clone(), algorithm, key: Arc::new(key) });
        }
    }
    Ok(keys)
}
