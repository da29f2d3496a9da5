//! URIs inside what tools and prompts pass through: resource links, embedded resources and
//! `_meta.ui.resourceUri` (MCP Apps: the `ui://` resource a tool renders with) are namespaced
//! into the proxy's URIs — so a host reads them through the proxy like any resource — and
//! checked against the caller's policy like a read: one it may not see is dropped.
//!
//! `structuredContent` is the tool's own JSON, shaped by its `outputSchema`, so it is rewritten
//! in strings only, never in shape: a string that is a whole URI in a scheme the upstream serves
//! (one of the schemes of its listed resources and templates) is namespaced, every other string
//! (an `https://` home page of an upstream that serves `demo://`, prose) is left alone. A URI the
//! caller may not read cannot be dropped without changing the shape, so the whole result is
//! withheld instead: the call answers as a tool error (`isError`, which hosts do not validate
//! against the schema) that names nothing. The text block that mirrors `structuredContent` (the
//! spec's serialized copy for older hosts) is re-serialized from the rewritten value.
//!
//! Invariant: nothing leaves here carrying an upstream's own URI in these slots, or a URI the
//! caller may not read.

use std::collections::BTreeSet;

use rmcp::model::{CallToolResult, ContentBlock, MetaObject, ResourceContents, Tool};
use serde_json::Value;

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

/// What became of a tool result's `structuredContent`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Structured {
    /// Absent, or rewritten (in strings only) and passed on.
    Passed,
    /// It names a resource the caller may not read: the result was replaced by a tool error.
    Withheld,
}

/// Rewrite `result.structuredContent` from `upstream` (whose resources use `schemes`) for
/// `principal`, and the text block that mirrors it; or withhold the result (see the module doc).
pub(super) fn structured_for(
    upstream: &str,
    schemes: &BTreeSet<String>,
    result: &mut CallToolResult,
    policy: &PolicySet,
    principal: &str,
) -> Structured {
    let Some(original) = result.structured_content.take() else { return Structured::Passed };
    let mut rewritten = original.clone();
    match rewrite_strings(&mut rewritten, &|s| resource_uri(upstream, schemes, s), policy, principal) {
        Ok(0) => result.structured_content = Some(original),
        Ok(_) => {
            for block in &mut result.content {
                if let ContentBlock::Text(text) = block
                    && serde_json::from_str::<Value>(&text.text).is_ok_and(|v| v == original)
                {
                    // Pretty when it came pretty (two-space indents, as the SDKs write it).
                    let serialized = if text.text.contains('\n') {
                        serde_json::to_string_pretty(&rewritten)
                    } else {
                        serde_json::to_string(&rewritten)
                    };
                    text.text = serialized.unwrap_or_default();
                }
            }
            result.structured_content = Some(rewritten);
        }
        Err(Hidden) => {
            *result = withheld(result.meta.take());
            return Structured::Withheld;
        }
    }
    Structured::Passed
}

/// A string of `structuredContent` that names a resource the caller may not read.
struct Hidden;

/// Namespace every string of `value` that `namespace_of` maps; how many were; `Hidden` at the
/// first one the principal may not read.
fn rewrite_strings(
    value: &mut Value,
    namespace_of: &dyn Fn(&str) -> Option<String>,
    policy: &PolicySet,
    principal: &str,
) -> Result<usize, Hidden> {
    match value {
        Value::String(text) => {
            let Some(namespaced) = namespace_of(text) else { return Ok(0) };
            if !visible(policy, principal, &namespaced) {
                return Err(Hidden);
            }
            *text = namespaced;
            Ok(1)
        }
        Value::Array(items) => items.iter_mut().map(|v| rewrite_strings(v, namespace_of, policy, principal)).sum(),
        Value::Object(fields) => fields.values_mut().map(|v| rewrite_strings(v, namespace_of, policy, principal)).sum(),
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(0),
    }
}

