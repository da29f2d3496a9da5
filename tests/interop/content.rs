//! What crosses in tool, prompt and completion content and in listed icons: a real upstream (the Python SDK,
//! tests/py/content_server.py) beside the fixture (`fx://`), the proxy binary, and rmcp hosts
//! of both eras. alice may not read `docs+py://doc/secret/**`, `docs+ui://widget/secret` or
//! `fx+fx://fx/hidden/**`; bob may read everything.
//!
//! Each test asserts what a host receives: URIs the upstream serves namespaced, what alice may
//! not read gone in a way that does not tell whether it existed, foreign URLs as sent.

use rmcp::model::{ArgumentInfo, CallToolRequestParams, CompleteRequestParams, Reference};
use serde_json::{Value, json};

use crate::support::fixture::Era;
use crate::support::peers::{py_script, python};
use crate::support::proxy::{
    ProxyProcess, alice_and_bob_policies, alice_and_bob_under_policies, fixture_upstream, toml_str,
};
use crate::support::wire::{self, WireHost};

const ALICE_TOKEN: &str = "alice-tok-3f8d1c6a9e2b7054";
const BOB_TOKEN: &str = "bob-tok-8a1e5d3c7f9b2046";
const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE_TOKEN), ("BOB_TOKEN", BOB_TOKEN)];
const ALICE: &str = "allow = [\"**\"]\n\
                     deny = [\"docs+py://doc/secret/**\", \"docs+ui://widget/secret\", \"fx+fx://fx/hidden/**\"]\n";

/// The proxy in front of the content server (`docs`) and the fixture (`fx`), both listed.
async fn start() -> anyhow::Result<(ProxyProcess, tempfile::TempDir)> {
    let policies = alice_and_bob_policies(ALICE, "allow = [\"**\"]\n")?;
    let upstreams = format!(
        "[[upstreams]]\nname = \"docs\"\ncommand = {}\nargs = [{}]\nprotocol = \"2025-11-25\"\n\n{}",
        toml_str(&python().display().to_string()),
        toml_str(&py_script("content_server.py").display().to_string()),
        fixture_upstream("fx", &[])
    );
    let config = alice_and_bob_under_policies("", policies.path(), &upstreams);
    let proxy = ProxyProcess::start_with_offerings(&config, &TOKENS, &["docs", "fx"]).await?;
    for upstream in ["docs", "fx"] {
        proxy.status_when(upstream, |report| report["resources"].as_u64() > Some(0)).await?;
    }
    Ok((proxy, policies))
}

/// A tool's result as the host received it, as JSON.
async fn call(host: &WireHost, tool: &str, arguments: Value) -> anyhow::Result<Value> {
    let arguments = arguments.as_object().cloned().unwrap_or_default();
    let result = host.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)).await?;
    Ok(serde_json::to_value(result)?)
}

fn texts(result: &Value) -> Vec<String> {
    let blocks = result["content"].as_array().cloned().unwrap_or_default();
    blocks.iter().filter_map(|block| block["text"].as_str().map(str::to_string)).collect()
}

fn mentions_denied(value: &Value) -> bool {
    let text = value.to_string();
    ["secret", "hidden"].iter().any(|word| text.contains(word))
}

/// A search whose hits include a resource alice may not read answers her exactly as the same
/// search when that resource does not exist (the hit is gone, the SDK's text mirror follows);
/// bob gets the hit, namespaced.
#[tokio::test]
async fn a_denied_hit_in_structured_content_answers_as_if_it_did_not_exist() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    for era in [Era::Legacy, Era::Modern] {
        let (alice, _) = wire::connect(&proxy.url, era, Some(ALICE_TOKEN)).await?;
        let with_secret = call(&alice, "docs__find_docs", json!({"include_secret": true})).await?;
        let without = call(&alice, "docs__find_docs", json!({})).await?;
        assert_eq!(with_secret, without, "{era:?}: the same answer whether the secret exists or not");
        let structured = &with_secret["structuredContent"];
        let uris: Vec<&Value> =
            structured["matches"].as_array().map(|m| m.iter().map(|m| &m["uri"]).collect()).unwrap_or_default();
        assert_eq!(
            uris,
            [&json!("docs+py://doc/public/1"), &json!("docs+py://doc/public/2")],
            "{era:?}: {with_secret}"
        );
        assert_eq!(structured["homepage"], "https://example.com/docs", "{era:?}");
        assert_ne!(with_secret["isError"], true, "{era:?}");
        let mirror: Value = serde_json::from_str(&texts(&with_secret)[0])?;
        assert_eq!(&mirror, structured, "{era:?}: the mirror follows");

        let (bob, _) = wire::connect(&proxy.url, era, Some(BOB_TOKEN)).await?;
        let all = call(&bob, "docs__find_docs", json!({"include_secret": true})).await?;
        assert_eq!(all["structuredContent"]["matches"][2]["uri"], "docs+py://doc/secret/1", "{era:?}: {all}");
    }
    Ok(())
}

