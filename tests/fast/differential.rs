//! The fast path against rmcp, byte for byte: a generated corpus (a fixed seed; both eras, the
//! methods the fast path answers and ones it does not, odd headers and odd bodies, see
//! `corpus`) is sent to two proxies of the same config, one answering on the fast path
//! (`server.fast_path = true`, the default) and one sending everything through rmcp's
//! streamable HTTP service (`server.fast_path = false`). Each reply is compared whole: status,
//! every header (name and value, in order) and the body bytes. Normalised before comparing:
//! only what cannot be equal between two processes — `Date`, the session id a proxy minted, a
//! cursor (sealed with a per-process key), a cache entry's remaining lifetime (`ttlMs`) — and
//! the differences in [`ALLOWED`], each with its reason.
//!
//! The fast path declines what it is not sure of (it goes to rmcp untouched), so most odd
//! requests are answered by rmcp on both sides; the test counts the cases the fast path
//! answered (its debug event) and requires a good share of them.
//!
//! Bumping rmcp (pinned in Cargo.toml) means running this test; a difference it finds is fixed
//! in the fast path (`src/wire/`, `src/downstream/fast*`), or, when rmcp is wrong per the spec,
//! allowed here with the reason.

mod corpus;
mod raw;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context;
use serde_json::Value;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{Layer, registry};

use self::corpus::{CURSOR, Case, HOST, LEGACY, MODERN, SESSION};
use self::raw::{RawReply, RawRequest, exchange};
use crate::support::inproc::InProcessProxy;
use crate::support::proxy::toml_str;
use crate::support::{DEADLINE, eventually};

const SEED: u64 = 0x2711_0c0d_e5ee_d001;
const CASES: usize = 600;
/// The debug event of a request the fast path answered.
const ANSWERED_FAST: &str = "answered on the fast path";

/// A difference between the two paths that is deliberate, why, and how it is taken out of both
/// replies before they are compared.
struct Allowance {
    what: &'static str,
    why: &'static str,
    apply: fn(&mut RawReply),
}

const ALLOWED: &[Allowance] = &[
    Allowance {
        what: "HTTP/1.1 framing: `Content-Length` on the fast path, `Transfer-Encoding: chunked` on rmcp's SSE replies",
        why: "the fast path has the whole reply before it sends it, rmcp streams it; the body bytes are compared \
              after transfer decoding",
        apply: |reply| reply.headers.retain(|(name, _)| name != "content-length" && name != "transfer-encoding"),
    },
    Allowance {
        what: "a 2025 session's SSE reply: rmcp opens it with a priming event (`data:` empty, `id: 0/<stream>`, \
               `retry: 500`) and gives the answer `id: 1/<stream>`; the fast path sends the answer alone, no ids",
        why: "`<stream>` counts the streams rmcp's session worker opened, which only rmcp knows (the fast path's \
              answers are streams it never saw), so ids the fast path wrote would name streams rmcp cannot resume \
              from a `Last-Event-ID`; the spec makes event ids optional (MAY) and asks for the priming event \
              (SHOULD) so a client can reconnect to a stream closed before its answer — the fast path writes the \
              answer whole in one body and closes no stream early",
        apply: |reply| {
            if header(reply, "content-type") == Some("text/event-stream") {
                reply.body = without_ids_and_priming(&reply.body);
            }
        },
    },
];

/// The whole corpus through both paths: every reply the same.
#[tokio::test]
async fn the_fast_path_answers_a_generated_corpus_byte_for_byte_as_rmcp_does() -> anyhow::Result<()> {
    let fast_answers = Arc::new(AtomicUsize::new(0));
    let _events = tracing::subscriber::set_default(
        registry()
            .with(Counting(fast_answers.clone()).with_filter(
                Targets::new().with_target("mcp_resource_proxy::downstream::fast", tracing::Level::DEBUG),
            )),
    );
    let files = folder()?;
    let fast = Side::start(files.path(), true).await?;
    let rmcp = Side::start(files.path(), false).await?;
    let uris = rmcp.uris().await?;
    let uris: Vec<&str> = uris.iter().map(String::as_str).collect();
    let (mut differences, mut answered_fast) = (Vec::new(), 0);
    for case in corpus::generate(SEED, CASES, &uris) {
        let before = fast_answers.load(Ordering::SeqCst);
        let on_fast = fast.send(&case.request).await.with_context(|| case.label.clone())?;
        let fast_here = fast_answers.load(Ordering::SeqCst) - before;
        answered_fast += fast_here;
        let on_rmcp = rmcp.send(&case.request).await.with_context(|| case.label.clone())?;
        let (on_fast, on_rmcp) = (fast.normalise(on_fast), rmcp.normalise(on_rmcp));
        if on_fast != on_rmcp {
            differences.push(describe(&case, &on_fast, &on_rmcp));
        } else if std::env::var_os("DIFFERENTIAL_SHOW").is_some() {
            let path = if fast_here > 0 { "fast" } else { "rmcp" };
            eprintln!("same ({path}): {}: {} {}", case.label, on_fast.status, String::from_utf8_lossy(&on_fast.body));
        }
    }
    eprintln!("differential: {CASES} cases, {answered_fast} answered on the fast path, {} differ", differences.len());
    for allowed in ALLOWED {
        eprintln!("differential: allowed: {} (why: {})", allowed.what, allowed.why);
    }
    assert!(
        differences.is_empty(),
        "{} of {CASES} replies differ between the fast path and rmcp:\n{}\nThe first in full:\n{}",
        differences.len(),
        differences.iter().filter_map(|d| d.lines().next()).collect::<Vec<_>>().join("\n"),
        differences.iter().take(4).cloned().collect::<Vec<_>>().join("\n\n")
    );
    assert!(answered_fast >= CASES / 5, "the corpus reached the fast path only {answered_fast} times");
    Ok(())
}

