//! Every channel bounded, every long-lived task on the spine: outside test code there is no
//! unbounded channel, and `tokio::spawn` appears only where the task is one short job of a
//! request or connection (listed below with what ends it). A long-lived background task is
//! spawned through `spine::Spine::spawn`, named and drained with the rest.

use super::PRODUCT;
use super::scan::{self, Source};

/// Files that spawn short tasks off the spine, and what ends each.
const SHORT_TASKS: &[(&str, &str)] = &[
    ("upstream/offerings.rs", "one `notifications/cancelled` send of an abandoned call"),
    ("serve_dir/watch.rs", "one notification to one peer, bounded by SEND_TIMEOUT"),
    ("auth/jwks.rs", "one key-set fetch, at most one at a time"),
    ("listener.rs", "one HTTP connection, held by its connection permit and drained by graceful shutdown"),
    ("downstream/offerings.rs", "one call's progress sender, ending with the call"),
    ("tools/parked.rs", "one parked upstream call, ending with the call or its time limit"),
    ("downstream/kept.rs", "one forwarded call kept past its forwarding replica, ending with the call"),
    ("downstream/shared/keepers.rs", "one word on a kept answer asked for, ending with the call or at COLLECT_WAIT"),
];

/// The code of `source` that is not test code: nothing of a `tests` module's file, and a file's
/// text before its inline `mod tests`.
fn production_code(source: &Source) -> String {
    if source.module.iter().any(|m| m == "tests") {
        return String::new();
    }
    let text = scan::strip_comments(&source.text);
    let inline_tests = text.match_indices("#[cfg(test)]\n").map(|(at, _)| at).find(|at| {
        let next = text[at + "#[cfg(test)]\n".len()..].lines().next().unwrap_or_default();
        next.contains("mod ") && next.trim_end().ends_with('{')
    });
    match inline_tests {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// `(file:line, what)` for each line of production code that contains `needle`.
fn lines_with(needle: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for source in scan::sources(PRODUCT) {
        for (index, line) in production_code(&source).lines().enumerate() {
            if line.contains(needle) {
                found.push((source.file.clone(), format!("{}:{}: {}", source.file, index + 1, line.trim())));
            }
        }
    }
    found
}

#[test]
fn no_channel_is_unbounded() {
    let found: Vec<String> = lines_with("unbounded").into_iter().map(|(_, at)| at).collect();
    assert!(found.is_empty(), "unbounded channels (give each a capacity and an overflow rule):\n{}", found.join("\n"));
}

#[test]
fn long_lived_tasks_run_on_the_spine() {
    let stray: Vec<String> = lines_with("tokio::spawn(")
        .into_iter()
        .filter(|(file, _)| !SHORT_TASKS.iter().any(|(short, _)| short == file))
        .map(|(_, at)| at)
        .collect();
    assert!(
        stray.is_empty(),
        "tasks spawned off the spine (use Spine::spawn, or list a short one):\n{}",
        stray.join("\n")
    );
}
