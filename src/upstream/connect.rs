//! Opening one upstream connection: the transport (stdio child, streamable HTTP, in-process
//! folder server) and the protocol era (probe, pinned, or remembered from the last connect;
//! `auto` keeps the 2025 era for an upstream that would lose sampling, elicitation or roots in
//! 2026-07-28, and probes 2026-07-28 for the others).
//! Every transport is tapped for its calls' progress and log messages (`tap`). An HTTP
//! upstream's broken reply stream is resumed at most three times (`ResumeBriefly`), so a request
//! caught by the upstream's death fails at once instead of after its timeout.

use std::collections::HashMap;
use std::os::fd::OwnedFd;

use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::common::client_side_sse::SseRetryPolicy;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ServiceExt, service::ClientCacheConfig};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::client::UpstreamClient;
use super::connection::{Connection, Inner};
use super::http::GuardedHttpClient;
use super::notices::NoticeSender;
use super::progress::ProgressRoutes;
use super::reason::initialize_failure;
use super::roots::Roots;
use super::stdio::{StdioUpstream, child_environment};
use super::tap::Taps;
use super::thin::{HANDED_ON_QUEUE, Inlet, ThinReader};
use crate::config::{ProtocolChoice, UpstreamTransport};
use crate::protocol::{Era, LEGACY_HANDSHAKE, version_of};
use crate::sandbox::{self, Launch, SandboxProfile};
use crate::serve_dir::FolderServer;
use crate::spine::Spine;

pub(crate) type Running = RunningService<RoleClient, UpstreamClient>;
/// A connection and, over streamable HTTP, its thin read client.
type Connected = (Running, Option<ThinReader>);

/// How to start the lifecycle.
#[derive(Debug, Clone)]
enum Plan {
    Auto,
    Legacy(ProtocolVersion),
    Modern,
}

/// Make `connection` once (its tasks on `spine`, its child's stderr to its child output).
/// `remembered` is the era found on its last successful connect, which skips the probe. The
/// error text, in plain words (see `reason`), is for logs and `/status`, never for clients. A
/// streamable HTTP connection comes with its thin read client (`thin`).
///
/// `auto` with nothing remembered starts with the 2025 handshake, and keeps it when the
/// upstream would lose something in 2026-07-28 (see [`keeps_2025`]): it offers tools or prompts
/// (whose calls may ask the host for sampling or elicitation, server-to-client requests that
/// era forbids) or it is given roots (`roots/list`, likewise). Otherwise — an upstream with
/// resources only, or one that refuses the handshake — a fresh connection probes 2026-07-28
/// (`server/discover`), falling back to the 2025 handshake, so an upstream that speaks
/// 2026-07-28 keeps that era's cache hints.
pub(crate) async fn connect(
    connection: &Connection,
    notices: NoticeSender,
    progress: &ProgressRoutes,
    remembered: Option<Era>,
    spine: &Spine,
) -> Result<(Running, Era, Option<ThinReader>), String> {
    if let Some(credentials) = connection.credentials() {
        // No token, no handshake in either era (each would only ask the token endpoint again).
        credentials.token().await.map_err(|failure| failure.describe())?;
    }
    let (config, roots) = (connection.config(), &connection.inner.roots);
    let plan = plan(&config.protocol, remembered);
    let start = |plan| start(connection, &notices, progress, plan, spine);
    let (running, thin) = match plan {
        Plan::Auto => match start(Plan::Legacy(LEGACY_HANDSHAKE)).await {
            Ok(running) if keeps_2025(&running.0, roots) => running,
            Ok(running) => {
                tracing::debug!(upstream = %config.name, "resources only; probing 2026-07-28 for its cache hints");
                drop(running.0.cancel().await);
                probe(start(Plan::Auto).await, start).await?
            }
            Err(handshake_error) => {
                tracing::debug!(upstream = %config.name, error = %handshake_error, "no 2025 handshake; probing 2026-07-28");
                start(Plan::Auto).await?
            }
        },
        plan => start(plan).await?,
    };
    running.set_response_cache_config(ClientCacheConfig::disabled()).await;
    let era = Era::of_negotiated(running.peer_info().as_ref().map(|info| &info.protocol_version));
    Ok((running, era, thin))
}

/// rmcp's Auto can fail against legacy-only servers instead of falling back: retry with the
/// 2025 handshake on a fresh transport.
async fn probe<F, Fut>(probed: Result<Connected, String>, start: F) -> Result<Connected, String>
where
    F: Fn(Plan) -> Fut,
    Fut: Future<Output = Result<Connected, String>>,
{
    match probed {
        Ok(connected) => Ok(connected),
        Err(probe_error) => {
            tracing::debug!(error = %probe_error, "probe failed; trying the 2025 handshake again");
            start(Plan::Legacy(LEGACY_HANDSHAKE)).await
        }
    }
}

