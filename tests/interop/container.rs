//! The container file's command line is the binary's: `ENTRYPOINT` + `CMD` of `Containerfile`,
//! run here with the config path swapped for a temporary one holding a problem, exits 78 with
//! the problem (the arguments parsed; a wrong flag would exit 2 from the argument parser).
//! And the file passes hadolint (pinned in tests/py/requirements.txt). No container engine is
//! needed.

use crate::support::proxy::{PROXY_BIN, write_config};

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
