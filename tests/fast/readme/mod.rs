//! The commands of README.md and of the book (docs/*.md), as written. Every shell command in a
//! `sh` code block of those files must be listed in [`COVERED`] with the tests (or CI steps) that
//! run it — or, for the benchmarks notebook alone, in [`RUN_BY_HAND`] with why no test runs it —
//! so a new command without a test fails here; the tests below run them: the quick start's
//! `cargo run --release -- serve` until `/readyz`, the repository commands (`check`, `policy
//! explain`, `import`; in this build, `--release` dropped, as in the quick start), the import
//! section's `import` / `check` / `serve --mcp-json` in a folder holding `.vscode/mcp.json`, the
//! unit's install steps into a temporary folder (then its `ExecStartPre` check), and the
//! container's mounts. Release builds (the literal commands, `cargo install`) run in CI
//! (`.ci/readme-release.sh`), and so does the book's build (`.ci/run`).
//!
//! The tests of the deployment recipes (the unit's install steps, the container's mounts) are
//! `deploy`.

mod deploy;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::support::PROXY_BIN;
use crate::support::fixture::fixture_bin;
use crate::support::{cargo, eventually, repo_root};
use anyhow::Context;
use tokio::process::Command;

/// A `cargo run` may wait for the build lock of another cargo in this tree.
const CARGO_DEADLINE: Duration = Duration::from_secs(300);

/// Each command of README.md and docs/*.md and where it is run: a test's function name, or
/// `FILE: TEXT` for a CI script that runs it (FILE must contain TEXT).
const COVERED: &[(&str, &[&str])] = &[
    (
        "cargo run --release -- serve",
        &[
            "readme_quick_start_serves_the_shipped_config_until_readyz",
            ".ci/readme-release.sh: cargo run --release -- serve",
        ],
    ),
    ("cargo test --test fast -- --test-threads 4", &[".ci/run: cargo test"]),
    ("cargo test", &[".ci/run: cargo test"]),
    (
        "cargo run --release -- check",
        &["readme_repository_commands_run_as_written", ".ci/readme-release.sh: cargo run --release -- check"],
    ),
    (
        "cargo run --release -- policy explain --principal local policies+file:///default.toml grafana+file:///secrets/key.json",
        &["readme_repository_commands_run_as_written", ".ci/readme-release.sh: cargo run --release -- policy explain"],
    ),
    (
        "cargo run --release -- import tests/data/mcp-servers/claude_desktop_config.json",
        &["readme_repository_commands_run_as_written", ".ci/readme-release.sh: cargo run --release -- import"],
    ),
    ("cargo install --path . --root /usr/local", &[".ci/readme-release.sh: cargo install --path . --root"]),
    (
        "docker build -f Containerfile -t mcp-resource-proxy .",
        &["the_containerfile_command_line_is_accepted_by_the_binary", "the_containerfile_passes_hadolint"],
    ),
    (
        "docker build -f Containerfile --target runtimes -t mcp-resource-proxy:runtimes .",
        &["the_runtimes_target_is_the_proxy_with_node_and_python_and_the_default_is_unchanged"],
    ),
    (
        "docker run --rm -p 127.0.0.1:8080:8080 -v \"$PWD/config.toml:/etc/mcp-resource-proxy/config.toml:ro\" -v \"$PWD/policies:/etc/mcp-resource-proxy/policies:ro\" -v \"$PWD/grafana:/etc/mcp-resource-proxy/grafana:ro\" --env-file ./proxy.env mcp-resource-proxy",
        &[
            "the_containerfile_command_line_is_accepted_by_the_binary",
            "readme_docker_run_mounts_every_folder_the_shipped_config_names",
        ],
    ),
    (
        "mcp-resource-proxy import .vscode/mcp.json --output config.toml",
        &["readme_import_check_and_serve_run_as_written"],
    ),
    ("mcp-resource-proxy check --config config.toml", &["readme_import_check_and_serve_run_as_written"]),
    ("mcp-resource-proxy serve --mcp-json .vscode/mcp.json", &["readme_import_check_and_serve_run_as_written"]),
    (
        "mcp-resource-proxy connect claude-desktop --config /etc/mcp-resource-proxy/config.toml --dry-run",
        &["readme_connect_dry_run_runs_as_written"],
    ),
    ("bash .ci/install-book.sh", &[".ci/run: bash .ci/install-book.sh"]),
    (".peers/book/bin/mkdocs build --strict", &[".ci/run: .peers/book/bin/mkdocs build --strict"]),
];

