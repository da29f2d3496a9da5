//! Subscriptions through the proxy with third-party peers on either side: the PyPI `mcp` SDK's
//! `MCPServer` (tests/py/server.py) as an upstream in both eras, its `Client` (tests/py/client.py)
//! as a host in both modes, and the npm server-everything as an upstream. Real processes, real
//! HTTP; changes are triggered from the test on a side connection, after the proxy says its
//! upstream subscription is in place.

use std::collections::BTreeSet;
use std::process::Stdio;

use crate::support::fixture::{
    self, DEADLINE, Era, FixtureClient, FixtureEvent, HttpFixture, call_json, wait_for_stats, watched,
};
use crate::support::peers::{everything_stdio_command, py_client, spawn_py_server_http};
use crate::support::proxy::{ProxyProcess, http_upstream, toml_str};
use rmcp::model::{ServerNotification, SubscribeRequestParams, SubscriptionFilter};
use rmcp::service::Subscription;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// How long one line from client.py may take (a Python start costs about a second).
const CLIENT_LINE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// A host of either era that asked for `uris`: a legacy session's notifications, or a listen stream.
enum Host {
    Legacy { _client: FixtureClient, events: fixture::Events },
    Modern { _client: FixtureClient, stream: Box<Subscription> },
}

impl Host {
    /// Connect to `url` in `era` and subscribe (legacy) or listen (2026-07-28) to `uris`; both
    /// must be accepted, a listen stream acknowledging every URI.
    async fn subscribe(url: &str, era: Era, uris: &[&str]) -> anyhow::Result<Host> {
        let (client, events) = fixture::connect_http(url, era).await?;
        if era == Era::Legacy {
            for uri in uris {
                #[allow(deprecated)]
                client.subscribe(SubscribeRequestParams::new(*uri)).await?;
            }
            return Ok(Host::Legacy { _client: client, events });
        }
        let filter = SubscriptionFilter::builder().resource_subscriptions(uris.iter().copied()).build();
        let stream = client.listen(filter).await?;
        let acknowledged: BTreeSet<&str> =
            stream.acknowledged().resource_subscriptions.iter().flatten().map(String::as_str).collect();
        anyhow::ensure!(
            acknowledged == uris.iter().copied().collect(),
            "listen acknowledged {acknowledged:?} of {uris:?}"
        );
        Ok(Host::Modern { _client: client, stream: Box::new(stream) })
    }

    /// The URI of the next `updated` this host hears (list changes passed over).
    async fn next_update(&mut self) -> anyhow::Result<String> {
        loop {
            match self {
                Host::Legacy { events, .. } => {
                    if let FixtureEvent::Updated(uri) = events.next().await? {
                        return Ok(uri);
                    }
                }
                Host::Modern { stream, .. } => match tokio::time::timeout(DEADLINE, stream.next()).await {
                    Ok(Ok(Some(ServerNotification::ResourceUpdatedNotification(n)))) => return Ok(n.params.uri),
                    Ok(Ok(Some(_))) => continue,
                    Ok(Ok(None)) => anyhow::bail!("the listen stream ended"),
                    Ok(Err(error)) => return Err(error.into()),
                    Err(_) => anyhow::bail!("no update within {DEADLINE:?}"),
                },
            }
        }
    }
}

/// tests/py/server.py over streamable HTTP as two upstreams of one proxy, one spoken to in each
/// era (`pyold` subscribes, `pynew` listens). Hosts of both eras hold `py://note/1` through
/// both; one `bump` on a side connection to the Python server reaches every host as an
/// `updated` for each namespaced URI.
#[tokio::test]
async fn python_server_updates_reach_hosts_of_both_eras_through_both_upstream_eras() -> anyhow::Result<()> {
    let server = spawn_py_server_http(&[]);
    let config = format!(
        "{}{}",
        http_upstream("pyold", &server.url, "protocol = \"2025-11-25\""),
        http_upstream("pynew", &server.url, "protocol = \"2026-07-28\"")
    );
    let proxy = ProxyProcess::start(&config).await?;
    for (upstream, era) in [("pyold", "2025"), ("pynew", "2026-07-28")] {
        proxy.wait_up(upstream, 1).await?;
        let up = proxy.matching(&["\"upstream up\"", &format!("\"upstream\":\"{upstream}\"")]);
        assert!(
            up.iter().all(|line| line.contains(&format!("\"era\":\"{era}\""))),
            "{upstream} in the {era} era: {up:?}"
        );
    }
    let uris = ["pyold+py://note/1", "pynew+py://note/1"];
    let mut hosts = vec![
        (Era::Legacy, Host::subscribe(&proxy.url, Era::Legacy, &uris).await?),
        (Era::Modern, Host::subscribe(&proxy.url, Era::Modern, &uris).await?),
    ];
    for upstream in ["pyold", "pynew"] {
        wait_applied(&proxy, upstream, 1).await?;
    }

    let (side, _) = fixture::connect_http(&server.url, Era::Legacy).await?;
    let bumped = call_json(&side, "bump", json!({"id": 1})).await?;
    assert_eq!(bumped["version"], 2, "{bumped}");

    for (era, host) in &mut hosts {
        let heard: BTreeSet<String> = [host.next_update().await?, host.next_update().await?].into();
        assert_eq!(heard, uris.map(String::from).into(), "{era:?} host: one update per namespaced URI");
    }
    Ok(())
}

