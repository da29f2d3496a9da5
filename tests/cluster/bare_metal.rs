//! The bare-metal recipe (`deploy/bare-metal/`) run as systemd would run it, without systemd:
//! the template unit's `[Service]` lines are read — `ExecStartPre=`, `ExecStart=`,
//! `Environment=`, `EnvironmentFile=`, `LoadCredential=`, `WorkingDirectory=` — and three
//! instances (`1`, `2`, `3`) run exactly so, with only the machine's paths moved into a
//! temporary folder (`/etc/mcp-resource-proxy`, `/var/lib`, the binary) and the recipe's ports
//! moved to free ones. The cluster secret reaches each replica only as a credential file in its
//! own `$CREDENTIALS_DIRECTORY`. Then haproxy runs the recipe's `haproxy.cfg` (its static servers
//! pointing at those ports), and a host in each era lists and reads through it; each replica's
//! audit trail is in its own file in its state folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, bail};
use rmcp::model::ReadResourceRequestParams;
use serde_json::Value;
use tokio::process::{Child, Command};

use crate::support::PROXY_BIN;
use crate::support::cluster::Balancer;
use crate::support::fixture::{DEADLINE, Era, connect_http_with_token, list_all_resources};
use crate::support::redis_server::{Redis, free_port};
use crate::support::{eventually, repo_root};

const TOKEN: &str = "platform-token-bare-metal-6e1d";
const SECRET: &str = "bare-metal-cluster-secret-9c4f2a7e1b3d5f60";
/// What `%l` (the machine's short name) stands for here.
const HOST: &str = "test-host";
const INSTANCES: [&str; 3] = ["1", "2", "3"];

/// The `[Service]` lines the recipe's template unit runs a replica with.
struct Unit {
    exec_start_pre: String,
    exec_start: String,
    environment: Vec<String>,
    environment_file: String,
    credentials: Vec<String>,
    working_directory: String,
}

impl Unit {
    fn read() -> anyhow::Result<Self> {
        let path = repo_root().join("deploy/bare-metal/mcp-resource-proxy@.service");
        let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        let service = text.split("[Service]").nth(1).context("a [Service] section")?;
        let service = service.split("\n[").next().unwrap_or_default();
        let values = |key: &str| -> Vec<String> {
            let prefix = format!("{key}=");
            service.lines().filter_map(|line| line.strip_prefix(&prefix)).map(str::to_string).collect()
        };
        let one = |key: &str| -> anyhow::Result<String> {
            let mut found = values(key);
            if found.len() != 1 {
                bail!("{key}=: {found:?}, want one");
            }
            Ok(found.remove(0))
        };
        Ok(Self {
            exec_start_pre: one("ExecStartPre")?,
            exec_start: one("ExecStart")?,
            environment: values("Environment"),
            environment_file: one("EnvironmentFile")?,
            credentials: values("LoadCredential"),
            working_directory: one("WorkingDirectory")?,
        })
    }
}

/// The machine a recipe runs on, in a temporary folder: its `/etc/mcp-resource-proxy` (the
/// recipe's config and the policies it names, the secret, the environment file) and `/var/lib`.
struct Machine {
    root: tempfile::TempDir,
    /// The recipe's port → the free port it stands for here.
    ports: BTreeMap<u16, u16>,
}

impl Machine {
    fn new(redis: &Redis) -> anyhow::Result<Self> {
        let root = tempfile::tempdir()?;
        let etc = root.path().join("etc/mcp-resource-proxy");
        std::fs::create_dir_all(etc.join("policies"))?;
        std::fs::create_dir_all(root.path().join("var/lib"))?;
        let config = std::fs::read_to_string(repo_root().join("deploy/bare-metal/config.toml"))?;
        let recipe_redis = "redis://127.0.0.1:6379/0";
        assert!(config.contains(&format!("redis_url = \"{recipe_redis}\"")), "{config}");
        std::fs::write(etc.join("config.toml"), config.replace(recipe_redis, &redis.url()))?;
        std::fs::copy(repo_root().join("deploy/policies/default.toml"), etc.join("policies/default.toml"))?;
        std::fs::write(etc.join("cluster-secret"), format!("{SECRET}\n"))?;
        std::fs::write(etc.join("env"), format!("PROXY_TOKEN_PLATFORM={TOKEN}\n"))?;
        Ok(Self { root, ports: BTreeMap::new() })
    }

