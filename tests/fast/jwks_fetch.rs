//! Fetching the JWKS of `[auth.jwt]` defensively, through the real binary and a real HTTP
//! endpoint on 127.0.0.1: redirects are not followed, a huge body is not read to its end, and a
//! fetch that hangs (started by a token with an unknown `kid`, which needs no valid signature)
//! holds only the requests that wait for it — never one whose key is known.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::response::IntoResponse;
use futures::StreamExt;
use jsonwebtoken::jwk::JwkSet;

use crate::support::eventually;
use crate::support::fixture::DEADLINE;
use crate::support::jwt::{JwksServer, claims, post_initialize, rsa_a, start_proxy};

/// Serve `app` on 127.0.0.1:0; its base URL.
async fn serve(app: axum::Router) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(base)
}

/// A JWKS URL that answers `302` to a URL serving the real keys: the proxy does not follow it,
/// so the token is refused and the target is never asked.
#[tokio::test]
async fn a_jwks_redirect_is_not_followed() -> anyhow::Result<()> {
    let target_hits = Arc::new(AtomicUsize::new(0));
    let hits = target_hits.clone();
    let keys = serde_json::to_value(JwkSet { keys: vec![rsa_a().jwk()] })?;
    let app = axum::Router::new()
        .route("/jwks", axum::routing::get(|| async { (axum::http::StatusCode::FOUND, [("location", "/keys")]) }))
        .route(
            "/keys",
            axum::routing::get(move || {
                hits.fetch_add(1, Ordering::SeqCst);
                let keys = keys.clone();
                async move { axum::Json(keys) }
            }),
        );
    let base = serve(app).await?;
    let (proxy, _policies) = start_proxy(&format!("{base}/jwks"), "").await?;
    let token = format!("Bearer {}", rsa_a().sign(&claims("alice", &[])));
    assert_eq!(post_initialize(&proxy, Some(&token)).await?.0, 401, "keys behind a redirect are not used");
    assert_eq!(target_hits.load(Ordering::SeqCst), 0, "the redirect's target was fetched");
    proxy.wait_log(&["redirects are not followed"]).await?;
    Ok(())
}

/// A JWKS endpoint streaming 100 MB without a length: the proxy stops reading past 1 MiB and
/// drops the connection, so the endpoint produces far less than the whole body.
#[tokio::test]
async fn a_huge_jwks_body_is_not_read_to_its_end() -> anyhow::Result<()> {
    const CHUNK: usize = 64 << 10;
    const WHOLE: usize = 100 << 20;
    let produced = Arc::new(AtomicUsize::new(0));
    let ended = Arc::new(AtomicBool::new(false));
    let (counter, flag) = (produced.clone(), ended.clone());
    let app = axum::Router::new().route(
        "/jwks",
        axum::routing::get(move || {
            let (counter, guard) = (counter.clone(), Ended(flag.clone()));
            async move {
                let chunks = futures::stream::iter(0..WHOLE / CHUNK).map(move |_| {
                    let _alive = &guard;
                    counter.fetch_add(CHUNK, Ordering::SeqCst);
                    Ok::<_, std::io::Error>(vec![b' '; CHUNK])
                });
                Body::from_stream(chunks).into_response()
            }
        }),
    );
    let base = serve(app).await?;
    let (proxy, _policies) = start_proxy(&format!("{base}/jwks"), "").await?;
    let token = format!("Bearer {}", rsa_a().sign(&claims("alice", &[])));
    assert_eq!(post_initialize(&proxy, Some(&token)).await?.0, 401);
    proxy.wait_log(&["the JWKS is larger than"]).await?;
    eventually(DEADLINE, "the JWKS body is dropped", || async {
        if ended.load(Ordering::SeqCst) { Ok(()) } else { Err("still streaming") }
    })
    .await?;
    let read = produced.load(Ordering::SeqCst);
    assert!(read < 16 << 20, "{read} bytes of the body were produced: it was read to its end");
    Ok(())
}

/// Set when the streamed body is dropped (the client went away or it was read to its end).
struct Ended(Arc<AtomicBool>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A token with an unknown `kid` starts a fetch; when the endpoint hangs, that request waits
/// for it, but a token whose key is known is answered meanwhile — while the fetch still hangs,
/// not after its timeout.
#[tokio::test]
async fn a_hanging_fetch_for_an_unknown_kid_does_not_hold_tokens_with_known_keys() -> anyhow::Result<()> {
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let (proxy, _policies) = start_proxy(&jwks.url, "jwks_min_refresh = \"0ms\"").await?;
    let good = format!("Bearer {}", rsa_a().sign(&claims("alice", &[])));
    assert_eq!(post_initialize(&proxy, Some(&good)).await?.0, 200);
    let fetched = jwks.fetches();
    jwks.stalled.store(true, Ordering::SeqCst);
    let unknown = format!("Bearer {}", rsa_a().sign_as("no-such-kid", &claims("alice", &[])));
    let proxy = Arc::new(proxy);
    let waiting = tokio::spawn({
        let proxy = proxy.clone();
        async move { post_initialize(&proxy, Some(&unknown)).await }
    });
    eventually(DEADLINE, "the unknown kid's fetch has started", || async {
        if jwks.fetches() > fetched { Ok(()) } else { Err("no fetch yet") }
    })
    .await?;
    let answer = tokio::time::timeout(DEADLINE, post_initialize(&proxy, Some(&good))).await.context("no answer")??;
    assert_eq!(answer.0, 200);
    assert!(!waiting.is_finished(), "the known key was answered only once the hanging fetch gave up");
    let refused =
        tokio::time::timeout(Duration::from_secs(30), waiting).await.context("the fetch never timed out")???;
    assert_eq!(refused.0, 401, "the unknown kid is refused once its fetch fails");
    Ok(())
}
