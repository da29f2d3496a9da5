//! URIs inside what tools and prompts pass through, for one caller: resource links, embedded
//! resources, `_meta.ui.resourceUri` (MCP Apps: the `ui://` resource a tool renders with) and
//! its flat spelling `_meta["ui/resourceUri"]` (which the ext-apps SDK still sends beside it)
//! on a tool, a prompt or any content block (and on an embedded resource's contents),
//! `icons[].src` of tools, prompts, resource links and listed resources and templates
//! ([`listed`]), `structuredContent` ([`structured`]) and completion values ([`completion`]).
//!
//! One rule for every slot ([`links`]): a URI the upstream serves is namespaced into the
//! proxy's form — so a host reads it through the proxy like any resource — and checked against
//! the caller's policy like a read; one it may not read is dropped (a link or embedded
//! resource block, a `ui.resourceUri` or `ui/resourceUri`, an icon, a completion value) or
//! removed (`structuredContent`). Foreign URLs (`https://…`, `data:`) are left alone. Decisions
//! are by policy over the string, never by whether the resource exists. The upstream's own
//! `serverInfo` (and its icons) never reaches a host: the proxy presents its own, and the copy
//! an upstream puts in a result's `_meta` (`io.modelcontextprotocol/serverInfo`) is removed.
//!
//! Invariant: nothing leaves here carrying an upstream's own URI in these slots, or a URI the
//! caller may not read.

mod answer;
mod completion;
mod links;
mod listed;
mod structured;

use rmcp::model::{ContentBlock, Icon, JsonObject, MetaObject, ResourceContents};

pub(crate) use self::answer::answer_for;
pub(crate) use self::completion::completion_for;
pub(crate) use self::links::{Link, Links};
pub(crate) use self::listed::ListedIcons;
use crate::namespace;
use crate::policy::PolicySet;
use crate::uri;

const UI: &str = "ui";
const RESOURCE_URI: &str = "resourceUri";
/// The flat spelling of `ui.resourceUri`, a key of `_meta` itself.
const FLAT_RESOURCE_URI: &str = "ui/resourceUri";
const SERVER_INFO_META_KEY: &str = "io.modelcontextprotocol/serverInfo";

/// May `principal` read this namespaced URI?
pub(super) fn visible(policy: &PolicySet, principal: &str, namespaced: &str) -> bool {
    policy.is_allow_all() || uri::normalize(namespaced).is_ok_and(|n| policy.decide(principal, &n).allowed)
}

/// `_meta` as an upstream sent it, with its MCP Apps resource URIs namespaced (each removed
/// when it has no scheme, so cannot be).
pub(super) fn meta_from_upstream(upstream: &str, mut meta: MetaObject) -> MetaObject {
    each_resource_uri(&mut meta, |uri| namespace::namespaced(upstream, uri));
    meta
}

/// `_meta` (already namespaced) without an MCP Apps resource URI the principal may not read.
pub(super) fn meta_for(mut meta: MetaObject, policy: &PolicySet, principal: &str) -> MetaObject {
    each_resource_uri(&mut meta, |uri| visible(policy, principal, uri).then(|| uri.to_string()));
    meta
}

/// Replace each MCP Apps resource URI of `_meta` — the nested `ui.resourceUri` and the flat
/// `ui/resourceUri` that the ext-apps SDK still sends beside it — by what `rewrite` makes of
/// it; one it makes nothing of (or that is no string) is removed.
fn each_resource_uri(meta: &mut MetaObject, mut rewrite: impl FnMut(&str) -> Option<String>) {
    if let Some(ui) = meta.0.get_mut(UI).and_then(|ui| ui.as_object_mut()) {
        rewrite_slot(ui, RESOURCE_URI, &mut rewrite);
    }
    rewrite_slot(&mut meta.0, FLAT_RESOURCE_URI, &mut rewrite);
}

/// `object[key]`, when present, rewritten or removed (see [`each_resource_uri`]).
fn rewrite_slot(object: &mut JsonObject, key: &str, rewrite: &mut impl FnMut(&str) -> Option<String>) {
    let Some(value) = object.get_mut(key) else { return };
    match value.as_str().and_then(rewrite) {
        Some(rewritten) => *value = rewritten.into(),
        None => drop(object.remove(key)),
    }
}

/// `_meta` as an upstream sent it in a content block, as the caller may see it.
fn block_meta(links: &Links<'_>, meta: Option<MetaObject>) -> Option<MetaObject> {
    meta.map(|meta| meta_for(meta_from_upstream(links.upstream(), meta), links.policy(), links.principal()))
}