/// `text` namespaced when it is a whole URI (a scheme, no whitespace or control characters)
/// in one of the `schemes` the upstream serves.
fn resource_uri(upstream: &str, schemes: &BTreeSet<String>, text: &str) -> Option<String> {
    let (scheme, rest) = text.split_once(':')?;
    let whole = !rest.is_empty() && !text.chars().any(|c| c.is_whitespace() || c.is_control());
    (whole && schemes.contains(&scheme.to_ascii_lowercase())).then(|| namespace::namespaced(upstream, text))?
}

/// The tool error that stands for a withheld result.
fn withheld(meta: Option<MetaObject>) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(
        "The tool's result refers to a resource this caller may not read; it was withheld.",
    )]);
    result.meta = meta;
    result
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

    fn structured(value: Value) -> CallToolResult {
        let mut result = CallToolResult::structured(value.clone());
        result.content = vec![ContentBlock::text(value.to_string()), ContentBlock::text("prose")];
        result
    }

    fn check(input: Value, expected: Option<Value>) {
        let schemes: BTreeSet<String> = ["demo".to_string()].into();
        let mut result = structured(input.clone());
        let outcome = structured_for("ev", &schemes, &mut result, &deny_secret(), "alice");
        match expected {
            Some(expected) => {
                assert_eq!(outcome, Structured::Passed, "{input}");
                assert_eq!(result.structured_content.as_ref(), Some(&expected), "{input}");
                let mirror = result.content[0].as_text().map(|t| t.text.clone()).unwrap_or_default();
                assert_eq!(serde_json::from_str::<Value>(&mirror).ok(), Some(expected), "the mirror follows");
                assert_eq!(result.content[1].as_text().map(|t| t.text.as_str()), Some("prose"));
                assert_ne!(result.is_error, Some(true));
            }
            None => {
                assert_eq!(outcome, Structured::Withheld, "{input}");
                assert_eq!(result.structured_content, None);
                assert_eq!(result.is_error, Some(true));
                assert!(!format!("{:?}", result.content).contains("secret"), "names nothing");
            }
        }
    }

    #[test]
    fn structured_content_strings_that_are_served_uris_are_namespaced_in_place() {
        use serde_json::json;
        check(json!({"temperature": 36, "conditions": "rain"}), Some(json!({"temperature": 36, "conditions": "rain"})));
        check(
            json!({"matches": [{"uri": "demo://open/1", "n": 1}, {"uri": "DEMO://open/2"}], "top": "demo://open/3"}),
            Some(
                json!({"matches": [{"uri": "ev+demo://open/1", "n": 1}, {"uri": "ev+DEMO://open/2"}], "top": "ev+demo://open/3"}),
            ),
        );
        // Not a resource of this upstream, or not a whole URI: left alone.
        check(
            json!({"home": "https://example.com/", "note": "demo://open/1 is first", "bare": "demo:", "n": null}),
            Some(json!({"home": "https://example.com/", "note": "demo://open/1 is first", "bare": "demo:", "n": null})),
        );
        check(json!(["demo://open/1", true, 2]), Some(json!(["ev+demo://open/1", true, 2])));
        check(json!("demo://open/1"), Some(json!("ev+demo://open/1")));
    }

    #[test]
    fn structured_content_naming_a_denied_resource_withholds_the_result() {
        use serde_json::json;
        check(json!({"matches": [{"uri": "demo://open/1"}, {"uri": "demo://secret/1"}]}), None);
        check(json!(["demo://secret/x"]), None);
    }

    #[test]
    fn structured_content_that_is_absent_or_unchanged_keeps_its_mirror_as_sent() {
        let schemes: BTreeSet<String> = ["demo".to_string()].into();
        let mut result = CallToolResult::success(vec![ContentBlock::text("demo://open/1")]);
        assert_eq!(structured_for("ev", &schemes, &mut result, &deny_secret(), "alice"), Structured::Passed);
        assert_eq!(result.content[0].as_text().map(|t| t.text.as_str()), Some("demo://open/1"));
        let mut result = structured(serde_json::json!({"a": "x://y"}));
        let before = result.content.clone();
        structured_for("ev", &schemes, &mut result, &deny_secret(), "alice");
        assert_eq!(result.content, before);
    }
}
