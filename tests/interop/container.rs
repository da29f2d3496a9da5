//! The container file's command line is the binary's: `ENTRYPOINT` + `CMD` of `Containerfile`,
//! run here with the config path swapped for a temporary one holding a problem, exits 78 with
//! the problem (the arguments parsed; a wrong flag would exit 2 from the argument parser).
//! And the file passes hadolint (pinned in tests/py/requirements.txt), both targets in it: the
//! default (the proxy alone) and `runtimes` (Node.js and Python for stdio servers), which
//! docs/deploy.md's build command names. No container engine is needed.

use crate::support::PROXY_BIN;
use crate::support::proxy::write_config;

/// The JSON array of the first line starting with `instruction`.
fn exec_form(containerfile: &str, instruction: &str) -> Vec<String> {
    let line = containerfile.lines().find(|l| l.starts_with(instruction)).expect("the instruction is there");
    serde_json::from_str(line[instruction.len()..].trim()).expect("exec form: a JSON array")
}

#[tokio::test]
async fn the_containerfile_command_line_is_accepted_by_the_binary() -> anyhow::Result<()> {
    let text = std::fs::read_to_string(crate::support::peers::repo_root().join("Containerfile"))?;
    let entrypoint = exec_form(&text, "ENTRYPOINT");
    let command = exec_form(&text, "CMD");
    assert_eq!(entrypoint[0], "/usr/local/bin/mcp-resource-proxy");
    let config_at = command.iter().position(|a| a == "--config").expect("--config") + 1;
    assert_eq!(command[config_at], "/etc/mcp-resource-proxy/config.toml");

    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), "[server]\nno_such_key = 1\n")?;
    let mut args: Vec<String> = entrypoint[1..].iter().chain(&command).cloned().collect();
    args[entrypoint.len() - 1 + config_at] = config.display().to_string();
    let output = tokio::process::Command::new(PROXY_BIN).args(&args).output().await?;
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(78), "{args:?}: {said}");
    assert!(said.contains("no_such_key"), "{said}");
    Ok(())
}

#[tokio::test]
async fn the_containerfile_passes_hadolint() -> anyhow::Result<()> {
    let hadolint = crate::support::peers::python().with_file_name("hadolint");
    let root = crate::support::peers::repo_root();
    let output = tokio::process::Command::new(&hadolint).arg("Containerfile").current_dir(&root).output().await?;
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{}: {said}", hadolint.display());
    Ok(())
}

/// `(name, base)` of each `FROM base [AS name]` of the Containerfile, in order.
fn stages(containerfile: &str) -> Vec<(Option<String>, String)> {
    containerfile
        .lines()
        .filter_map(|line| line.strip_prefix("FROM "))
        .map(|rest| {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let name = words.iter().position(|w| w.eq_ignore_ascii_case("AS")).map(|at| words[at + 1].to_string());
            (name, words[0].to_string())
        })
        .collect()
}

/// docs/deploy.md's build command names a target of the Containerfile, `runtimes`: the proxy
/// stage with node, npx, python3 and uvx added, as the same unprivileged user; the default target
/// (the last stage) is still the proxy alone, as compose and the README build it.
#[test]
fn the_runtimes_target_is_the_proxy_with_node_and_python_and_the_default_is_unchanged() {
    let root = crate::support::peers::repo_root();
    let docs = std::fs::read_to_string(root.join("docs/deploy.md")).expect("docs/deploy.md");
    let command = docs.lines().find(|l| l.starts_with("docker build ")).expect("a build command in docs/deploy.md");
    let words: Vec<&str> = command.split_whitespace().collect();
    let after = |flag: &str| words.iter().position(|w| *w == flag).map(|at| words[at + 1]).expect(flag);
    assert_eq!(after("-f"), "Containerfile");
    let target = after("--target");
    assert_eq!(target, "runtimes");

    let text = std::fs::read_to_string(root.join("Containerfile")).expect("Containerfile");
    let stages = stages(&text);
    assert!(stages.contains(&(Some("runtimes".into()), "proxy".into())), "{stages:?}");
    assert_eq!(stages.last(), Some(&(None, "proxy".to_string())), "the default target is the proxy alone");
    let runtimes = text.split("AS runtimes").nth(1).expect("the runtimes stage");
    let runtimes = runtimes.split("\nFROM ").next().unwrap_or_default();
    for program in ["/usr/local/bin/node", "npx-cli.js /usr/local/bin/npx", "/uvx", "python3"] {
        assert!(runtimes.contains(program), "{program} in the runtimes stage");
    }
    let last_user = runtimes.lines().filter_map(|l| l.strip_prefix("USER ")).next_back();
    assert_eq!(last_user, Some("10001:10001"), "runtimes runs as the proxy's user");
}
