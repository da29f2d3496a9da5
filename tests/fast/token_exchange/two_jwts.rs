//! One principal, two JWTs: each call, read, completion and subscription goes upstream with a
//! token exchanged for the JWT its request came with, never for her other one.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, bail};
use rmcp::model::{ArgumentInfo, CompleteRequestParams, ReadResourceRequestParams, Reference};
use serde_json::json;

use super::{call, gated, gated_on};
use crate::support::eventually;
use crate::support::fixture::{Era, FixtureClient, connect_http_with_token};
use crate::support::jwt::{claims, now, rsa_a};
use crate::support::token_exchange::Mode;

/// alice's hosts with her two JWTs: `scope=admin` (the one expiring last, first seen on a
/// `resources/list` by a 2025 host) and `scope=read` (a 2026-07-28 host and a 2025 one).
struct TwoJwts {
    admin_jwt: String,
    read_jwt: String,
    admin: FixtureClient,
    read_modern: FixtureClient,
    read_legacy: FixtureClient,
}

impl TwoJwts {
    async fn connect(url: &str) -> anyhow::Result<Self> {
        let jwt = |scope: &str, lifetime: u64| {
            let mut claims = claims("alice", &[]);
            (claims["scope"], claims["exp"]) = (json!(scope), json!(now() + lifetime));
            rsa_a().sign(&claims)
        };
        let (admin_jwt, read_jwt) = (jwt("admin", 1200), jwt("read", 600));
        let (admin, _) = connect_http_with_token(url, Era::Legacy, &admin_jwt).await?;
        admin.list_all_resources().await.context("alice's list with her admin JWT")?;
        let (read_modern, _) = connect_http_with_token(url, Era::Modern, &read_jwt).await?;
        let (read_legacy, _) = connect_http_with_token(url, Era::Legacy, &read_jwt).await?;
        Ok(Self { admin_jwt, read_jwt, admin, read_modern, read_legacy })
    }

    /// The hosts the tests send through, in order, each with the JWT it came with.
    fn hosts(&self) -> [(&FixtureClient, &String); 4] {
        [
            (&self.read_modern, &self.read_jwt),
            (&self.read_legacy, &self.read_jwt),
            (&self.admin, &self.admin_jwt),
            (&self.read_modern, &self.read_jwt),
        ]
    }
}

/// alice presents two JWTs: `scope=admin` (the one expiring last, first seen on a
/// `resources/list`) and `scope=read`. Every call goes upstream with a token exchanged for the
/// JWT that call came with, in both eras — none with a token exchanged for her other JWT.
#[tokio::test]
async fn each_call_goes_with_a_token_exchanged_for_the_jwt_it_came_with() -> anyhow::Result<()> {
    let (proxy, _jwks, authority, _fixture) = gated(Mode::Issue(Duration::from_secs(600)), "").await?;
    let alice = TwoJwts::connect(&proxy.url).await?;

    let calls = alice.hosts();
    for (n, (host, _)) in calls.iter().enumerate() {
        call(host).await?.map_err(anyhow::Error::msg).with_context(|| format!("call {n}"))?;
    }
    // What the token endpoint was asked to exchange for the token each call came with.
    let subjects: Vec<Option<String>> =
        authority.call_tokens().iter().map(|token| authority.exchanged_for(token)).collect();
    let expected: Vec<Option<String>> = calls.iter().map(|(_, jwt)| Some(jwt.to_string())).collect();
    let own: Vec<bool> = subjects.iter().zip(&expected).map(|(got, wanted)| got == wanted).collect();
    assert_eq!(subjects.len(), calls.len(), "every call reached the upstream once");
    assert_eq!(own.iter().filter(|own| !**own).count(), 0, "calls with another JWT's token: {own:?}");
    assert_eq!(authority.issued_for(&alice.read_jwt).len(), 1, "the read JWT's token is kept for its calls");
    assert_eq!(authority.refused.load(Ordering::SeqCst), 0);
    Ok(())
}

