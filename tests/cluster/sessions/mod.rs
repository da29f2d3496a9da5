//! 2025 sessions across replicas (issue 28): a session whose requests land on every replica
//! works, its GET stream survives the `kill -9` of the replica serving it, and a session id that
//! is forged, replayed, another principal's or another cluster secret's is answered exactly like
//! an unknown one (another principal's audited as refused, as on one process).
//!
//! The SDKs' own clients (Python, TypeScript) holding a session across replicas are
//! `sdk_clients`.

mod sdk_clients;

use std::time::{Duration, Instant};

use anyhow::Context;
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams, SubscribeRequestParams};
use serde_json::json;

use crate::support::cluster::{Replicas, SECRET_ENV, with_cluster};
use crate::support::fixture::{self, Era, FixtureEvent, HttpFixture, call_json, list_all_resources};
use crate::support::proxy::{ProxyProcess, http_upstream};
use crate::support::raw_http::{self, LEGACY};
use crate::support::{DEADLINE, eventually};

const ITEM: &str = "fx+fx://fx/item/1";

/// The fixture upstream (7 items and its own resources, pages of 2) and a proxy page size of 2: listing takes
/// several requests, each a new cursor from whichever replica answered.
async fn upstream() -> anyhow::Result<(HttpFixture, String)> {
    let fixture = HttpFixture::spawn(&["--resources", "7"]).await?;
    // The audit trail on the log (not its own file), where the replicas' lines are looked for.
    let config =
        format!("[server]\npage_size = 2\n\n[audit]\nfile = \"-\"\n\n{}", http_upstream("fx", &fixture.url, ""));
    Ok((fixture, config))
}

/// The next `updated` a host hears (list changes passed over).
async fn next_updated(events: &mut fixture::Events) -> anyhow::Result<String> {
    loop {
        if let FixtureEvent::Updated(uri) = events.next().await? {
            return Ok(uri);
        }
    }
}

/// The next `updated`, waiting up to `within` (longer than one event's usual deadline).
async fn next_updated_within(events: &mut fixture::Events, within: Duration) -> anyhow::Result<String> {
    let deadline = Instant::now() + within;
    loop {
        match events.next().await {
            Ok(FixtureEvent::Updated(uri)) => return Ok(uri),
            Ok(_) => continue,
            Err(error) if Instant::now() < deadline && error.to_string().starts_with("no event within") => continue,
            Err(error) => return Err(error),
        }
    }
}

