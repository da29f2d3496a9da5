//! What travels between replicas for a per-principal upstream session held by another one: a
//! request forwarded to an owner whose upstream cannot start is told why, as a local host is.
//! Two replicas and a real Redis; each host connects to one replica directly, so one of them is
//! always the owner's and the other's requests are forwarded.

use anyhow::Context;
use rmcp::model::ReadResourceRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};

use crate::support::cluster::{Replicas, cluster_when};
use crate::support::proxy::{ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, toml_str};
use crate::support::{DEADLINE, eventually};

const ALICE_TOKEN: &str = "alice-tok-between-replicas-3d58";
const BOB_TOKEN: &str = "bob-tok-between-replicas-81fa";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];

type Host = RunningService<RoleClient, ()>;

/// A 2025 host of the principal whose bearer token is `token`, on `url`.
async fn host(url: &str, token: &str) -> anyhow::Result<Host> {
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config.reinit_on_expired_session(false));
    Ok(tokio::time::timeout(DEADLINE, ().serve(transport)).await.context("connect")??)
}

/// The sum of `mcp_proxy_cluster_forwards_total{outcome}` over `replicas`.
async fn forwards(replicas: &[ProxyProcess], outcome: &str) -> anyhow::Result<f64> {
    let needle = format!("mcp_proxy_cluster_forwards_total{{outcome=\"{outcome}\"}}");
    let mut sum = 0.0;
    for replica in replicas {
        let metrics = replica.admin_get("/metrics").await?;
        sum += metrics
            .lines()
            .filter(|line| line.starts_with(&needle))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    Ok(sum)
}

/// The message and `data.cause` of the error a read of `uri` gets from `host`, once it has a
/// cause (before the first attempt to start the session ended, it has none).
async fn told_why(host: &Host, uri: &str) -> anyhow::Result<(String, String)> {
    eventually(DEADLINE, "the read names why the upstream cannot start", || async {
        let error = match host.peer().read_resource(ReadResourceRequestParams::new(uri)).await {
            Err(rmcp::ServiceError::McpError(error)) => error,
            other => anyhow::bail!("{other:?}"),
        };
        let cause = error.data.as_ref().and_then(|data| data["cause"].as_str()).map(str::to_owned);
        let cause = cause.with_context(|| format!("no cause in {error:?}"))?;
        Ok((error.message.to_string(), cause))
    })
    .await
}

/// A per-principal stdio upstream that exits at once, naming a secret of its entry on stderr:
/// alice's read is answered with the cause on both replicas, her owner's and the other one,
/// which forwards it (counted `failed`: the owner answered with an error). The secret stays
/// masked on the way.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_forwarded_to_an_owner_whose_upstream_cannot_start_is_told_why() -> anyhow::Result<()> {
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = [\"**\"]\n")?;
    let quits = "echo \"no luck with key $API_KEY\" >&2; exit 3";
    let upstream = format!(
        "[[upstreams]]\nname = \"quits\"\ncommand = \"sh\"\nargs = [\"-c\", {}]\n\
         env = {{ API_KEY = \"do-not-show-me\" }}\nsession = \"per-principal\"\nrequired = false\n\n",
        toml_str(quits)
    );
    let config = alice_and_bob_under_policies("", policies.path(), &upstream);
    let cluster = Replicas::start(2, &config, &TOKENS).await?;
    for replica in &cluster.replicas {
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == 2)).await?;
    }
    for replica in &cluster.replicas {
        let alice = host(&replica.url, ALICE_TOKEN).await?;
        let (message, cause) = told_why(&alice, "quits+fx://fx/item/1").await?;
        assert_eq!(cause, "`sh` exited (exit status: 3): no luck with key ***", "{}", replica.url);
        assert!(message.starts_with("upstream `quits` is not connected (`sh` exited"), "{message}");
        assert!(!message.contains("do-not-show-me"), "{message}");
        alice.cancel().await?;
    }
    assert!(forwards(&cluster.replicas, "failed").await? >= 1.0, "one replica forwarded alice's read");
    Ok(())
}
