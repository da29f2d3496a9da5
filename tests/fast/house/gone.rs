//! One way per thing: a second way, once removed, stays removed. Each name below belonged to a
//! twin of something the product now does one way; none may appear again in its code (comments
//! aside), test code included; nor may a removed package come back into Cargo.lock.

use super::PRODUCT;
use super::scan;

/// `(name, what does it one way now)`.
const GONE: &[(&str, &str)] = &[
    ("is_session", "a shared upstream and a session are two types over one `upstream::Connection`, not a flag"),
    ("fn prompt_here", "tools, prompts and completions take one routed path (`tools::routed`)"),
    ("fn prompt_parked", "tools, prompts and completions take one routed path (`tools::routed`)"),
    ("fn prompt_needs", "tools, prompts and completions take one routed path (`tools::routed`)"),
    ("fn forwarded_prompt", "tools, prompts and completions take one routed path (`tools::routed`)"),
    ("OfferingsCatalog", "one `catalog::Catalog` over what it lists"),
    ("OfferingsSnapshot", "one `catalog::Catalog` over what it lists"),
    ("Call::Hold", "a subscription on a session another replica holds is MCP on its connection (`upstream::owners`)"),
    ("Call::Offerings", "a session's own lists at another replica are its `tools/list` there (`upstream::owners`)"),
    ("Call::Offered", "a session's own list changes reach replicas as MCP `list_changed` (`downstream::owned_lists`)"),
    ("fn hold_following", "a hold is made on the session `upstream::owners` picks, like any session's"),
    ("mod mailbox", "a host's answer for another replica goes on the one session news channel, sealed and addressed"),
    ("Call::Collect", "a cut stream's kept answer is asked for on the session news channel and read from Redis"),
    ("Line::Kept", "a cut stream's kept answer is asked for on the session news channel and read from Redis"),
    ("mod forward;", "what crosses to another replica's session is MCP to its session endpoint (`upstream::owners`)"),
    ("mod forwarded;", "another replica's requests come to the session endpoint as MCP (`downstream::owned`)"),
    ("mod remote;", "another replica's requests run through `tools::served`, as MCP requests"),
    (
        "mod held_elsewhere",
        "a subscription on a session another replica holds is MCP on its connection (`upstream::owners`)",
    ),
    (
        "mod offered_elsewhere",
        "a session's own lists at another replica are its `tools/list` there (`upstream::owners`)",
    ),
    ("fn resume_at", "a 2026-07-28 retry goes to the replica its call is parked on over MCP (`Upstream::session_on`)"),
    ("_elsewhere(", "one decision says where a request runs (`Upstream::session_for`); no caller knows elsewhere"),
    ("WatchBook", "one name per concept: the proxy's upstream subscriptions are `coherence::UpstreamSubscriptions`"),
    ("WatchTicket", "one name per concept: a load's claim is a `coherence::LoadSubscription`"),
    ("HolderId", "one name per concept: whoever subscribes is a subscriber (`subscription_table::SubscriberId`)"),
    ("Holdings", "one name per concept: who subscribes what is the `subscription_table::SubscriptionTable`"),
    ("struct Holds", "one name per concept: `CacheSubscriptions`, `SessionSubscriptions` (see ARCHITECTURE.md)"),
    ("struct Hold ", "one name per concept: the cache's is a `CacheSubscription`"),
    ("struct Held ", "one name per concept: see the glossary in ARCHITECTURE.md"),
    ("struct Holding", "one name per concept: a GET stream's are its `StreamSubscriptions`"),
    ("StreamHolds", "one name per concept: the streams open here are `OpenStreams`"),
    ("OwnedHolds", "one name per concept: one MCP session's are its `ReplicaSubscriptions`"),
    ("SessionHold", "one name per concept: one on a session is a `SessionSubscription`"),
    ("ReplicaHold", "one name per concept: one for another replica is a `ReplicaSubscription`"),
    ("enum Watching", "one name per concept: what became of a subscribe is a `SubscribeOutcome`"),
    ("WatchSet", "one name per concept: a connection's is its `SubscribedSet`"),
    ("ClientSecret", "a value never shown (the cluster's secrets, an upstream's client secret) is a `config::Secret`"),
    ("HostOf", "a host session is one `host::HostSession`, in a sealed session pass too"),
];

#[test]
fn no_removed_twin_comes_back() {
    let mut found = Vec::new();
    for source in scan::sources(PRODUCT) {
        let text = scan::strip_comments(&source.text);
        for (index, line) in text.lines().enumerate() {
            for (name, instead) in GONE {
                if line.contains(name) {
                    found.push(format!("{}:{}: `{name}` ({instead})", source.file, index + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "a removed second way is back:\n{}", found.join("\n"));
}

/// `(package, why it stays out of Cargo.lock)`.
const GONE_PACKAGES: &[(&str, &str)] = &[
    ("aws-lc-rs", "one crypto provider: ring, for rustls, the JWT signatures and the AEAD"),
    ("aws-lc-sys", "one crypto provider: ring, for rustls, the JWT signatures and the AEAD"),
    ("protobuf", "the metrics' text format only (prometheus without `protobuf`)"),
    ("rmcp-macros", "no member uses rmcp's macros; rmcp is taken without its default features"),
    ("darling", "no member uses rmcp's macros; rmcp is taken without its default features"),
];

#[test]
fn no_removed_package_comes_back_into_the_lock() {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).expect("Cargo.lock");
    let packages: Vec<&str> =
        lock.lines().filter_map(|line| line.strip_prefix("name = \"")?.strip_suffix('"')).collect();
    assert!(packages.contains(&"ring"), "Cargo.lock lists no `ring`: the one crypto provider is gone");
    let back: Vec<String> = GONE_PACKAGES
        .iter()
        .filter(|(package, _)| packages.contains(package))
        .map(|(package, why)| format!("`{package}` ({why})"))
        .collect();
    assert!(back.is_empty(), "a removed package is back in Cargo.lock:\n{}", back.join("\n"));
}