/// Requests each replica answered on `/mcp`, from its metrics.
async fn requests_served(replica: &ProxyProcess) -> anyhow::Result<f64> {
    let metrics = replica.admin_get("/metrics").await?;
    let served = metrics
        .lines()
        .filter(|line| line.starts_with("mcp_proxy_downstream_requests_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    Ok(served)
}

#[tokio::test]
async fn a_session_whose_requests_land_on_every_replica_works() -> anyhow::Result<()> {
    let (fixture, config) = upstream().await?;
    let cluster = Replicas::start(3, &config, &[]).await?;
    let (side, _) = fixture::connect_http(&fixture.url, Era::Legacy).await?;
    let (host, mut events) = fixture::connect_http(cluster.url(), Era::Legacy).await?;

    let (resources, pages) = list_all_resources(&host).await?;
    let (upstream_resources, _) = list_all_resources(&side).await?;
    assert_eq!(resources.len(), upstream_resources.len(), "every resource, paged across replicas");
    assert!(pages >= 4, "{pages} pages");
    let read = host.read_resource(ReadResourceRequestParams::new(ITEM)).await?;
    assert!(!read.contents.is_empty());

    #[allow(deprecated)]
    host.subscribe(SubscribeRequestParams::new(ITEM)).await?;
    // Once the replica serving the stream holds the URI (acknowledged upstream) the host is
    // told; after that, an upstream change reaches it.
    assert_eq!(next_updated(&mut events).await?, ITEM);
    call_json(&side, "touch", json!({ "uri": "fx://fx/item/1" })).await?;
    assert_eq!(next_updated(&mut events).await?, ITEM, "the upstream's change reaches the host");

    let progress = host
        .call_tool(
            CallToolRequestParams::new("fx__progress")
                .with_arguments(json!({ "count": 3 }).as_object().cloned().context("object")?),
        )
        .await?;
    assert_ne!(progress.is_error, Some(true), "{progress:?}");

    for (i, replica) in cluster.replicas.iter().enumerate() {
        let served = requests_served(replica).await?;
        assert!(served >= 1.0, "replica r{i} answered none of the session's requests");
    }
    host.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn the_host_keeps_its_subscription_when_the_replica_serving_its_stream_dies() -> anyhow::Result<()> {
    let (fixture, config) = upstream().await?;
    let cluster = Replicas::start(3, &config, &[]).await?;
    let (side, _) = fixture::connect_http(&fixture.url, Era::Legacy).await?;
    let (host, mut events) = fixture::connect_http(cluster.url(), Era::Legacy).await?;
    #[allow(deprecated)]
    host.subscribe(SubscribeRequestParams::new(ITEM)).await?;
    // The stream's replica announces the acknowledged subscription once; on a loaded machine
    // the host's GET stream and the replica's reading of the record can take a while.
    let first = next_updated_within(&mut events, Duration::from_secs(45)).await;
    if first.is_err() {
        for (i, r) in cluster.replicas.iter().enumerate() {
            for l in r.logs() {
                eprintln!("r{i}: {l}");
            }
        }
    }
    assert_eq!(first?, ITEM);

    let serving = eventually(DEADLINE, "a replica serves the host's GET stream", || async {
        let serving: Vec<usize> = (0..cluster.replicas.len())
            .filter(|&i| !cluster.replicas[i].matching(&["serves the session's GET stream"]).is_empty())
            .collect();
        match serving.as_slice() {
            [one] => Ok(*one),
            other => Err(anyhow::anyhow!("replicas serving a stream: {other:?}")),
        }
    })
    .await?;
    kill(&cluster.replicas[serving]).await?;
    let killed = Instant::now();
    eventually(DEADLINE, "the host's next request succeeds", || {
        host.read_resource(ReadResourceRequestParams::new(ITEM))
    })
    .await?;
    let failover = killed.elapsed();
    eprintln!("failover: kill -9 of the stream's replica to the host's next successful request: {failover:?}");

    // The host hears of the change on the stream it reopened elsewhere (its client reconnects
    // with backoff: the change is made again until heard, within a generous deadline).
    let deadline = Instant::now() + Duration::from_secs(60);
    let heard = loop {
        call_json(&side, "touch", json!({ "uri": "fx://fx/item/1" })).await?;
        match tokio::time::timeout(Duration::from_secs(3), next_updated(&mut events)).await {
            Ok(heard) => break heard?,
            Err(_) if Instant::now() < deadline => continue,
            Err(_) => anyhow::bail!("the host heard no change within 60 s of the failover"),
        }
    };
    assert_eq!(heard, ITEM);
    eprintln!("failover: kill -9 to the host's next `updated`: {:?}", killed.elapsed());
    let moved = eventually(DEADLINE, "another replica serves the stream", || async {
        let serving: Vec<usize> = (0..cluster.replicas.len())
            .filter(|&i| i != serving && !cluster.replicas[i].matching(&["serves the session's GET stream"]).is_empty())
            .collect();
        serving.first().copied().context("none yet")
    })
    .await?;
    assert_ne!(moved, serving);
    Ok(())
}

/// The replica that answered a session's `initialize` but never heard its `initialized` (the
/// balancer sent it elsewhere) serves the session's GET stream: the subscription made on a third
/// request elsewhere is announced on it, and a later change reaches the host there too; the
/// subscribe is audited once, where it was answered.
#[tokio::test]
async fn the_stream_is_served_by_the_replica_that_opened_the_session_although_initialized_went_elsewhere()
-> anyhow::Result<()> {
    let (fixture, config) = upstream().await?;
    let cluster = Replicas::start(2, &config, &[]).await?;
    let (side, _) = fixture::connect_http(&fixture.url, Era::Legacy).await?;
    let (opener, other) = (&cluster.replicas[0].url, &cluster.replicas[1].url);
    let request = |url: &str, method: reqwest::Method| {
        reqwest::Client::new()
            .request(method, url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
    };
    let opened = raw_http::send(request(opener, reqwest::Method::POST).json(&raw_http::initialize("raw"))).await?;
    let session = opened.session.context("a session id")?;
    let on_session = |url: &str, method: reqwest::Method| {
        request(url, method).header("mcp-protocol-version", LEGACY).header("mcp-session-id", &session)
    };
    let initialized = raw_http::send(on_session(other, reqwest::Method::POST).json(&raw_http::initialized())).await?;
    assert_eq!(initialized.status, 202, "initialized on the other replica: {}", initialized.body);
    let mut stream = tokio::time::timeout(DEADLINE, on_session(opener, reqwest::Method::GET).send()).await??;
    assert_eq!(stream.status(), 200, "the GET stream on the replica that opened the session");
    let subscribe = json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": ITEM}});
    let subscribed = raw_http::send(on_session(other, reqwest::Method::POST).json(&subscribe)).await?;
    assert!(subscribed.message().is_some_and(|m| m["result"].is_object()), "subscribe: {}", subscribed.body);

    let mut heard = String::new();
    let updated = |heard: &str| heard.matches("notifications/resources/updated").count();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while updated(&heard) < 1 {
        let chunk = tokio::time::timeout_at(deadline, stream.chunk()).await.context("the subscription announced")??;
        heard.push_str(&String::from_utf8_lossy(&chunk.context("the stream ended")?));
    }
    assert!(heard.contains(ITEM), "{heard}");
    // A change made now is heard on the same stream (the change is made again until heard: the
    // replica holds the upstream subscription once its upstream acknowledged it).
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while updated(&heard) < 2 {
        call_json(&side, "touch", json!({ "uri": "fx://fx/item/1" })).await?;
        let chunk = match tokio::time::timeout(Duration::from_secs(2), stream.chunk()).await {
            Ok(chunk) => chunk?.context("the stream ended")?,
            Err(_) if tokio::time::Instant::now() < deadline => continue,
            Err(_) => anyhow::bail!("no change heard on the stream: {heard}"),
        };
        heard.push_str(&String::from_utf8_lossy(&chunk));
    }
    // The subscribe is audited once, by the replica that answered it; the replica holding it
    // for the stream records no second one.
    let audited = |replica: &ProxyProcess| replica.matching(&[r#"\"event\":\"subscribe\""#, ITEM]).len();
    eventually(DEADLINE, "the subscribe audited", || async {
        let count = audited(&cluster.replicas[1]);
        if count == 1 { Ok(()) } else { Err(anyhow::anyhow!("{count} audited")) }
    })
    .await?;
    assert_eq!(audited(&cluster.replicas[0]), 0, "the stream's replica audits no subscribe of its own");
    Ok(())
}

/// `kill -9` of `replica`.
async fn kill(replica: &ProxyProcess) -> anyhow::Result<()> {
    let pid = replica.pid().context("the replica runs")?;
    let status = tokio::process::Command::new("kill").args(["-9", &pid.to_string()]).status().await?;
    anyhow::ensure!(status.success(), "kill -9 {pid}");
    Ok(())
}

/// A raw request on session `session` as `token` (none: anonymous) at `url`.
async fn post_on(url: &str, session: &str, token: Option<&str>) -> anyhow::Result<raw_http::Reply> {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", LEGACY)
        .header("mcp-session-id", session)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    raw_http::send(request).await
}

/// Open a 2025 session at `url` as `token`; its id.
async fn open_session(url: &str, token: &str) -> anyhow::Result<String> {
    let request = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .json(&raw_http::initialize("raw"));
    let reply = raw_http::send(request).await?;
    let session = reply.session.context("a session id")?;
    let request = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", LEGACY)
        .header("mcp-session-id", &session)
        .json(&raw_http::initialized());
    raw_http::send(request).await?;
    Ok(session)
}

#[tokio::test]
async fn a_forged_replayed_foreign_or_other_cluster_session_id_is_answered_like_an_unknown_one() -> anyhow::Result<()> {
    let (_fixture, upstreams) = upstream().await?;
    let config = format!(
        "[auth]\nmode = \"bearer\"\n\n[[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"ALICE_TOKEN\"\n\n\
         [[auth.tokens]]\nprincipal = \"bob\"\ntoken_env = \"BOB_TOKEN\"\n\n{upstreams}"
    );
    let env = [("ALICE_TOKEN", "alice-token"), ("BOB_TOKEN", "bob-token")];
    let cluster = Replicas::start(2, &config, &env).await?;
    // A replica of another cluster (another secret) on the same Redis.
    let elsewhere = with_cluster(&config, &cluster.redis.url(), "elsewhere");
    let mut other_env = env.to_vec();
    other_env.push((SECRET_ENV, "another cluster's secret, just as long as ours"));
    let other_secret = ProxyProcess::start_with(&elsewhere, &[], &other_env).await?;

    let unknown = post_on(cluster.url(), "not-a-session", Some("alice-token")).await?;
    assert_eq!(unknown.status, 404);
    let alike = |reply: &raw_http::Reply, what: &str| {
        assert_eq!((reply.status, reply.body.as_str()), (unknown.status, unknown.body.as_str()), "{what}");
    };

    let alices = open_session(cluster.url(), "alice-token").await?;
    for replica in &cluster.replicas {
        let served = post_on(&replica.url, &alices, Some("alice-token")).await?;
        assert_eq!(served.status, 200, "alice's session on every replica: {}", served.body);
    }
    for replica in &cluster.replicas {
        alike(&post_on(&replica.url, &alices, Some("bob-token")).await?, "alice's session presented by bob");
    }
    // Each replica audits bob's try as one process does (refused, `wrong_principal`, bob's); an id
    // nobody holds is only unknown, as there.
    let wrong = |replica: &ProxyProcess| replica.matching(&[r#"\"reason\":\"wrong_principal\""#]);
    for replica in &cluster.replicas {
        eventually(DEADLINE, "bob's try audited", || async {
            let audited = wrong(replica);
            anyhow::ensure!(audited.len() == 1, "{} audited", audited.len());
            anyhow::ensure!(audited[0].contains(r#"\"principal\":\"bob\""#), "{}", audited[0]);
            Ok(())
        })
        .await?;
    }
    let (nonce, tag) = alices.split_once('.').context("an id of two parts")?;
    let rest = tag.get(1..).context("a tag")?;
    let forged_tag = if tag.starts_with('A') { format!("B{rest}") } else { format!("A{rest}") };
    alike(&post_on(cluster.url(), &format!("{nonce}.{forged_tag}"), Some("alice-token")).await?, "a forged tag");
    alike(&post_on(cluster.url(), &format!("{nonce}x.{tag}"), Some("alice-token")).await?, "a forged nonce");

    let foreign = open_session(&other_secret.url, "alice-token").await?;
    for replica in &cluster.replicas {
        alike(&post_on(&replica.url, &foreign, Some("alice-token")).await?, "another cluster secret's session");
    }

    let delete = reqwest::Client::new()
        .delete(&cluster.replicas[0].url)
        .bearer_auth("alice-token")
        .header("mcp-protocol-version", LEGACY)
        .header("mcp-session-id", &alices)
        .send()
        .await?;
    assert_eq!(delete.status(), 204);
    for replica in &cluster.replicas {
        let url = replica.url.clone();
        let id = alices.clone();
        eventually(DEADLINE, "the ended session is unknown on every replica", || {
            let (url, id) = (url.clone(), id.clone());
            async move {
                let reply = post_on(&url, &id, Some("alice-token")).await?;
                anyhow::ensure!(reply.status == 404, "still answered {}", reply.status);
                Ok::<_, anyhow::Error>(reply)
            }
        })
        .await
        .map(|reply| alike(&reply, "a replayed id after DELETE"))?;
    }
    let audited: Vec<usize> = cluster.replicas.iter().map(|replica| wrong(replica).len()).collect();
    assert_eq!(audited, [1, 1], "forged, foreign and ended ids are not another principal's");
    Ok(())
}

/// The next `updated` on a 2026-07-28 listen stream; `None` when the stream ended.
pub(crate) async fn next_listened(stream: &mut rmcp::service::Subscription) -> anyhow::Result<Option<String>> {
    loop {
        match tokio::time::timeout(DEADLINE, stream.next()).await.context("nothing heard on the listen stream")? {
            Ok(Some(rmcp::model::ServerNotification::ResourceUpdatedNotification(n))) => return Ok(Some(n.params.uri)),
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => return Ok(None),
        }
    }
}

/// A 2026-07-28 listen stream cut by the `kill -9` of its replica is reopened by the host
/// through the load balancer, and the change the upstream made while no stream was open reaches
/// it on the new one.
#[tokio::test]
async fn a_listen_stream_reopened_after_its_replica_died_loses_no_change() -> anyhow::Result<()> {
    let (fixture, config) = upstream().await?;
    let cluster = Replicas::start(3, &config, &[]).await?;
    let (side, _) = fixture::connect_http(&fixture.url, Era::Legacy).await?;
    let (host, _) = fixture::connect_http(cluster.url(), Era::Modern).await?;
    let filter = || rmcp::model::SubscriptionFilter::builder().resource_subscriptions([ITEM.to_owned()]).build();
    let mut stream = host.listen(filter()).await?;
    assert_eq!(next_listened(&mut stream).await?.as_deref(), Some(ITEM), "the stream announces what it holds");
    let serving = eventually(DEADLINE, "a replica serves the listen stream", || async {
        let serving: Vec<usize> = (0..cluster.replicas.len())
            .filter(|&i| !cluster.replicas[i].matching(&["listen stream announced"]).is_empty())
            .collect();
        match serving.as_slice() {
            [one] => Ok(*one),
            other => Err(anyhow::anyhow!("replicas serving it: {other:?}")),
        }
    })
    .await?;
    kill(&cluster.replicas[serving]).await?;
    assert_eq!(next_listened(&mut stream).await?, None, "the stream ends with its replica");
    // A change while no stream is open.
    call_json(&side, "touch", json!({ "uri": "fx://fx/item/1" })).await?;
    let mut reopened = eventually(DEADLINE, "the host reopens its listen stream", || host.listen(filter())).await?;
    assert_eq!(next_listened(&mut reopened).await?.as_deref(), Some(ITEM), "the change is not lost");
    Ok(())
}
