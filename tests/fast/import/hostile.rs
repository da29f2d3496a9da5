//! Hostile servers files and paths, through the real binary: a variable name or a source path
//! holding TOML lines never becomes a table of the written config (nor of the one `serve
//! --mcp-json` loads); no secret of a common shape is written in clear; `--output` is never
//! written through a symbolic link.

use std::str::FromStr;

use anyhow::Context;

use super::{EXIT_CONFIG, command, output_of, run, texts};
use crate::support::fixture::fixture_bin;
use crate::support::proxy::ProxyProcess;

/// TOML lines that would open the config's own tables if they reached the file as lines: the
/// MCP listener on every address, no authentication, and a cache size seen in `/status`.
const INJECTED: &str = "\n[server]\nlisten = \"0.0.0.0:8080\"\n[auth]\nmode = \"none\"\n\
                        allow_unauthenticated = true\n[cache]\nmax_bytes = 4242\n#";

/// The cache size `/status` shows when `[cache] max_bytes` is not set.
const DEFAULT_CACHE_BYTES: u64 = 256 << 20;

/// A servers file whose path holds TOML lines: `import` writes a config whose only table is
/// `[[upstreams]]` (`check` accepts it), and `serve --mcp-json` of the same path runs with the
/// default settings (its `/status` shows the default cache size, not the injected one).
#[tokio::test]
async fn a_source_path_holding_toml_lines_adds_no_table() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let source = dir.path().join(format!("servers{INJECTED}.json"));
    let servers = serde_json::json!({"mcpServers": {"fixture": {"command": fixture_bin().to_str().unwrap()}}});
    std::fs::write(&source, serde_json::to_string(&servers)?)?;
    let written = dir.path().join("imported.toml");
    let output = run(&["import", source.to_str().unwrap(), "-o", written.to_str().unwrap()], &[]).await?;
    let (_, notes) = texts(&output);
    assert_eq!(output.status.code(), Some(0), "{notes}");
    let config = std::fs::read_to_string(&written)?;
    assert_eq!(top_level_keys(&config)?, ["upstreams"], "{config}");
    assert!(!notes.lines().any(|line| line.starts_with('[')), "a line of the path on stderr:\n{notes}");
    let checked = run(&["check", "--config", written.to_str().unwrap()], &[]).await?;
    assert_eq!(checked.status.code(), Some(0), "{}", texts(&checked).0);

    let proxy = ProxyProcess::start_with("", &["--mcp-json", source.to_str().unwrap()], &[]).await?;
    proxy.wait_up("fixture", 1).await?;
    let status = proxy.status().await?;
    assert_eq!(status["cache"]["max_bytes"].as_u64(), Some(DEFAULT_CACHE_BYTES), "{status}");
    Ok(())
}

/// A `${env:NAME}` whose NAME holds TOML lines is refused by `import` (exit 78, nothing written,
/// the place named on one line) and by `serve --mcp-json`.
#[tokio::test]
async fn a_variable_name_holding_toml_lines_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let source = dir.path().join("claude_desktop_config.json");
    let hostile = format!("${{env:LOG{INJECTED}}}");
    let servers = serde_json::json!({"mcpServers": {"memory": {"command": "npx", "env": {"LEVEL": hostile}}}});
    std::fs::write(&source, serde_json::to_string(&servers)?)?;
    let written = dir.path().join("imported.toml");
    let output = run(&["import", source.to_str().unwrap(), "-o", written.to_str().unwrap()], &[]).await?;
    let (_, errors) = texts(&output);
    assert_eq!(output.status.code(), Some(EXIT_CONFIG), "{errors}");
    assert!(!written.exists(), "nothing written");
    let named = errors.lines().find(|line| line.contains("mcpServers.memory.env.LEVEL")).context("the place")?;
    assert!(named.contains("not a variable name"), "{errors}");
    assert!(!errors.lines().any(|line| line.starts_with('[')), "a line of the name on stderr:\n{errors}");

    let serve = ["serve", "--listen", "127.0.0.1:0", "--admin-listen", "off", "--mcp-json", source.to_str().unwrap()];
    let served = run(&serve, &[]).await?;
    assert_eq!(served.status.code(), Some(EXIT_CONFIG), "{}", texts(&served).1);
    assert!(texts(&served).1.contains("not a variable name"), "{}", texts(&served).1);
    Ok(())
}

/// Literal secrets of every common shape, in one realistic file: none is written, each became a
/// variable named on stderr, and `check` accepts the config once those are set.
#[tokio::test]
async fn secrets_of_every_common_shape_stay_out_of_the_config() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let source = dir.path().join("claude_desktop_config.json");
    std::fs::write(&source, serde_json::to_string(&secret_shapes())?)?;
    let written = dir.path().join("imported.toml");
    let output = run(&["import", source.to_str().unwrap(), "-o", written.to_str().unwrap()], &[]).await?;
    let (_, notes) = texts(&output);
    assert_eq!(output.status.code(), Some(0), "{notes}");
    let config = std::fs::read_to_string(&written)?;
    for secret in SECRETS {
        assert!(!config.contains(secret), "`{secret}` written in clear:\n{config}");
        assert!(!notes.contains(secret), "`{secret}` on stderr:\n{notes}");
    }
    assert!(config.contains("--header"), "the header flags are kept:\n{config}");
    assert!(config.contains("Bearer ${"), "the scheme is kept:\n{config}");
    assert!(config.contains("Database=app;User Id=app;Password=${"), "{config}");
    assert!(config.contains("region=eu"), "the other query values are kept:\n{config}");
    let variables = notes
        .lines()
        .find_map(|line| line.strip_prefix("set in the proxy's environment before `check` or `serve`: "))
        .context("the variables to set")?;
    let set: Vec<(&str, &str)> = variables.split(", ").map(|name| (name, "value-for-test")).collect();
    let checked = run(&["check", "--config", written.to_str().unwrap()], &set).await?;
    assert_eq!(checked.status.code(), Some(0), "{}\n{config}", texts(&checked).0);
    Ok(())
}