/// The benchmarks notebook's commands, which no test runs: they take minutes, need a quiet
/// machine to mean anything, and their figures are read by a person. Only that file may hold
/// commands listed here.
const RUN_BY_HAND: (&str, &[&str]) = (
    "docs/benchmarks-notebook.md",
    &[
        "cargo build --release --bins",
        "bash .ci/install-bench-peers.sh",
        "target/release/proxy-bench matrix --quick",
        "cargo run --release --bin proxy-bench -- all",
        "cargo run --release --bin proxy-bench -- read-latency --quick",
        "cargo run --release --bin proxy-bench -- throughput --json",
        "bash scripts/callgrind_read.sh target/release/mcp-resource-proxy 2000",
        "PROXY_BENCH_PROXY=/tmp/old/mcp-resource-proxy target/release/proxy-bench matrix --quick",
        "cargo run --release --bin proxy-bench -- all --target http://127.0.0.1:9000/mcp --uri 'fx+fx://fx/item/1'",
    ],
);

/// The command of [`COVERED`] that starts with `start`.
fn covered(start: &str) -> &'static str {
    COVERED.iter().map(|(command, _)| *command).find(|c| c.starts_with(start)).expect(start)
}

/// The README's `connect` command, as written, in a temporary HOME: it shows the entry it would
/// write into Claude Desktop's usual file and writes nothing.
#[tokio::test]
async fn readme_connect_dry_run_runs_as_written() -> anyhow::Result<()> {
    let command = covered("mcp-resource-proxy connect");
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let home = tempfile::tempdir()?;
    let mut connect = Command::new(PROXY_BIN);
    connect.args(&args).current_dir(home.path()).env("HOME", home.path()).stdin(Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(CARGO_DEADLINE, connect.output()).await.context("connect did not exit")??;
    let errors = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{errors}");
    assert!(errors.contains("/etc/mcp-resource-proxy/config.toml") && errors.contains("dry run"), "{errors}");
    assert_eq!(std::fs::read_dir(home.path())?.count(), 0, "nothing written");
    Ok(())
}

/// The files whose commands are checked: README.md and every docs/*.md, by path from the root.
fn documentation_files() -> Vec<String> {
    let mut files = vec!["README.md".to_string()];
    let mut book: Vec<String> = std::fs::read_dir(repo_root().join("docs"))
        .expect("docs/")
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    book.sort();
    files.extend(book);
    files
}

/// The shell commands of `sh` blocks in [`documentation_files`], each with its file:
/// continuation lines joined, comments (whole lines and ` #` tails) dropped.
fn documented_commands() -> Vec<(String, String)> {
    let mut commands = Vec::new();
    for file in documentation_files() {
        let text = std::fs::read_to_string(repo_root().join(&file)).expect("documentation file");
        commands.extend(shell_commands(&text).into_iter().map(|command| (file.clone(), command)));
    }
    commands
}

fn shell_commands(markdown: &str) -> Vec<String> {
    let (mut commands, mut in_shell, mut pending) = (Vec::new(), false, String::new());
    for line in markdown.lines() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            in_shell = !in_shell && ["sh", "bash", "shell", "console"].contains(&info.trim());
            continue;
        }
        if !in_shell || line.trim_start().starts_with('#') {
            continue;
        }
        let line = line.split(" #").next().unwrap_or_default().trim();
        match line.strip_suffix('\\') {
            Some(start) => pending.push_str(&format!("{} ", start.trim())),
            None => {
                pending.push_str(line);
                if !pending.trim().is_empty() {
                    commands.push(pending.trim().to_string());
                }
                pending.clear();
            }
        }
    }
    commands
}

