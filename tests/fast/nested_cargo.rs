//! A cargo started inside the tests (the fixture's `cargo build --example`, the README's `cargo
//! run` lines) rebuilds nothing `cargo test` built. Two causes of such a rebuild are ruled out:
//! a build script watching a variable cargo set for the test process (ring's watches
//! `CARGO_MANIFEST_DIR` and `CARGO_PKG_*`: it would rerun, and ring and everything above it be
//! rebuilt, here and again at the next cargo started without them), and a dev-dependency turning
//! on a feature of a crate the product builds (`cargo build` and `cargo run` build no
//! dev-dependency, so they would build that crate and everything above it a second time).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::support::{cargo, repo_root};

/// Every `CARGO_*` variable that a build script of this build watches and that this test process
/// has is left out of the environment of a cargo the tests start.
#[test]
fn a_nested_cargo_sees_no_variable_cargo_set_for_the_tests_that_a_build_script_watches() {
    let watched_here: BTreeSet<String> = watched_variables()
        .into_iter()
        .filter(|name| name.starts_with("CARGO_") && std::env::var_os(name).is_some())
        .collect();
    let command = cargo();
    let removed: BTreeSet<String> = command
        .get_envs()
        .filter(|(_, value)| value.is_none())
        .map(|(name, _)| name.to_string_lossy().into_owned())
        .collect();
    let kept: Vec<&String> = watched_here.difference(&removed).collect();
    assert!(kept.is_empty(), "a nested cargo would see, and rerun a build script for: {kept:?}");
}

/// For every crate that `cargo build` (no dev-dependencies) builds, `cargo test` turns on the
/// same features, so that the binary alone reuses what the tests built.
#[test]
fn the_binary_alone_builds_every_crate_with_the_features_the_tests_built_it_with() {
    let with_tests = features("normal,build,dev");
    let alone = features("no-dev");
    let differ: Vec<String> = alone
        .iter()
        .filter(|(package, sets)| with_tests.get(*package) != Some(sets))
        .map(|(package, sets)| format!("{package}: {sets:?} alone, {:?} with the tests", with_tests.get(package)))
        .collect();
    assert!(differ.is_empty(), "features turned on by dev-dependencies only:\n{}", differ.join("\n"));
}

/// The names in the `rerun-if-env-changed` lines of this profile's build scripts' outputs.
fn watched_variables() -> BTreeSet<String> {
    let build = profile_dir().join("build");
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(&build).expect("the profile's build folder").flatten() {
        let output = std::fs::read_to_string(entry.path().join("output")).unwrap_or_default();
        names.extend(output.lines().filter_map(|line| {
            let directive = line.strip_prefix("cargo::").or_else(|| line.strip_prefix("cargo:"))?;
            directive.strip_prefix("rerun-if-env-changed=").map(str::to_owned)
        }));
    }
    names
}

/// `target/<profile>`: the test executable is in its `deps` folder.
fn profile_dir() -> PathBuf {
    let executable = std::env::current_exe().expect("the test executable");
    executable.parent().and_then(|deps| deps.parent()).expect("target/<profile>").to_path_buf()
}

/// `cargo tree --edges EDGES` of the workspace: each package with the feature sets it is built with.
fn features(edges: &str) -> BTreeMap<String, BTreeSet<String>> {
    let output = cargo()
        .args(["tree", "--locked", "--workspace", "--prefix", "none", "--format", "{p}|{f}", "--edges", edges])
        .current_dir(repo_root())
        .output()
        .expect("cargo tree");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let mut packages: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        if let Some((package, features)) = line.trim_end_matches(" (*)").split_once('|') {
            packages.entry(package.to_owned()).or_default().insert(features.to_owned());
        }
    }
    packages
}