    /// `text` with the machine's paths moved here and every recipe port moved to its free one
    /// (a port seen for the first time gets one).
    fn here(&mut self, text: &str) -> anyhow::Result<String> {
        let root = self.root.path().display().to_string();
        let mut text = text
            .replace("/usr/local/bin/mcp-resource-proxy", PROXY_BIN)
            .replace("/etc/mcp-resource-proxy", &format!("{root}/etc/mcp-resource-proxy"))
            .replace("/var/lib/", &format!("{root}/var/lib/"));
        for port in [8080, 8081, 8082, 8083, 8404, 9461, 9462, 9463] {
            if !text.contains(&format!(":{port}")) && !text.contains(&format!("port {port}")) {
                continue;
            }
            let free = match self.ports.get(&port) {
                Some(free) => *free,
                None => {
                    let free = free_port()?;
                    self.ports.insert(port, free);
                    free
                }
            };
            text = text.replace(&format!("127.0.0.1:{port}"), &format!("127.0.0.1:{free}"));
            text = text.replace(&format!("port {port}"), &format!("port {free}"));
        }
        Ok(text)
    }

    fn port(&self, recipe: u16) -> u16 {
        self.ports[&recipe]
    }
}

/// Replica `instance` as its unit starts it: `%i` and `%l` replaced, paths and ports moved, the
/// environment systemd gives it (the unit's `Environment=` and `EnvironmentFile=`, the
/// credentials folder), nothing of the test's own. `ExecStartPre=` must pass first.
async fn start_replica(unit: &Unit, machine: &mut Machine, instance: &str) -> anyhow::Result<Child> {
    let specifiers = |line: &str| {
        let line = line.replace("%i", instance).replace("%l", HOST);
        assert!(!line.contains('%'), "a specifier the test does not stand in for: {line}");
        line
    };
    let mut env: Vec<(String, String)> = Vec::new();
    for line in &unit.environment {
        let (key, value) = line.split_once('=').with_context(|| format!("Environment={line}"))?;
        env.push((key.to_string(), machine.here(&specifiers(value))?));
    }
    let file = machine.here(unit.environment_file.trim_start_matches('-'))?;
    for line in std::fs::read_to_string(&file)?.lines().filter(|l| !l.trim().is_empty()) {
        let (key, value) = line.split_once('=').with_context(|| format!("{file}: {line}"))?;
        env.push((key.to_string(), value.to_string()));
    }
    let credentials = machine.root.path().join(format!("run/credentials/mcp-resource-proxy@{instance}.service"));
    std::fs::create_dir_all(&credentials)?;
    for line in &unit.credentials {
        let (id, source) = line.split_once(':').with_context(|| format!("LoadCredential={line}"))?;
        std::fs::copy(machine.here(source)?, credentials.join(id))?;
    }
    env.push(("CREDENTIALS_DIRECTORY".into(), credentials.display().to_string()));
    let state = PathBuf::from(machine.here(&specifiers(&unit.working_directory))?);
    std::fs::create_dir_all(&state)?;
    env.push(("PATH".into(), std::env::var("PATH").unwrap_or_default()));

    let check = command(&machine.here(&specifiers(&unit.exec_start_pre))?, &env, &state)?.output().await?;
    let said = String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "ExecStartPre of replica {instance}: {said}");
    let log = std::fs::File::create(state.join("replica.log"))?;
    let mut start = command(&machine.here(&specifiers(&unit.exec_start))?, &env, &state)?;
    Ok(start.stdout(Stdio::null()).stderr(log).kill_on_drop(true).spawn()?)
}

