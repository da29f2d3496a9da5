//! Resources as tools, for models whose host lets them call tools only (`[bridge]`, off by
//! default): the proxy offers `proxy_resources_list`, `proxy_resources_search`,
//! `proxy_resources_read`, `proxy_resource_templates_list` and
//! `proxy_resource_template_expand`, working across every upstream.
//!
//! Each call goes through the proxy's own resource paths ([`Proxy::list_resources`],
//! [`Proxy::list_templates`], [`Proxy::read`]) with the caller's principal: the same policy
//! decisions, the same cache, the same namespaced URIs. Text contents come back as text; a
//! blob as an embedded resource up to `bridge.max_blob_bytes`, above it as a summary (URI,
//! mimeType, size). A model's mistakes (a bad argument, a URI it may not or cannot read) are
//! tool errors (`isError`) it can read and correct, not protocol errors.
//!
//! Names: none contains `__`, so none can be an upstream's `<upstream>__<name>`. Policies
//! decide them over `tool://proxy.bridge/<name>`: upstream names have no `.`, so no
//! upstream's tool has that pseudo-URI.
//!
//! Invariant: a bridge call reveals no more than the resource methods would to the same
//! principal; a URI it may not see answers exactly like a missing one, and a bridge tool it
//! may not use is unlisted and answers like an unknown tool.

mod answers;
mod search;
mod template;

use std::sync::{Arc, LazyLock};

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use crate::audit::scope;
use crate::error::ProxyError;
use crate::metrics::{DenialAction, DenialKind};
use crate::proxy::{Caller, Proxy};

/// The bridge's tools, in the order they are listed (named in `crate::tools` so that policy
/// reloads weigh them; `DEFINITIONS` follows the same order).
pub use crate::tools::own::BRIDGE_TOOLS as TOOL_NAMES;
pub use crate::tools::own::{POLICY_HOST, policy_uri};

const LIST: &str = "proxy_resources_list";
const SEARCH: &str = "proxy_resources_search";
const READ: &str = "proxy_resources_read";
const TEMPLATES: &str = "proxy_resource_templates_list";
const EXPAND: &str = "proxy_resource_template_expand";

/// Is `name` one of the bridge's tools (whether or not the bridge is on)?
pub fn is_bridge_tool(name: &str) -> bool {
    TOOL_NAMES.contains(&name)
}

/// The bridge tools `caller` may use; none when the bridge is off.
pub fn tools_for(proxy: &Proxy, caller: &Caller) -> Vec<Tool> {
    if !proxy.config().bridge.enabled {
        return Vec::new();
    }
    DEFINITIONS.iter().filter(|tool| allowed(caller, &tool.name)).cloned().collect()
}

/// Run a bridge tool for `caller`, every step decided with its one policy snapshot. A tool it
/// may not use (or any tool while the bridge is off) answers like an unknown tool.
pub async fn call(proxy: &Proxy, caller: &Caller, params: CallToolRequestParams) -> Result<CallToolResult, ProxyError> {
    let name = params.name.to_string();
    if !proxy.config().bridge.enabled || !is_bridge_tool(&name) {
        return Err(ProxyError::UnknownName { offering: "tool", name });
    }
    let decision = caller.policy().decide(caller.principal(), &policy_uri(&name));
    if !decision.allowed {
        tracing::debug!(principal = caller.principal(), name, "bridge tool denied");
        proxy.metrics().policy_denied(DenialAction::Use, decision.file.as_deref());
        scope::denied(proxy.metrics(), DenialKind::Call, &name, None);
        return Err(ProxyError::UnknownName { offering: "tool", name });
    }
    let arguments = params.arguments.unwrap_or_default();
    let answer = match name.as_str() {
        LIST => answers::list(proxy, caller, &arguments),
        SEARCH => search::search(proxy, caller, &arguments).await,
        READ => match string_argument(&arguments, "uri") {
            Ok(uri) => answers::read(proxy, caller, &uri).await,
            Err(error) => Err(error),
        },
        TEMPLATES => answers::templates(proxy, caller, &arguments),
        _ => template::expand_and_read(proxy, caller, &arguments).await,
    };
    // A model reads a tool error and can correct itself; only "unknown tool" is a protocol error.
    Ok(answer.unwrap_or_else(|message| CallToolResult::error(vec![ContentBlock::text(message)])))
}

/// What a tool call failed with, in words for the model.
pub(crate) type Answer = Result<CallToolResult, String>;

fn allowed(caller: &Caller, name: &str) -> bool {
    let policy = caller.policy();
    policy.is_allow_all() || policy.decide(caller.principal(), &policy_uri(name)).allowed
}