/// A result's `_meta` (a tool call's, a prompt's, a completion's) as the caller may see it:
/// as a block's, and without the upstream's own `serverInfo` (not ours to pass on).
pub(super) fn result_meta(links: &Links<'_>, meta: Option<MetaObject>) -> Option<MetaObject> {
    let mut meta = block_meta(links, meta)?;
    meta.remove(SERVER_INFO_META_KEY);
    Some(meta)
}

/// `icons` as the caller may see them: a `src` the upstream serves namespaced, one naming a
/// resource the caller may not read dropped (`None` when none is left), foreign ones as sent.
pub(super) fn icons_for(links: &Links<'_>, icons: Option<Vec<Icon>>) -> Option<Vec<Icon>> {
    let kept: Vec<Icon> = icons?
        .into_iter()
        .filter_map(|mut icon| match links.judge(&icon.src) {
            Link::Namespaced(namespaced) => {
                icon.src = namespaced;
                Some(icon)
            }
            Link::Denied => None,
            Link::Plain | Link::Elsewhere => Some(icon),
        })
        .collect();
    (!kept.is_empty()).then_some(kept)
}

/// A block of a result, for the caller: URIs namespaced, `_meta` and icons rewritten; `None`
/// when it names a resource that cannot be namespaced or that the caller may not read.
pub(super) fn block_for(links: &Links<'_>, block: ContentBlock) -> Option<ContentBlock> {
    let check = |original: &str| {
        let namespaced = namespace::namespaced(links.upstream(), original)?;
        links.visible(&namespaced).then_some(namespaced)
    };
    match block {
        ContentBlock::ResourceLink(mut link) => {
            link.uri = check(&link.uri)?;
            link.meta = block_meta(links, link.meta);
            link.icons = icons_for(links, link.icons);
            Some(ContentBlock::ResourceLink(link))
        }
        ContentBlock::Resource(mut embedded) => {
            match &mut embedded.resource {
                ResourceContents::TextResourceContents { uri, meta, .. }
                | ResourceContents::BlobResourceContents { uri, meta, .. } => {
                    *uri = check(uri)?;
                    *meta = block_meta(links, meta.take());
                }
                _ => return None,
            }
            embedded.meta = block_meta(links, embedded.meta);
            Some(ContentBlock::Resource(embedded))
        }
        ContentBlock::Text(mut text) => {
            text.meta = block_meta(links, text.meta);
            Some(ContentBlock::Text(text))
        }
        ContentBlock::Image(mut image) => {
            image.meta = block_meta(links, image.meta);
            Some(ContentBlock::Image(image))
        }
        ContentBlock::Audio(mut audio) => {
            audio.meta = block_meta(links, audio.meta);
            Some(ContentBlock::Audio(audio))
        }
        _ => None,
    }
}

