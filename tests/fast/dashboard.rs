//! The Grafana dashboard against the metrics the proxy really registers: it parses, every panel
//! has a query, every metric name in every query is an exported family (histograms through
//! `_bucket`/`_sum`/`_count`) and every family is on a panel, every `$variable` is defined in
//! `templating`, every metric a panel reads is filtered on the `instance` variable (one replica,
//! several or all), and every latency panel links a slow point to its traces (`traces`).

use std::collections::BTreeSet;
use std::time::Duration;

use mcp_resource_proxy::metrics::{Hop, Metrics, Transport};
use serde_json::Value;

const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/grafana/dashboards/mcp-resource-proxy.json");

fn dashboard() -> Value {
    let text = std::fs::read_to_string(DASHBOARD).expect("dashboard file");
    serde_json::from_str(&text).expect("dashboard JSON parses")
}

/// Every non-row panel, including those nested in collapsed rows.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut found = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        if panel["type"] == "row" {
            found.extend(panel["panels"].as_array().into_iter().flatten());
        } else {
            found.push(panel);
        }
    }
    found
}

/// Every PromQL text: panel target expressions and query-variable definitions.
fn queries(dashboard: &Value) -> Vec<String> {
    let mut queries: Vec<String> = panels(dashboard)
        .iter()
        .flat_map(|panel| panel["targets"].as_array().into_iter().flatten())
        .filter_map(|target| target["expr"].as_str().map(String::from))
        .collect();
    for variable in variables(dashboard) {
        if variable["type"] == "query" {
            queries.push(variable["definition"].as_str().expect("query variable has a definition").to_string());
            queries.push(variable["query"]["query"].as_str().expect("query variable has a query").to_string());
        }
    }
    queries
}

fn variables(dashboard: &Value) -> &Vec<Value> {
    dashboard["templating"]["list"].as_array().expect("templating.list")
}

/// The prefixes of the families `Metrics` registers: ours, and the semantic conventions' two.
const PREFIXES: [&str; 3] = ["mcp_proxy_", "mcp_server_", "mcp_client_"];

/// Identifiers `mcp_proxy_[a-z0-9_]+` (or of another of [`PREFIXES`]) in `text`.
fn metric_names(text: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = PREFIXES.iter().filter_map(|prefix| rest.find(prefix)).min() {
        let preceded_by_word = rest[..start].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let tail = &rest[start..];
        let len =
            tail.find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')).unwrap_or(tail.len());
        if !preceded_by_word {
            names.push(&tail[..len]);
        }
        rest = &tail[len..];
    }
    names
}

/// Variable names referenced as `$name`, `${name}`, `${name:format}` or `[[name]]` in `text`.
fn variable_references(text: &str) -> Vec<String> {
    let word = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut references = Vec::new();
    for (i, _) in text.match_indices('$') {
        let after = &text[i + 1..];
        let name = match after.strip_prefix('{') {
            Some(braced) => word(braced),
            None => word(after),
        };
        if !name.is_empty() {
            references.push(name);
        }
    }
    for (i, _) in text.match_indices("[[") {
        references.push(word(&text[i + 2..]));
    }
    references
}

/// Every string anywhere in the JSON.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|item| strings(item, out)),
        Value::Object(fields) => fields.values().for_each(|field| strings(field, out)),
        _ => {}
    }
}

/// The families `Metrics::new()` registers, and which of them are histograms.
fn exported() -> (BTreeSet<String>, BTreeSet<String>) {
    let metrics = Metrics::new();
    let hop = Hop::new(Some("2025-11-25"), Transport::Http);
    metrics.downstream_request("resources/read", "ok", Duration::from_millis(1), hop);
    metrics.upstream_request("docs", "resources/read", "ok", Duration::from_millis(1), hop);
    let families: BTreeSet<String> = metrics.family_names().iter().cloned().collect();
    let text = metrics.render();
    let histograms = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE ")?.strip_suffix(" histogram"))
        .map(String::from)
        .collect();
    (families, histograms)
}

