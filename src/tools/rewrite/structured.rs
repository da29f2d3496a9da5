//! `structuredContent`: the tool's own JSON, shaped by its `outputSchema`, rewritten in strings
//! (and object keys) only.
//!
//! The rule, by the caller's policy and never by whether a resource exists (so a host sees the
//! same answer whether a denied resource exists or not):
//! - A string that is a resource URI of the upstream ([`Links::judge`]) is namespaced; a key that
//!   is one is renamed alike. Other strings (`https://…`, another upstream's raw URI the caller
//!   may read, prose) are left alone.
//! - A string that names a resource the caller may not read — a whole URI, or prose with such a
//!   URI among its words — is removed together with the innermost array element holding it (a
//!   search hit goes with its title, as if the upstream had not found it); a member whose key
//!   names one goes too. With no array above it, the top-level member holding it is removed.
//!   Only when the whole value is such a string is the result withheld (a tool error, `isError`,
//!   which hosts do not validate against the schema, that names nothing).
//! - Text blocks beside it, when anything was rewritten: the spec's serialized mirror (JSON equal
//!   to what the upstream sent) is re-serialized from the rewritten value; a text block holding
//!   other JSON is rewritten by the same rule; any other text that names a denied resource or
//!   holds a removed string is dropped. What was removed never reaches the host.

use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::{Map, Value};

use super::links::{Link, Links};

/// What became of a tool result's `structuredContent`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Structured {
    /// Absent, or passed on as sent.
    Passed,
    /// Rewritten: URIs namespaced, and this many strings naming denied resources removed
    /// (with what held them), text blocks alike.
    Rewritten { removed: usize },
    /// The whole value names a resource the caller may not read: the result was replaced by a
    /// tool error.
    Withheld,
}

/// Rewrite `result.structuredContent` and the text blocks beside it for the caller (see the
/// module doc).
pub(crate) fn structured_for(links: &Links<'_>, result: &mut CallToolResult) -> Structured {
    let Some(original) = result.structured_content.take() else { return Structured::Passed };
    let mut rewritten = original.clone();
    let mut report = Report::default();
    if rewrite_root(&mut rewritten, links, &mut report) == Fate::Remove {
        *result = withheld(result.meta.take());
        return Structured::Withheld;
    }
    if !report.changed() {
        result.structured_content = Some(original);
        return Structured::Passed;
    }
    let content = std::mem::take(&mut result.content);
    result.content =
        content.into_iter().filter_map(|block| text_for(block, &original, &rewritten, links, &mut report)).collect();
    result.structured_content = Some(rewritten);
    Structured::Rewritten { removed: report.removed.len() }
}

/// What was done to a value.
#[derive(Debug, Default)]
struct Report {
    namespaced: usize,
    /// The strings (the denied URIs among them) that were removed.
    removed: Vec<String>,
}

impl Report {
    fn changed(&self) -> bool {
        self.namespaced > 0 || !self.removed.is_empty()
    }
}

/// Whether a value stays or must go with what holds it.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Fate {
    Keep,
    Remove,
}

/// The root: an object's members that must go are removed one by one; anything else as below.
fn rewrite_root(value: &mut Value, links: &Links<'_>, report: &mut Report) -> Fate {
    match value {
        Value::Object(fields) => {
            rewrite_object(fields, links, report, true);
            Fate::Keep
        }
        other => rewrite_value(other, links, report),
    }
}

/// Rewrite `value` in place; [`Fate::Remove`] when it names a denied resource and must go.
fn rewrite_value(value: &mut Value, links: &Links<'_>, report: &mut Report) -> Fate {
    match value {
        Value::String(text) => rewrite_string(text, links, report),
        Value::Array(items) => {
            items.retain_mut(|item| rewrite_value(item, links, report) == Fate::Keep);
            Fate::Keep
        }
        Value::Object(fields) => rewrite_object(fields, links, report, false),
        Value::Null | Value::Bool(_) | Value::Number(_) => Fate::Keep,
    }
}

