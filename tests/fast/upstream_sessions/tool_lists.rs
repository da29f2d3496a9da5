//! A session that changes its own tool list is listed as it lists itself, to its own hosts
//! only: per principal, per host, and never through a shared upstream.

use rmcp::model::SubscribeRequestParams;
use serde_json::json;

use super::{ALICE_TOKEN, BOB_TOKEN, said, start};
use crate::support::told::{answered, next_heard, told_host, tool_names};

/// A session that changes its own tool list (the session server's `unlock` adds `secret` to
/// its process, its one session, and says so) is listed as it lists itself, to its own hosts
/// only: on a per-principal upstream alice's hosts hear `tools/list_changed`, list and call
/// `per__secret`; bob is told nothing, does not list it, and calling it is an unknown tool.
/// On a per-host upstream only the host session that unlocked it lists it, not alice's other
/// host. Each host also holds a shared upstream's URI: a change there is the marker after which
/// a leaked `tools/list_changed` would already have been heard.
#[tokio::test(flavor = "multi_thread")]
async fn a_sessions_own_tool_list_reaches_its_own_hosts_only() -> anyhow::Result<()> {
    let upstreams = [
        ("per", "session = \"per-principal\""),
        ("host", "session = \"per-host\""),
        ("shared", "session = \"shared\""),
    ];
    let (proxy, _policies) = start(&upstreams).await?;
    let shared = "shared+session://value";
    let (alice, mut alice_heard) = told_host(&proxy.url, ALICE_TOKEN).await?;
    let (other, mut other_heard) = told_host(&proxy.url, ALICE_TOKEN).await?;
    let (bob, mut bob_heard) = told_host(&proxy.url, BOB_TOKEN).await?;
    for host in [alice.peer(), other.peer(), bob.peer()] {
        #[allow(deprecated)]
        host.subscribe(SubscribeRequestParams::new(shared)).await?;
        let names = tool_names(host).await?;
        assert!(names.contains(&"per__unlock".to_string()) && !names.contains(&"per__secret".to_string()), "{names:?}");
    }
    let marker = |heard: String| heard == format!("updated {shared}");

    // Per principal: alice's session unlocks; her hosts hear it and list it, bob does not.
    assert_eq!(answered(alice.peer(), "per__unlock").await?, Ok("unlocked".into()));
    assert_eq!(next_heard(&mut alice_heard).await?, "tools/list_changed");
    assert_eq!(next_heard(&mut other_heard).await?, "tools/list_changed", "alice's other host shares her session");
    for host in [alice.peer(), other.peer()] {
        assert!(tool_names(host).await?.contains(&"per__secret".to_string()));
        let secret = answered(host, "per__secret").await?.map_err(|e| anyhow::anyhow!("per__secret: {e}"))?;
        assert!(secret.starts_with("the secret of "), "{secret}");
    }
    assert!(!tool_names(bob.peer()).await?.contains(&"per__secret".to_string()), "bob lists alice's session");
    let refused = answered(bob.peer(), "per__secret").await?.expect_err("bob called alice's session's tool");
    assert!(refused.contains("per__secret"), "{refused}");
    assert_eq!(said(alice.peer(), "shared__remember", json!({"value": "m1"})).await?, "kept m1");
    for heard in [&mut alice_heard, &mut other_heard, &mut bob_heard] {
        let next = next_heard(heard).await?;
        assert!(marker(next.clone()), "heard {next} before the marker");
    }

    // Per host: only the host session that unlocked lists it.
    assert_eq!(answered(alice.peer(), "host__unlock").await?, Ok("unlocked".into()));
    assert_eq!(next_heard(&mut alice_heard).await?, "tools/list_changed");
    assert!(tool_names(alice.peer()).await?.contains(&"host__secret".to_string()));
    assert!(!tool_names(other.peer()).await?.contains(&"host__secret".to_string()), "another host's session listed");
    assert!(answered(other.peer(), "host__secret").await?.is_err(), "alice's other host called it");
    assert_eq!(said(bob.peer(), "shared__remember", json!({"value": "m2"})).await?, "kept m2");
    for heard in [&mut alice_heard, &mut other_heard, &mut bob_heard] {
        let next = next_heard(heard).await?;
        assert!(marker(next.clone()), "heard {next} before the marker");
    }
    Ok(())
}
