//! `/readyz` and `/status` follow a required upstream down and up.

use crate::support::proxy::{ProxyProcess, http_upstream};
use anyhow::Context;
use serde_json::{Value, json};

use crate::support::observe::*;

/// `/readyz` is 200 while the required upstream is up although an optional one never is, 503
/// naming the required one while it is down, 200 again once it is back; `/status` shows each
/// step (state, `last_error`, `reconnects`).
#[tokio::test]
async fn readyz_flips_when_a_required_upstream_dies_and_recovers_and_status_reflects_it() -> anyhow::Result<()> {
    let mut fx = RestartableFixture::spawn(&["--era", "legacy"]).await?;
    let nowhere = format!("http://{}/mcp", free_address()?);
    let optional = format!("required = false\n{TUNING}");
    let config = format!(
        "[server]\nstartup_wait = \"1s\"\n\n{}{}",
        http_upstream("fx", &fx.url(), TUNING),
        http_upstream("optional", &nowhere, &optional)
    );
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("fx", 1).await?;

    let ready = json!({ "ready": true, "missing": [] });
    assert_eq!(wait_readyz(&proxy, 200).await?, ready);
    let status = admin_json(&proxy, "/status").await?;
    let (fx_status, optional_status) = (upstream_status(&status, "fx")?, upstream_status(&status, "optional")?);
    assert_eq!((&fx_status["state"], &fx_status["required"]), (&json!("up"), &json!(true)), "{status}");
    assert_eq!((&fx_status["last_error"], &fx_status["reconnects"]), (&Value::Null, &json!(0)), "{status}");
    assert_ne!(optional_status["state"], "up", "{status}");
    assert_eq!(optional_status["required"], false, "{status}");
    assert!(optional_status["last_error"].is_string(), "the optional upstream's failure is shown: {status}");

    fx.stop().await?;
    assert_eq!(wait_readyz(&proxy, 503).await?, json!({ "ready": false, "missing": ["fx"] }));
    let status = admin_json(&proxy, "/status").await?;
    let fx_status = upstream_status(&status, "fx")?;
    assert!(["down", "connecting"].contains(&fx_status["state"].as_str().unwrap_or_default()), "{status}");
    assert!(fx_status["last_error"].as_str().is_some_and(|e| !e.is_empty()), "{status}");
    assert_eq!((&status["ready"], &status["missing"]), (&json!(false), &json!(["fx"])), "{status}");

    fx.start().await?;
    assert_eq!(wait_readyz(&proxy, 200).await?, ready);
    let status = admin_json(&proxy, "/status").await?;
    let fx_status = upstream_status(&status, "fx")?;
    assert_eq!((&fx_status["state"], &fx_status["last_error"]), (&json!("up"), &Value::Null), "{status}");
    let reconnects = fx_status["reconnects"].as_f64().context("reconnects")?;
    assert!(reconnects >= 1.0, "{status}");
    let counter = scrape(&proxy).await?.value("mcp_proxy_upstream_reconnects_total", &[("upstream", "fx")]);
    assert_eq!(counter, Some(reconnects), "/status and /metrics agree on reconnects");
    assert_ne!(upstream_status(&status, "optional")?["state"], "up", "{status}");
    Ok(())
}