/// Every block of a result, rewritten; those the caller may not see are dropped (counted in
/// the return value).
pub(super) fn blocks_for(links: &Links<'_>, blocks: Vec<ContentBlock>) -> (Vec<ContentBlock>, usize) {
    let before = blocks.len();
    let kept: Vec<ContentBlock> = blocks.into_iter().filter_map(|block| block_for(links, block)).collect();
    let dropped = before - kept.len();
    (kept, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Catalog, UpstreamCatalog};
    use rmcp::model::{EmbeddedResource, ImageContent, Resource};

    fn deny_secret() -> PolicySet {
        PolicySet::from_texts(&[(
            "p.toml",
            "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"*+demo://secret/**\"]\n",
        )])
        .expect("valid policy")
    }

    fn serving_demo() -> Catalog {
        let catalog = Catalog::new();
        let entries = UpstreamCatalog { resources: vec![Resource::new("ev+demo://open/1", "open")], templates: vec![] };
        catalog.set_upstream("ev", entries);
        catalog
    }

    fn meta(uri: &str) -> MetaObject {
        MetaObject(serde_json::json!({"ui": {"resourceUri": uri}}).as_object().unwrap().clone())
    }

    #[test]
    fn links_and_embedded_resources_are_namespaced_and_denied_ones_dropped() {
        let (catalog, policy) = (serving_demo(), deny_secret());
        let snapshot = catalog.snapshot();
        let links = Links::new("ev", &snapshot, &policy, "alice");
        let blocks = vec![
            ContentBlock::text("hello"),
            ContentBlock::ResourceLink(Resource::new("demo://open/1", "open")),
            ContentBlock::ResourceLink(Resource::new("demo://secret/1", "secret")),
            ContentBlock::Resource(EmbeddedResource::new(ResourceContents::text("x", "demo://open/2"))),
            ContentBlock::Resource(EmbeddedResource::new(ResourceContents::text("x", "demo://secret/2"))),
            ContentBlock::ResourceLink(Resource::new("no-scheme", "odd")),
        ];
        let (kept, dropped) = blocks_for(&links, blocks);
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
        let namespaced = meta_from_upstream("ev", meta("ui://widget/a"));
        assert_eq!(namespaced.0["ui"]["resourceUri"], "ev+ui://widget/a");
        let policy = deny_secret();
        assert_eq!(meta_for(namespaced.clone(), &policy, "alice").0, namespaced.0);
        let denied = meta_for(meta_from_upstream("ev", meta("demo://secret/ui")), &policy, "alice");
        assert!(denied.0["ui"].get("resourceUri").is_none());
        let unschemed = meta_from_upstream("ev", meta("widget"));
        assert!(unschemed.0["ui"].get("resourceUri").is_none());
    }

    #[test]
    fn the_flat_ui_resource_uri_is_namespaced_and_hidden_like_the_nested_one() {
        let both = |uri: &str| {
            let meta = serde_json::json!({"ui": {"resourceUri": uri}, "ui/resourceUri": uri});
            MetaObject(meta.as_object().unwrap().clone())
        };
        let namespaced = meta_from_upstream("ev", both("ui://widget/a"));
        assert_eq!(namespaced.0["ui/resourceUri"], "ev+ui://widget/a");
        assert_eq!(namespaced.0["ui"]["resourceUri"], "ev+ui://widget/a");
        let policy = deny_secret();
        assert_eq!(meta_for(namespaced.clone(), &policy, "alice").0, namespaced.0);
        let denied = meta_for(meta_from_upstream("ev", both("demo://secret/ui")), &policy, "alice");
        assert!(denied.0.get("ui/resourceUri").is_none(), "{denied:?}");
        assert!(denied.0["ui"].get("resourceUri").is_none(), "{denied:?}");
        assert!(meta_from_upstream("ev", both("widget")).0.get("ui/resourceUri").is_none());
    }

    #[test]
    fn ui_resource_uri_of_image_and_embedded_blocks_and_their_contents_is_rewritten() {
        let (catalog, policy) = (serving_demo(), deny_secret());
        let snapshot = catalog.snapshot();
        let links = Links::new("ev", &snapshot, &policy, "alice");
        let image = ContentBlock::Image(ImageContent::new("AAAA", "image/png").with_meta(meta("demo://secret/ui")));
        let Some(ContentBlock::Image(image)) = block_for(&links, image) else { panic!("an image stays") };
        assert!(image.meta.expect("meta")["ui"].get("resourceUri").is_none());
        let contents = ResourceContents::TextResourceContents {
            uri: "demo://open/1".into(),
            mime_type: None,
            text: "t".into(),
            meta: Some(meta("ui://w/1")),
        };
        let mut embedded = EmbeddedResource::new(contents);
        embedded.meta = Some(meta("ui://w/2"));
        let embedded = ContentBlock::Resource(embedded);
        let Some(ContentBlock::Resource(embedded)) = block_for(&links, embedded) else { panic!("allowed") };
        assert_eq!(embedded.meta.expect("meta")["ui"]["resourceUri"], "ev+ui://w/2");
        let ResourceContents::TextResourceContents { meta: Some(inner), .. } = embedded.resource else { panic!() };
        assert_eq!(inner["ui"]["resourceUri"], "ev+ui://w/1");
    }

    #[test]
    fn icons_served_are_namespaced_denied_dropped_foreign_kept() {
        let (catalog, policy) = (serving_demo(), deny_secret());
        let snapshot = catalog.snapshot();
        let links = Links::new("ev", &snapshot, &policy, "alice");
        let icon = |src: &str| Icon::new(src);
        let icons = vec![icon("demo://icons/a.png"), icon("demo://secret/b.png"), icon("https://e.com/c.png")];
        let srcs: Vec<String> = icons_for(&links, Some(icons)).expect("some").into_iter().map(|i| i.src).collect();
        assert_eq!(srcs, ["ev+demo://icons/a.png", "https://e.com/c.png"]);
        assert_eq!(icons_for(&links, Some(vec![icon("demo://secret/only.png")])), None);
        assert_eq!(icons_for(&links, None), None);
    }
}