/// Every command of README.md and the book is listed in [`COVERED`] (or, in the benchmarks
/// notebook, [`RUN_BY_HAND`]), and nothing listed is gone from them; every test named there
/// exists, and every CI step named is in its script.
#[test]
fn every_documented_command_is_covered_by_a_test() {
    let commands = documented_commands();
    assert!(commands.len() >= 10, "{commands:#?}");
    let listed: Vec<&str> = COVERED.iter().map(|(command, _)| *command).collect();
    let (notebook, by_hand) = RUN_BY_HAND;
    for (file, command) in &commands {
        let by_hand = file == notebook && by_hand.contains(&command.as_str());
        assert!(
            by_hand || listed.contains(&command.as_str()),
            "{file}: command without a test (add it to COVERED): {command}"
        );
    }
    for command in listed.iter().chain(by_hand) {
        assert!(commands.iter().any(|(_, c)| c == command), "listed, but in no documentation file: {command}");
    }
    let sources = test_sources();
    for (command, runs) in COVERED {
        assert!(!runs.is_empty(), "{command}");
        for run in *runs {
            match run.split_once(": ") {
                Some((script, text)) => {
                    let script_text = std::fs::read_to_string(repo_root().join(script)).expect(script);
                    assert!(script_text.contains(text), "{script} runs `{text}` (for `{command}`)");
                }
                None => assert!(sources.contains(&format!("fn {run}(")), "no test `{run}` (for `{command}`)"),
            }
        }
    }
}

/// The quick start's first command (`--release` dropped; the listeners moved to free ports and
/// a ready file added so that the test knows them) serves the shipped config until `/readyz`.
#[tokio::test]
async fn readme_quick_start_serves_the_shipped_config_until_readyz() -> anyhow::Result<()> {
    // reqwest has no crypto provider of its own; run alone, no other test has installed one.
    mcp_resource_proxy::crypto::install();
    let dir = tempfile::tempdir()?;
    let ready = dir.path().join("ready.json");
    let line = covered("cargo run --release -- serve").replace(" --release", "");
    let mut command = shell_line(&line, &repo_root());
    command
        .arg("--ready-file")
        .arg(&ready)
        .envs(FREE_PORTS)
        .kill_on_drop(true)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _serving = command.spawn()?;
    let ready: serde_json::Value = eventually(CARGO_DEADLINE, "the proxy writes its ready file", || async {
        Ok::<_, anyhow::Error>(serde_json::from_str(&tokio::fs::read_to_string(&ready).await?)?)
    })
    .await?;
    let readyz = format!("http://{}/readyz", ready["admin"].as_str().context("admin address")?);
    eventually(crate::support::fixture::DEADLINE, "/readyz answers 200", || async {
        let status = reqwest::get(&readyz).await?.status();
        anyhow::ensure!(status == 200, "{status}");
        Ok(())
    })
    .await
}

/// The quick start's repository commands, from the repository root (`--release` dropped, as in
/// the quick start: this build's binary; CI runs them as written).
#[tokio::test]
async fn readme_repository_commands_run_as_written() -> anyhow::Result<()> {
    let root = repo_root();
    let in_this_build = |start: &str| covered(start).replace(" --release", "");
    let check = output(shell_line(&in_this_build("cargo run --release -- check"), &root)).await?;
    assert_eq!(check.status.code(), Some(0), "{}", text(&check));
    assert!(text(&check).contains("config.toml: valid"), "{}", text(&check));
    let explain = output(shell_line(&in_this_build("cargo run --release -- policy explain"), &root)).await?;
    let said = text(&explain);
    assert_eq!(explain.status.code(), Some(0), "{said}");
    assert!(said.contains("allowed by") && said.contains("denied by"), "{said}");
    let import = output(shell_line(&in_this_build("cargo run --release -- import"), &root)).await?;
    assert_eq!(import.status.code(), Some(0), "{}", text(&import));
    assert!(String::from_utf8_lossy(&import.stdout).contains("[[upstreams]]"), "{}", text(&import));
    Ok(())
}