/// `--output` at a symbolic link is refused, with `--force` or without, and the link's target
/// is left as it was (a dangling link's target is not made).
#[tokio::test]
async fn output_through_a_symbolic_link_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let source = crate::support::repo_root().join("tests/data/mcp-servers/claude_desktop_config.json");
    let target = dir.path().join("precious.toml");
    std::fs::write(&target, "# precious\n")?;
    let link = dir.path().join("config.toml");
    std::os::unix::fs::symlink(&target, &link)?;
    let args = ["import", source.to_str().unwrap(), "-o", link.to_str().unwrap(), "--force"];
    let forced = run(&args, &[]).await?;
    assert_ne!(forced.status.code(), Some(0));
    assert!(texts(&forced).1.contains("is a symbolic link"), "{}", texts(&forced).1);
    assert_eq!(std::fs::read_to_string(&target)?, "# precious\n");
    assert!(std::fs::symlink_metadata(&link)?.file_type().is_symlink());

    let missing = dir.path().join("elsewhere.toml");
    let dangling = dir.path().join("dangling.toml");
    std::os::unix::fs::symlink(&missing, &dangling)?;
    let refused =
        output_of(command(&["import", source.to_str().unwrap(), "-o", dangling.to_str().unwrap()], &[])).await?;
    assert_ne!(refused.status.code(), Some(0));
    assert!(texts(&refused).1.contains("is a symbolic link"), "{}", texts(&refused).1);
    assert!(!missing.exists(), "written through a dangling link");
    Ok(())
}

/// Each literal secret of [`secret_shapes`].
const SECRETS: [&str; 17] = [
    "remote-bearer-5c1d9e",
    "one-arg-bearer-7a2f4b",
    "flag-joined-bearer-3e8c",
    "bearer-flag-9d4a1f",
    "conn-password-6b2e",
    "odbc-pwd-8f3a",
    "a3f9c2e17b4d4e0f9a1c6b8d2e7f0a5c",
    "123e4567-e89b-12d3-a456-426614174000",
    "sig-value-2c7e",
    "token-value-4a9b",
    "key-value-1f6d",
    "db-pw-value-5e3c",
    "smtp-passphrase-0b7d",
    "client-secret-value-7c1e",
    "signing-key-value-2d8f",
    "token-beside-a-variable-6a4e",
    "url-password-9e5b",
];

/// A servers file holding each of [`SECRETS`] in a shape hosts' files use.
fn secret_shapes() -> serde_json::Value {
    serde_json::json!({"mcpServers": {
        "remote": {"command": "npx", "args": [
            "mcp-remote", "https://mcp.example.com/a3f9c2e17b4d4e0f9a1c6b8d2e7f0a5c/mcp",
            "--header", "Authorization: Bearer remote-bearer-5c1d9e",
            "--header", "Authorization:Bearer one-arg-bearer-7a2f4b",
            "--header Authorization:Bearer flag-joined-bearer-3e8c",
            "--bearer", "bearer-flag-9d4a1f",
        ]},
        "database": {"command": "mssql-mcp", "args": ["Driver={ODBC};Server=db;Uid=app;Pwd=odbc-pwd-8f3a;"], "env": {
            "CONNECTION_STRING": "Server=tcp:db.example.com,1433;Database=app;User Id=app;Password=conn-password-6b2e;",
            "DATABASE_URL": "postgres://app:url-password-9e5b@db.example.com/app",
            "DB_PW": "db-pw-value-5e3c",
            "SMTP_PASSPHRASE": "smtp-passphrase-0b7d",
            "OAUTH_CLIENTSECRET": "client-secret-value-7c1e",
            "SIGNINGKEY": "signing-key-value-2d8f",
            "API_TOKEN": "token-beside-a-variable-6a4e${env:TOKEN_SUFFIX}",
        }},
        "hooks": {"url": "https://hooks.example.com/mcp/123e4567-e89b-12d3-a456-426614174000/stream?sig=sig-value-2c7e&region=eu"},
        "search": {"url": "https://search.example.com/mcp?token=token-value-4a9b&key=key-value-1f6d"},
    }})
}

/// The names of a TOML text's top-level keys and tables.
fn top_level_keys(text: &str) -> anyhow::Result<Vec<String>> {
    let document = toml_edit::DocumentMut::from_str(text)?;
    Ok(document.iter().map(|(key, _)| key.to_string()).collect())
}