#[test]
fn dashboard_is_current_grafana_schema_with_its_variables() {
    let dashboard = dashboard();
    assert!(dashboard["schemaVersion"].as_u64().expect("schemaVersion") >= 39);
    assert!(dashboard["uid"].as_str().is_some_and(|uid| !uid.is_empty()));
    let variable = |name: &str| variables(&dashboard).iter().find(|v| v["name"] == name).cloned().expect(name);
    let datasource = variable("datasource");
    assert_eq!((&datasource["type"], &datasource["query"]), (&Value::from("datasource"), &Value::from("prometheus")));
    let upstream = variable("upstream");
    assert_eq!(upstream["type"], "query");
    assert_eq!(upstream["definition"], "label_values(mcp_proxy_upstream_up, upstream)");
    assert_eq!((&upstream["multi"], &upstream["includeAll"]), (&Value::Bool(true), &Value::Bool(true)));

    let rows: Vec<&str> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "row")
        .filter_map(|p| p["title"].as_str())
        .collect();
    assert_eq!(
        rows,
        [
            "Overview",
            "Upstreams",
            "Cache",
            "Subscriptions & notifications",
            "Access control",
            "Tools, prompts & completion",
            "Cluster"
        ]
    );
}

#[test]
fn every_panel_has_a_query_on_the_datasource_variable_and_a_unique_id() {
    let dashboard = dashboard();
    let mut ids = BTreeSet::new();
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or("?");
        assert!(ids.insert(panel["id"].as_u64().expect("panel id")), "{title}: duplicate id");
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets =
            panel["targets"].as_array().filter(|t| !t.is_empty()).unwrap_or_else(|| panic!("{title}: no targets"));
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or_default();
            assert!(!expr.trim().is_empty(), "{title}: a target without an expr");
            assert!(!metric_names(expr).is_empty(), "{title}: `{expr}` reads no metric of ours");
        }
    }
}

#[test]
fn every_metric_name_in_every_query_is_an_exported_family() {
    let dashboard = dashboard();
    let (families, histograms) = exported();
    assert!(!histograms.is_empty());
    let mut used = BTreeSet::new();
    for query in queries(&dashboard) {
        for name in metric_names(&query) {
            let histogram = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix).filter(|base| histograms.contains(*base)));
            match histogram {
                Some(base) => used.insert(base.to_string()),
                None => {
                    assert!(families.contains(name), "`{name}` in `{query}` is not a family Metrics registers");
                    assert!(
                        !histograms.contains(name),
                        "histogram `{name}` used without _bucket/_sum/_count: `{query}`"
                    );
                    used.insert(name.to_string())
                }
            };
        }
    }
    let unused: Vec<&String> = families.difference(&used).collect();
    assert!(unused.is_empty(), "families no panel shows: {unused:?}");
}

#[test]
fn every_variable_used_is_defined() {
    let dashboard = dashboard();
    let defined: BTreeSet<String> =
        variables(&dashboard).iter().map(|v| v["name"].as_str().expect("variable name").to_string()).collect();
    let mut texts = Vec::new();
    strings(&dashboard, &mut texts);
    for text in texts {
        for reference in variable_references(&text) {
            let builtin = reference.starts_with("__");
            assert!(builtin || defined.contains(&reference), "`${reference}` in `{text}` is not defined in templating");
        }
    }
}

#[test]
fn the_instance_variable_lists_the_replicas() {
    let dashboard = dashboard();
    let instance = variables(&dashboard).iter().find(|v| v["name"] == "instance").cloned().expect("instance");
    assert_eq!(instance["type"], "query");
    assert_eq!(instance["definition"], "label_values(mcp_proxy_build_info, instance)");
    assert_eq!(instance["query"]["query"], instance["definition"]);
    assert_eq!(instance["datasource"]["uid"], "${datasource}");
    assert_eq!((&instance["multi"], &instance["includeAll"]), (&Value::Bool(true), &Value::Bool(true)));
}

