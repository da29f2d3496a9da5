//! Fetching an upstream's whole catalog: every page of its resources and templates,
//! namespaced, with the shortest `ttlMs` the pages came with. A list is bounded at 100,000
//! items (and pages); a cursor the upstream already gave ends it as a loop (an error). Its
//! tools and prompts (`offerings`) are fetched and counted by the same [`every_page`].
//!
//! An entry's `icons[].src` that is a whole URI in a scheme the upstream serves (one of its
//! listed resources' or templates') is namespaced here like the entry's own URI; every other
//! `src` is kept as sent. Which icons a caller sees is decided per list request
//! (`proxy::lists`), by the same rule as tool and prompt icons.
//!
//! Invariant: an upstream that did not declare `resources` is never asked for them, and a list
//! it answers with -32601 is empty (counted: `outcome="method_not_found"`), never a failed
//! connection.

use std::collections::BTreeSet;
use std::time::Duration;

use rmcp::model::{Icon, PaginatedRequestParams, Resource, ResourceTemplate};
use rmcp::service::ServiceError;

use super::{Connection, Link};
use crate::catalog::UpstreamCatalog;
use crate::namespace;

/// A guard against upstreams whose cursors never end.
const MAX_PAGES: usize = 100_000;
/// A guard against an upstream that lists without end: one list (resources, templates, tools
/// or prompts) holds at most this many items; a longer one fails its fetch.
const MAX_ITEMS: usize = 100_000;
/// Lists are not fetched again more often than this, whatever `ttlMs` says.
const MIN_REFRESH: Duration = Duration::from_secs(1);

/// What one fetch produced.
pub(super) struct Listing {
    pub entries: UpstreamCatalog,
    /// When to fetch again (the upstream's shortest positive `ttlMs`); `None`: only on
    /// `list_changed` or reconnect.
    pub refresh: Option<Duration>,
}

pub(super) async fn fetch(upstream: &Connection, link: &Link) -> Result<Listing, String> {
    if link.capabilities.resources.is_none() {
        // Not declared: the upstream has no resources, and is not asked for them.
        return Ok(Listing { entries: UpstreamCatalog::default(), refresh: None });
    }
    let (name, peer) = (upstream.name(), &link.peer);
    let metrics = &upstream.inner.metrics;
    let (resources, resources_ttl) = every_page(upstream, link, "resources/list", true, |cursor| async {
        let page = peer.list_resources(Some(PaginatedRequestParams::default().with_cursor(cursor))).await?;
        Ok((page.resources, page.next_cursor, page.ttl_ms))
    })
    .await?;
    let (templates, templates_ttl) = every_page(upstream, link, "resources/templates/list", true, |cursor| async {
        let page = peer.list_resource_templates(Some(PaginatedRequestParams::default().with_cursor(cursor))).await?;
        Ok((page.resource_templates, page.next_cursor, page.ttl_ms))
    })
    .await?;
    let unlisted = |uri: &str| {
        tracing::warn!(upstream = name, uri, "URI has no scheme; not listed");
        metrics.catalog_entry_unlisted(name);
    };
    let served = served_schemes(&resources, &templates);
    let mut entries = UpstreamCatalog {
        resources: resources.into_iter().filter_map(|r| namespace_resource(name, &served, r, &unlisted)).collect(),
        templates: templates.into_iter().filter_map(|t| namespace_template(name, &served, t, &unlisted)).collect(),
    };
    let duplicates = entries.dedupe();
    if duplicates > 0 {
        tracing::warn!(upstream = name, duplicates, "upstream lists URIs more than once; each listed once");
        (0..duplicates).for_each(|_| metrics.catalog_entry_unlisted(name));
    }
    let refresh = [resources_ttl, templates_ttl]
        .into_iter()
        .flatten()
        .filter(|ttl| *ttl > 0)
        .min()
        .map(|ttl| Duration::from_millis(ttl).max(MIN_REFRESH));
    Ok(Listing { entries, refresh })
}

/// The lower-cased schemes of an upstream's own (not yet namespaced) URIs and templates.
fn served_schemes(resources: &[Resource], templates: &[ResourceTemplate]) -> BTreeSet<String> {
    let uris = resources.iter().map(|r| r.uri.as_str());
    let templates = templates.iter().map(|t| t.uri_template.as_str());
    uris.chain(templates).filter_map(|uri| uri.split_once(':')).map(|(scheme, _)| scheme.to_ascii_lowercase()).collect()
}

fn namespace_resource(
    upstream: &str,
    served: &BTreeSet<String>,
    mut resource: Resource,
    unlisted: &dyn Fn(&str),
) -> Option<Resource> {
    let Some(uri) = namespace::namespaced(upstream, &resource.uri) else {
        unlisted(&resource.uri);
        return None;
    };
    resource.uri = uri;
    namespace_icons(upstream, served, resource.icons.as_deref_mut());
    Some(resource)
}

fn namespace_template(
    upstream: &str,
    served: &BTreeSet<String>,
    mut template: ResourceTemplate,
    unlisted: &dyn Fn(&str),
) -> Option<ResourceTemplate> {
    let Some(uri_template) = namespace::namespaced_template(upstream, &template.uri_template) else {
        unlisted(&template.uri_template);
        return None;
    };
    template.uri_template = uri_template;
    namespace_icons(upstream, served, template.icons.as_deref_mut());
    Some(template)
}

