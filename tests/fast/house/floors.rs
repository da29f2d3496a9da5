//! The product's floors and edges. Every top-level module of `src/` has a floor ([`FLOORS`])
//! and imports only from modules on a lower floor, so there is no import circle between them; a
//! new module gets a floor here, and an edge that goes up or sideways fails with the file and
//! line that made it. On top of the floors, the edges that may exist are listed ([`EDGES`]): a
//! new dependency between modules is a change to this list, made on purpose, and any other
//! import fails, naming its edge. [`RULES`] states the edges no list may hold; the imports
//! known to break them are [`KNOWN_EXCEPTIONS`], a list that only shrinks.

use std::collections::BTreeSet;

use super::{Edge, PRODUCT, ROOTS, edges, scan};

/// The floors, lowest first. A module may import from any module on a lower floor, never from
/// its own floor or a higher one.
const FLOORS: &[&[&str]] = &[
    // The one crypto provider (ring): no imports of the crate at all.
    &["crypto"],
    // Facts and pure values: nothing of the crate but `crypto`.
    &[
        "protocol",
        "problem",
        "logging",
        "error",
        "namespace",
        "uri",
        "cursor",
        "subscription_table",
        "spine",
        "ready_file",
        "host",
    ],
    // Pure decisions over the facts, the merged lists with their cursors, the folder server (an
    // MCP server of its own), the byte-level rules of MCP over HTTP (from `protocol` only), and
    // the stdio sandbox (its profile and launcher: nothing of the crate).
    &["policy", "catalog", "serve_dir", "wire", "sandbox"],
    // Validated configuration.
    &["config"],
    // Identity, instruments, the accept loop and the rate limits' buckets.
    &["auth", "metrics", "listener", "mcp_json", "rate_limits", "telemetry"],
    // Stores and queues: the audit trail's; the cluster's shared state (Redis) and derived keys.
    &["cache", "fanout", "audit", "cluster"],
    // Upstream connections.
    &["upstream"],
    // Cache coherence (holds upstream handles in its upstream subscriptions).
    &["coherence", "tools"],
    // The admin listener (given the status by whoever serves it).
    &["admin"],
    // The proxy core.
    &["proxy"],
    // Resources as the proxy's own tools, over the proxy's resource paths.
    &["bridge"],
    // The hosts' side.
    &["downstream"],
];

/// The edges between top-level modules that may exist, by importing module (in floor order):
/// `(from, [to…])`. Each goes down the floors and breaks no rule of [`RULES`]; an import along
/// any other edge fails.
const EDGES: &[(&str, &[&str])] = &[
    ("cursor", &["crypto"]),
    ("policy", &["problem", "uri"]),
    ("catalog", &["error", "cursor"]),
    ("serve_dir", &["spine"]),
    ("wire", &["protocol"]),
    ("config", &["crypto", "protocol", "problem", "namespace", "policy", "serve_dir", "sandbox"]),
    ("auth", &["host", "crypto", "policy", "config"]),
    ("metrics", &["protocol", "error", "namespace"]),
    ("listener", &["config"]),
    ("mcp_json", &["problem", "namespace", "config"]),
    ("rate_limits", &["policy", "config"]),
    ("telemetry", &["crypto", "config"]),
    ("cache", &["subscription_table", "metrics"]),
    ("fanout", &["subscription_table", "spine"]),
    ("audit", &["protocol", "spine", "config", "auth", "metrics", "telemetry"]),
    ("cluster", &["crypto", "protocol", "error", "spine", "host", "config", "metrics", "telemetry"]),
    (
        "upstream",
        &[
            "crypto",
            "protocol",
            "error",
            "namespace",
            "uri",
            "subscription_table",
            "catalog",
            "spine",
            "host",
            "serve_dir",
            "wire",
            "sandbox",
            "config",
            "auth",
            "metrics",
            "telemetry",
        ],
    ),
    ("coherence", &["error", "subscription_table", "wire", "config", "metrics", "cache", "cluster", "upstream"]),
    (
        "tools",
        &[
            "crypto",
            "protocol",
            "error",
            "namespace",
            "uri",
            "cursor",
            "catalog",
            "host",
            "policy",
            "config",
            "metrics",
            "fanout",
            "audit",
            "cluster",
            "upstream",
            "telemetry",
        ],
    ),
    ("admin", &["crypto", "protocol", "metrics", "listener", "cluster", "upstream", "coherence"]),
    (
        "proxy",
        &[
            "error",
            "namespace",
            "uri",
            "cursor",
            "subscription_table",
            "catalog",
            "spine",
            "policy",
            "config",
            "auth",
            "metrics",
            "rate_limits",
            "fanout",
            "audit",
            "cluster",
            "upstream",
            "coherence",
            "tools",
            "admin",
            "telemetry",
        ],
    ),
    ("bridge", &["error", "namespace", "uri", "metrics", "audit", "tools", "proxy"]),
    (
        "downstream",
        &[
            "protocol",
            "error",
            "subscription_table",
            "spine",
            "host",
            "wire",
            "config",
            "auth",
            "metrics",
            "listener",
            "cache",
            "fanout",
            "audit",
            "cluster",
            "tools",
            "proxy",
            "bridge",
            "telemetry",
        ],
    ),
];

