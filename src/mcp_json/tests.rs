use std::path::{Path, PathBuf};

use super::*;
use crate::config::{Config, UpstreamTransport};

fn origin() -> Origin {
    Origin { workspace: Some(PathBuf::from("/home/me/project")) }
}

fn imported(text: &str) -> Import {
    import(text, &origin()).unwrap_or_else(|e| panic!("{e}"))
}

fn notes_of(import: &Import, entry: &str) -> Vec<String> {
    import.notes.iter().filter(|n| n.entry == entry).map(|n| n.message.clone()).collect()
}

/// The config the import writes, loaded as the proxy would (every variable set to `set-<NAME>`,
/// but the OpenTelemetry ones, which no import writes).
fn loaded(import: &Import) -> Config {
    let text = import.to_toml();
    let env = |name: &str| (!name.starts_with("OTEL_")).then(|| format!("set-{name}"));
    Config::from_toml(&text, Path::new("/"), &env).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn a_claude_desktop_file_becomes_stdio_and_http_upstreams() {
    let import = imported(
        r#"{"mcpServers": {
            "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"], "env": {"MEMORY_FILE_PATH": "/tmp/m.jsonl"}},
            "remote": {"url": "https://example.com/mcp", "headers": {"X-Team": "blue"}}
        }, "globalShortcut": "Ctrl+Space"}"#,
    );
    let config = loaded(&import);
    assert_eq!(config.upstreams.len(), 2);
    match &config.upstreams[0].transport {
        UpstreamTransport::Command { program, args, env, .. } => {
            assert_eq!(program, "npx");
            assert_eq!(args, &["-y", "@modelcontextprotocol/server-memory"]);
            assert_eq!(env.get("MEMORY_FILE_PATH").map(String::as_str), Some("/tmp/m.jsonl"));
        }
        other => panic!("{other:?}"),
    }
    match &config.upstreams[1].transport {
        UpstreamTransport::Http { url, headers, .. } => {
            assert_eq!(url, "https://example.com/mcp");
            assert_eq!(headers.get("X-Team").map(String::as_str), Some("blue"));
        }
        other => panic!("{other:?}"),
    }
    assert!(import.notes.is_empty(), "{:?}", import.notes);
}