fn rewrite_string(text: &mut String, links: &Links<'_>, report: &mut Report) -> Fate {
    match links.judge(text) {
        Link::Namespaced(namespaced) => {
            *text = namespaced;
            report.namespaced += 1;
            Fate::Keep
        }
        Link::Denied => {
            report.removed.push(text.clone());
            Fate::Remove
        }
        Link::Plain | Link::Elsewhere => {
            let denied: Vec<String> = links.denied_words(text).map(str::to_string).collect();
            if denied.is_empty() {
                return Fate::Keep;
            }
            report.removed.extend(denied);
            Fate::Remove
        }
    }
}

/// An object's keys and values; at the `top` level a member that must go is removed, below it
/// the whole object goes.
fn rewrite_object(fields: &mut Map<String, Value>, links: &Links<'_>, report: &mut Report, top: bool) -> Fate {
    let mut kept = Map::new();
    let mut fate = Fate::Keep;
    for (mut key, mut value) in std::mem::take(fields) {
        let key_goes = rewrite_string(&mut key, links, report) == Fate::Remove;
        if key_goes {
            continue;
        }
        if rewrite_value(&mut value, links, report) == Fate::Remove {
            if !top {
                fate = Fate::Remove;
            }
            continue;
        }
        kept.insert(key, value);
    }
    *fields = kept;
    fate
}

/// A block beside a rewritten `structuredContent` (see the module doc); `None`: dropped.
fn text_for(
    block: ContentBlock,
    original: &Value,
    rewritten: &Value,
    links: &Links<'_>,
    report: &mut Report,
) -> Option<ContentBlock> {
    let ContentBlock::Text(mut text) = block else { return Some(block) };
    let pretty = text.text.contains('\n');
    match serde_json::from_str::<Value>(&text.text) {
        Ok(parsed) if parsed == *original => text.text = serialized(rewritten, pretty),
        Ok(mut other @ (Value::Object(_) | Value::Array(_))) => {
            let mut inner = Report::default();
            if rewrite_root(&mut other, links, &mut inner) == Fate::Remove {
                return None;
            }
            if inner.changed() {
                text.text = serialized(&other, pretty);
            }
            report.removed.extend(inner.removed);
        }
        _ => {
            let holds_removed = report.removed.iter().any(|removed| text.text.contains(removed.as_str()));
            if holds_removed || links.names_denied(&text.text) {
                return None;
            }
        }
    }
    Some(ContentBlock::Text(text))
}