/// Beside a rewritten `structuredContent`: the exact mirror is re-serialized, a differing JSON
/// text is rewritten by the same rule, prose naming a removed resource is dropped; another
/// upstream's URI alice may read stays as sent, one she may not is removed, `https://` stays.
#[tokio::test]
async fn text_beside_structured_content_is_consistent_and_foreign_uris_follow_the_policy() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    for era in [Era::Legacy, Era::Modern] {
        let (alice, _) = wire::connect(&proxy.url, era, Some(ALICE_TOKEN)).await?;
        let result = call(&alice, "docs__report", json!({"include_secret": true})).await?;
        let public = json!(["docs+py://doc/public/1", "docs+py://doc/public/2"]);
        let expected = json!({"docs": public, "elsewhere": ["fx://fx/item/1"], "home": "https://example.com/"});
        assert_eq!(result["structuredContent"], expected, "{era:?}: {result}");
        let sent = texts(&result);
        assert_eq!(sent.len(), 2, "{era:?}: the prose naming the secret is dropped: {sent:?}");
        assert_eq!(serde_json::from_str::<Value>(&sent[0])?, expected, "{era:?}");
        assert_eq!(serde_json::from_str::<Value>(&sent[1])?, json!({"all": public}), "{era:?}");
        assert!(!mentions_denied(&result), "{era:?}: {result}");

        let (bob, _) = wire::connect(&proxy.url, era, Some(BOB_TOKEN)).await?;
        let result = call(&bob, "docs__report", json!({"include_secret": true})).await?;
        assert_eq!(result["structuredContent"]["elsewhere"], json!(["fx://fx/item/1", "fx://fx/hidden/1"]), "{era:?}");
        assert_eq!(texts(&result).len(), 3, "{era:?}: bob may read all of it");
        assert!(texts(&result)[2].contains("py://doc/secret/1"), "{era:?}: prose is not rewritten");
    }
    Ok(())
}

/// Icons of tools, prompts and resource links, and `_meta.ui.resourceUri` on image and embedded
/// resource blocks (and the embedded contents): namespaced when the upstream serves them,
/// gone when alice may not read them, `https://` as sent; the upstream's `serverInfo` does not
/// ride along in a result's `_meta`.
#[tokio::test]
async fn icons_and_ui_resource_uris_are_namespaced_and_filtered() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    for era in [Era::Legacy, Era::Modern] {
        let (alice, _) = wire::connect(&proxy.url, era, Some(ALICE_TOKEN)).await?;
        let tools = serde_json::to_value(alice.list_all_tools().await?)?;
        let find = tools.as_array().and_then(|t| t.iter().find(|t| t["name"] == "docs__find_docs")).cloned();
        let srcs = |icons: &Value| icons.as_array().map(|i| i.iter().map(|i| i["src"].clone()).collect::<Vec<_>>());
        assert_eq!(
            find.as_ref().and_then(|t| srcs(&t["icons"])),
            Some(vec![json!("docs+py://icons/find.png"), json!("https://example.com/find.png")]),
            "{era:?}: {find:?}"
        );
        let prompts = serde_json::to_value(alice.list_all_prompts().await?)?;
        let open = prompts.as_array().and_then(|p| p.iter().find(|p| p["name"] == "docs__open_doc")).cloned();
        assert_eq!(open.and_then(|p| srcs(&p["icons"])), Some(vec![json!("docs+py://icons/prompt.png")]), "{era:?}");

        let result = call(&alice, "docs__widgets", json!({})).await?;
        let blocks = &result["content"];
        assert_eq!(blocks[0]["type"], "image", "{era:?}: {result}");
        assert!(blocks[0]["_meta"]["ui"].get("resourceUri").is_none(), "{era:?}: {result}");
        assert_eq!(blocks[1]["_meta"]["ui"]["resourceUri"], "docs+ui://widget/open", "{era:?}: {result}");
        assert_eq!(blocks[1]["resource"]["uri"], "docs+py://doc/public/1", "{era:?}");
        assert_eq!(blocks[1]["resource"]["_meta"]["ui"]["resourceUri"], "docs+ui://widget/open", "{era:?}");
        assert_eq!(blocks[2]["uri"], "docs+py://doc/public/2", "{era:?}");
        assert_eq!(srcs(&blocks[2]["icons"]), Some(vec![json!("docs+py://icons/link.png")]), "{era:?}");
        assert!(!mentions_denied(&result), "{era:?}: {result}");
        assert!(!result.to_string().contains("py-content"), "{era:?}: the upstream's serverInfo: {result}");

        let (bob, _) = wire::connect(&proxy.url, era, Some(BOB_TOKEN)).await?;
        let result = call(&bob, "docs__widgets", json!({})).await?;
        assert_eq!(result["content"][0]["_meta"]["ui"]["resourceUri"], "docs+ui://widget/secret", "{era:?}");
        let icons = srcs(&result["content"][2]["icons"]);
        assert_eq!(icons, Some(vec![json!("docs+py://icons/link.png"), json!("docs+py://doc/secret/link.png")]));
    }
    Ok(())
}