#[test]
fn literal_secrets_become_variables_and_never_reach_the_config() {
    let import = imported(
        r#"{"mcpServers": {
            "github": {"command": "docker", "args": ["run", "--api-key=ghp_abcdefghijklmnop1234"], "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_0123456789abcdefABCDEF"}},
            "db": {"command": "npx", "args": ["server-postgres", "postgresql://app:hunter2@localhost/db"]},
            "api": {"type": "http", "url": "https://api.example.com/mcp?api_key=k123&team=x", "headers": {"Authorization": "Bearer abc.def", "X-Api-Key": "plain"}}
        }}"#,
    );
    let text = import.to_toml();
    for secret in ["ghp_0123456789abcdefABCDEF", "ghp_abcdefghijklmnop1234", "hunter2", "k123", "abc.def", "plain"] {
        assert!(!text.contains(secret), "`{secret}` written in clear:\n{text}");
    }
    let expected =
        ["GITHUB_PERSONAL_ACCESS_TOKEN", "GITHUB_API_KEY", "DB_PASSWORD", "API_API_KEY", "API_TOKEN", "API_X_API_KEY"];
    for variable in expected {
        assert!(import.variables.contains(variable), "{variable} in {:?}", import.variables);
        assert!(import.notes.iter().any(|n| n.message.contains(&format!("`{variable}`"))), "{:?}", import.notes);
    }
    assert!(text.contains("\"Bearer ${API_TOKEN}\""), "{text}");
    assert!(text.contains("postgresql://app:${DB_PASSWORD}@localhost/db"), "{text}");
    assert!(text.contains("team=x"), "{text}");
    let config = loaded(&import);
    match &config.upstreams[0].transport {
        UpstreamTransport::Http { headers, .. } => {
            assert_eq!(headers.get("Authorization").map(String::as_str), Some("Bearer set-API_TOKEN"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn vs_code_variables_map_to_the_proxys_references() {
    let import = imported(
        r#"{"inputs": [{"type": "promptString", "id": "api-key", "description": "Search API key", "password": true}],
            "servers": {"search": {"type": "stdio", "command": "uvx", "args": ["search-mcp", "${workspaceFolder}/data"],
                                   "env": {"SEARCH_KEY": "${input:api-key}", "HOME_DIR": "${userHome}", "LEVEL": "${env:LOG_LEVEL}"}}}}"#,
    );
    match &import.upstreams[0].transport {
        ImportedTransport::Command { args, env, .. } => {
            assert_eq!(args, &["search-mcp", "/home/me/project/data"]);
            let expected = [("HOME_DIR", "${HOME}"), ("LEVEL", "${LOG_LEVEL}"), ("SEARCH_KEY", "${API_KEY}")];
            assert_eq!(env, &expected.map(|(key, value)| (key.to_string(), value.to_string())));
        }
        other => panic!("{other:?}"),
    }
    let notes = notes_of(&import, "search");
    assert!(
        notes.iter().any(|n| n.contains("input `api-key` (Search API key)") && n.contains("`API_KEY`")),
        "{notes:?}"
    );
    assert_eq!(import.variables.iter().map(String::as_str).collect::<Vec<_>>(), ["API_KEY", "HOME", "LOG_LEVEL"]);
    loaded(&import);
}

#[test]
fn names_are_made_valid_and_unique_and_each_rename_is_noted() {
    let import = imported(
        r#"{"mcpServers": {"My Server": {"command": "a"}, "my_server": {"command": "b"}, "Ünï": {"command": "c"}, "ok-1": {"command": "d"}}}"#,
    );
    let names: Vec<(&str, &str)> = import.upstreams.iter().map(|u| (u.entry.as_str(), u.name.as_str())).collect();
    assert_eq!(names, [("My Server", "my-server"), ("my_server", "my-server-2"), ("ok-1", "ok-1"), ("Ünï", "n")]);
    for (entry, name) in [("My Server", "my-server"), ("my_server", "my-server-2"), ("Ünï", "n")] {
        assert!(notes_of(&import, entry).iter().any(|n| n.contains(&format!("renamed to `{name}`"))), "{entry}");
    }
    assert!(notes_of(&import, "ok-1").is_empty());
    assert_eq!(loaded(&import).upstreams.len(), 4);
}

#[test]
fn unsupported_and_disabled_entries_are_skipped_with_a_note() {
    let import = imported(
        r#"{"mcpServers": {"legacy": {"type": "sse", "url": "http://127.0.0.1:1/sse"}, "off": {"command": "x", "disabled": true},
            "kept": {"command": "y", "autoApprove": ["t"], "fancy": 1}}}"#,
    );
    assert_eq!(import.upstreams.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(), ["kept"]);
    assert!(notes_of(&import, "legacy").iter().any(|n| n.contains("`sse`") && n.contains("skipped")));
    assert!(notes_of(&import, "off").iter().any(|n| n.contains("disabled")));
    let kept = notes_of(&import, "kept");
    assert!(kept.iter().any(|n| n.contains("`autoApprove`")) && kept.iter().any(|n| n.contains("`fancy`")), "{kept:?}");
}

#[test]
fn every_broken_entry_is_named_at_once() {
    let error = import(
        r#"{"mcpServers": {"good": {"command": "a"}, "nothing": {}, "both": {"command": "a", "url": "http://x"},
            "odd": {"type": "websocket", "url": "ws://x"}, "badargs": {"command": "a", "args": "--x"},
            "badurl": {"url": "ftp://x"}, "notobj": 7, "unknownvar": {"command": "${config:x}"}}}"#,
        &origin(),
    )
    .expect_err("broken");
    let places: Vec<&str> = error.problems.iter().map(|p| p.at.as_str()).collect();
    let expected = [
        "mcpServers.badargs.args",
        "mcpServers.badurl.url",
        "mcpServers.both",
        "mcpServers.nothing",
        "mcpServers.notobj",
        "mcpServers.odd.type",
        "mcpServers.unknownvar.command",
    ];
    assert_eq!(places, expected, "{error}");
    assert!(error.to_string().starts_with("7 problems in the servers file"), "{error}");
}