#[test]
fn every_metric_every_panel_reads_is_filtered_on_the_instance_variable() {
    let dashboard = dashboard();
    let mut selectors = 0;
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or("?");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default();
            for name in metric_names(expr) {
                for (at, _) in expr.match_indices(name).filter(|(at, _)| is_metric_at(expr, *at, name)) {
                    let matchers = expr[at + name.len()..].strip_prefix('{').and_then(|rest| rest.split_once('}'));
                    let matchers = matchers.map(|(inside, _)| inside).unwrap_or_default();
                    assert!(
                        matchers.split(',').any(|m| m.trim() == "instance=~\"$instance\""),
                        "{title}: `{name}` is not filtered on instance in `{expr}`"
                    );
                    selectors += 1;
                }
            }
        }
    }
    assert!(selectors > 40, "only {selectors} metric selectors seen");
}

/// Whether `name` at byte `at` of `expr` is a whole metric name (not part of a longer word).
fn is_metric_at(expr: &str, at: usize, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    !expr[..at].chars().next_back().is_some_and(word) && !expr[at + name.len()..].chars().next().is_some_and(word)
}

#[test]
fn the_extractors_find_what_they_should() {
    assert_eq!(
        metric_names("sum(rate(mcp_proxy_a_total{x=\"mcp_proxy_b\"}[5m])) / xmcp_proxy_c"),
        ["mcp_proxy_a_total", "mcp_proxy_b"]
    );
    assert_eq!(
        metric_names("rate(mcp_server_operation_duration_seconds_bucket[5m]) + mcp_client_x + mcp_proxy_y"),
        ["mcp_server_operation_duration_seconds_bucket", "mcp_client_x", "mcp_proxy_y"]
    );
    assert_eq!(
        variable_references("a=~\"$upstream\" ${datasource} ${x:csv} [[old]] $__rate_interval $"),
        ["upstream", "datasource", "x", "__rate_interval", "old"]
    );
}

/// Every panel that shows a latency (our histograms and the semantic conventions' two) links
/// a point to the traces at least that slow, on the `traces` data source variable (Tempo):
/// an Explore link whose TraceQL names the span kind and the point's value.
#[test]
fn every_latency_panel_links_a_slow_point_to_its_traces() {
    let dashboard = dashboard();
    let traces = variables(&dashboard).iter().find(|v| v["name"] == "traces").cloned().expect("traces variable");
    assert_eq!((&traces["type"], &traces["query"]), (&Value::from("datasource"), &Value::from("tempo")));
    let mut linked = 0;
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap_or("?");
        let exprs: Vec<&str> =
            panel["targets"].as_array().into_iter().flatten().filter_map(|t| t["expr"].as_str()).collect();
        let latency = exprs.iter().any(|expr| expr.contains("duration_seconds_bucket"));
        let links = panel["fieldConfig"]["defaults"]["links"].as_array();
        if !latency {
            continue;
        }
        let link = links.and_then(|links| links.first()).unwrap_or_else(|| panic!("{title}: no link to traces"));
        let url = link["url"].as_str().expect("a link's url");
        let query = percent_decoded(url);
        assert!(url.starts_with("/explore?"), "{title}: {url}");
        assert!(query.contains("\"datasource\":\"${traces}\""), "{title}: not on the traces variable: {query}");
        assert!(query.contains("\"queryType\":\"traceql\""), "{title}: {query}");
        assert!(query.contains("duration>=${__value.raw}s"), "{title}: not the point's value: {query}");
        assert!(query.contains("kind=server") || query.contains("kind=client"), "{title}: {query}");
        linked += 1;
    }
    assert!(linked >= 6, "only {linked} latency panels");
}

/// `text` with its `%XX` escapes decoded (ASCII).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