/// The import section's three commands in a folder holding `.vscode/mcp.json` (the fixture and
/// the folder server, and a token in clear): `import` writes `config.toml` without the token,
/// `check` accepts it once the named variable is set, `serve --mcp-json` brings both up.
#[tokio::test]
async fn readme_import_check_and_serve_run_as_written() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join(".vscode"))?;
    let servers = serde_json::json!({"servers": {
        "fixture": {"type": "stdio", "command": fixture_bin().to_str().unwrap(), "env": {"FIXTURE_TOKEN": "ghp_0123456789abcdefABCDEF"}},
        "Docs": {"type": "stdio", "command": PROXY_BIN, "args": ["serve-dir", "${workspaceFolder}/.vscode"]},
    }});
    std::fs::write(dir.path().join(".vscode/mcp.json"), serde_json::to_string_pretty(&servers)?)?;
    let [import, check, serve] = [
        covered("mcp-resource-proxy import"),
        covered("mcp-resource-proxy check"),
        covered("mcp-resource-proxy serve --mcp-json"),
    ];
    let imported = output(shell_line(import, dir.path())).await?;
    assert_eq!(imported.status.code(), Some(0), "{}", text(&imported));
    assert!(text(&imported).contains("set `FIXTURE_TOKEN`"), "{}", text(&imported));
    let config = std::fs::read_to_string(dir.path().join("config.toml"))?;
    assert!(!config.contains("ghp_") && config.contains("${FIXTURE_TOKEN}"), "{config}");
    let mut checking = shell_line(check, dir.path());
    checking.env("FIXTURE_TOKEN", "t");
    let checked = output(checking).await?;
    assert_eq!(checked.status.code(), Some(0), "{}", text(&checked));
    let ready = dir.path().join("ready.json");
    let mut serving = shell_line(serve, dir.path());
    serving
        .arg("--ready-file")
        .arg(&ready)
        .envs(FREE_PORTS)
        .env("FIXTURE_TOKEN", "t")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _serving = serving.spawn()?;
    let deadline = crate::support::fixture::DEADLINE;
    let ready: serde_json::Value = eventually(deadline, "the ready file", || async {
        Ok::<_, anyhow::Error>(serde_json::from_str(&tokio::fs::read_to_string(&ready).await?)?)
    })
    .await?;
    let status = format!("http://{}/status", ready["admin"].as_str().context("admin address")?);
    eventually(deadline, "both upstreams up in /status", || async {
        let report: serde_json::Value = reqwest::get(&status).await?.json().await?;
        let up = |name: &str| {
            report["upstreams"]
                .as_array()
                .is_some_and(|all| all.iter().any(|u| u["name"] == name && u["state"] == "up"))
        };
        anyhow::ensure!(up("fixture") && up("docs"), "{report}");
        Ok(())
    })
    .await
}

/// The listeners on free ports, so that the shipped config's fixed ones never collide.
const FREE_PORTS: [(&str, &str); 2] =
    [("MCP_PROXY_SERVER__LISTEN", "127.0.0.1:0"), ("MCP_PROXY_SERVER__ADMIN_LISTEN", "127.0.0.1:0")];

/// A documented line as a command: `cargo` is this cargo ([`cargo`]), `mcp-resource-proxy` this
/// build's binary.
fn shell_line(line: &str, cwd: &Path) -> Command {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut command = match words[0] {
        "cargo" => Command::from(cargo()),
        "mcp-resource-proxy" => Command::new(PROXY_BIN),
        other => panic!("no runner for `{other}`"),
    };
    command.args(&words[1..]).current_dir(cwd).stdin(Stdio::null()).kill_on_drop(true);
    command
}

async fn output(mut command: Command) -> anyhow::Result<Output> {
    tokio::time::timeout(CARGO_DEADLINE, command.output()).await.context("did not exit")?.map_err(Into::into)
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// The text of every test source file.
fn test_sources() -> String {
    let mut text = String::new();
    let mut dirs = vec![repo_root().join("tests")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("tests/").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                text.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    text
}