/// The folder both proxies serve: texts with characters JSON escapes, a binary file, a name
/// with a space, enough entries for several pages.
fn folder() -> anyhow::Result<tempfile::TempDir> {
    let files = tempfile::tempdir()?;
    std::fs::write(files.path().join("a.txt"), "alpha")?;
    std::fs::write(files.path().join("b.md"), "# b\n\"quoted\" \\ back\tslash \u{1} é 🎉 </script>\n")?;
    std::fs::write(files.path().join("c.json"), r#"{"k": [1, 2.5, null]}"#)?;
    std::fs::write(files.path().join("d.bin"), [0u8, 159, 146, 150, 255, 10])?;
    std::fs::write(files.path().join("e f.txt"), "space")?;
    Ok(files)
}

/// One proxy, its open 2025-11-25 session and a cursor it minted.
struct Side {
    /// Serving while the side lives.
    _proxy: InProcessProxy,
    address: String,
    session: String,
    cursor: String,
}

impl Side {
    async fn start(root: &std::path::Path, fast_path: bool) -> anyhow::Result<Self> {
        let root = root.canonicalize()?;
        let config = format!(
            "[server]\npage_size = 2\nfast_path = {fast_path}\n\n[[upstreams]]\nname = \"docs\"\ndir = {}\n",
            toml_str(root.to_str().context("a UTF-8 path")?)
        );
        let proxy = InProcessProxy::start(&config).await?;
        proxy.wait_up("docs", 1).await?;
        let address = proxy.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
        let mut side = Self { _proxy: proxy, address, session: String::new(), cursor: String::new() };
        side.session = side.open_session().await?;
        let first = side.modern("resources/list", "{}").await?;
        side.cursor = first["result"]["nextCursor"].as_str().context("a first page with a next cursor")?.to_string();
        if fast_path {
            side.until_fast().await?;
        }
        Ok(side)
    }

    /// `request` with this proxy's address, session and cursor in place of the placeholders.
    async fn send(&self, request: &RawRequest) -> anyhow::Result<RawReply> {
        let fill = |text: &str| {
            text.replace(HOST, &self.address).replace(SESSION, &self.session).replace(CURSOR, &self.cursor)
        };
        let headers = request.headers.iter().map(|(name, value)| (name.clone(), fill(value))).collect();
        let body = fill(&String::from_utf8_lossy(&request.body)).into_bytes();
        exchange(&self.address, "/mcp", &RawRequest { headers, body, chunked: request.chunked }).await
    }

    /// A plain 2026-07-28 request; its JSON-RPC reply.
    async fn modern(&self, method: &str, params: &str) -> anyhow::Result<Value> {
        let meta = format!(
            r#"{{"io.modelcontextprotocol/protocolVersion":"{MODERN}","io.modelcontextprotocol/clientCapabilities":{{}}}}"#
        );
        let params = if params == "{}" {
            format!(r#"{{"_meta":{meta}}}"#)
        } else {
            params.replace("}", &format!(r#","_meta":{meta}}}"#))
        };
        let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#);
        let headers = vec![
            ("Host".into(), HOST.into()),
            ("Accept".into(), "application/json, text/event-stream".into()),
            ("Content-Type".into(), "application/json".into()),
            ("MCP-Protocol-Version".into(), MODERN.into()),
            ("Mcp-Method".into(), method.into()),
        ];
        let reply = self.send(&RawRequest { headers, body: body.into_bytes(), chunked: false }).await?;
        anyhow::ensure!(reply.status == 200, "{method}: {reply:?}");
        Ok(serde_json::from_slice(&reply.body)?)
    }

    /// Every resource URI, from every page.
    async fn uris(&self) -> anyhow::Result<Vec<String>> {
        let (mut uris, mut params) = (Vec::new(), "{}".to_string());
        loop {
            let page = self.modern("resources/list", &params).await?;
            let resources = page["result"]["resources"].as_array().context("a page")?;
            uris.extend(resources.iter().filter_map(|r| r["uri"].as_str().map(str::to_owned)));
            match page["result"]["nextCursor"].as_str() {
                Some(cursor) => params = format!(r#"{{"cursor":"{cursor}"}}"#),
                None => return Ok(uris),
            }
        }
    }

    /// `initialize` and `notifications/initialized` by hand; the session id.
    async fn open_session(&self) -> anyhow::Result<String> {
        let legacy = |body: String, session: Option<&str>| {
            let mut headers = vec![
                ("Host".to_string(), HOST.to_string()),
                ("Accept".to_string(), "application/json, text/event-stream".to_string()),
                ("Content-Type".to_string(), "application/json".to_string()),
            ];
            if let Some(session) = session {
                headers.push(("Mcp-Session-Id".into(), session.into()));
                headers.push(("MCP-Protocol-Version".into(), LEGACY.into()));
            }
            RawRequest { headers, body: body.into_bytes(), chunked: false }
        };
        let initialize = format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{LEGACY}","capabilities":{{}},"clientInfo":{{"name":"differential","version":"0"}}}}}}"#
        );
        let reply = self.send(&legacy(initialize, None)).await?;
        let session = header(&reply, "mcp-session-id").context("initialize opened no session")?.to_string();
        let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_string();
        let reply = self.send(&legacy(initialized, Some(&session))).await?;
        anyhow::ensure!(reply.status == 202, "initialized: {reply:?}");
        Ok(session)
    }

    /// Wait until the session's requests are answered on the fast path (its handshake reached
    /// it): seen on the wire, a session reply without rmcp's priming event (see [`ALLOWED`]).
    async fn until_fast(&self) -> anyhow::Result<()> {
        let list = r#"{"jsonrpc":"2.0","id":1,"method":"resources/templates/list"}"#;
        let headers = vec![
            ("Host".into(), HOST.into()),
            ("Accept".into(), "application/json, text/event-stream".into()),
            ("Content-Type".into(), "application/json".into()),
            ("Mcp-Session-Id".into(), SESSION.into()),
        ];
        let request = RawRequest { headers, body: list.as_bytes().to_vec(), chunked: false };
        eventually(DEADLINE, "the session answered on the fast path", || async {
            let reply = self.send(&request).await?;
            anyhow::ensure!(reply.body.starts_with(b"data: {"), "answered by rmcp: {reply:?}");
            Ok(())
        })
        .await
    }

    /// What differs between two processes taken out (see the module doc), then [`ALLOWED`].
    fn normalise(&self, mut reply: RawReply) -> RawReply {
        reply.headers.retain(|(name, _)| name != "date");
        for (name, value) in &mut reply.headers {
            if name == "mcp-session-id" {
                *value = if *value == self.session { "<this session>".into() } else { "<a new session>".into() };
            }
        }
        let body = String::from_utf8_lossy(&reply.body).into_owned();
        let body = blank_value(&blank_value(&body, "\"ttlMs\":"), "\"nextCursor\":");
        reply.body = body.replace(&self.cursor, "<cursor>").into_bytes();
        for allowed in ALLOWED {
            (allowed.apply)(&mut reply);
        }
        reply
    }
}

/// `json` with the value after each `key` (a number or a string) replaced by `_`.
fn blank_value(json: &str, key: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut rest = json;
    while let Some(at) = rest.find(key) {
        out.push_str(&rest[..at + key.len()]);
        rest = &rest[at + key.len()..];
        let end = if let Some(string) = rest.strip_prefix('"') {
            string.find('"').map_or(rest.len(), |n| n + 2)
        } else {
            rest.find(|c: char| !c.is_ascii_digit() && c != '-').unwrap_or(rest.len())
        };
        out.push('_');
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// An SSE body without `id:` lines and without events that carried no data (the priming one).
fn without_ids_and_priming(body: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(body);
    let mut out = String::new();
    for event in text.split_terminator("\n\n") {
        let fields: Vec<&str> = event.lines().filter(|line| !line.starts_with("id:")).collect();
        if fields.iter().any(|line| line.starts_with("data:") && line.len() > "data: ".len()) {
            out.push_str(&fields.join("\n"));
            out.push_str("\n\n");
        }
    }
    out.into_bytes()
}

fn header<'a>(reply: &'a RawReply, name: &str) -> Option<&'a str> {
    reply.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

fn describe(case: &Case, on_fast: &RawReply, on_rmcp: &RawReply) -> String {
    let show = |reply: &RawReply| {
        format!("{} {:?}\n    {}", reply.status, reply.headers, String::from_utf8_lossy(&reply.body))
    };
    format!(
        "{}\n  request: {:?} {}\n  fast path: {}\n  rmcp:      {}",
        case.label,
        case.request.headers,
        String::from_utf8_lossy(&case.request.body),
        show(on_fast),
        show(on_rmcp)
    )
}

/// Counts the fast path's `answered on the fast path` events (the test's runtime is one thread,
/// so the proxies' tasks log through this test's subscriber).
struct Counting(Arc<AtomicUsize>);

impl<S: tracing::Subscriber> Layer<S> for Counting {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message(bool);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0 |= field.name() == "message" && format!("{value:?}") == ANSWERED_FAST;
            }
        }
        let mut message = Message(false);
        event.record(&mut message);
        if message.0 {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}