/// alice presents two JWTs: `scope=admin` (the one expiring last, first seen on a
/// `resources/list`) and `scope=read`. Every read and every completion goes upstream with a
/// token exchanged for the JWT its request came with, in both eras (reads of a 2025 session and
/// stateless ones) — none with a token exchanged for her other JWT.
#[tokio::test]
async fn each_read_and_completion_goes_with_a_token_exchanged_for_the_jwt_it_came_with() -> anyhow::Result<()> {
    let (proxy, _jwks, authority, _fixture) = gated(Mode::Issue(Duration::from_secs(600)), "").await?;
    let alice = TwoJwts::connect(&proxy.url).await?;

    let hosts = alice.hosts();
    for (n, (host, _)) in hosts.iter().enumerate() {
        let read = host.read_resource(ReadResourceRequestParams::new("gated+fx://fx/item/0"));
        tokio::time::timeout(Duration::from_secs(20), read)
            .await
            .context("hung")?
            .with_context(|| format!("read {n}"))?;
        let argument = ArgumentInfo::new("topic", "x");
        let complete = host.complete(CompleteRequestParams::new(Reference::for_prompt("gated__ask"), argument));
        let completed = tokio::time::timeout(Duration::from_secs(20), complete).await.context("hung")?;
        let completed = completed.with_context(|| format!("completion {n}"))?;
        assert_eq!(completed.completion.values, ["x-done"], "completion {n} was answered upstream");
    }
    // Per method: how many reached the upstream, and how many of those with a token exchanged
    // for another JWT than their request's (or none exchanged).
    let expected: Vec<Option<String>> = hosts.iter().map(|(_, jwt)| Some(jwt.to_string())).collect();
    let methods = ["resources/read", "completion/complete"];
    let tally: Vec<(&str, usize, usize)> = methods
        .iter()
        .map(|method| {
            let subjects: Vec<Option<String>> =
                authority.tokens_of(method).iter().map(|token| authority.exchanged_for(token)).collect();
            let other = subjects.iter().zip(&expected).filter(|(got, wanted)| got != wanted).count();
            (*method, subjects.len(), other)
        })
        .collect();
    assert_eq!(tally, methods.map(|method| (method, hosts.len(), 0)), "(method, sent, with another JWT's token)");
    assert_eq!(authority.refused.load(Ordering::SeqCst), 0);
    Ok(())
}

/// alice presents two JWTs: `scope=admin` (the one expiring last, first seen on a
/// `resources/list`) and `scope=read`, which subscribes: a 2025 host's `resources/subscribe`
/// on a 2025 upstream, a 2026-07-28 host's listen stream on a 2026-07-28 one. The subscription
/// goes upstream (`resources/subscribe`, `subscriptions/listen` on alice's own session) with a
/// token exchanged for the read JWT, none with a token exchanged for her admin one.
#[tokio::test]
async fn each_subscription_goes_with_a_token_exchanged_for_the_jwt_it_came_with() -> anyhow::Result<()> {
    let uri = "gated+fx://fx/item/0";
    for (upstream_era, method) in [("legacy", "resources/subscribe"), ("modern", "subscriptions/listen")] {
        let mode = Mode::Issue(Duration::from_secs(600));
        let (proxy, _jwks, authority, _fixture) = gated_on(&["--era", upstream_era], mode, "", "").await?;
        let alice = TwoJwts::connect(&proxy.url).await?;
        let _stream = match upstream_era {
            "legacy" => {
                #[allow(deprecated)]
                alice.read_legacy.subscribe(rmcp::model::SubscribeRequestParams::new(uri)).await?;
                None
            }
            _ => {
                let filter = rmcp::model::SubscriptionFilter::builder().resource_subscriptions([uri.to_string()]);
                Some(alice.read_modern.listen(filter.build()).await?)
            }
        };
        // The shared connection's own listen stream (for list changes) goes with the proxy's
        // client credentials (`cc-…`): alice's session's is the one that is hers.
        let sessions = || -> Vec<String> {
            authority.tokens_of(method).into_iter().filter(|token| !token.starts_with("cc-")).collect()
        };
        let sent = eventually(Duration::from_secs(20), "the subscription upstream", || async {
            let tokens = sessions();
            if tokens.is_empty() { bail!("no {method} of a session upstream yet") } else { Ok(tokens) }
        })
        .await?;
        let subjects: Vec<Option<String>> = sent.iter().map(|token| authority.exchanged_for(token)).collect();
        let admin = subjects.iter().filter(|subject| subject.as_deref() == Some(alice.admin_jwt.as_str())).count();
        let read = subjects.iter().filter(|subject| subject.as_deref() == Some(alice.read_jwt.as_str())).count();
        assert_eq!(
            (admin, read),
            (0, sent.len()),
            "{upstream_era} upstream: {method} with the admin / read JWT's token"
        );
        assert_eq!(authority.refused.load(Ordering::SeqCst), 0);
    }
    Ok(())
}
