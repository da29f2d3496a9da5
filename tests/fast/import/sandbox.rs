//! `import` derives a sandbox profile per stdio server (docs/sandbox.md): a native program with
//! an absolute folder argument (this build's folder server) gets one written that may write
//! that folder, a native program without path arguments (the fixture) one with no paths, both
//! keeping the variables their entry sets; a script (`sh` running the fixture) is written
//! without one and its note says the profile to start from. `check` prints each profile, and
//! the written config serves: every server up, the folder read and the variable seen through
//! the proxy, the first two under their profiles.

use std::os::unix::fs::PermissionsExt;

use anyhow::{Context, ensure};

use super::{run, texts};
use crate::support::PROXY_BIN;
use crate::support::fixture::{Era, connect_http, fixture_bin};
use crate::support::proxy::ProxyProcess;
use crate::support::reads::{read, text};

#[tokio::test]
async fn import_writes_a_sandbox_for_native_programs_and_every_server_serves() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ground = dir.path().canonicalize()?;
    let notes = ground.join("notes");
    std::fs::create_dir(&notes)?;
    std::fs::write(notes.join("guide.md"), "# guide\n")?;
    let script = ground.join("fixture.sh");
    std::fs::write(&script, format!("exec '{}'\n", fixture_bin().display()))?;
    // Open to user nobody, whom a root proxy runs a sandboxed server as: only the sandbox refuses.
    for (path, mode) in [(&ground, 0o755), (&notes, 0o755), (&notes.join("guide.md"), 0o644), (&script, 0o644)] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    let servers = serde_json::json!({"mcpServers": {
        "notes": {"command": PROXY_BIN, "args": ["serve-dir", notes]},
        "fixture": {"command": fixture_bin(), "env": {"FIXTURE_MODE": "sandboxed"}},
        "script": {"command": "sh", "args": [script]},
    }});
    let file = ground.join("claude_desktop_config.json");
    std::fs::write(&file, serde_json::to_string_pretty(&servers)?)?;
    let out = ground.join("proxy.toml");
    let imported = run(&["import", "--output", out.to_str().unwrap(), file.to_str().unwrap()], &[]).await?;
    let (_, notes_said) = texts(&imported);
    ensure!(imported.status.success(), "{notes_said}");
    let suggested = format!(
        "no sandbox written (a script or interpreter: what it loads may lie outside the system's folders); a profile to start from: read = [{:?}]",
        script.display().to_string()
    );
    ensure!(notes_said.contains(&format!("`script`: {suggested}")), "{notes_said}");

    let written = std::fs::read_to_string(&out)?;
    let config: toml_edit::DocumentMut = written.parse()?;
    let upstreams = config["upstreams"].as_array_of_tables().context("upstreams")?;
    let sandbox_of = |name: &str| {
        let upstream = upstreams.iter().find(|u| u.get("name").and_then(|n| n.as_str()) == Some(name))?;
        upstream.get("sandbox").map(|sandbox| sandbox.to_string())
    };
    let folder = sandbox_of("notes").context("a sandbox for the folder server")?;
    ensure!(folder.contains(&format!("write = [{:?}]", notes.display().to_string())), "{written}");
    ensure!(folder.contains("network = true"), "{written}");
    let fixture = sandbox_of("fixture").context("a sandbox for the fixture")?;
    ensure!(fixture.contains("write = []") && fixture.contains("keep_env = [\"FIXTURE_MODE\"]"), "{written}");
    ensure!(sandbox_of("script").is_none(), "{written}");

    let checked = run(&["check", "--config", out.to_str().unwrap()], &[]).await?;
    let (said, errors) = texts(&checked);
    ensure!(checked.status.success(), "{said}{errors}");
    ensure!(said.contains("upstream notes: sandboxed: reads the system"), "{said}");
    ensure!(said.contains(&format!("writes {}; network allowed (TCP)", notes.display())), "{said}");
    ensure!(said.contains("upstream fixture: sandboxed:") && said.contains("FIXTURE_MODE and LC_*"), "{said}");
    ensure!(said.contains("upstream script: unsandboxed"), "{said}");

    let proxy = ProxyProcess::start(&written).await?;
    for upstream in ["notes", "fixture", "script"] {
        proxy.wait_up(upstream, 1).await?;
    }
    let (host, _events) = connect_http(&proxy.url, Era::Legacy).await?;
    ensure!(text(&read(host.peer(), "notes+file:///guide.md").await?) == "# guide\n");
    ensure!(text(&read(host.peer(), "fixture+fx://fx/env/FIXTURE_MODE").await?) == "sandboxed");
    ensure!(!text(&read(host.peer(), "script+fx://fx/item/0").await?).is_empty());
    Ok(())
}
