//! The fixture's control tools: tests drive the fixture through them on any connection (`touch`,
//! `add`, `list_changed_burst`, `stats`, `set_read_delay`, `hold_reads`, `exit`). Each returns one
//! JSON text content.

use std::{sync::Arc, time::Duration};

use rmcp::{
    ErrorData as McpError,
    model::{CallToolRequestParams, CallToolResult, ContentBlock, JsonObject, Tool},
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::state::{FanOut, Fixture};

/// How long `exit` waits after replying, so the reply can be flushed.
const EXIT_GRACE: Duration = Duration::from_millis(50);

/// The tool definitions advertised by `tools/list`.
pub fn definitions() -> Vec<Tool> {
    vec![
        tool("touch", "Bump a URI's version and notify its subscribers.", json!({"uri": {"type": "string"}}), &["uri"]),
        tool(
            "add",
            "Append items and announce resources/list_changed.",
            json!({"count": {"type": "integer", "minimum": 0}}),
            &["count"],
        ),
        tool(
            "list_changed_burst",
            "Send count resources/list_changed notifications back to back.",
            json!({"count": {"type": "integer", "minimum": 0}}),
            &["count"],
        ),
        tool("stats", "Counters and current watchers.", json!({}), &[]),
        tool(
            "set_read_delay",
            "Sleep this long inside each read.",
            json!({"ms": {"type": "integer", "minimum": 0}}),
            &["ms"],
        ),
        tool("hold_reads", "While on, reads block until turned off.", json!({"on": {"type": "boolean"}}), &["on"]),
        tool("exit", "Exit the process shortly after replying.", json!({"code": {"type": "integer"}}), &[]),
    ]
}

/// Run one `tools/call`.
pub async fn call(fixture: &Fixture, request: CallToolRequestParams) -> Result<CallToolResult, McpError> {
    let arguments = request.arguments.unwrap_or_default();
    let reply = match request.name.as_ref() {
        "touch" => touch(fixture, parse(arguments)?).await,
        "add" => add(fixture, parse(arguments)?).await,
        "list_changed_burst" => burst(fixture, parse(arguments)?).await,
        "stats" => fixture.stats(),
        "set_read_delay" => set_read_delay(fixture, parse(arguments)?),
        "hold_reads" => hold_reads(fixture, parse(arguments)?),
        "exit" => exit(parse(arguments)?),
        other => return Err(McpError::invalid_params(format!("unknown tool {other}"), None)),
    };
    Ok(CallToolResult::success(vec![ContentBlock::text(reply.to_string())]))
}

#[derive(Deserialize)]
struct TouchArgs {
    uri: String,
}

#[derive(Deserialize)]
struct CountArgs {
    count: u64,
}

#[derive(Deserialize)]
struct DelayArgs {
    ms: u64,
}

#[derive(Deserialize)]
struct HoldArgs {
    on: bool,
}

#[derive(Deserialize)]
struct ExitArgs {
    #[serde(default)]
    code: i32,
}

async fn touch(fixture: &Fixture, args: TouchArgs) -> Value {
    let (version, fan_out) = fixture.touch(&args.uri).await;
    json!({"uri": args.uri, "version": version, "notified": fan_out.delivered, "failed": fan_out.failed})
}

async fn add(fixture: &Fixture, args: CountArgs) -> Value {
    let (items, fan_out) = fixture.add_items(args.count).await;
    json!({"items": items, "notified": fan_out.delivered, "failed": fan_out.failed})
}

async fn burst(fixture: &Fixture, args: CountArgs) -> Value {
    let mut total = FanOut::default();
    for _ in 0..args.count {
        let fan_out = fixture.announce_list_changed().await;
        total.delivered += fan_out.delivered;
        total.failed += fan_out.failed;
    }
    json!({"sent": args.count, "notified": total.delivered, "failed": total.failed})
}

fn set_read_delay(fixture: &Fixture, args: DelayArgs) -> Value {
    fixture.set_read_delay(args.ms);
    json!({"read_delay_ms": args.ms})
}

fn hold_reads(fixture: &Fixture, args: HoldArgs) -> Value {
    fixture.hold_reads(args.on);
    json!({"hold_reads": args.on})
}

fn exit(args: ExitArgs) -> Value {
    let code = args.code;
    tracing::info!(code, "exit requested");
    tokio::spawn(async move {
        tokio::time::sleep(EXIT_GRACE).await;
        std::process::exit(code);
    });
    json!({"exiting": code})
}

fn parse<T: for<'de> Deserialize<'de>>(arguments: JsonObject) -> Result<T, McpError> {
    serde_json::from_value(Value::Object(arguments))
        .map_err(|error| McpError::invalid_params(format!("bad arguments: {error}"), None))
}

fn tool(name: &'static str, description: &'static str, properties: Value, required: &[&str]) -> Tool {
    let schema = json!({"type": "object", "properties": properties, "required": required});
    let Value::Object(schema) = schema else { unreachable!("a json! object literal") };
    Tool::new(name, description, Arc::new(schema))
}