/// A unit's command line (no quoting in the recipe's) to run in `dir` with exactly `env`.
fn command(line: &str, env: &[(String, String)], dir: &Path) -> anyhow::Result<Command> {
    assert!(!line.contains(['"', '\'', '$']), "the test splits command lines on spaces: {line}");
    let mut words = line.split_whitespace();
    let mut command = Command::new(words.next().context("an empty command line")?);
    command.args(words).env_clear().envs(env.iter().map(|(k, v)| (k, v))).current_dir(dir).stdin(Stdio::null());
    Ok(command)
}

/// Replica `instance`'s `/status`, once it shows `count` replicas and Redis up.
async fn status_when_all_seen(machine: &Machine, instance: &str, count: usize) -> anyhow::Result<Value> {
    let admin = machine.port(9460 + instance.parse::<u16>()?);
    let url = format!("http://127.0.0.1:{admin}/status");
    eventually(DEADLINE, &format!("replica {instance} sees {count} replicas"), || async {
        let status: Value = reqwest::get(&url).await?.json().await?;
        let cluster = &status["cluster"];
        let seen = cluster["replicas"].as_array().map_or(0, Vec::len);
        if cluster["redis"]["state"] == "up" && seen == count { Ok(status) } else { Err(anyhow::anyhow!("{status}")) }
    })
    .await
}

#[tokio::test]
async fn three_replicas_of_the_bare_metal_recipe_behind_its_haproxy_serve_a_host_in_both_eras() -> anyhow::Result<()> {
    let redis = Redis::start().await?;
    let unit = Unit::read()?;
    assert!(unit.credentials.iter().any(|c| c.starts_with("cluster-secret:")), "{:?}", unit.credentials);
    let mut machine = Machine::new(&redis)?;
    let mut replicas = Vec::new();
    for instance in INSTANCES {
        replicas.push(start_replica(&unit, &mut machine, instance).await?);
    }
    for instance in INSTANCES {
        let status = status_when_all_seen(&machine, instance, INSTANCES.len()).await?;
        assert_eq!(status["cluster"]["replica"], format!("{HOST}-{instance}"), "Environment=: {status}");
        assert!(!status.to_string().contains(SECRET));
    }

    let recipe = std::fs::read_to_string(repo_root().join("deploy/bare-metal/haproxy.cfg"))?;
    let config = machine.here(&recipe)?;
    let (port, stats) = (machine.port(8080), machine.port(8404));
    let balancer = Balancer::start_config(tempfile::tempdir()?, &config, port, stats, INSTANCES.len()).await?;

    for era in [Era::Legacy, Era::Modern] {
        let (host, _) = connect_http_with_token(&balancer.url, era, TOKEN).await?;
        let (resources, _) = tokio::time::timeout(DEADLINE, list_all_resources(&host)).await??;
        let uri = "policies+file:///default.toml";
        assert!(resources.iter().any(|r| r.uri == uri), "{era:?}: {resources:?}");
        for _ in INSTANCES {
            // Round-robin: each read lands on the next replica.
            let read = host.read_resource(ReadResourceRequestParams::new(uri)).await?;
            let contents = serde_json::to_value(&read.contents)?;
            assert!(contents[0]["text"].as_str().is_some_and(|t| t.contains("principals")), "{era:?}: {contents}");
        }
        host.cancel().await?;
    }
    // Each replica's audit trail is in its own file in its state folder, as `Environment=` says:
    // reads go on (round-robin) until each replica's file holds one.
    let (host, _) = connect_http_with_token(&balancer.url, Era::Modern, TOKEN).await?;
    let trails: Vec<PathBuf> = INSTANCES
        .iter()
        .map(|i| machine.root.path().join(format!("var/lib/mcp-resource-proxy-{i}/audit.jsonl")))
        .collect();
    eventually(DEADLINE, "every replica audits a read in its own file", || async {
        host.read_resource(ReadResourceRequestParams::new("policies+file:///default.toml")).await?;
        for trail in &trails {
            let text = std::fs::read_to_string(trail).unwrap_or_default();
            let events = text.lines().filter_map(|line| serde_json::from_str::<Value>(line).ok());
            if !events.into_iter().any(|e| e["event"] == "read" && e["principal"] == "platform") {
                bail!("{}: {text}", trail.display());
            }
        }
        anyhow::Ok(())
    })
    .await?;
    drop(replicas);
    Ok(())
}
