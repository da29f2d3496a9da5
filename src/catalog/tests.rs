use super::*;

fn entries(prefix: &str, n: usize) -> UpstreamCatalog {
    UpstreamCatalog {
        resources: (0..n).map(|i| Resource::new(format!("{prefix}+x://r/{i}"), format!("r{i}"))).collect(),
        templates: vec![ResourceTemplate::new(format!("{prefix}+x://r/{{id}}"), "t")],
    }
}

fn all_pages(snapshot: &Snapshot, limit: usize, visible: &dyn Fn(&str) -> bool) -> Vec<String> {
    let mut uris = Vec::new();
    let mut offset = Some(0);
    while let Some(at) = offset {
        let page = page(&snapshot.parts, at, limit, |p| &p.resources, |r| visible(&r.uri));
        assert!(page.items.len() <= limit);
        uris.extend(page.items.into_iter().map(|r| r.uri));
        offset = page.next;
    }
    uris
}

#[test]
fn schemes_of_an_upstream_are_those_of_its_own_resources_and_templates() {
    let catalog = Catalog::new();
    let mut a = entries("a", 1);
    a.templates.push(ResourceTemplate::new("a+Demo://t/{id}", "t2"));
    catalog.set_upstream("a", a);
    catalog
        .set_upstream("b", UpstreamCatalog { resources: vec![Resource::new("b+file:///x", "x")], templates: vec![] });
    let snapshot = catalog.snapshot();
    assert_eq!(snapshot.schemes_of("a").into_iter().collect::<Vec<_>>(), ["demo", "x"]);
    assert_eq!(snapshot.schemes_of("b").into_iter().collect::<Vec<_>>(), ["file"]);
    assert!(snapshot.schemes_of("c").is_empty());
}

#[test]
fn pages_walk_the_merged_list_in_upstream_name_order() {
    let catalog = Catalog::new();
    catalog.set_upstream("b", entries("b", 3));
    catalog.set_upstream("a", entries("a", 4));
    let snapshot = catalog.snapshot();
    assert_eq!(snapshot.generation, 2);
    let uris = all_pages(&snapshot, 3, &|_| true);
    assert_eq!(uris.len(), 7);
    assert!(uris[..4].iter().all(|u| u.starts_with("a+")));
    assert!(uris[4..].iter().all(|u| u.starts_with("b+")));
    assert_eq!(snapshot.counts().iter().map(|(_, _, templates)| templates).sum::<usize>(), 2);
}

#[test]
fn duplicates_are_dropped_and_the_first_kept() {
    let mut part = entries("a", 3);
    part.resources.push(Resource::new("a+x://r/1", "second"));
    part.templates.push(ResourceTemplate::new("a+x://r/{id}", "second"));
    assert_eq!(part.dedupe(), 2);
    let names: Vec<&str> = part.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["r0", "r1", "r2"]);
    assert_eq!(part.templates.len(), 1);
    assert_eq!(part.templates[0].name, "t");
}

#[test]
fn an_exact_fit_ends_without_an_empty_page() {
    let catalog = Catalog::new();
    catalog.set_upstream("a", entries("a", 4));
    let page = page(&catalog.snapshot().parts, 0, 4, |p| &p.resources, |_| true);
    assert_eq!(page.items.len(), 4);
    assert_eq!(page.next, None);
}

#[test]
fn hidden_items_are_skipped_not_counted() {
    let catalog = Catalog::new();
    catalog.set_upstream("a", entries("a", 10));
    let even = |uri: &str| uri.rsplit('/').next().unwrap().parse::<u32>().unwrap() % 2 == 0;
    let uris = all_pages(&catalog.snapshot(), 2, &even);
    assert_eq!(uris, ["a+x://r/0", "a+x://r/2", "a+x://r/4", "a+x://r/6", "a+x://r/8"]);
}

#[test]
fn the_fingerprint_follows_the_content_not_the_history() {
    let steady = Catalog::new();
    steady.set_upstream("a", entries("a", 3));
    steady.set_upstream("b", entries("b", 2));
    let churned = Catalog::new();
    churned.set_upstream("b", entries("b", 5));
    churned.set_upstream("a", entries("a", 3));
    churned.remove_upstream("b");
    churned.set_upstream("b", entries("b", 2));
    let (steady, churned) = (steady.snapshot(), churned.snapshot());
    assert_ne!(steady.generation, churned.generation, "another history");
    assert_eq!(steady.fingerprint(), churned.fingerprint(), "the same lists, the same fingerprint");
    let other = Catalog::new();
    other.set_upstream("a", entries("a", 3));
    other.set_upstream("b", entries("b", 3));
    assert_ne!(other.snapshot().fingerprint(), steady.fingerprint(), "another list");
}

#[test]
fn snapshots_are_immutable_and_removal_bumps_the_generation() {
    let catalog = Catalog::new();
    catalog.set_upstream("a", entries("a", 2));
    let before = catalog.snapshot();
    let generation = catalog.remove_upstream("a");
    assert_eq!(before.counts()[0].1, 2);
    assert_eq!(catalog.snapshot().counts().len(), 0);
    assert_eq!(generation, before.generation + 1);
}
