//! The upstream's capabilities decide what the proxy asks it: an upstream that declares only
//! tools, only prompts or only resources is up (`/readyz` 200) and served in full, and is never
//! asked a list it did not declare; a list it answers with -32601 is empty and counted, never a
//! failed connection. Roots given in config are answered to the upstream's `roots/list` and
//! changed in place by a reload. `protocol = "auto"` keeps the 2025 era for an upstream whose
//! calls could ask the host (it offers tools or prompts, or is given roots).

use anyhow::Context;
use mcp_resource_proxy::config::{CliOverrides, Config};
use rmcp::model::ReadResourceRequestParams;
use serde_json::{Value, json};

use crate::support::eventually;
use crate::support::exposition::Exposition;
use crate::support::fixture::{self, DEADLINE, Era, call_json, list_all_resources, stats};
use crate::support::inproc::InProcessProxy;
use crate::support::proxy::{http_upstream, write_config};

/// Each kind alone: up, ready, its own offerings served to both host eras, nothing else asked.
#[tokio::test]
async fn an_upstream_declaring_one_kind_is_up_served_and_asked_for_nothing_else() -> anyhow::Result<()> {
    for kind in ["tools", "prompts", "resources"] {
        let upstream = fixture::serve_in_process(&["--offer", kind]).await?;
        let proxy = InProcessProxy::start(&http_upstream("fx", &upstream.url, "")).await?;
        proxy.wait_up("fx", 1).await.with_context(|| format!("{kind} only"))?;
        let readyz = reqwest::get(format!("{}/readyz", proxy.admin)).await?.status();
        assert_eq!(readyz, 200, "{kind} only: /readyz");
        for era in [Era::Legacy, Era::Modern] {
            let (host, _) = fixture::connect_http(&proxy.url, era).await?;
            let tools = host.peer().list_all_tools().await?;
            let prompts = host.peer().list_all_prompts().await?;
            let (resources, _) = list_all_resources(host.peer()).await?;
            let served = (!tools.is_empty(), !prompts.is_empty(), !resources.is_empty());
            let expected = (kind == "tools", kind == "prompts", kind == "resources");
            assert_eq!(served, expected, "{kind} only, {era:?} host: (tools, prompts, resources) served");
            if kind == "tools" {
                let touched = call_json(host.peer(), "fx__touch", json!({"uri": "fx://fx/item/0"})).await?;
                assert!(touched.is_object(), "a tool of a tools-only upstream is called: {touched}");
            }
            if kind == "prompts" {
                assert!(prompts.iter().any(|p| p.name == "fx__ask"), "{prompts:?}");
            }
            if kind != "resources" {
                let read = host.peer().read_resource(ReadResourceRequestParams::new("fx+fx://fx/item/0")).await;
                assert!(read.is_err(), "{kind} only: a read of what it never listed is not found");
            }
        }
        let (side, _) = fixture::connect_http(&upstream.url, Era::Legacy).await?;
        let counters = stats(side.peer()).await?;
        let count = |key: &str| counters[key].as_u64().unwrap_or(u64::MAX);
        let asked = (count("lists") > 0, count("template_lists") > 0);
        assert_eq!(asked, (kind == "resources", kind == "resources"), "{kind} only: resource lists asked");
        assert_eq!(count("reads"), 0, "{kind} only: no read reached the upstream");
    }
    Ok(())
}