/// Each `src` that is a whole URI in a scheme `upstream` serves, namespaced; the others as sent.
fn namespace_icons(upstream: &str, served: &BTreeSet<String>, icons: Option<&mut [Icon]>) {
    for icon in icons.into_iter().flatten() {
        let own = namespace::whole_uri_scheme(&icon.src).is_some_and(|scheme| served.contains(&scheme));
        if let Some(namespaced) = own.then(|| namespace::namespaced(upstream, &icon.src)).flatten() {
            icon.src = namespaced;
        }
    }
}

/// Every page of one list (`method`) on `link` (none when the upstream does not `offer` it),
/// with the shortest `ttlMs` of its pages; counted with its `outcome`: `ok`, `method_not_found`
/// (the upstream answered -32601: an empty list, never a failure, as a server that does not have
/// a kind of thing need not implement its list), or `upstream_failed`.
pub(super) async fn every_page<T, Fut>(
    upstream: &Connection,
    link: &Link,
    method: &'static str,
    offers: bool,
    page: impl FnMut(Option<String>) -> Fut,
) -> Result<(Vec<T>, Option<u64>), String>
where
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>, Option<u64>), ServiceError>>,
{
    let started = std::time::Instant::now();
    let listed = match offers {
        false => Ok((Vec::new(), None)),
        true => all_pages(upstream.config().request_timeout, page).await,
    };
    let (outcome, listed) = match listed {
        Ok(listed) => ("ok", Ok(listed)),
        Err(e) if e.is_method_not_found() => ("method_not_found", Ok((Vec::new(), None))),
        Err(e) => ("upstream_failed", Err(format!("{method}: {e}"))),
    };
    let (name, hop) = (upstream.name(), upstream.hop_over(Some(link)));
    upstream.inner.metrics.upstream_request(name, method, outcome, started.elapsed(), hop);
    listed
}

/// A failed page fetch.
#[derive(Debug)]
enum PageError {
    Service(ServiceError),
    Timeout,
    Loop,
    TooMany,
}

impl PageError {
    fn is_method_not_found(&self) -> bool {
        matches!(self, PageError::Service(ServiceError::McpError(e)) if e.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND)
    }
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PageError::Service(e) => f.write_str(&super::reason::service_failure(e)),
            PageError::Timeout => f.write_str("timed out"),
            PageError::Loop => f.write_str("the upstream's cursors do not end"),
            PageError::TooMany => write!(f, "the upstream lists more than {MAX_ITEMS} items"),
        }
    }
}

impl From<ServiceError> for PageError {
    fn from(e: ServiceError) -> Self {
        PageError::Service(e)
    }
}

/// Follow cursors to the end; the items and the shortest `ttlMs` of any page.
async fn all_pages<T, F, Fut>(timeout: Duration, mut fetch: F) -> Result<(Vec<T>, Option<u64>), PageError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>, Option<u64>), ServiceError>>,
{
    let mut items = Vec::new();
    let mut ttl: Option<u64> = None;
    let mut cursor = None;
    let mut seen = std::collections::HashSet::new();
    for _ in 0..MAX_PAGES {
        let (page, next, page_ttl) =
            tokio::time::timeout(timeout, fetch(cursor)).await.map_err(|_| PageError::Timeout)??;
        items.extend(page);
        if items.len() > MAX_ITEMS {
            return Err(PageError::TooMany);
        }
        ttl = match (ttl, page_ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match next {
            Some(next) if !seen.insert(next.clone()) => return Err(PageError::Loop),
            Some(next) => cursor = Some(next),
            None => return Ok((items, ttl)),
        }
    }
    Err(PageError::Loop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Icons in a scheme the upstream serves are namespaced with its entries; `https:`,
    /// `data:`, another upstream's proxy-form URI and prose are kept as sent.
    #[test]
    fn icons_in_a_served_scheme_are_namespaced_at_listing() {
        let icons = [
            "py://icons/a.png",
            "PY://doc/secret/b.png",
            "https://e.com/c.png",
            "data:image/png;base64,AA",
            "fx+fx://x",
            "py://a b",
        ];
        let resource = Resource::new("py://doc/1", "d").with_icons(icons.iter().map(|src| Icon::new(*src)).collect());
        let template = ResourceTemplate::new("tpl://t/{id}", "t").with_icons(vec![Icon::new("tpl://icon")]);
        let served = served_schemes(std::slice::from_ref(&resource), std::slice::from_ref(&template));
        let none = |_: &str| {};
        let listed = namespace_resource("docs", &served, resource, &none).expect("listed");
        let srcs: Vec<&str> = listed.icons.iter().flatten().map(|icon| icon.src.as_str()).collect();
        let expected = [
            "docs+py://icons/a.png",
            "docs+PY://doc/secret/b.png",
            "https://e.com/c.png",
            "data:image/png;base64,AA",
            "fx+fx://x",
            "py://a b",
        ];
        assert_eq!(srcs, expected);
        let listed = namespace_template("docs", &served, template, &none).expect("listed");
        assert_eq!(listed.icons.expect("icons")[0].src, "docs+tpl://icon");
    }

    /// An upstream whose pages never end with fresh cursors fails the fetch once the list
    /// outgrows the bound, instead of growing without end.
    #[tokio::test]
    async fn a_list_without_end_fails_at_the_item_bound() {
        let mut pages = 0usize;
        let fetched = all_pages(Duration::from_secs(5), |_| {
            pages += 1;
            let next = Some(format!("page-{pages}"));
            async move { Ok((vec![0u8; 1_000], next, None)) }
        })
        .await;
        assert!(matches!(fetched, Err(PageError::TooMany)));
        assert_eq!(pages, MAX_ITEMS / 1_000 + 1);
    }
}
