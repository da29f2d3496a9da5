//! URIs inside what tools and prompts pass through: resource links, embedded resources and
//! `_meta.ui.resourceUri` (MCP Apps: the `ui://` resource a tool renders with) are namespaced
//! into the proxy's URIs — so a host reads them through the proxy like any resource — and
//! checked against the caller's policy like a read: one it may not see is dropped.
//!
//! Invariant: nothing leaves here carrying an upstream's own URI in these slots, or a URI the
//! caller may not read.

use rmcp::model::{ContentBlock, MetaObject, ResourceContents, Tool};

use crate::namespace;
use crate::policy::PolicySet;
use crate::uri;

const UI: &str = "ui";
const RESOURCE_URI: &str = "resourceUri";

/// May `principal` read this namespaced URI?
pub(super) fn visible(policy: &PolicySet, principal: &str, namespaced: &str) -> bool {
    policy.is_allow_all() || uri::normalize(namespaced).is_ok_and(|n| policy.decide(principal, &n).allowed)
}

/// `_meta` as an upstream sent it, with `ui.resourceUri` namespaced (removed when it has no
/// scheme, so cannot be).
pub(super) fn meta_from_upstream(upstream: &str, mut meta: MetaObject) -> MetaObject {
    let Some(ui) = meta.0.get_mut(UI).and_then(|ui| ui.as_object_mut()) else { return meta };
    let namespaced = ui.get(RESOURCE_URI).and_then(|u| u.as_str()).map(|u| namespace::namespaced(upstream, u));
    match namespaced {
        Some(Some(namespaced)) => drop(ui.insert(RESOURCE_URI.into(), namespaced.into())),
        Some(None) => drop(ui.remove(RESOURCE_URI)),
        None => {}
    }
    meta
}

/// `_meta` (already namespaced) without a `ui.resourceUri` the principal may not read.
pub(super) fn meta_for(mut meta: MetaObject, policy: &PolicySet, principal: &str) -> MetaObject {
    let Some(ui) = meta.0.get_mut(UI).and_then(|ui| ui.as_object_mut()) else { return meta };
    let hidden = ui.get(RESOURCE_URI).is_some_and(|u| !u.as_str().is_some_and(|u| visible(policy, principal, u)));
    if hidden {
        ui.remove(RESOURCE_URI);
    }
    meta
}

/// A listed tool as `principal` may see it.
pub(super) fn tool_for(mut tool: Tool, policy: &PolicySet, principal: &str) -> Tool {
    tool.meta = tool.meta.map(|meta| meta_for(meta, policy, principal));
    tool
}

/// A block of a result from `upstream`, for `principal`: URIs namespaced; `None` when it
/// names a resource that cannot be namespaced or that the principal may not read.
pub(super) fn block_for(
    upstream: &str,
    block: ContentBlock,
    policy: &PolicySet,
    principal: &str,
) -> Option<ContentBlock> {
    let check = |original: &str| {
        let namespaced = namespace::namespaced(upstream, original)?;
        visible(policy, principal, &namespaced).then_some(namespaced)
    };
    match block {
        ContentBlock::ResourceLink(mut link) => {
            link.uri = check(&link.uri)?;
            link.meta = link.meta.map(|meta| meta_for(meta_from_upstream(upstream, meta), policy, principal));
            Some(ContentBlock::ResourceLink(link))
        }
        ContentBlock::Resource(mut embedded) => {
            match &mut embedded.resource {
                ResourceContents::TextResourceContents { uri, .. }
                | ResourceContents::BlobResourceContents { uri, .. } => *uri = check(uri)?,
                _ => return None,
            }
            Some(ContentBlock::Resource(embedded))
        }
        other => Some(other),
    }
}

/// Every block of a result, rewritten; those the principal may not see are dropped (counted
/// in the return value).
pub(super) fn blocks_for(
    upstream: &str,
    blocks: Vec<ContentBlock>,
    policy: &PolicySet,
    principal: &str,
) -> (Vec<ContentBlock>, usize) {
    let before = blocks.len();
    let kept: Vec<ContentBlock> =
        blocks.into_iter().filter_map(|block| block_for(upstream, block, policy, principal)).collect();
    let dropped = before - kept.len();
    (kept, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{EmbeddedResource, Resource};

    fn deny_secret() -> PolicySet {
        PolicySet::from_texts(&[(
            "p.toml",
            "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"*+demo://secret/**\"]\n",
        )])
        .expect("valid policy")
    }

    #[test]
    fn links_and_embedded_resources_are_namespaced_and_denied_ones_dropped() {
        let policy = deny_secret();
        let blocks = vec![
            ContentBlock::text("hello"),
            ContentBlock::ResourceLink(Resource::new("demo://open/1", "open")),
            ContentBlock::ResourceLink(Resource::new("demo://secret/1", "secret")),
            ContentBlock::Resource(EmbeddedResource::new(ResourceContents::text("x", "demo://open/2"))),
            ContentBlock::Resource(EmbeddedResource::new(ResourceContents::text("x", "demo://secret/2"))),
            ContentBlock::ResourceLink(Resource::new("no-scheme", "odd")),
        ];
        let (kept, dropped) = blocks_for("ev", blocks, &policy, "alice");
        assert_eq!(dropped, 3);
        let uris: Vec<String> = kept
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ResourceLink(link) => Some(link.uri.clone()),
                ContentBlock::Resource(e) => match &e.resource {
                    ResourceContents::TextResourceContents { uri, .. } => Some(uri.clone()),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        assert_eq!(uris, ["ev+demo://open/1", "ev+demo://open/2"]);
        assert_eq!(kept.len(), 3, "the text block stays");
    }

    #[test]
    fn ui_resource_uri_is_namespaced_then_hidden_when_denied() {
        let meta = |uri: &str| MetaObject(serde_json::json!({"ui": {"resourceUri": uri}}).as_object().unwrap().clone());
        let namespaced = meta_from_upstream("ev", meta("ui://widget/a"));
        assert_eq!(namespaced.0["ui"]["resourceUri"], "ev+ui://widget/a");
        let policy = deny_secret();
        assert_eq!(meta_for(namespaced.clone(), &policy, "alice").0, namespaced.0);
        let denied = meta_for(meta_from_upstream("ev", meta("demo://secret/ui")), &policy, "alice");
        assert!(denied.0["ui"].get("resourceUri").is_none());
        let unschemed = meta_from_upstream("ev", meta("widget"));
        assert!(unschemed.0["ui"].get("resourceUri").is_none());
    }
}
