//! The deployment recipes as written: the systemd unit's install steps and its `ExecStartPre`
//! check, the container's `docker run` mounts.

use anyhow::Context;
use mcp_resource_proxy::config::{CliOverrides, Config, UpstreamTransport};
use tokio::process::Command;

use super::{covered, output, text};
use crate::support::PROXY_BIN;
use crate::support::repo_root;

/// The unit header's install steps, into a temporary folder for /etc/mcp-resource-proxy (the
/// binary from this build; `systemctl` and /etc/systemd left out), give a config its
/// `ExecStartPre` check accepts.
#[tokio::test]
async fn the_units_install_steps_give_a_config_check_accepts() -> anyhow::Result<()> {
    let unit = std::fs::read_to_string(repo_root().join("deploy/mcp-resource-proxy.service"))?;
    let etc = tempfile::tempdir()?;
    let etc_dir = etc.path().join("mcp-resource-proxy");
    let steps: Vec<&str> = unit.lines().filter_map(|line| line.strip_prefix("#   ")).collect();
    assert!(steps.iter().any(|s| s.contains("cp config.toml")), "{steps:?}");
    for step in steps {
        let step = step.split("  #").next().unwrap_or_default().trim();
        if step.starts_with("cargo install") || step.starts_with("systemctl") || step.contains("/etc/systemd") {
            continue;
        }
        let step = step.replace("/etc/mcp-resource-proxy", etc_dir.to_str().unwrap());
        let mut command = Command::new("sh");
        command.args(["-c", &step]).current_dir(repo_root());
        let done = output(command).await?;
        assert_eq!(done.status.code(), Some(0), "{step}: {}", text(&done));
    }
    let pre = unit.lines().find_map(|line| line.strip_prefix("ExecStartPre=")).context("ExecStartPre")?;
    let pre = pre
        .replace("/usr/local/bin/mcp-resource-proxy", PROXY_BIN)
        .replace("/etc/mcp-resource-proxy", etc_dir.to_str().unwrap());
    let mut command = Command::new("sh");
    command.args(["-c", &pre]).current_dir(etc.path());
    let checked = output(command).await?;
    assert_eq!(checked.status.code(), Some(0), "{pre}: {}", text(&checked));
    Ok(())
}

/// The container's `docker run` mounts the config and every folder it names beside it.
#[test]
fn readme_docker_run_mounts_every_folder_the_shipped_config_names() {
    let run = covered("docker run");
    let mounted: Vec<&str> = run
        .split("-v \"$PWD/")
        .skip(1)
        .filter_map(|mount| mount.split_once(':'))
        .filter(|(local, rest)| rest.starts_with(&format!("/etc/mcp-resource-proxy/{local}:")))
        .map(|(local, _)| local)
        .collect();
    let config = Config::load(&repo_root().join("config.toml"), &CliOverrides::default()).expect("shipped config");
    let mut needed = vec!["config.toml".to_string()];
    let folders = config.upstreams.iter().filter_map(|u| match &u.transport {
        UpstreamTransport::Dir { path, .. } => Some(path.clone()),
        _ => None,
    });
    for folder in folders.chain(config.policies.dir.clone()) {
        needed.push(folder.strip_prefix(repo_root()).unwrap_or(&folder).display().to_string());
    }
    for path in needed {
        assert!(mounted.contains(&path.as_str()), "`{path}` is not mounted by: {run}");
    }
}