/// Edges that may never be listed, whatever the floors allow, and why.
const RULES: &[(&str, &str, &str)] = &[
    ("downstream", "upstream", "downstream never imports upstream: hosts reach upstreams through the `Proxy`"),
    ("downstream", "coherence", "downstream never imports coherence: hosts reach the cache through the `Proxy`"),
    ("upstream", "cluster", "upstream never imports cluster: what crosses replicas is handed to the upstreams"),
];

/// Imports that break a rule of [`RULES`] today, as (importing file, the module it imports, why
/// it is still here). This list may only shrink: an import that breaks a rule and is not here
/// fails, and so does an entry whose import is gone (drop it then).
const KNOWN_EXCEPTIONS: &[(&str, &str, &str)] = &[];

fn floor_of(module: &str) -> Option<usize> {
    FLOORS.iter().position(|floor| floor.contains(&module))
}

fn listed(from: &str, to: &str) -> bool {
    EDGES.iter().any(|(listed, targets)| *listed == from && targets.contains(&to))
}

fn rule_broken(from: &str, to: &str) -> Option<&'static str> {
    RULES.iter().find(|(f, t, _)| *f == from && *t == to).map(|(_, _, rule)| *rule)
}

/// Whether the known exception `(file, target)` is this import.
fn excepts(exception: &(&str, &str, &str), edge: &Edge) -> bool {
    let target: Vec<&str> = exception.1.split("::").collect();
    exception.0 == edge.file && edge.to.len() >= target.len() && edge.to.iter().zip(&target).all(|(a, b)| a == b)
}

#[test]
fn every_module_has_a_floor_and_imports_only_from_lower_floors() {
    let modules: BTreeSet<String> = scan::sources(PRODUCT).into_iter().map(|s| s.module[0].clone()).collect();
    let homeless: Vec<&String> =
        modules.iter().filter(|m| !ROOTS.contains(&m.as_str()) && floor_of(m).is_none()).collect();
    assert!(homeless.is_empty(), "modules without a floor in tests/fast/house/floors.rs FLOORS: {homeless:?}");
    let wrong: Vec<String> = edges(PRODUCT)
        .into_iter()
        .filter(|e| floor_of(e.to()).is_some() && floor_of(e.to()) >= floor_of(&e.from))
        .map(|e| format!("{} imports {} ({})", e.from, e.to(), e.at()))
        .collect();
    assert!(wrong.is_empty(), "imports that go up or sideways:\n{}", wrong.join("\n"));
}

#[test]
fn every_import_between_modules_is_a_listed_edge() {
    let edges = edges(PRODUCT);
    assert!(edges.len() > 100, "the scan found the imports: {edges:?}");
    let unlisted: Vec<String> = edges
        .iter()
        .filter(|e| !listed(&e.from, e.to()) && !KNOWN_EXCEPTIONS.iter().any(|x| excepts(x, e)))
        .map(|e| match rule_broken(&e.from, e.to()) {
            Some(rule) => format!("{} -> {} ({}): breaks \"{rule}\"", e.from, e.to(), e.at()),
            None => format!("{} -> {} ({}): not in EDGES", e.from, e.to(), e.at()),
        })
        .collect();
    assert!(
        unlisted.is_empty(),
        "imports along edges not listed in tests/fast/house/floors.rs:\n{}",
        unlisted.join("\n")
    );
}

#[test]
fn the_listed_edges_keep_the_floors_and_the_rules() {
    let mut wrong = Vec::new();
    for (from, targets) in EDGES {
        for to in *targets {
            match (floor_of(from), floor_of(to)) {
                (Some(f), Some(t)) if t < f => {}
                _ => wrong.push(format!("{from} -> {to} does not go down the floors")),
            }
            if let Some(rule) = rule_broken(from, to) {
                wrong.push(format!("{from} -> {to} is listed but breaks \"{rule}\""));
            }
        }
    }
    for (from, to, _) in RULES {
        if floor_of(from).is_none() || floor_of(to).is_none() {
            wrong.push(format!("the rule {from} -> {to} names a module without a floor"));
        }
    }
    for (file, target, _) in KNOWN_EXCEPTIONS {
        let from = file.split(['/', '.']).next().unwrap_or_default();
        let to = target.split("::").next().unwrap_or_default();
        if rule_broken(from, to).is_none() {
            wrong.push(format!("the exception {file} -> {target} breaks no rule: list {from} -> {to} in EDGES"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_known_exception_still_exists() {
    let edges = edges(PRODUCT);
    let gone: Vec<String> = KNOWN_EXCEPTIONS
        .iter()
        .filter(|exception| !edges.iter().any(|e| excepts(exception, e)))
        .map(|(file, target, _)| format!("{file} no longer imports {target}: drop it from KNOWN_EXCEPTIONS"))
        .collect();
    assert!(gone.is_empty(), "{}", gone.join("\n"));
}