/// Keep this 2025 connection rather than probe 2026-07-28? Sampling, elicitation and roots are
/// requests from the server to the client, which 2026-07-28 forbids (a server of that era asks
/// through `input_required`, which the proxy bridges, but SDKs that serve both eras, such as
/// the Python SDK 2.x, fail such a request instead). They happen in tool calls and prompts, and
/// roots are asked when given. An upstream with resources only loses nothing in 2026-07-28 and
/// gains its cache hints (`ttlMs`, `cacheScope`). A connection whose handshake already settled
/// on 2026-07-28 is kept as it is.
fn keeps_2025(running: &Running, roots: &Roots) -> bool {
    let Some(info) = running.peer_info() else { return true };
    let capabilities = &info.capabilities;
    Era::of_negotiated(Some(&info.protocol_version)) == Era::Modern
        || capabilities.tools.is_some()
        || capabilities.prompts.is_some()
        || roots.capability().is_some()
}

fn plan(choice: &ProtocolChoice, remembered: Option<Era>) -> Plan {
    match (choice, remembered) {
        (ProtocolChoice::Pinned(v), _) => match Era::of_text(v) {
            Era::Modern => Plan::Modern,
            Era::Legacy => Plan::Legacy(version_of(v)),
        },
        (ProtocolChoice::Auto, Some(Era::Modern)) => Plan::Modern,
        (ProtocolChoice::Auto, Some(Era::Legacy)) => Plan::Legacy(Era::Legacy.version()),
        (ProtocolChoice::Auto, None) => Plan::Auto,
    }
}

fn lifecycle(plan: &Plan) -> ClientLifecycleMode {
    match plan {
        Plan::Auto => ClientLifecycleMode::Auto {
            preferred_versions: vec![Era::Modern.version()],
            legacy_version: Some(LEGACY_HANDSHAKE),
        },
        Plan::Legacy(_) => ClientLifecycleMode::Initialize,
        Plan::Modern => ClientLifecycleMode::Discover { preferred_versions: vec![Era::Modern.version()] },
    }
}

async fn start(
    connection: &Connection,
    notices: &NoticeSender,
    progress: &ProgressRoutes,
    plan: Plan,
    spine: &Spine,
) -> Result<Connected, String> {
    let Inner { config, child_output: output, relays, roots, declared, credentials, .. } = &*connection.inner;
    let handshake_version = match &plan {
        Plan::Legacy(v) => v.clone(),
        _ => LEGACY_HANDSHAKE,
    };
    let over_http = matches!(config.transport, UpstreamTransport::Http { .. });
    let handler = UpstreamClient::new(notices.clone(), handshake_version, relays.clone(), roots.clone(), *declared);
    let tap = Taps { progress: progress.clone(), relays: relays.clone(), over_http };
    let mode = lifecycle(&plan);
    let name = &config.name;
    match &config.transport {
        UpstreamTransport::Dir { path, uri_base } => {
            let folder = FolderServer::on_spine(path, *uri_base, spine)
                .map_err(|e| format!("folder {}: {e}", path.display()))?;
            let (client_side, server_side) = tokio::io::duplex(1 << 20);
            let upstream = name.clone();
            let shutdown = spine.shutdown();
            spine.spawn(format!("folder-server:{name}"), async move {
                match folder.serve(server_side).await {
                    Ok(running) => {
                        let closing = running.cancellation_token();
                        let mut waiting = std::pin::pin!(running.waiting());
                        tokio::select! {
                            _ = &mut waiting => {}
                            _ = shutdown.cancelled() => {
                                closing.cancel();
                                drop(waiting.await);
                            }
                        }
                    }
                    Err(e) => tracing::warn!(upstream, error = %e, "folder server ended"),
                }
            });
            let (read, write) = tokio::io::split(client_side);
            let transport = tap.on(AsyncRwTransport::new_client(read, write));
            let running = handler.serve_with_lifecycle(transport, mode).await;
            running.map(|running| (running, None)).map_err(|e| initialize_failure(&e, None))
        }
        UpstreamTransport::Command { program, args, env, inherit_env, cwd, sandbox } => {
            let not_started = |why: String| {
                output.not_started(&why);
                why
            };
            let (mut command, lifeline) = stdio_command(program, args, sandbox.as_ref()).map_err(not_started)?;
            let environment = child_environment(std::env::vars_os(), inherit_env, env, sandbox.as_ref());
            command.env_clear().envs(environment);
            if let Some(cwd) = cwd {
                command.current_dir(cwd);
            }
            let (lifeline, launcher_end) = lifeline.unzip();
            let spawned = StdioUpstream::spawn(
                command,
                lifeline,
                config.max_response_bytes,
                notices.clone(),
                output.clone(),
                name,
                spine,
            );
            drop(launcher_end);
            let transport = spawned.map_err(|e| not_started(format!("cannot start `{program}`: {e}")))?;
            let transport = tap.on(transport);
            let running = handler.serve_with_lifecycle(transport, mode).await;
            running.map(|running| (running, None)).map_err(|e| match output.exit() {
                Some(exit) => match output.tail().into_iter().rev().find(|line| line.starts_with("sandbox: ")) {
                    Some(cause) => format!("`{program}` exited ({exit}) during the handshake: {cause}"),
                    None => format!("`{program}` exited ({exit}) during the handshake"),
                },
                None => initialize_failure(&e, None),
            })
        }
        UpstreamTransport::Http { url, headers, ca, .. } => {
            let limit = config.max_response_bytes;
            let roots = ca.as_ref().map(|ca| ca.certificates()).unwrap_or_default();
            let credentials = credentials.clone();
            if let Some(credentials) = &credentials {
                // The first token before the handshake, so a failure to get one is named as such.
                credentials.token().await.map_err(|failure| failure.describe())?;
            }
            // `[cluster]`: a connection to another replica's session endpoint reads over MCP
            // only (each request needs a pass of its own).
            let client = match connection.owner() {
                Some(owner) => GuardedHttpClient::to_owner(limit, owner.clone()),
                None => GuardedHttpClient::new(limit, roots, credentials),
            };
            let (inlet, handed_on) = mpsc::channel(HANDED_ON_QUEUE);
            let thin = connection.owner().is_none().then(|| client.thin_reader(url.as_str(), inlet));
            let mut transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(header_map(headers))
                .max_json_response_size(limit)
                .max_sse_event_size(limit)
                .reinit_on_expired_session(false);
            transport_config.retry_config = Arc::new(ResumeBriefly);
            let transport = StreamableHttpClientTransport::with_client(client, transport_config);
            let transport = tap.on(Inlet::new(transport, handed_on));
            let running = handler.serve_with_lifecycle(transport, mode).await;
            running.map(|running| (running, thin)).map_err(|e| initialize_failure(&e, Some(url.as_str())))
        }
    }
}

