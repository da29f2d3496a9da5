//! One name per era wherever a user reads it: `2025` and `2026-07-28` in `/status`, in the
//! `upstream up` log line, in the audit trail and in the `era` label of
//! `mcp_proxy_downstream_sessions`.

use crate::support::fixture::{self, Era, HttpFixture};
use crate::support::proxy::{ProxyProcess, http_upstream, toml_str};

use crate::support::observe::*;

/// A 2025 upstream and a 2026-07-28 one, read by a host of each era: each era is named alike
/// by `/status`, the log, the audit file and the sessions gauge.
#[tokio::test]
async fn status_logs_audit_and_metrics_name_each_era_alike() -> anyhow::Result<()> {
    let (legacy, modern) =
        (HttpFixture::spawn(&["--era", "legacy"]).await?, HttpFixture::spawn(&["--era", "modern"]).await?);
    let audit = tempfile::tempdir()?;
    let audit_file = audit.path().join("audit.jsonl");
    let config = format!(
        "[audit]\nfile = {}\n\n{}{}",
        toml_str(audit_file.to_str().expect("utf-8 path")),
        http_upstream("old", &legacy.url, ""),
        http_upstream("new", &modern.url, "")
    );
    let proxy = ProxyProcess::start(&config).await?;
    proxy.wait_up("old", 1).await?;
    proxy.wait_up("new", 1).await?;
    let status = admin_json(&proxy, "/status").await?;
    assert_eq!(upstream_status(&status, "old")?["era"], "2025", "{status}");
    assert_eq!(upstream_status(&status, "new")?["era"], "2026-07-28", "{status}");
    for (upstream, era) in [("old", "2025"), ("new", "2026-07-28")] {
        let (upstream, era) = (format!("\"upstream\":\"{upstream}\""), format!("\"era\":\"{era}\""));
        proxy.wait_log(&["\"upstream up\"", &upstream, &era]).await?;
    }

    let (legacy_host, _) = fixture::connect_http(&proxy.url, Era::Legacy).await?;
    let (modern_host, _) = fixture::connect_http(&proxy.url, Era::Modern).await?;
    read(&legacy_host, "old+fx://fx/item/1").await?;
    read(&modern_host, "new+fx://fx/item/1").await?;
    proxy.wait_metric("mcp_proxy_downstream_sessions", &[("transport", "http"), ("era", "2025")], |v| v == 1.0).await?;
    let reads = crate::support::eventually(fixture::DEADLINE, "both reads in the audit file", || async {
        let text = std::fs::read_to_string(&audit_file).unwrap_or_default();
        let events: Vec<serde_json::Value> = text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
        let reads: Vec<(String, String)> = events
            .iter()
            .filter(|event| event["event"] == "read")
            .map(|event| (event["upstream"].as_str().unwrap_or("").into(), event["era"].as_str().unwrap_or("").into()))
            .collect();
        if reads.len() == 2 { Ok(reads) } else { Err(anyhow::anyhow!("{text}")) }
    })
    .await?;
    let reads: Vec<(&str, &str)> = reads.iter().map(|(upstream, era)| (upstream.as_str(), era.as_str())).collect();
    assert_eq!(reads, [("old", "2025"), ("new", "2026-07-28")]);
    Ok(())
}
