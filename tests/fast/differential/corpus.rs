//! The corpus: requests generated from a fixed seed — a plain request of one era and method,
//! then none, one or two changes to its head or body. Placeholders (`{host}`, `{session}`,
//! `{cursor}`) are filled per proxy, so both proxies get the same request for their own address,
//! session and cursor.

use base64::Engine;

use super::raw::RawRequest;

pub const MODERN: &str = "2026-07-28";
pub const LEGACY: &str = "2025-11-25";
pub const HOST: &str = "{host}";
pub const SESSION: &str = "{session}";
pub const CURSOR: &str = "{cursor}";

/// One request of the corpus, with what it is in words.
#[derive(Debug, Clone)]
pub struct Case {
    pub label: String,
    pub request: RawRequest,
}

/// xorshift64*: the same corpus on every run.
pub struct Seeded(u64);

impl Seeded {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Era {
    /// 2026-07-28 stateless: `_meta` and standard headers.
    Modern,
    /// On the proxy's open 2025-11-25 session.
    Session,
    /// 2025-era shape without a session.
    Sessionless,
}

/// A method and its params (without `_meta`), and the `Mcp-Name` it has.
struct Call {
    method: &'static str,
    params: Option<String>,
    name: Option<String>,
}

/// `count` cases from `seed`; `uris` are readable URIs of the proxy's upstream.
pub fn generate(seed: u64, count: usize, uris: &[&str]) -> Vec<Case> {
    let mut rng = Seeded::new(seed);
    (0..count).map(|n| case(&mut rng, n, uris)).collect()
}

fn case(rng: &mut Seeded, n: usize, uris: &[&str]) -> Case {
    let era = *rng.pick(&[Era::Modern, Era::Modern, Era::Session, Era::Session, Era::Sessionless]);
    let call = call(rng, uris);
    let ids = [
        "1",
        "7",
        "0",
        "\"s-1\"",
        "\"\"",
        "-5",
        "9223372036854775807",
        "-9223372036854775808",
        "1.0",
        "18446744073709551615",
        "1e30",
    ];
    let id = *rng.pick(&ids);
    let mut label = format!("#{n} {era:?} {} id {id}", call.method);
    let mut headers = vec![
        ("Host".to_string(), HOST.to_string()),
        ("Accept".to_string(), "application/json, text/event-stream".to_string()),
        ("Content-Type".to_string(), "application/json".to_string()),
    ];
    match era {
        Era::Modern => {
            headers.push(("MCP-Protocol-Version".into(), MODERN.into()));
            headers.push(("Mcp-Method".into(), call.method.into()));
            if let Some(name) = &call.name {
                headers.push(("Mcp-Name".into(), name.clone()));
            }
        }
        Era::Session => {
            headers.push(("Mcp-Session-Id".into(), SESSION.into()));
            headers.push(("MCP-Protocol-Version".into(), LEGACY.into()));
        }
        Era::Sessionless => headers.push(("MCP-Protocol-Version".into(), LEGACY.into())),
    }
    let meta = (era == Era::Modern).then(|| {
        format!(
            r#""_meta":{{"io.modelcontextprotocol/protocolVersion":"{MODERN}","io.modelcontextprotocol/clientCapabilities":{{}},"io.modelcontextprotocol/clientInfo":{{"name":"differential","version":"0"}}}}"#
        )
    });
    let params = match (call.params.as_deref(), meta.as_deref()) {
        (Some("{}"), Some(m)) => Some(format!("{{{m}}}")),
        (Some(p), Some(m)) => Some(format!("{},{m}}}", &p[..p.len() - 1])),
        (None, Some(m)) => Some(format!("{{{m}}}")),
        (p, None) => p.map(str::to_owned),
    };
    let mut body = match params {
        Some(params) => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{}","params":{params}}}"#, call.method),
        None => format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{}"}}"#, call.method),
    };
    let mut chunked = false;
    for _ in 0..*rng.pick(&[0, 0, 1, 1, 1, 2]) {
        let change = mutate(rng, &mut headers, &mut body, &mut chunked);
        label.push_str(", ");
        label.push_str(&change);
    }
    Case { label, request: RawRequest { headers, body: body.into_bytes(), chunked } }
}

fn call(rng: &mut Seeded, uris: &[&str]) -> Call {
    let read = |uri: &str| Call {
        method: "resources/read",
        params: Some(format!(r#"{{"uri":{}}}"#, serde_json::Value::from(uri))),
        name: Some(uri.to_string()),
    };
    let list = |method, params: Option<&str>| Call { method, params: params.map(str::to_owned), name: None };
    match rng.below(14) {
        0..=3 => read(uris[rng.below(uris.len())]),
        4 => read("docs+file:///missing.txt"),
        5 => read("nope+file:///a.txt"),
        6 => list("resources/list", None),
        7 => list("resources/list", Some(&format!(r#"{{"cursor":"{CURSOR}"}}"#))),
        8 => list("resources/list", Some(r#"{"cursor":"not-a-cursor"}"#)),
        9 => list("resources/templates/list", Some("{}")),
        10 => list("tools/list", None),
        11 => list("ping", None),
        12 => list(
            "initialize",
            Some(&format!(
                r#"{{"protocolVersion":"{LEGACY}","capabilities":{{}},"clientInfo":{{"name":"differential","version":"0"}}}}"#
            )),
        ),
        _ => list("no/such-method", Some("{}")),
    }
}

/// Change the request in one way; what was changed.
fn mutate(rng: &mut Seeded, headers: &mut Vec<(String, String)>, body: &mut String, chunked: &mut bool) -> String {
    let mut set = |name: &str, value: Option<&str>| {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        if let Some(value) = value {
            headers.push((name.to_string(), value.to_string()));
        }
        format!("{name}: {value:?}")
    };
    match rng.below(13) {
        0 => {
            let accepts = [
                None,
                Some("application/json"),
                Some("text/event-stream"),
                Some("application/json;q=0.9, text/event-stream"),
                Some("*/*"),
                Some("text/event-stream, application/json, text/html"),
                Some("Application/JSON,TEXT/EVENT-STREAM"),
            ];
            set("Accept", *rng.pick(&accepts))
        }
        1 => {
            let types = [
                None,
                Some("text/plain"),
                Some("application/json; charset=utf-8"),
                Some("APPLICATION/JSON"),
                Some("application/jsonx"),
            ];
            set("Content-Type", *rng.pick(&types))
        }
        2 => {
            let hosts = [None, Some("localhost"), Some("evil.example"), Some("127.0.0.1"), Some("[::1]:1")];
            set("Host", *rng.pick(&hosts))
        }
        3 => set("Mcp-Session-Id", *rng.pick(&[None, Some("not-a-session"), Some(SESSION)])),
        4 => {
            let versions = [None, Some("2025-06-18"), Some("2099-01-01"), Some("garbage"), Some(MODERN), Some(LEGACY)];
            set("MCP-Protocol-Version", *rng.pick(&versions))
        }
        5 => set(
            "Mcp-Method",
            *rng.pick(&[None, Some("resources/list"), Some("resources/read"), Some("RESOURCES/READ")]),
        ),
        6 => {
            let wrapped =
                format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode("docs+file:///a.txt"));
            let names = [None, Some("docs+file:///b.md".to_string()), Some(wrapped)];
            set("Mcp-Name", rng.pick(&names).as_deref())
        }
        7 => {
            let (name, value) =
                *rng.pick(&[("Mcp-Foo", "1"), ("Origin", "http://evil.example"), ("Origin", "http://localhost")]);
            headers.push((name.into(), value.into()));
            format!("+{name}: {value}")
        }
        8 => {
            // A header sent twice.
            let Some(header) = headers.get(rng.below(headers.len())).cloned() else { return "nothing".into() };
            headers.push(header.clone());
            format!("{} twice", header.0)
        }
        9 => {
            *chunked = true;
            "chunked".into()
        }
        _ => body_change(rng, body),
    }
}

fn body_change(rng: &mut Seeded, body: &mut String) -> String {
    let (what, changed) = match rng.below(18) {
        0 => ("cut in half", body[..body.len() / 2].to_string()),
        1 => ("a batch", format!("[{body}]")),
        2 => ("empty", String::new()),
        3 => ("null", "null".to_string()),
        4 => ("jsonrpc 1.0", body.replacen(r#""2.0""#, r#""1.0""#, 1)),
        5 => ("an extra key", body.replacen('{', r#"{"extra":1,"#, 1)),
        6 => ("id twice", body.replacen('{', r#"{"id":99,"#, 1)),
        7 => ("params an array", params_in_an_array(body)),
        8 => ("uri a number", body.replacen(r#""uri":""#, r#""uri":5,"x":""#, 1)),
        9 => ("no client capabilities", body.replacen(r#""io.modelcontextprotocol/clientCapabilities":{},"#, "", 1)),
        10 => ("pretty", body.replace("\":", "\": ").replace(",\"", ", \"")),
        11 => ("a progress token", with_progress_token(body)),
        12 => (
            "no client info",
            body.replacen(r#","io.modelcontextprotocol/clientInfo":{"name":"differential","version":"0"}"#, "", 1),
        ),
        13 => ("a null cursor", body.replacen(r#""params":{"#, r#""params":{"cursor":null,"#, 1)),
        14 => ("a key escaped", body.replacen(r#""uri":"#, r#""\u0075ri":"#, 1)),
        15 => ("a trace context", with_trace_context(body)),
        16 => ("a traceparent not a string", with_meta_entry(body, r#""traceparent":5"#)),
        _ => ("escaped method", body.replacen("resources/", "resources\\/", 1)),
    };
    *body = changed;
    format!("body {what}")
}

/// `"params":{…}` as `"params":[{…}]` (the params are the last member of the request).
fn params_in_an_array(body: &str) -> String {
    let Some(at) = body.find(r#""params":"#) else { return body.to_string() };
    let inner = &body[at + r#""params":"#.len()..body.len() - 1];
    format!(r#"{}"params":[{inner}]}}"#, &body[..at])
}

/// The W3C trace context keys (`traceparent`, `tracestate`, `baggage`) in the request's `_meta`.
fn with_trace_context(body: &str) -> String {
    let entries = r#""traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"vendor=1","baggage":"k=v""#;
    with_meta_entry(body, entries)
}

/// `entries` first in the request's `_meta` (made when the request has none).
fn with_meta_entry(body: &str, entries: &str) -> String {
    if body.contains(r#""_meta":{"#) {
        body.replacen(r#""_meta":{"#, &format!(r#""_meta":{{{entries},"#), 1)
    } else {
        body.replacen(r#""params":{"#, &format!(r#""params":{{"_meta":{{{entries}}},"#), 1)
    }
}

/// A `progressToken` in the request's `_meta` (made when the request has none).
fn with_progress_token(body: &str) -> String {
    if body.contains(r#""_meta":{"#) {
        body.replacen(r#""_meta":{"#, r#""_meta":{"progressToken":"p-1","#, 1)
    } else {
        body.replacen(r#""params":{"#, r#""params":{"_meta":{"progressToken":"p-1"},"#, 1)
    }
}
