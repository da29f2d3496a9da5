//! One trace across replicas: three replicas behind haproxy (round-robin), a real Redis, each
//! replica exporting its spans over OTLP/HTTP to the one receiver of `support::otlp`, and the
//! fixture over stdio as `per`, with sessions per principal (alice's lives on one replica, and
//! a request of hers landing on another is forwarded there). A host's traced call or read that
//! lands on a replica not holding her session is one trace whose spans come from two replicas:
//! the front one's SERVER span and the CLIENT span of its hop, the owner's SERVER span (the
//! hop's child) and its CLIENT span to the upstream, whose context the upstream received.

use anyhow::Context;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::cluster::{Replicas, cluster_when};
use crate::support::otlp::{ReceivedSpan, Receiver, exporting_to, traceparent_ids};
use crate::support::proxy::{alice_and_bob_policies, alice_and_bob_under_policies, fixture_upstream};
use crate::support::raw_http::{self, Reply};

const ALICE: &str = "alice-token-cluster-traces-3b8e";
const MODERN: &str = "2026-07-28";
const REPLICAS: usize = 3;

/// A host's context: trace `n`, its span `n`.
fn host_traceparent(n: u8) -> String {
    format!("00-{:032x}-{:016x}-01", 0xc000 + u32::from(n), 0xd000 + u32::from(n))
}

/// A stateless 2026-07-28 request of alice through the balancer (a new connection each, so
/// round-robin gives each request the next replica), with `traceparent` in its `_meta`.
async fn traced(url: &str, id: u8, method: &str, name: &str, mut params: Value) -> anyhow::Result<Reply> {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "cluster-traces", "version": "0"},
        "traceparent": host_traceparent(id),
    });
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let request = reqwest::Client::new()
        .post(url)
        .bearer_auth(ALICE)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", MODERN)
        .header("Mcp-Method", method)
        .header("Mcp-Name", name)
        .json(&body);
    let reply = raw_http::send(request).await?;
    anyhow::ensure!(reply.status == StatusCode::OK, "{method} {name}: {reply:?}");
    anyhow::ensure!(reply.message().is_some_and(|m| m.get("result").is_some()), "{method} {name}: {reply:?}");
    Ok(reply)
}

fn in_trace<'a>(spans: &'a [ReceivedSpan], trace: &str, kind: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|span| span.trace_id == trace && span.kind == kind).collect()
}

/// Request `id`'s spans are all in: the front's SERVER span (the host's span its parent), and one
/// SERVER and one CLIENT span when it ran where it landed, two of each when it was forwarded.
/// Each replica exports on its own: the owner's two spans alone are no request ran where it
/// landed.
fn complete(spans: &[ReceivedSpan], id: u8) -> bool {
    let Ok((trace, host_span)) = traceparent_ids(&host_traceparent(id)) else { return false };
    let servers = in_trace(spans, &trace, "SERVER");
    let clients = in_trace(spans, &trace, "CLIENT");
    let front = servers.iter().any(|s| s.parent_span_id == host_span);
    let forwarded = clients.iter().any(|c| c.attribute("mcp_proxy.replica").is_some());
    front && (servers.len(), clients.len()) == if forwarded { (2, 2) } else { (1, 1) }
}

/// A forwarded request's trace, checked: the front replica's SERVER span (the host's span its
/// parent), its hop's CLIENT span, the owner's SERVER span under the hop, and the owner's CLIENT
/// span to the upstream under that; the front's and the owner's spans from two replicas. The
/// owner's CLIENT span; `None` when the request ran where it landed.
fn forwarded_trace(spans: &[ReceivedSpan], id: u8) -> anyhow::Result<Option<&ReceivedSpan>> {
    let (trace, host_span) = traceparent_ids(&host_traceparent(id))?;
    let clients = in_trace(spans, &trace, "CLIENT");
    let Some(hop) = clients.iter().find(|c| c.attribute("mcp_proxy.replica").is_some()) else { return Ok(None) };
    let servers = in_trace(spans, &trace, "SERVER");
    let front = servers.iter().find(|s| s.parent_span_id == host_span).context("the front's SERVER span")?;
    assert_eq!(hop.parent_span_id, front.span_id, "the hop is the front's request's: {spans:#?}");
    assert_eq!(hop.instance, front.instance);
    let owner = servers.iter().find(|s| s.parent_span_id == hop.span_id).context("the owner's SERVER span")?;
    assert_ne!(owner.instance, front.instance, "the owner is another replica: {owner:#?} {front:#?}");
    assert_eq!(hop.attribute("mcp_proxy.replica"), Some(owner.instance.as_str()));
    assert_eq!(owner.name, hop.name);
    assert_eq!(owner.attribute("mcp_proxy.upstream"), Some("per"));
    let upstream = clients.iter().find(|c| c.parent_span_id == owner.span_id).context("the owner's CLIENT span")?;
    assert_eq!(upstream.instance, owner.instance);
    assert_eq!(upstream.attribute("network.transport"), Some("pipe"));
    Ok(Some(upstream))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_on_a_session_owned_by_another_replica_is_one_trace_across_both() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let policies = alice_and_bob_policies("allow = [\"**\"]\n", "allow = []\n")?;
    let upstream = format!("{}session = \"per-principal\"\n\n", fixture_upstream("per", &[]));
    let config = alice_and_bob_under_policies("", policies.path(), &upstream);
    let exporting = exporting_to(&receiver);
    let mut env: Vec<(&str, &str)> = exporting.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.extend([("ALICE_TOKEN", ALICE), ("BOB_TOKEN", "bob-token-cluster-traces-0d41")]);
    let cluster = Replicas::start(REPLICAS, &config, &env).await?;
    for replica in &cluster.replicas {
        replica.wait_offerings("per").await?;
        cluster_when(replica, |c| c["reachable"].as_array().is_some_and(|r| r.len() == REPLICAS)).await?;
    }

    // Round-robin: of three calls in a row, two land on a replica that does not hold alice's
    // session; so do two of three reads.
    let calls = [1, 2, 3];
    for id in calls {
        traced(cluster.url(), id, "tools/call", "per__stats", json!({"name": "per__stats", "arguments": {}})).await?;
    }
    let reads = [4, 5, 6];
    let mut seen_upstream = Vec::new();
    for id in reads {
        let uri = "per+fx://fx/traceparent";
        let reply = traced(cluster.url(), id, "resources/read", uri, json!({"uri": uri})).await?;
        let seen: Value = serde_json::from_str(&reply.contents_text().context("no contents")?)?;
        seen_upstream.push((id, seen["meta"].as_str().map(str::to_owned)));
    }

    let spans =
        receiver.wait("every request's spans", |s| calls.iter().chain(&reads).all(|id| complete(s, *id))).await?;
    let mut forwarded = 0;
    for id in calls {
        forwarded += usize::from(forwarded_trace(&spans, id)?.is_some());
    }
    assert!(forwarded >= 1, "no call was forwarded: {spans:#?}");
    let mut forwarded = 0;
    for (id, got) in seen_upstream {
        let Some(upstream) = forwarded_trace(&spans, id)? else { continue };
        forwarded += 1;
        let (trace, span) = traceparent_ids(got.as_deref().context("no _meta.traceparent upstream")?)?;
        assert_eq!(trace, upstream.trace_id, "the upstream request is in the host's trace");
        assert_eq!(span, upstream.span_id, "the upstream got the owner's CLIENT span's context");
    }
    assert!(forwarded >= 1, "no read was forwarded: {spans:#?}");
    Ok(())
}
