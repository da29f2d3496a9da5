//! The proxy's own tools as policies see them: the bridge's (served by `crate::bridge`, a floor
//! above) are named here so that a policy reload's `tools/list_changed` weighs them with the
//! upstreams' tools. Policies decide them over `tool://proxy.bridge/<name>`: upstream names
//! have no `.`, so no upstream's tool has that pseudo-URI.

/// The pseudo-URI host policies decide bridge tools on (no upstream is named like it).
pub const POLICY_HOST: &str = "proxy.bridge";

/// The bridge's tools, in the order they are listed.
pub const BRIDGE_TOOLS: [&str; 5] = [
    "proxy_resources_list",
    "proxy_resources_search",
    "proxy_resources_read",
    "proxy_resource_templates_list",
    "proxy_resource_template_expand",
];

/// The pseudo-URI a policy decides a bridge tool on: `tool://proxy.bridge/proxy_resources_read`.
pub fn policy_uri(name: &str) -> String {
    format!("tool://{POLICY_HOST}/{name}")
}
