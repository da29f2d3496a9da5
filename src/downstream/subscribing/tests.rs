//! The acknowledgement's promise, in process: an upstream change that lands after rmcp sent
//! `notifications/subscriptions/acknowledged` but before `listen` runs reaches the host.

use std::path::Path;
use std::time::Duration;

use rmcp::model::{ProtocolVersion, ServerConfig, ServerNotification, SubscriptionFilter};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, SubscriptionContext};
use rmcp::{ErrorData, ServerHandler, ServiceExt};

use super::super::ProxyServer;
use crate::config::Config;
use crate::metrics::Transport;
use crate::proxy::Proxy;
use crate::spine::Spine;

/// A `ProxyServer` whose upstream changes `a+x://1` exactly in the window.
struct ChangeInTheWindow(ProxyServer);

impl ServerHandler for ChangeInTheWindow {
    fn get_info(&self) -> ServerConfig {
        self.0.get_info()
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        self.0.accepted_subscription_filter(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        // rmcp has sent the acknowledgement; the stream is not handed over yet.
        self.0.proxy.subscriptions().updated("a", "x://1", &crate::telemetry::Span::default());
        self.0.listen(context).await
    }
}

#[tokio::test]
async fn an_update_between_acknowledgement_and_listen_reaches_the_host() {
    let toml = "[[upstreams]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\n";
    let config = Config::from_toml(toml, Path::new("/"), &|_| None).expect("config");
    let spine = Spine::new();
    let proxy = Proxy::start(config, &spine);
    let (client_side, server_side) = tokio::io::duplex(1 << 16);
    let server = ChangeInTheWindow(ProxyServer::new(proxy, "p", Transport::Stdio));
    let serving = tokio::spawn(async move { server.serve(server_side).await.expect("serve").waiting().await });
    let modern = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    let client = ().serve_with_lifecycle(client_side, modern).await.expect("client");
    let filter = SubscriptionFilter::builder().resource_subscriptions(["a+x://1".to_owned()]).build();
    let mut stream = client.listen(filter).await.expect("listen");
    assert_eq!(stream.acknowledged().resource_subscriptions.as_deref(), Some(&["a+x://1".to_owned()][..]));
    let heard = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("heard within 10s");
    match heard.expect("stream open") {
        Some(ServerNotification::ResourceUpdatedNotification(n)) => assert_eq!(n.params.uri, "a+x://1"),
        other => panic!("expected updated, got {other:?}"),
    }
    drop(stream);
    drop(client);
    serving.abort();
}
