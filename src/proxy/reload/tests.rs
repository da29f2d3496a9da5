use super::*;

fn config(text: &str) -> Config {
    Config::from_toml(text, Path::new("/"), &|_| None).expect("config")
}

fn upstream(name: &str, port: u16) -> String {
    format!("[[upstreams]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:{port}/mcp\"\n")
}

#[test]
fn the_diff_names_added_removed_and_changed_upstreams() {
    let running = config(&[upstream("a", 1), upstream("b", 2), upstream("c", 3)].concat());
    let running: BTreeMap<String, Upstream> =
        running.upstreams.into_iter().map(|u| (u.name.clone(), Upstream::new(u, Metrics::new()))).collect();
    let next = config(&[upstream("a", 1), upstream("c", 4), upstream("d", 5)].concat());
    let diff = diff(&running, &next.upstreams);
    let names = |configs: &[UpstreamConfig]| configs.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&diff.added), ["d"]);
    assert_eq!(diff.removed, ["b"]);
    assert_eq!(names(&diff.changed), ["c"]);
}

#[test]
fn a_change_of_roots_alone_is_made_in_place() {
    let rooted = |name: &str, root: &str| format!("{}roots = [\"{root}\"]\n", upstream(name, 1));
    let running = config(&[rooted("a", "file:///x"), rooted("b", "file:///x")].concat());
    let running: BTreeMap<String, Upstream> =
        running.upstreams.into_iter().map(|u| (u.name.clone(), Upstream::new(u, Metrics::new()))).collect();
    let next = config(&[rooted("a", "file:///y"), rooted("b", "file:///x")].concat());
    let diff = diff(&running, &next.upstreams);
    assert!(diff.changed.is_empty());
    assert_eq!(diff.rerooted.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["a"]);
}

#[test]
fn sections_that_cannot_change_live_are_named() {
    let running = config(&upstream("a", 1));
    let next = config(&format!(
        "[server]\npage_size = 7\n[cache]\nenabled = false\n[bridge]\nenabled = true\n[audit]\nqueue = 7\n{}",
        upstream("b", 2)
    ));
    assert_eq!(restart_needed(&running, &next), ["server", "cache", "bridge", "audit"]);
    assert!(restart_needed(&running, &running.clone()).is_empty());
}
