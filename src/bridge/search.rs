//! `proxy_resources_search`: a case-insensitive substring over each listed resource's name,
//! title, URI and description, through the caller's own list pages.
//!
//! Bounded per call: one call examines at most `bridge.max_search_scan` listed resources; past
//! that it stops and says so (`incomplete: true`, a `nextCursor` to go on from, and a `note` in
//! words), so a catalog of any size costs one call a bounded amount of work. The walk runs on
//! the blocking pool, at most [`SCANS_AT_ONCE`] at a time across every principal, so searches
//! never hold the async workers that answer everyone else's reads; a call waiting for its turn
//! holds its place under `server.max_calls_per_principal` like any routed call.

use std::sync::LazyLock;

use rmcp::model::JsonObject;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::answers::{listed, structured};
use super::{Answer, optional_string, string_argument};
use crate::proxy::{Caller, Proxy};

/// Searches walking the catalog at once, across every principal: one, so a second core is
/// always left for reads.
pub const SCANS_AT_ONCE: usize = 1;

static SCANS: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(SCANS_AT_ONCE));

/// What one call asks for.
struct Query {
    text: String,
    limit: usize,
    cursor: Option<String>,
    budget: usize,
}

/// What one call found.
struct Found {
    matches: Vec<Value>,
    /// More matches than `limit` exist.
    truncated: bool,
    /// Where an unfinished walk stopped (the budget ran out), to go on from.
    resume: Option<String>,
}

/// `proxy_resources_search`: the first matches (at most `limit`, capped by
/// `bridge.max_search_results`) among at most `bridge.max_search_scan` listed resources.
pub(super) async fn search(proxy: &Proxy, caller: &Caller, arguments: &JsonObject) -> Answer {
    let query = query(proxy, arguments)?;
    let budget = query.budget;
    let _turn = SCANS.acquire().await.map_err(|_| "the proxy is shutting down".to_string())?;
    let (proxy, caller) = (proxy.clone(), caller.clone());
    let found = tokio::task::spawn_blocking(move || walk(&proxy, &caller, query))
        .await
        .map_err(|_| "the search failed".to_string())??;
    let mut answer = json!({ "resources": found.matches, "truncated": found.truncated });
    if let Some(cursor) = found.resume {
        answer["incomplete"] = json!(true);
        answer["nextCursor"] = json!(cursor);
        answer["note"] = json!(format!(
            "The search stopped after examining {budget} resources (bridge.max_search_scan); \
             call it again with this nextCursor as cursor to search the rest."
        ));
    }
    Ok(structured(answer))
}

fn query(proxy: &Proxy, arguments: &JsonObject) -> Result<Query, String> {
    let text = string_argument(arguments, "query")?.to_lowercase();
    let bridge = &proxy.config().bridge;
    let cap = bridge.max_search_results;
    let limit = match arguments.get("limit") {
        None | Some(Value::Null) => cap,
        Some(value) => match value.as_u64() {
            Some(n) if n >= 1 => usize::try_from(n).unwrap_or(cap).min(cap),
            _ => return Err("`limit` must be a whole number of at least 1".into()),
        },
    };
    let cursor = optional_string(arguments, "cursor")?;
    Ok(Query { text, limit, cursor, budget: bridge.max_search_scan })
}

/// Walk the caller's list pages from `query.cursor` until `limit` matches are past, the list
/// ends, or `budget` resources were examined.
fn walk(proxy: &Proxy, caller: &Caller, query: Query) -> Result<Found, String> {
    let mut found = Found { matches: Vec::new(), truncated: false, resume: None };
    let mut cursor = query.cursor;
    let mut examined = 0;
    loop {
        let page = proxy.list_resources(caller, cursor.as_deref()).map_err(|e| e.to_string())?;
        for resource in page.resources.iter().map(listed) {
            examined += 1;
            if !matches_query(&resource, &query.text) {
                continue;
            }
            if found.matches.len() == query.limit {
                found.truncated = true;
                return Ok(found);
            }
            found.matches.push(resource);
        }
        cursor = page.next_cursor;
        match cursor {
            None => return Ok(found),
            Some(next) if examined >= query.budget => {
                found.resume = Some(next);
                return Ok(found);
            }
            Some(_) => {}
        }
    }
}

fn matches_query(resource: &Value, query: &str) -> bool {
    ["uri", "name", "title", "description"]
        .iter()
        .filter_map(|key| resource.get(key)?.as_str())
        .any(|text| text.to_lowercase().contains(query))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_matches_any_listed_text_field_case_insensitively() {
        let resource = json!({"uri": "docs+file:///A.md", "name": "a", "description": "The Roadmap"});
        assert!(matches_query(&resource, "roadmap"));
        assert!(matches_query(&resource, "file:///a.md"));
        assert!(!matches_query(&resource, "mimetype"));
    }
}