/// The PyPI `mcp` client as a host, `legacy` mode (`subscribe_resource`) and `2026-07-28` mode
/// (`listen`), through the proxy over HTTP to the rmcp fixture: once it is subscribed and the
/// proxy's upstream subscription is in place, a `touch` on a side connection to the fixture
/// reaches it as an `updated` for the namespaced URI, by the mechanism of its mode.
#[tokio::test]
async fn python_client_receives_updates_in_both_modes() -> anyhow::Result<()> {
    for (mode, subscribe, via) in [("legacy", "subscribe", "legacy"), ("2026-07-28", "listen", "listen")] {
        let upstream = HttpFixture::spawn(&["--resources", "3"]).await?;
        let proxy = ProxyProcess::start(&http_upstream("fx", &upstream.url, "")).await?;
        proxy.wait_up("fx", 1).await?;
        let uri = "fx+fx://fx/item/1";
        let subscribe_op = format!("{subscribe}:{uri}");
        let wait_op = format!("wait_updated:{uri}:20");
        let mut client = PythonClient::spawn(&["--url", &proxy.url, "--mode", mode, &subscribe_op, "ready", &wait_op])?;
        let subscribed = client.next_line().await?;
        assert_eq!(subscribed["op"], subscribe, "{mode}: {subscribed}");
        assert!(subscribed.get("error").is_none(), "{mode}: {subscribed}");
        assert_eq!(client.next_line().await?, json!({"op": "ready"}), "{mode}");
        let (side, _) = fixture::connect_http(&upstream.url, Era::Auto).await?;
        wait_for_stats(&side, |s| watched(s).iter().any(|w| w == "fx://fx/item/1")).await?;
        call_json(&side, "touch", json!({"uri": "fx://fx/item/1"})).await?;
        let waited = client.next_line().await?;
        assert_eq!(waited, json!({"op": "wait_updated", "uri": uri, "received": true, "via": via}), "{mode}");
        client.finish().await?;
    }
    Ok(())
}

/// server-everything (2025 era) over stdio as an upstream: a subscription to one of its
/// documents through the proxy is accepted for a legacy host and acknowledged on a 2026-07-28
/// host's listen stream, and the proxy subscribes upstream. (It emits updates only to a session
/// that called its `toggle-subscriber-updates` tool, so none is expected here.)
#[tokio::test]
async fn everything_accepts_subscriptions_through_the_proxy_in_both_eras() -> anyhow::Result<()> {
    let (program, args) = everything_stdio_command();
    let args: Vec<String> = args.iter().map(|a| toml_str(a)).collect();
    let config = format!(
        "[[upstreams]]\nname = \"everything\"\ncommand = {}\nargs = [{}]\n",
        toml_str(&program),
        args.join(", ")
    );
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("everything", 1).await?;
    let legacy_uri = "everything+demo://resource/static/document/features.md";
    let modern_uri = "everything+demo://resource/dynamic/text/1";
    let _legacy = Host::subscribe(&proxy.url, Era::Legacy, &[legacy_uri]).await?;
    let _modern = Host::subscribe(&proxy.url, Era::Modern, &[modern_uri]).await?;
    wait_applied(&proxy, "everything", 2).await?;
    let refused = proxy.matching(&["upstream refused a subscription"]);
    assert!(refused.is_empty(), "server-everything refused: {refused:?}");
    Ok(())
}

/// Wait for the proxy to say its subscriptions on `upstream` now cover `watched` URIs.
async fn wait_applied(proxy: &ProxyProcess, upstream: &str, watched: usize) -> anyhow::Result<()> {
    let upstream = format!("\"upstream\":\"{upstream}\"");
    let watched = format!("\"watched\":{watched}");
    proxy.wait_log(&["upstream subscriptions applied", &upstream, &watched]).await.map(drop)
}

/// tests/py/client.py running its ops, its JSON lines read as they come.
struct PythonClient {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl PythonClient {
    fn spawn(args: &[&str]) -> anyhow::Result<Self> {
        let mut command = tokio::process::Command::from(py_client(args));
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit()).kill_on_drop(true);
        let mut child = command.spawn()?;
        let stdout = child.stdout.take().expect("piped stdout");
        Ok(Self { child, lines: BufReader::new(stdout).lines() })
    }

    /// The next JSON line, within [`CLIENT_LINE_DEADLINE`].
    async fn next_line(&mut self) -> anyhow::Result<Value> {
        let line = tokio::time::timeout(CLIENT_LINE_DEADLINE, self.lines.next_line()).await;
        match line {
            Err(_) => anyhow::bail!("client.py printed nothing within {CLIENT_LINE_DEADLINE:?}"),
            Ok(Ok(Some(line))) => Ok(serde_json::from_str(&line)?),
            Ok(Ok(None)) => anyhow::bail!("client.py exited early: {:?}", self.child.try_wait()),
            Ok(Err(error)) => Err(error.into()),
        }
    }

    /// Wait for a clean exit after the last op.
    async fn finish(mut self) -> anyhow::Result<()> {
        let status = tokio::time::timeout(CLIENT_LINE_DEADLINE, self.child.wait()).await??;
        anyhow::ensure!(status.success(), "client.py exited with {status}");
        Ok(())
    }
}
