//! The event loop over the services `Proxy::start` wires, driven by hand.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::super::events::Debounce;
use super::Shared;
use crate::config::Config;
use crate::fanout::tests::Recorder;
use crate::fanout::{Outgoing, OutletInfo, OutletKind};
use crate::spine::Spine;
use crate::upstream::{Inbound, Lost};

/// What the loop does with an overflowed upstream (its events were lost to a full queue):
/// every subscriber of one of its URIs hears `updated` for each, subscribers of other upstreams
/// hear nothing, and list views are compared again.
#[tokio::test]
async fn an_overflow_tells_every_subscriber_of_that_upstream() {
    let got = overflow_heard(Lost::Everything).await;
    assert_eq!(got, [Outgoing::Updated("a+x://1".into()), Outgoing::Updated("a+x://2/".into())]);
}

/// An overflow that kept the lost URIs tells subscribers `updated` for those alone.
#[tokio::test]
async fn an_overflow_with_its_uris_tells_only_their_subscribers() {
    let got = overflow_heard(Lost::Updated(["x://1".to_string()].into())).await;
    assert_eq!(got, [Outgoing::Updated("a+x://1".into())]);
}

/// What a subscriber of `a`'s `x://1` and `x://2/` and of `b`'s `x://3` hears for an overflow of
/// `a` that lost `lost` (list views are compared again either way).
async fn overflow_heard(lost: Lost) -> Vec<Outgoing> {
    let config = Config::from_toml("", Path::new("/"), &|_| None).expect("config");
    let spine = Spine::new();
    let shared = Shared::new(&config, &spine);
    let (sent, mut heard) = mpsc::unbounded_channel();
    let info = OutletInfo {
        principal: "p".into(),
        kind: OutletKind::Session,
        wants_list_changed: false,
        wants_tools_list_changed: false,
        wants_prompts_list_changed: false,
        host_key: Default::default(),
    };
    let subscriber = shared.subscriptions.register_outlet(info, Arc::new(Recorder(sent)));
    for (upstream, uri) in [("a", "x://1"), ("a", "x://2/"), ("b", "x://3")] {
        shared.upstream_subscriptions.subscribe(subscriber, upstream, uri);
    }
    let mut list_changed = Debounce::new(Duration::from_secs(3600));
    shared.event_loop(&config).on_inbound(Inbound::Overflowed("a".into(), lost), &mut list_changed).await;
    assert!(list_changed.is_due(), "list views are compared again");
    shared.fanout.deliver(subscriber, Outgoing::ListChanged);
    let mut got = Vec::new();
    while let Some(message) = tokio::time::timeout(Duration::from_secs(5), heard.recv()).await.unwrap() {
        if message == Outgoing::ListChanged {
            break;
        }
        got.push(message);
    }
    got.sort_by_key(|m| format!("{m:?}"));
    assert_eq!(spine.drain(Duration::from_secs(5)).await, Ok(()));
    got
}