/// A list answered -32601 although its kind is declared is an empty list: the upstream comes
/// up with everything else, and `mcp_proxy_upstream_requests_total{outcome="method_not_found"}`
/// counts it.
#[tokio::test]
async fn a_list_answered_method_not_found_is_empty_and_counted() -> anyhow::Result<()> {
    let args = ["--method-not-found", "resources", "--method-not-found", "prompts"];
    let upstream = fixture::serve_in_process(&args).await?;
    let proxy = InProcessProxy::start(&http_upstream("fx", &upstream.url, "")).await?;
    proxy.wait_up("fx", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let (resources, _) = list_all_resources(host.peer()).await?;
    assert!(resources.is_empty());
    assert!(host.peer().list_all_prompts().await?.is_empty());
    assert!(!host.peer().list_all_tools().await?.is_empty(), "the lists it answers are served");
    let templates = host.peer().list_all_resource_templates().await?;
    assert!(!templates.is_empty(), "templates it answers are served");
    let metrics = Exposition::parse(&proxy.admin_get("/metrics").await?)?;
    for method in ["resources/list", "prompts/list"] {
        let labels = [("upstream", "fx"), ("method", method), ("outcome", "method_not_found")];
        assert_eq!(metrics.value("mcp_proxy_upstream_requests_total", &labels), Some(1.0), "{method}");
    }
    Ok(())
}

/// `roots` are what the upstream's `roots/list` gets; a reload that changes them alone keeps
/// the connection and tells the upstream `notifications/roots/list_changed`. An upstream given
/// none gets -32601 (the capability was not declared).
#[tokio::test]
async fn configured_roots_are_answered_and_a_reload_changes_them_in_place() -> anyhow::Result<()> {
    let upstream = fixture::serve_in_process(&["--roots-tool"]).await?;
    let rooted = |root: &str| http_upstream("fx", &upstream.url, &format!("roots = [\"{root}\"]"));
    let proxy = InProcessProxy::start(&rooted("file:///srv/a")).await?;
    proxy.wait_up("fx", 1).await?;
    let (host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let answered = call_json(host.peer(), "fx__roots", json!({})).await?;
    assert_eq!(answered, json!({"roots": ["file:///srv/a"], "changes": 0}));

    let path = write_config(proxy.dir.path(), &rooted("file:///srv/b"))?;
    let overrides = CliOverrides { listen: Some("127.0.0.1:0".into()), admin_listen: Some("127.0.0.1:0".into()) };
    let report = proxy.proxy.reload_config(Config::load(&path, &overrides)).await;
    assert_eq!(
        (report.roots_changed.as_slice(), report.changed.as_slice()),
        (&["fx".to_string()][..], &[][..]),
        "{report:?}"
    );
    let answered = eventually(DEADLINE, "the upstream told of the new roots", || async {
        let answered = call_json(host.peer(), "fx__roots", json!({})).await?;
        match answered["changes"] == json!(1) {
            true => Ok(answered),
            false => Err(anyhow::anyhow!("{answered}")),
        }
    })
    .await?;
    // Told on the same connection: a new one would have asked `roots/list` afresh, unprompted.
    assert_eq!(answered["roots"], json!(["file:///srv/b"]));

    let bare = InProcessProxy::start(&http_upstream("fx", &upstream.url, "")).await?;
    bare.wait_up("fx", 1).await?;
    let (host, _) = fixture::connect_http(&bare.url, Era::Legacy).await?;
    let answered = call_json(host.peer(), "fx__roots", json!({})).await?;
    assert_eq!(answered["error"], json!(-32601), "{answered}");
    Ok(())
}

/// `auto`: a dual-era upstream that offers tools or prompts, or is given roots, is spoken to in
/// the 2025 era (its calls may ask the host); one with resources only keeps 2026-07-28; one that
/// speaks only 2026-07-28 gets it.
#[tokio::test]
async fn auto_keeps_the_2025_era_where_calls_could_ask_the_host() -> anyhow::Result<()> {
    let cases: [(&[&str], &str, &str); 4] = [
        (&[], "", "2025"),
        (&["--offer", "resources"], "roots = [\"file:///srv\"]", "2025"),
        (&["--offer", "resources"], "", "2026-07-28"),
        (&["--era", "modern"], "", "2026-07-28"),
    ];
    for (args, extra, era) in cases {
        let upstream = fixture::serve_in_process(args).await?;
        let proxy = InProcessProxy::start(&http_upstream("fx", &upstream.url, extra)).await?;
        proxy.wait_up("fx", 1).await?;
        let status = proxy.proxy.statuses().into_iter().find(|s| s.name == "fx").context("fx")?;
        let spoken: Value = serde_json::to_value(status.era)?;
        assert_eq!(spoken, json!(era), "{args:?} {extra}");
    }
    Ok(())
}
