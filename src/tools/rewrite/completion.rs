//! `completion/complete` values for the caller. A value is a suggestion the host may insert
//! as it is, so it follows the URI rule of every other slot ([`Links::judge`]): a resource URI
//! of the upstream is namespaced; one the caller may not read is dropped, and so is a raw URI of
//! another upstream (not in a form the host can use through the proxy); other values (words,
//! numbers, `https://…`) pass as sent.
//!
//! `total` and `hasMore` stay honest: when every value was seen (`total` no more than the values
//! sent, or absent without `hasMore`), a `total` is the count kept; when the upstream holds more
//! than it sent, the unseen values were never judged, so `total` is dropped (whatever was
//! dropped among those sent: by rule, so its absence tells nothing) unless the caller's policy
//! is allow-all (then it is only lowered by the values dropped); `hasMore` is kept.

use rmcp::model::CompletionInfo;

use super::links::{Link, Links};

/// The upstream's completion as the caller may see it; how many values were dropped.
pub(crate) fn completion_for(links: &Links<'_>, mut completion: CompletionInfo) -> (CompletionInfo, usize) {
    let (total, has_more) = (completion.total, completion.has_more);
    let sent = completion.values.len();
    let kept: Vec<String> = std::mem::take(&mut completion.values)
        .into_iter()
        .filter_map(|value| match links.judge(&value) {
            Link::Namespaced(namespaced) => Some(namespaced),
            Link::Plain if !links.names_denied(&value) => Some(value),
            Link::Plain | Link::Elsewhere | Link::Denied => None,
        })
        .collect();
    let dropped = sent - kept.len();
    let all_seen = match total {
        Some(total) => total as usize <= sent,
        None => has_more != Some(true),
    };
    let total = if all_seen {
        total.map(|_| kept.len() as u32)
    } else if links.policy().is_allow_all() {
        total.map(|total| total.saturating_sub(dropped as u32))
    } else {
        None
    };
    completion.values = kept;
    completion.total = total;
    (completion, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Catalog, UpstreamCatalog};
    use crate::policy::PolicySet;
    use rmcp::model::Resource;

    fn check(values: &[&str], total: Option<u32>, has_more: Option<bool>, expected: (&[&str], Option<u32>)) {
        let catalog = Catalog::new();
        let docs = UpstreamCatalog { resources: vec![Resource::new("docs+py://doc/public/1", "p")], templates: vec![] };
        catalog.set_upstream("docs", docs);
        let fx = UpstreamCatalog { resources: vec![Resource::new("fx+fx://fx/item/1", "i")], templates: vec![] };
        catalog.set_upstream("fx", fx);
        let text = "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"docs+py://doc/secret/**\"]\n";
        let policy = PolicySet::from_texts(&[("p.toml", text)]).expect("valid policy");
        let snapshot = catalog.snapshot();
        let links = Links::new("docs", &snapshot, &policy, "alice");
        let mut info = CompletionInfo::default();
        info.values = values.iter().map(|v| v.to_string()).collect();
        (info.total, info.has_more) = (total, has_more);
        let (info, _) = completion_for(&links, info);
        assert_eq!(
            (info.values.as_slice(), info.total),
            (expected.0.iter().map(|v| v.to_string()).collect::<Vec<_>>().as_slice(), expected.1),
            "{values:?}"
        );
        assert_eq!(info.has_more, has_more);
    }

    #[test]
    fn values_naming_denied_or_other_upstreams_resources_are_dropped_and_total_stays_honest() {
        let values = [
            "py://doc/public/1",
            "py://doc/secret/1",
            "docs+py://doc/secret/2",
            "fx://fx/item/1",
            "plain",
            "https://example.com/",
        ];
        let kept = ["docs+py://doc/public/1", "plain", "https://example.com/"];
        check(&values, Some(6), Some(false), (&kept, Some(3)));
        check(&values, None, None, (&kept, None));
        check(&values, Some(40), Some(true), (&kept, None));
        check(&["a", "b"], Some(40), Some(true), (&["a", "b"], None));
        check(&["a", "b"], Some(2), None, (&["a", "b"], Some(2)));
        check(&["py://doc/public/2"], Some(1), None, (&["docs+py://doc/public/2"], Some(1)));
    }
}
