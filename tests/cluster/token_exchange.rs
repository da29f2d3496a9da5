//! Token exchange across replicas (issue 39, R5): a call, read or completion for a
//! per-principal upstream session that another replica owns is forwarded there with the JWT its
//! request came with (sealed in the forwarded body), and the owner exchanges that JWT, not the
//! latest of the principal's it knows. Two replicas sharing a real Redis; the fixture behind
//! the authorization server's gate (`support::token_exchange`), which records which token each
//! upstream request came with and what each token was exchanged for. Hosts connect to each
//! replica directly, so that one of each pair of requests is forwarded.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use rmcp::model::{
    ArgumentInfo, CallToolRequestParams, CompleteRequestParams, JsonObject, ReadResourceRequestParams, Reference,
};
use serde_json::json;

use crate::support::cluster::{Replicas, cluster_when, forwards};
use crate::support::fixture::{Era, FixtureClient, HttpFixture, connect_http_with_token};
use crate::support::jwt::{ISSUER, JwksServer, RESOURCE, claims, now, rsa_a};
use crate::support::proxy::{http_upstream, toml_str};
use crate::support::token_exchange::{Authority, CLIENT_ID, CLIENT_SECRET, Mode};

const SECRET_ENV: &str = "TEST_EXCHANGE_CLIENT_SECRET";
const METHODS: [&str; 3] = ["tools/call", "resources/read", "completion/complete"];

/// alice's `scope=admin` JWT (expiring last) is presented to both replicas first, so it is
/// each one's latest of hers; then her `scope=read` JWT calls, reads and completes through each
/// replica. The owner of her session runs its own requests and the other replica's forwarded
/// ones: every one reaches the upstream with a token exchanged for the read JWT.
#[tokio::test(flavor = "multi_thread")]
async fn a_forwarded_request_goes_with_a_token_exchanged_for_the_jwt_it_came_with() -> anyhow::Result<()> {
    let fixture = HttpFixture::spawn(&["--resources", "1", "--completions"]).await?;
    let (authority, base) = Authority::start(Mode::Issue(Duration::from_secs(600)), &fixture.url).await?;
    let jwks = JwksServer::start(vec![rsa_a().jwk()]).await?;
    let cluster = Replicas::start(2, &config(&jwks.url, &base), &[(SECRET_ENV, CLIENT_SECRET)]).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("gated").await?;
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 2)).await?;
    }
    let jwt = |scope: &str, lifetime: u64| {
        let mut claims = claims("alice", &[]);
        (claims["scope"], claims["exp"]) = (json!(scope), json!(now() + lifetime));
        rsa_a().sign(&claims)
    };
    let (admin_jwt, read_jwt) = (jwt("admin", 1200), jwt("read", 600));
    for replica in &cluster.replicas {
        let (admin, _) = connect_http_with_token(&replica.url, Era::Legacy, &admin_jwt).await?;
        admin.list_all_resources().await.context("alice's list with her admin JWT")?;
    }
    for (n, replica) in cluster.replicas.iter().enumerate() {
        let (read, _) = connect_http_with_token(&replica.url, Era::Modern, &read_jwt).await?;
        ask_each(&read).await.with_context(|| format!("through replica {n}"))?;
    }

    assert_eq!(
        forwards(&cluster.replicas, "forwarded").await?,
        METHODS.len() as f64,
        "one replica's requests were forwarded"
    );
    // Per method: how many reached the upstream, and how many of those with a token exchanged
    // for another JWT than the read one.
    let tally: Vec<(&str, usize, usize)> = METHODS
        .iter()
        .map(|method| {
            let tokens = authority.tokens_of(method);
            let other = tokens.iter().filter(|t| authority.exchanged_for(t).as_deref() != Some(&read_jwt)).count();
            (*method, tokens.len(), other)
        })
        .collect();
    assert_eq!(tally, METHODS.map(|method| (method, 2, 0)), "(method, sent, with another JWT's token)");
    assert_eq!(authority.refused.load(Ordering::SeqCst), 0);
    // The JWT travelled between replicas sealed: no replica logged it.
    for replica in &cluster.replicas {
        let logs = replica.logs().join("\n");
        assert!(!logs.contains(&read_jwt) && !logs.contains(&admin_jwt), "a JWT in a replica's log");
    }
    Ok(())
}

/// The replicas' config: alice's JWTs from `jwks_url`, everything allowed, and the fixture
/// behind the gate at `base`, per principal, with tokens exchanged at its `/token`.
fn config(jwks_url: &str, base: &str) -> String {
    let auth = format!(
        "session = \"per-principal\"\n[upstreams.cache]\nenabled = false\n[upstreams.auth]\nkind = \"token_exchange\"\n\
         token_url = {}\naudience = \"fixture\"\nclient_id = \"{CLIENT_ID}\"\nclient_secret_env = \"{SECRET_ENV}\"\n",
        toml_str(&format!("{base}/token"))
    );
    format!(
        "[auth]\nmode = \"bearer\"\n\n[auth.jwt]\nresource = {}\nissuer = {}\njwks_url = {}\n\n{}",
        toml_str(RESOURCE),
        toml_str(ISSUER),
        toml_str(jwks_url),
        http_upstream("gated", &format!("{base}/mcp"), &auth),
    )
}

/// A call, a read and a completion of the gated upstream as `host`.
async fn ask_each(host: &FixtureClient) -> anyhow::Result<()> {
    let call = host.call_tool(CallToolRequestParams::new("gated__stats").with_arguments(JsonObject::new()));
    let called = within(call).await??;
    anyhow::ensure!(called.is_error != Some(true), "the call failed: {called:?}");
    within(host.read_resource(ReadResourceRequestParams::new("gated+fx://fx/item/0"))).await??;
    let reference = Reference::for_prompt("gated__ask");
    let completed = within(host.complete(CompleteRequestParams::new(reference, ArgumentInfo::new("topic", "x"))));
    anyhow::ensure!(completed.await??.completion.values == ["x-done"], "the completion was not answered upstream");
    Ok(())
}

/// `what`'s outcome, unless it takes longer than 20 s.
async fn within<T>(what: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(Duration::from_secs(20), what).await.context("hung")
}