#[test]
fn a_file_without_servers_or_not_json_is_one_clear_problem() {
    for (text, needle) in [("{\"servers\": 3}", "no `mcpServers`"), ("{oops", "not JSON"), ("[]", "not a JSON object")]
    {
        let error = import(text, &origin()).expect_err(text);
        assert!(error.to_string().contains(needle), "{text}: {error}");
    }
    let error =
        import(r#"{"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}"#, &origin()).expect_err("nothing left");
    assert!(error.to_string().contains("no server could be imported"), "{error}");
}

#[test]
fn secret_detection_by_name_and_shape() {
    for name in ["GITHUB_TOKEN", "X-Api-Key", "--api-key", "apiKey", "Authorization", "DB_PASSWORD", "BRAVE_API_KEY"] {
        assert!(secrets::secret_name(name), "{name}");
    }
    let also = ["DB_PW", "dbPass", "SMTP_PASSPHRASE", "OAUTH_CLIENTSECRET", "SIGNINGKEY", "AccountKey", "--bearer"];
    for name in also.into_iter().chain(["sig", "X-Amz-Signature", "GH_TOKENS", "refresh_token"]) {
        assert!(secrets::secret_name(name), "{name}");
    }
    for name in ["MEMORY_FILE_PATH", "PORT", "LOG_LEVEL", "KEYBOARD", "PWD", "--verbose"] {
        assert!(!secrets::secret_name(name), "{name}");
    }
    for value in
        ["ghp_0123456789abcdefABCDEF", "sk-proj-abcdefghijklmnopqrstuv", "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8"]
    {
        assert!(secrets::secret_value(value), "{value}");
    }
    for value in ["@modelcontextprotocol/server-everything@2026.8.31", "/tmp/data", "stdio", "-y", "sk-short"] {
        assert!(!secrets::secret_value(value), "{value}");
    }
    for segment in
        ["123e4567-e89b-12d3-a456-426614174000", "a3f9c2e17b4d4e0f9a1c6b8d2e7f0a5c", "sk-ak-4f9a2c7e1b3d5f8a"]
    {
        assert!(secrets::secret_segment(segment), "{segment}");
    }
    for segment in ["mcp", "v1", "2026-01-01-release-notes", "server-everything", "sse", "modelcontextprotocol", ""] {
        assert!(!secrets::secret_segment(segment), "{segment}");
    }
}

#[test]
fn the_written_strings_survive_toml() {
    let import = imported(r#"{"mcpServers": {"q": {"command": "sh", "args": ["-c", "echo \"a\\b\"\n\ttab"]}}}"#);
    match &loaded(&import).upstreams[0].transport {
        UpstreamTransport::Command { args, .. } => assert_eq!(args[1], "echo \"a\\b\"\n\ttab"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_workspace_of_a_vs_code_file_is_above_its_folder() {
    let origin = Origin::of_file(Path::new("/w/proj/.vscode/mcp.json"));
    assert_eq!(origin.workspace.as_deref(), Some(Path::new("/w/proj")));
    let origin = Origin::of_file(Path::new("/w/claude/claude_desktop_config.json"));
    assert_eq!(origin.workspace.as_deref(), Some(Path::new("/w/claude")));
}

#[test]
fn an_env_name_the_proxy_cannot_pass_is_a_problem_and_an_sse_looking_url_a_note() {
    let error =
        import(r#"{"mcpServers": {"a": {"command": "x", "env": {"MY-VAR": "1"}}}}"#, &origin()).expect_err("bad name");
    assert_eq!(error.problems[0].at, "mcpServers.a.env.MY-VAR", "{error}");
    let import = imported(r#"{"mcpServers": {"old": {"url": "http://localhost:8931/sse"}}}"#);
    assert!(notes_of(&import, "old").iter().any(|n| n.contains("`/sse`")), "{:?}", import.notes);
}

#[test]
fn secrets_in_arguments_keep_their_names() {
    let import = imported(
        r#"{"mcpServers": {"gh": {"command": "docker", "args": ["run", "-e", "GITHUB_TOKEN=ghp_0123456789abcdefABCDEF", "--api-key-file", "--verbose", "--token", "t0k3n", "image"]}}}"#,
    );
    match &import.upstreams[0].transport {
        ImportedTransport::Command { args, .. } => assert_eq!(
            args,
            &[
                "run",
                "-e",
                "GITHUB_TOKEN=${GITHUB_TOKEN}",
                "--api-key-file",
                "--verbose",
                "--token",
                "${GH_TOKEN}",
                "image"
            ]
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn nothing_of_the_file_is_written_outside_its_keys_and_values() {
    let hostile = "x\"\n[server]\nlisten = \"0.0.0.0:8080\"\n[auth]\nmode = \"none\"\n#";
    let servers = serde_json::json!({"mcpServers": {
        hostile: {"command": hostile, "args": [hostile], "cwd": format!("/srv/{hostile}")},
        "web": {"url": format!("https://h.example/{}", hostile.replace('\n', "%0A")), "headers": {"X-Note": hostile}},
    }});
    let import = imported(&servers.to_string());
    let text = import.to_toml();
    let document: toml_edit::DocumentMut = text.parse().unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(document.iter().map(|(key, _)| key).collect::<Vec<_>>(), ["upstreams"], "{text}");
    assert!(text.lines().filter(|line| line.starts_with('#')).all(|line| !line.contains("0.0.0.0")), "{text}");
    match &loaded(&import).upstreams[1].transport {
        UpstreamTransport::Command { program, args, .. } => {
            assert_eq!((program.as_str(), args[0].as_str()), (hostile, hostile))
        }
        other => panic!("{other:?}"),
    }
    assert!(
        import.notes.iter().all(|note| !note.entry.contains('\n') && !note.message.contains('\n')),
        "{:?}",
        import.notes
    );
}

#[test]
fn a_variable_that_is_no_name_is_a_problem_on_one_line() {
    for (value, name) in
        [("${env:A\n[auth]}", "A\\n[auth]"), ("${env:}", ""), ("${env:1X}", "1X"), ("${env:A B}", "A B")]
    {
        let servers = serde_json::json!({"mcpServers": {"a": {"command": "x", "env": {"LEVEL": value}}}});
        let error = import(&servers.to_string(), &origin()).expect_err(value);
        assert_eq!(error.problems[0].at, "mcpServers.a.env.LEVEL", "{error}");
        assert!(error.problems[0].message.contains(&format!("`{name}` is not a variable name")), "{error}");
        assert!(!error.to_string().trim_end().lines().any(|line| line.starts_with('[')), "{error}");
    }
    let origin = Origin { workspace: Some(PathBuf::from("/w/${HOME}")) };
    let error = import(r#"{"mcpServers": {"a": {"command": "x", "args": ["${workspaceFolder}"]}}}"#, &origin)
        .expect_err("a workspace read as a variable");
    assert!(error.to_string().contains("holds `${`"), "{error}");
}

#[test]
fn a_secret_beside_a_variable_is_moved_and_the_variable_no_longer_listed() {
    let import = imported(
        r#"{"mcpServers": {"a": {"command": "x", "env": {"API_TOKEN": "live-abc${env:SUFFIX}", "PLAIN": "${env:KEPT}"}},
            "b": {"url": "https://h.example/mcp", "headers": {"Authorization": "Bearer ${env:B_TOKEN}"}}}}"#,
    );
    let text = import.to_toml();
    assert!(!text.contains("live-abc"), "{text}");
    assert_eq!(import.variables.iter().map(String::as_str).collect::<Vec<_>>(), ["API_TOKEN", "B_TOKEN", "KEPT"]);
    loaded(&import);
}