/// The command that starts a stdio upstream: through the proxy binary's launcher when there
/// is one (with its lifeline: the proxy's end and the launcher's), else the program itself;
/// a sandboxed upstream needs the launcher.
fn stdio_command(
    program: &str,
    args: &[String],
    sandbox: Option<&SandboxProfile>,
) -> Result<(tokio::process::Command, Option<(OwnedFd, OwnedFd)>), String> {
    match (sandbox::launcher(), sandbox) {
        (Some(launcher), sandbox) => {
            let launch = Launch::new(launcher, program, args, sandbox)
                .map_err(|e| format!("cannot prepare the launch of `{program}`: {e}"))?;
            Ok((launch.command, Some((launch.lifeline, launch.launcher_end))))
        }
        (None, Some(_)) => Err(format!(
            "`{program}` has a sandboxed profile, which only the proxy binary can start (its `sandbox-exec` launcher)"
        )),
        (None, None) => {
            let mut command = tokio::process::Command::new(program);
            command.args(args);
            Ok((command, None))
        }
    }
}

/// How a broken SSE stream from an upstream is resumed: three tries, 250 ms, 500 ms and 1 s
/// apart; then the stream is given up (a request waiting on it fails with a transport error).
/// rmcp's default tries for ever with doubling waits, so a request whose reply stream broke
/// because the upstream died waited out its whole `request_timeout` (30 s by default), and a
/// health probe caught that way kept a dead upstream "up" as long. A stream the upstream closes
/// cleanly is reopened after the first wait every time (SEP-1699), so a live upstream that
/// closes its streams now and then is unaffected.
#[derive(Debug)]
struct ResumeBriefly;

impl SseRetryPolicy for ResumeBriefly {
    fn retry(&self, tries: usize) -> Option<std::time::Duration> {
        (tries < 3).then(|| std::time::Duration::from_millis(250 << tries))
    }
}

fn header_map(headers: &std::collections::BTreeMap<String, String>) -> HashMap<http::HeaderName, http::HeaderValue> {
    headers
        .iter()
        .filter_map(|(k, v)| {
            let name = http::HeaderName::from_bytes(k.as_bytes()).ok()?;
            let mut value = http::HeaderValue::from_str(v).ok()?;
            value.set_sensitive(true);
            Some((name, value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_stream_is_resumed_three_times_then_given_up() {
        let waits: Vec<_> = (0..5).map(|tries| ResumeBriefly.retry(tries)).collect();
        let ms = std::time::Duration::from_millis;
        assert_eq!(waits, [Some(ms(250)), Some(ms(500)), Some(ms(1000)), None, None]);
    }
}
