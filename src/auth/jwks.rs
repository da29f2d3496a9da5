//! The signing keys of `[auth.jwt]`: a JWKS read from a file or fetched over HTTP(S), cached,
//! refreshed when older than `jwks_refresh` and when a token names a `kid` not in the cache.
//!
//! Invariant: at most one fetch per `jwks_min_refresh`, whatever tokens arrive — a client
//! sending random `kid`s cannot make the proxy hammer the JWKS URL. Fetches are single-flight
//! (one lock around the cache and the fetch). A failed fetch keeps the keys already known.
//! A cache that is merely old is refreshed in the background (requests go on with the keys
//! known); only an empty cache or an unknown `kid` makes a request wait for the fetch.
//! Only asymmetric keys are kept: an `oct` key or a key marked `use = "enc"` is skipped, and
//! key material in a token's header (`jwk`, `jku`) is never looked at.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use tokio::sync::Mutex;

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
    state: Mutex<State>,
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
        let client = reqwest::Client::builder().timeout(FETCH_TIMEOUT).build().unwrap_or_default();
        KeyStore { inner: Arc::new(Inner { source, refresh, min_refresh, client, state: Mutex::default() }) }
    }

    /// The key for a token signed with `algorithm` under `kid`: fetched again first when the
    /// cache is stale, or when the `kid` is unknown — both at most once per `min_refresh`.
    pub async fn key_for(&self, kid: Option<&str>, algorithm: Algorithm) -> Option<Arc<DecodingKey>> {
        let inner = &self.inner;
        let mut state = inner.state.lock().await;
        let stale = state.fetched.is_none_or(|at| at.elapsed() >= inner.refresh);
        if stale && inner.may_fetch(&state) {
            if state.keys.is_empty() {
                inner.fetch_into(&mut state).await;
            } else {
                state.attempted = Some(Instant::now());
                let store = self.clone();
                tokio::spawn(async move { store.refresh_in_background().await });
            }
        }
        if let Some(key) = state.find(kid, algorithm) {
            return Some(key);
        }
        if inner.may_fetch(&state) {
            inner.fetch_into(&mut state).await;
            return state.find(kid, algorithm);
        }
        None
    }

    /// Fetch while requests go on with the keys known; install the result.
    async fn refresh_in_background(&self) {
        let fetched = self.inner.fetch().await;
        let mut state = self.inner.state.lock().await;
        self.inner.install(&mut state, fetched);
    }
}

impl Inner {
    fn may_fetch(&self, state: &State) -> bool {
        state.attempted.is_none_or(|at| at.elapsed() >= self.min_refresh)
    }

    async fn fetch_into(&self, state: &mut State) {
        state.attempted = Some(Instant::now());
        let fetched = self.fetch().await;
        self.install(state, fetched);
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
        if !response.status().is_success() {
            return Err(format!("fetching {url}: HTTP {}", response.status()));
        }
        if response.content_length().is_some_and(|length| length > MAX_JWKS_BYTES as u64) {
            return Err(format!("the JWKS is larger than {MAX_JWKS_BYTES} bytes"));
        }
        let bytes = response.bytes().await.map_err(|e| format!("fetching {url}: {e}"))?;
        Ok(bytes.to_vec())
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