/// A required string argument.
pub(crate) fn string_argument(arguments: &JsonObject, key: &str) -> Result<String, String> {
    match arguments.get(key) {
        Some(Value::String(text)) if !text.is_empty() => Ok(text.clone()),
        _ => Err(format!("`{key}` is required: a non-empty string")),
    }
}

/// An optional string argument.
pub(crate) fn optional_string(arguments: &JsonObject, key: &str) -> Result<Option<String>, String> {
    match arguments.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(format!("`{key}` must be a string")),
    }
}

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(object) => Arc::new(object),
        _ => unreachable!("schemas are objects"),
    }
}

fn read_only(mut tool: Tool) -> Tool {
    let annotations = ToolAnnotations::from_raw(None, Some(true), Some(false), Some(true), Some(false));
    tool.annotations = Some(annotations);
    tool
}

static DEFINITIONS: LazyLock<Vec<Tool>> = LazyLock::new(|| {
    let cursor = json!({"type": "object", "properties": {"cursor": {"type": "string",
        "description": "The nextCursor of the previous page; omit for the first page."}}});
    let uri = json!({"type": "object", "required": ["uri"], "properties": {"uri": {"type": "string",
        "description": "The resource's URI exactly as listed, e.g. docs+file:///README.md"}}});
    let search = json!({"type": "object", "required": ["query"], "properties": {
        "query": {"type": "string", "description": "Text to look for (case-insensitive) in each resource's name, title, URI and description."},
        "limit": {"type": "integer", "minimum": 1, "description": "At most this many matches (the server caps it)."},
        "cursor": {"type": "string", "description": "The nextCursor of an incomplete search, to search the rest."}}});
    let expand = json!({"type": "object", "required": ["uriTemplate"], "properties": {
        "uriTemplate": {"type": "string", "description": "A uriTemplate exactly as proxy_resource_templates_list gives it."},
        "arguments": {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]},
            "description": "A value for each {variable} of the template, e.g. {\"id\": \"42\"}."}}});
    vec![
        Tool::new(
            LIST,
            "List the resources (documents, files, records) available to you from every connected server, one page \
             at a time. Each has a uri (pass it to proxy_resources_read), a name and often a description and \
             mimeType. Use it to browse; to find something specific, proxy_resources_search is quicker. Input: \
             optional cursor (the nextCursor of the previous page).",
            schema(cursor.clone()),
        ),
        Tool::new(
            SEARCH,
            "Find resources whose name, title, URI or description contains some text (case-insensitive), across \
             every connected server. Returns the matching resources (uri, name, description, mimeType); read one \
             with proxy_resources_read. One call examines a bounded number of resources: when it says incomplete, \
             call it again with its nextCursor as cursor. Inputs: query (the text), optional limit, optional cursor.",
            schema(search),
        ),
        Tool::new(
            READ,
            "Read one resource by its URI, as given by proxy_resources_list or proxy_resources_search (for example \
             docs+file:///README.md). Returns its text; a small binary resource comes back as an embedded resource, \
             a large one as a summary (mimeType, size). A resource that does not exist or that you may not read \
             gives the same 'resource not found' error. Input: uri.",
            schema(uri),
        ),
        Tool::new(
            TEMPLATES,
            "List resource templates: URI patterns such as docs+file:///notes/{name} that name resources not listed \
             one by one. Use proxy_resource_template_expand to fill one in and read it. Input: optional cursor.",
            schema(cursor),
        ),
        Tool::new(
            EXPAND,
            "Fill in a resource template's {variables} and read the resulting resource, in one step. Use it after \
             proxy_resource_templates_list. Inputs: uriTemplate (exactly as listed) and arguments (a value per \
             variable). Returns what proxy_resources_read would.",
            schema(expand),
        ),
    ]
    .into_iter()
    .map(read_only)
    .collect()
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_names_can_never_be_an_upstream_tool_or_its_pseudo_uri() {
        for name in TOOL_NAMES {
            assert!(crate::tools::names::split(name).is_none(), "{name} splits like an upstream tool");
            // An un-prefixed upstream's names never start so (tools::names::Naming::present).
            assert!(name.starts_with(crate::tools::names::RESERVED_PREFIX), "{name}");
            assert!(name.len() <= crate::tools::names::MAX_NAME_LEN);
            let uri = policy_uri(name);
            assert_eq!(crate::uri::normalize(&uri).as_deref(), Ok(uri.as_str()), "{uri} is already normal");
        }
        assert!(!crate::namespace::is_valid_upstream_name(POLICY_HOST));
        let defined: Vec<&str> = DEFINITIONS.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(defined, TOOL_NAMES);
        assert_eq!([LIST, SEARCH, READ, TEMPLATES, EXPAND], TOOL_NAMES);
    }
}