/// The `src` of each icon of the listed entry `key` = `value` of `list`, in order.
fn listed_srcs(list: &Value, key: &str, value: &str) -> Option<Vec<Value>> {
    let entry = list.as_array()?.iter().find(|entry| entry[key] == value)?;
    Some(entry["icons"].as_array()?.iter().map(|icon| icon["src"].clone()).collect())
}

/// Icons of listed resources and templates follow the rule of tool icons: one in a scheme the
/// upstream serves namespaced, one naming a resource alice may not read gone, `https://` as
/// sent; bob sees all three.
#[tokio::test]
async fn icons_of_listed_resources_and_templates_are_namespaced_and_filtered() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    let (resource, template) = (("uri", "docs+py://doc/public/1"), ("uriTemplate", "docs+py://doc/{kind}/{n}"));
    for era in [Era::Legacy, Era::Modern] {
        let (alice, _) = wire::connect(&proxy.url, era, Some(ALICE_TOKEN)).await?;
        let resources = serde_json::to_value(alice.list_all_resources().await?)?;
        let templates = serde_json::to_value(alice.list_all_resource_templates().await?)?;
        let kept = vec![json!("docs+py://icons/list.png"), json!("https://example.com/list.png")];
        assert_eq!(listed_srcs(&resources, resource.0, resource.1), Some(kept.clone()), "{era:?}: {resources}");
        assert_eq!(listed_srcs(&templates, template.0, template.1), Some(kept), "{era:?}: {templates}");
        assert!(!mentions_denied(&templates), "{era:?}: {templates}");

        let (bob, _) = wire::connect(&proxy.url, era, Some(BOB_TOKEN)).await?;
        let resources = serde_json::to_value(bob.list_all_resources().await?)?;
        let templates = serde_json::to_value(bob.list_all_resource_templates().await?)?;
        let all = vec![
            json!("docs+py://doc/secret/list.png"),
            json!("docs+py://icons/list.png"),
            json!("https://example.com/list.png"),
        ];
        assert_eq!(listed_srcs(&resources, resource.0, resource.1), Some(all.clone()), "{era:?}: {resources}");
        assert_eq!(listed_srcs(&templates, template.0, template.1), Some(all), "{era:?}: {templates}");
    }
    Ok(())
}

/// Complete `docs__open_doc`'s `uri` argument from what was typed.
async fn complete(host: &WireHost, typed: &str) -> anyhow::Result<rmcp::model::CompletionInfo> {
    let argument = ArgumentInfo::new("uri", typed);
    let params = CompleteRequestParams::new(Reference::for_prompt("docs__open_doc"), argument);
    Ok(host.complete(params).await?.completion)
}

/// Completion values: the upstream's resource URIs namespaced, those naming a resource alice may
/// not read and raw URIs of another upstream dropped, words and `https://` as sent; `total` is
/// the count kept when every value was sent, and absent when the upstream holds more.
#[tokio::test]
async fn completion_values_are_namespaced_and_filtered_with_an_honest_total() -> anyhow::Result<()> {
    let (proxy, _policies) = start().await?;
    for era in [Era::Legacy, Era::Modern] {
        let (alice, _) = wire::connect(&proxy.url, era, Some(ALICE_TOKEN)).await?;
        let all = complete(&alice, "").await?;
        let kept = ["docs+py://doc/public/1", "https://example.com/x", "plain"];
        assert_eq!(
            (all.values.as_slice(), all.total, all.has_more),
            (&kept.map(String::from)[..], Some(3), Some(false)),
            "{era:?}"
        );
        let more = complete(&alice, "more").await?;
        assert_eq!(
            (more.values.as_slice(), more.total, more.has_more),
            (&kept.map(String::from)[..], None, Some(true)),
            "{era:?}"
        );

        let (bob, _) = wire::connect(&proxy.url, era, Some(BOB_TOKEN)).await?;
        let all = complete(&bob, "").await?;
        let kept = [
            "docs+py://doc/public/1",
            "docs+py://doc/secret/1",
            "docs+py://doc/secret/2",
            "https://example.com/x",
            "plain",
        ];
        assert_eq!((all.values.as_slice(), all.total), (&kept.map(String::from)[..], Some(5)), "{era:?}");
    }
    Ok(())
}