/// Pretty when it came pretty (two-space indents, as the SDKs write it).
fn serialized(value: &Value, pretty: bool) -> String {
    let text = if pretty { serde_json::to_string_pretty(value) } else { serde_json::to_string(value) };
    text.unwrap_or_default()
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
    use crate::catalog::{Catalog, UpstreamCatalog};
    use crate::policy::PolicySet;
    use rmcp::model::Resource;
    use serde_json::json;

    fn result_of(value: Value, texts: &[&str]) -> CallToolResult {
        let mut result = CallToolResult::structured(value.clone());
        result.content = vec![ContentBlock::text(value.to_string())];
        result.content.extend(texts.iter().map(|text| ContentBlock::text(*text)));
        result
    }

    /// The result `value` (with its mirror and `texts`) comes to as alice sees it.
    fn rewritten(value: Value, texts: &[&str]) -> (Structured, CallToolResult) {
        let catalog = Catalog::new();
        let entries = UpstreamCatalog { resources: vec![Resource::new("ev+demo://open/1", "o")], templates: vec![] };
        catalog.set_upstream("ev", entries);
        let text = "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"*+demo://secret/**\"]\n";
        let policy = PolicySet::from_texts(&[("p.toml", text)]).expect("valid policy");
        let snapshot = catalog.snapshot();
        let links = Links::new("ev", &snapshot, &policy, "alice");
        let mut result = result_of(value, texts);
        (structured_for(&links, &mut result), result)
    }

    fn check(input: Value, expected: Value) {
        let (_, result) = rewritten(input.clone(), &["prose"]);
        assert_eq!(result.structured_content.as_ref(), Some(&expected), "{input}");
        let mirror = result.content[0].as_text().map(|t| t.text.clone()).unwrap_or_default();
        assert_eq!(serde_json::from_str::<Value>(&mirror).ok(), Some(expected), "the mirror follows");
        assert_eq!(result.content[1].as_text().map(|t| t.text.as_str()), Some("prose"));
        assert_ne!(result.is_error, Some(true));
    }

    #[test]
    fn strings_that_are_served_uris_are_namespaced_in_place() {
        check(json!({"temperature": 36, "conditions": "rain"}), json!({"temperature": 36, "conditions": "rain"}));
        check(
            json!({"matches": [{"uri": "demo://open/1", "n": 1}, {"uri": "DEMO://open/2"}], "top": "demo://open/3"}),
            json!({"matches": [{"uri": "ev+demo://open/1", "n": 1}, {"uri": "ev+DEMO://open/2"}], "top": "ev+demo://open/3"}),
        );
        // Not a resource of this upstream, or not a whole URI: left alone.
        check(
            json!({"home": "https://example.com/", "note": "demo://open/1 is first", "bare": "demo:", "n": null}),
            json!({"home": "https://example.com/", "note": "demo://open/1 is first", "bare": "demo:", "n": null}),
        );
        check(json!({"by_uri": {"demo://open/1": 3}}), json!({"by_uri": {"ev+demo://open/1": 3}}));
    }

    #[test]
    fn what_names_a_denied_resource_goes_with_its_array_element_or_top_level_member() {
        let with =
            json!({"matches": [{"uri": "demo://open/1", "title": "o"}, {"uri": "demo://secret/1", "title": "s"}]});
        let without = json!({"matches": [{"uri": "demo://open/1", "title": "o"}]});
        // The same answer as when the secret does not exist.
        assert_eq!(rewritten(with, &[]).1, rewritten(without.clone(), &[]).1);
        check(
            json!({"matches": [{"uri": "demo://open/1"}, {"uri": "demo://secret/1"}], "n": 2}),
            json!({"matches": [{"uri": "ev+demo://open/1"}], "n": 2}),
        );
        check(json!({"best": {"uri": "demo://secret/1", "title": "s"}, "n": 1}), json!({"n": 1}));
        check(json!({"summary": "see demo://secret/1.", "n": 1}), json!({"n": 1}));
        check(
            json!({"by_uri": {"demo://secret/1": 3, "demo://open/1": 4}}),
            json!({"by_uri": {"ev+demo://open/1": 4}}),
        );
        check(json!({"proxy_form": ["ev+demo://secret/2", "x"]}), json!({"proxy_form": ["x"]}));
        let (outcome, result) = rewritten(json!("demo://secret/x"), &[]);
        assert_eq!(outcome, Structured::Withheld);
        assert_eq!((result.structured_content, result.is_error), (None, Some(true)));
        assert!(!format!("{:?}", result.content).contains("secret"), "names nothing");
    }

    #[test]
    fn text_beside_rewritten_content_is_made_consistent_or_dropped() {
        let value = json!({"matches": ["demo://open/1", "demo://secret/1"]});
        let texts = ["Found demo://secret/1 and more", "{\"other\": [\"demo://secret/1\", \"demo://open/2\"]}", "fine"];
        let (outcome, result) = rewritten(value, &texts);
        assert_eq!(outcome, Structured::Rewritten { removed: 2 });
        let texts: Vec<&str> = result.content.iter().filter_map(|b| b.as_text()).map(|t| t.text.as_str()).collect();
        assert_eq!(texts, ["{\"matches\":[\"ev+demo://open/1\"]}", "{\"other\":[\"ev+demo://open/2\"]}", "fine"]);
    }

    #[test]
    fn unchanged_content_keeps_its_text_as_sent() {
        let (outcome, result) = rewritten(json!({"a": "x://y"}), &["demo://secret/1"]);
        assert_eq!(outcome, Structured::Passed);
        assert_eq!(result.content[1].as_text().map(|t| t.text.as_str()), Some("demo://secret/1"));
    }
}
