//! The test OTLP receiver (`support::otlp`, which decodes with the `opentelemetry-proto` crate's
//! messages) checked against the official Python exporter: PyPI
//! `opentelemetry-exporter-otlp-proto-http` (pinned in tests/py/requirements.txt) exports one
//! span to it (`tests/py/otlp_export.py`), and the receiver gets that span whole: its name, kind,
//! ids, attributes and resource.

use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

use crate::support::otlp::Receiver;
use crate::support::peers::{py_script, python};

/// How long the exporter's run may take (a Python start costs about a second).
const EXPORT_DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn the_receiver_decodes_a_span_the_official_python_exporter_sends() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let run = tokio::process::Command::new(python())
        .arg(py_script("otlp_export.py"))
        .arg(&receiver.endpoint)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(EXPORT_DEADLINE, run).await.context("the exporter hung")??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "otlp_export.py failed: {stderr}");
    let ids: Value = serde_json::from_slice(&output.stdout).with_context(|| format!("no ids printed: {stderr}"))?;
    let spans = receiver.wait("the exported span", |spans| !spans.is_empty()).await?;
    assert_eq!(spans.len(), 1, "{spans:#?}");
    let span = &spans[0];
    assert_eq!(span.name, "resources/read");
    assert_eq!(span.kind, "SERVER");
    assert_eq!(Some(span.trace_id.as_str()), ids["trace_id"].as_str());
    assert_eq!(Some(span.span_id.as_str()), ids["span_id"].as_str());
    assert_eq!(span.parent_span_id, "", "a root span");
    assert_eq!(span.service, "python-exporter");
    assert_eq!(span.attribute("mcp.method.name"), Some("resources/read"));
    assert_eq!(span.attribute("jsonrpc.request.id"), Some("7"), "an int attribute");
    assert_eq!(span.attribute("mcp_proxy.cached"), Some("true"), "a bool attribute");
    Ok(())
}
