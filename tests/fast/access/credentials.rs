//! Bearer tokens (401 without a valid one, never logged), and the policy problems `check` and
//! `policy explain` report.

use crate::support::PROXY_BIN;
use crate::support::fixture::{Era, connect_http_with_token, list_all_resources};
use crate::support::proxy::{ProxyProcess, fixture_upstream, toml_str};
use rmcp::model::ReadResourceRequestParams;

use super::*;

/// Without a valid `Authorization: Bearer <token>` the endpoint answers 401 with
/// `WWW-Authenticate: Bearer` before any MCP processing; a right token gets the SSE answer. Even
/// at `RUST_LOG=trace` no token reaches the logs.
#[tokio::test]
async fn requests_without_a_valid_bearer_token_get_401_and_tokens_never_reach_the_logs() -> anyhow::Result<()> {
    let policies = policies_folder(&[("all.toml", "principals = [\"*\"]\nallow = [\"**\"]\n")])?;
    let config = access_config(policies.path(), &fixture_upstream("fx", &[]));
    let proxy = ProxyProcess::start_with(&config, &[], &[TOKENS[0], TOKENS[1], ("RUST_LOG", "trace")]).await?;
    proxy.wait_up("fx", 1).await?;
    let wrong_token = "wrong-tok-5a7c9e1b3d";
    let refused = [
        ("no header", None),
        ("wrong token", Some(format!("Bearer {wrong_token}"))),
        ("scheme alone", Some("Bearer".to_string())),
        ("scheme and space", Some("Bearer ".to_string())),
        ("basic", Some("Basic YWxpY2U6cGFzc3dvcmQ=".to_string())),
        ("two spaces", Some(format!("Bearer  {ALICE_TOKEN}"))),
        ("token without scheme", Some(ALICE_TOKEN.to_string())),
    ];
    for (case, authorization) in &refused {
        let response = post_initialize(&proxy.url, authorization.as_deref()).await?;
        assert_eq!(response.status(), reqwest::StatusCode::UNAUTHORIZED, "{case}");
        let challenge = response.headers().get("www-authenticate").map(|v| v.to_str().unwrap_or("").to_owned());
        assert_eq!(challenge.as_deref(), Some("Bearer"), "{case}");
        assert!(response.headers().get("mcp-session-id").is_none(), "{case}: no session was opened");
    }
    for token in [ALICE_TOKEN, BOB_TOKEN] {
        let response = post_initialize(&proxy.url, Some(&format!("Bearer {token}"))).await?;
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        let content_type = response.headers().get("content-type").map(|v| v.to_str().unwrap_or("").to_owned());
        assert!(content_type.as_deref().is_some_and(|t| t.starts_with("text/event-stream")), "{content_type:?}");
        let body = response.text().await?;
        assert!(body.contains("\"result\""), "{body}");
    }
    // A whole session with each token, so every layer gets its chance to log something.
    for (token, era) in [(ALICE_TOKEN, Era::Legacy), (BOB_TOKEN, Era::Modern)] {
        let (client, _) = connect_http_with_token(&proxy.url, era, token).await?;
        list_all_resources(&client).await?;
        client.read_resource(ReadResourceRequestParams::new("fx+fx://fx/item/1")).await?;
        client.cancel().await?;
    }
    proxy.wait_log_count(&["unauthorized request"], refused.len()).await?;
    let logs = proxy.logs();
    assert!(logs.len() > 50, "trace logging is on ({} lines)", logs.len());
    for secret in [ALICE_TOKEN, BOB_TOKEN, wrong_token] {
        let found: Vec<&String> = logs.iter().filter(|line| line.contains(secret)).take(3).collect();
        assert!(found.is_empty(), "a token reached the logs: {found:#?}");
    }
    Ok(())
}

/// Run the proxy binary to completion; (exit code, stdout).
fn run_cli(args: &[&str]) -> anyhow::Result<(Option<i32>, String)> {
    let output = std::process::Command::new(PROXY_BIN).args(args).env("RUST_LOG", "warn").output()?;
    Ok((output.status.code(), String::from_utf8(output.stdout)?))
}

/// `check` reports policy problems together with config problems (exit 78); `policy explain`
/// prints each URI's verdict with the file and pattern that decided it.
#[tokio::test]
async fn check_reports_policy_problems_and_explain_names_the_deciding_rule() -> anyhow::Result<()> {
    let broken = policies_folder(&[
        ("default.toml", "principals = [\"*\"]\nallow = [\"**\"]\n"),
        ("bad-glob.toml", "principals = [\"ci\"]\nallow = [\"docs+[unclosed\"]\n"),
        ("no-principals.toml", "allow = [\"**\"]\nflavour = \"vanilla\"\n"),
    ])?;
    let config_dir = tempfile::tempdir()?;
    let config = format!(
        "[server]\npage_size = 0\n\n[policies]\ndir = {}\n\n{}",
        toml_str(broken.path().to_str().expect("utf-8")),
        fixture_upstream("fx", &[])
    );
    let config_path = crate::support::proxy::write_config(config_dir.path(), &config)?;
    let config_arg = config_path.to_str().expect("utf-8");
    let (code, out) = run_cli(&["check", "--config", config_arg])?;
    assert_eq!(code, Some(78), "{out}");
    for expected in ["page_size", "bad-glob.toml", "no-principals.toml", "principals", "flavour"] {
        assert!(out.contains(expected), "check names {expected:?}:\n{out}");
    }

    let policies = policies_folder(&[
        (
            "default.toml",
            "principals = [\"*\"]\nallow = [\"**\"]\ndeny = [\"*+file:///**/.env\", \"*+file:///**/secrets/**\"]\n",
        ),
        ("ci-bot.toml", "principals = [\"ci-bot\"]\nallow = [\"docs+**\"]\n"),
    ])?;
    let config = format!(
        "[policies]\ndir = {}\n\n{}",
        toml_str(policies.path().to_str().expect("utf-8")),
        fixture_upstream("fx", &[])
    );
    let config_path = crate::support::proxy::write_config(config_dir.path(), &config)?;
    let config_arg = config_path.to_str().expect("utf-8");
    let (code, out) = run_cli(&["check", "--config", config_arg])?;
    assert_eq!(code, Some(0), "{out}");

    let uris = ["docs+file:///app/.env", "docs+file:///app/guide.md", "docs+file:///app/%73ecrets/key"];
    let (code, out) =
        run_cli(&["policy", "explain", "--principal", "someone", "--config", config_arg, uris[0], uris[1], uris[2]])?;
    assert_eq!(code, Some(0), "{out}");
    let verdicts = verdict_lines(&out);
    assert_eq!(
        verdicts,
        [
            "denied by default.toml: *+file:///**/.env",
            "allowed by default.toml: **",
            "denied by default.toml: *+file:///**/secrets/**",
        ],
        "{out}"
    );
    assert!(out.contains("normalised: docs+file:///app/secrets/key"), "{out}");

    let (code, out) =
        run_cli(&["policy", "explain", "--principal", "ci-bot", "--config", config_arg, uris[0], "gh+x:y"])?;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(verdict_lines(&out), ["allowed by ci-bot.toml: docs+**", "denied: no rule allows it"], "{out}");
    Ok(())
}

/// The `allowed …` / `denied …` lines of `policy explain`.
fn verdict_lines(out: &str) -> Vec<String> {
    out.lines()
        .map(str::trim)
        .filter(|line| line.starts_with("allowed") || line.starts_with("denied"))
        .map(str::to_owned)
        .collect()
}
