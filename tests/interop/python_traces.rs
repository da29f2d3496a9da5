//! One trace from a real host to a real server through the proxy: the PyPI `mcp` SDK as the host
//! (`tests/py/client.py`) and as the stdio upstream (`tests/py/server.py`), both exporting the
//! SDK's own spans (`tests/py/traces_export.py`) to the test OTLP receiver the proxy exports to.
//! The host's SDK puts its CLIENT span's context in `_meta.traceparent`; the proxy's SERVER span
//! continues it, its CLIENT span is under that, and the upstream SDK's SERVER span is under ours:
//! the upstream received our `traceparent`. Over HTTP and, with the host running the proxy as
//! its stdio server, over `pipe`.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;

use crate::support::PROXY_BIN;
use crate::support::otlp::{ReceivedSpan, Receiver, exporting_to};
use crate::support::peers::{parse_json_lines, py_client, py_server_stdio_command};
use crate::support::proxy::{ProxyProcess, toml_str, write_config};

/// How long one client.py run may take (a Python start costs about a second).
const CLIENT_DEADLINE: Duration = Duration::from_secs(60);

/// The upstream's and the host's `service.name`.
const UPSTREAM: &str = "python-upstream";
const HOST: &str = "python-host";

/// tests/py/server.py over stdio, exporting its spans to `receiver` as [`UPSTREAM`].
fn traced_py_upstream(receiver: &Receiver) -> String {
    let (program, args) = py_server_stdio_command(&[]);
    let args: Vec<String> = args.iter().map(|a| toml_str(a)).collect();
    format!(
        "[[upstreams]]\nname = \"py\"\ncommand = {}\nargs = [{}]\nprotocol = \"2025-11-25\"\n\
         env = {{ OTEL_EXPORTER_OTLP_ENDPOINT = {}, OTEL_SERVICE_NAME = \"{UPSTREAM}\" }}\n\n",
        toml_str(&program),
        args.join(", "),
        toml_str(&receiver.endpoint),
    )
}

/// client.py in `mode` on `server` (`--url URL`, or `--stdio PROGRAM ARG… --`), exporting its
/// spans to `receiver` as [`HOST`]: each op must succeed.
async fn traced_host(server: &[&str], receiver: &Receiver, mode: &str, ops: &[&str]) -> anyhow::Result<()> {
    let args = server.iter().copied().chain(["--mode", mode]).chain(ops.iter().copied());
    let mut command = tokio::process::Command::from(py_client(&args.collect::<Vec<_>>()));
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)
        .env("OTEL_SERVICE_NAME", HOST)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(CLIENT_DEADLINE, command.output()).await.context("client.py hung")??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "client.py failed ({}):\n{stderr}", output.status);
    let lines = parse_json_lines(&output.stdout);
    anyhow::ensure!(lines.len() == ops.len(), "client.py printed {lines:?}; stderr:\n{stderr}");
    for line in &lines {
        anyhow::ensure!(line.get("error").is_none(), "{mode}: {line}");
    }
    Ok(())
}

/// The spans of `service` of `kind` for `method`.
fn of<'a>(spans: &'a [ReceivedSpan], service: &str, kind: &str, method: &str) -> Vec<&'a ReceivedSpan> {
    let method_of = |span: &ReceivedSpan| span.attribute("mcp.method.name") == Some(method);
    spans.iter().filter(|span| span.service == service && span.kind == kind && method_of(span)).collect()
}

/// The one span of `service` and `kind` whose parent is `parent`, in `parent`'s trace.
fn child<'a>(spans: &'a [ReceivedSpan], parent: &ReceivedSpan, service: &str, kind: &str) -> Option<&'a ReceivedSpan> {
    let mut children = spans.iter().filter(|span| {
        span.trace_id == parent.trace_id
            && span.parent_span_id == parent.span_id
            && span.service == service
            && span.kind == kind
    });
    let found = children.next();
    found.filter(|_| children.next().is_none())
}

/// host CLIENT → proxy SERVER → proxy CLIENT → upstream SERVER, one trace, for each traced
/// host request of `method`: how many such chains are whole.
fn whole_chains(spans: &[ReceivedSpan], method: &str) -> usize {
    of(spans, HOST, "CLIENT", method)
        .into_iter()
        .filter_map(|host| child(spans, host, "proxy-under-test", "SERVER"))
        .filter_map(|server| child(spans, server, "proxy-under-test", "CLIENT"))
        .filter_map(|client| child(spans, client, UPSTREAM, "SERVER"))
        .count()
}

/// A tool call and a read (a miss: each mode reads another note) from a Python SDK host of each
/// era are each one trace from the host to the Python SDK server behind the proxy.
#[tokio::test]
async fn a_python_host_s_trace_runs_through_the_proxy_into_a_python_server() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let env = exporting_to(&receiver);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let proxy = ProxyProcess::start_with(&traced_py_upstream(&receiver), &[], &env).await?;
    proxy.wait_up("py", 1).await?;

    let url = ["--url", proxy.url.as_str()];
    traced_host(&url, &receiver, "legacy", &["call:py__bump:{\"id\":1}", "read:py+py://note/1"]).await?;
    traced_host(&url, &receiver, "2026-07-28", &["call:py__bump:{\"id\":2}", "read:py+py://note/2"]).await?;

    let whole =
        |spans: &[ReceivedSpan]| whole_chains(spans, "tools/call") == 2 && whole_chains(spans, "resources/read") == 2;
    let spans = receiver.wait("two calls' and two reads' traces, host to upstream", whole).await?;
    for server in of(&spans, UPSTREAM, "SERVER", "tools/call") {
        assert_eq!(server.attribute("gen_ai.tool.name"), Some("bump"), "the upstream's own tool name: {server:#?}");
    }
    Ok(())
}

/// A Python SDK host running the proxy as its stdio server (its `[telemetry]` section names the
/// receiver: the SDK hands a stdio server only a few variables): the host's call and read are
/// each one trace into the Python server, our SERVER spans over `pipe`.
#[tokio::test]
async fn a_python_host_over_stdio_has_its_trace_continued_over_pipe() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let dir = tempfile::tempdir()?;
    let telemetry =
        format!("[telemetry]\nendpoint = {}\nservice_name = \"proxy-under-test\"\n\n", toml_str(&receiver.endpoint));
    let config = write_config(dir.path(), &format!("{telemetry}{}", traced_py_upstream(&receiver)))?;
    let config = config.to_str().context("a UTF-8 path")?;
    let stdio = ["--stdio", PROXY_BIN, "serve", "--stdio", "--config", config, "--"];
    traced_host(&stdio, &receiver, "legacy", &["call:py__bump:{\"id\":1}", "read:py+py://note/1"]).await?;

    let whole =
        |spans: &[ReceivedSpan]| whole_chains(spans, "tools/call") == 1 && whole_chains(spans, "resources/read") == 1;
    let spans = receiver.wait("the call's and the read's traces, host to upstream", whole).await?;
    let ours = spans.iter().filter(|span| span.service == "proxy-under-test" && span.kind == "SERVER");
    for server in ours {
        assert_eq!(server.attribute("network.transport"), Some("pipe"), "a stdio host's request: {server:#?}");
    }
    Ok(())
}
