//! The command-line contract of the real `mcp-resource-proxy` binary: `--version`, `--help` on
//! each subcommand, `check` (exit 0 / 78, every problem with where it is), `serve` refusing a bad
//! config before it starts anything, `serve-dir` speaking MCP over stdio, and `serve --stdio`
//! keeping stdout for JSON-RPC alone.
//!
//! `connect`: a host's config file made to use the proxy, and put back.
//!
//! `stdio`: `serve-dir` and `serve --stdio` over their stdin/stdout.

mod connect;
mod peer_tls;
mod stdio;

use std::path::Path;
use std::process::{Output, Stdio};

use crate::support::PROXY_BIN;
use crate::support::fixture::DEADLINE;
use crate::support::proxy::{toml_str, write_config};
use crate::support::repo_root;
use anyhow::Context;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// EX_CONFIG from sysexits.h.
const EXIT_CONFIG: i32 = 78;

#[tokio::test]
async fn version_prints_name_and_version() -> anyhow::Result<()> {
    let output = run(&["--version"], None).await?;
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(stdout(&output).trim(), format!("mcp-resource-proxy {}", env!("CARGO_PKG_VERSION")));
    Ok(())
}

/// `--help` and `<sub> --help` exit 0 and name every subcommand and flag of the contract.
#[tokio::test]
async fn help_of_each_command_exits_0_and_mentions_its_flags() -> anyhow::Result<()> {
    let cases: [(&[&str], &[&str]); 6] = [
        (&["--help"], &["serve", "check", "serve-dir", "import", "connect", "--version", "--help", "--log-format"]),
        (&["serve", "--help"], &["--config", "--mcp-json", "--stdio", "--listen", "--admin-listen", "config.toml"]),
        (&["check", "--help"], &["--config", "config.toml", "MCP_PROXY_CONFIG", "78"]),
        (&["import", "--help"], &["<FILE>", "--output", "--force", "78"]),
        (&["serve-dir", "--help"], &["<DIR>", "stdio"]),
        (&["connect", "--help"], &["claude-desktop", "cursor", "vscode", "--file", "--name", "--dry-run", "--undo"]),
    ];
    for (args, needles) in cases {
        let output = run(args, None).await?;
        assert_eq!(output.status.code(), Some(0), "{args:?}");
        let text = stdout(&output);
        for needle in needles {
            assert!(text.contains(needle), "{args:?} mentions {needle}:\n{text}");
        }
    }
    Ok(())
}

/// The shipped `config.toml` is valid, named explicitly and as the default path.
#[tokio::test]
async fn check_accepts_the_shipped_config() -> anyhow::Result<()> {
    let shipped = repo_root().join("config.toml");
    for args in [vec!["check", "--config", shipped.to_str().unwrap()], vec!["check"]] {
        let output = run(&args, Some(&repo_root())).await?;
        assert_eq!(output.status.code(), Some(0), "{args:?}: {}{}", stdout(&output), stderr(&output));
        assert!(stdout(&output).contains("valid"), "{args:?}: {}", stdout(&output));
    }
    Ok(())
}

/// Every config example in `examples/` is valid, and has no warning.
#[tokio::test]
async fn check_accepts_every_config_example() -> anyhow::Result<()> {
    let mut examples: Vec<_> = std::fs::read_dir(repo_root().join("examples"))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    examples.retain(|path| path.extension().is_some_and(|e| e == "toml"));
    assert!(examples.len() >= 3, "{examples:?}");
    for example in examples {
        let output = run(&["check", "--config", example.to_str().unwrap()], None).await?;
        assert_eq!(output.status.code(), Some(0), "{}: {}", example.display(), stdout(&output));
        assert!(!stdout(&output).contains("warning"), "{}: {}", example.display(), stdout(&output));
    }
    Ok(())
}

/// Every semantic problem of a config is printed in one run, each with where it is; exit 78.
#[tokio::test]
async fn check_prints_every_problem_with_its_place_and_exits_78() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), SEVERAL_PROBLEMS)?;
    let output = run(&["check", "--config", config.to_str().unwrap()], None).await?;
    assert_eq!(output.status.code(), Some(EXIT_CONFIG), "{}", stdout(&output));
    let text = stdout(&output);
    for (place, what) in SEVERAL_PROBLEMS_REPORTED {
        assert!(text.lines().any(|l| l.contains(place) && l.contains(what)), "`{place}`: {what} in:\n{text}");
    }
    assert!(text.contains(&format!("{} configuration problems", SEVERAL_PROBLEMS_REPORTED.len())), "{text}");
    Ok(())
}

/// A value of the wrong type is reported together with the config's other problems, not alone.
#[tokio::test]
async fn check_reports_a_type_error_together_with_the_other_problems() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let text = "[server]\npage_size = \"many\"\n\n[[upstreams]]\nname = \"Bad_Name\"\ndir = \"x\"\n";
    let config = write_config(dir.path(), text)?;
    let output = run(&["check", "--config", config.to_str().unwrap()], None).await?;
    assert_eq!(output.status.code(), Some(EXIT_CONFIG));
    let text = stdout(&output);
    assert!(text.contains("server.page_size"), "{text}");
    assert!(text.contains("upstreams[0] (Bad_Name).name"), "both problems at once:\n{text}");
    Ok(())
}

/// A folder upstream whose `dir` does not exist is a problem `check` reports (exit 78).
#[tokio::test]
async fn check_reports_a_folder_that_does_not_exist() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), "[[upstreams]]\nname = \"docs\"\ndir = \"nowhere\"\n")?;
    let output = run(&["check", "--config", config.to_str().unwrap()], None).await?;
    assert_eq!(output.status.code(), Some(EXIT_CONFIG), "{}", stdout(&output));
    let text = stdout(&output);
    assert!(text.lines().any(|l| l.contains("upstreams[0] (docs).dir") && l.contains("nowhere")), "{text}");
    Ok(())
}

/// An admin listener off loopback serves `/status` to anyone: `check` and `serve` warn.
#[tokio::test]
async fn an_admin_listener_off_loopback_is_warned_about_by_check_and_serve() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), "[server]\nadmin_listen = \"0.0.0.0:0\"\n")?;
    let output = run(&["check", "--config", config.to_str().unwrap()], None).await?;
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    let warned =
        |text: &str| text.lines().any(|l| l.contains("warning") || l.contains("WARN")) && text.contains("0.0.0.0:0");
    assert!(warned(&stdout(&output)), "check warns: {}", stdout(&output));
    let mut serve = Command::new(PROXY_BIN);
    serve
        .args(["serve", "--listen", "127.0.0.1:0", "--config", config.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = serve.spawn()?;
    let mut lines = BufReader::new(child.stderr.take().context("stderr")?).lines();
    let warning = tokio::time::timeout(DEADLINE, async {
        while let Some(line) = lines.next_line().await? {
            if line.contains("WARN") && line.contains("0.0.0.0:0") && line.contains("authentication") {
                return Ok(line);
            }
        }
        anyhow::bail!("serve exited without the warning")
    })
    .await
    .context("no warning from serve")??;
    assert!(warning.contains("admin_listen"), "{warning}");
    Ok(())
}

/// `policy explain` needs the policies only: token variables that are unset do not stop it.
#[tokio::test]
async fn policy_explain_runs_without_the_token_variables() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let text =
        "[auth]\nmode = \"bearer\"\n\n[[auth.tokens]]\nprincipal = \"ci-bot\"\ntoken_env = \"OPS_UNSET_TOKEN\"\n";
    let config = write_config(dir.path(), text)?;
    let mut command = Command::new(PROXY_BIN);
    command
        .args(["policy", "explain", "--principal", "ci-bot", "--config", config.to_str().unwrap(), "docs+file:///a.md"])
        .env_remove("OPS_UNSET_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(DEADLINE, command.output()).await??;
    assert_eq!(output.status.code(), Some(0), "{}{}", stdout(&output), stderr(&output));
    assert!(stdout(&output).contains("allowed"), "{}", stdout(&output));
    let serve = run(&["check", "--config", config.to_str().unwrap()], None).await?;
    assert_eq!(serve.status.code(), Some(EXIT_CONFIG), "check still needs them: {}", stdout(&serve));
    Ok(())
}

/// `serve` on a bad config prints the problems to stderr and exits 78 without starting any
/// upstream (the valid one's command would leave a marker file) or writing to stdout.
#[tokio::test]
async fn serve_on_a_bad_config_exits_78_before_starting_anything() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let marker = dir.path().join("upstream-started");
    let config = format!(
        "[server]\npage_size = 0\n\n[[upstreams]]\nname = \"would-start\"\ncommand = \"sh\"\nargs = [\"-c\", {}]\n",
        toml_str(&format!("touch '{}'; sleep 30", marker.display()))
    );
    let config = write_config(dir.path(), &config)?;
    for extra in [&[][..], &["--stdio"][..]] {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--config", config.to_str().unwrap()];
        args.extend_from_slice(extra);
        let output = run(&args, None).await?;
        assert_eq!(output.status.code(), Some(EXIT_CONFIG), "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).contains("server.page_size"), "{args:?}: {}", stderr(&output));
        assert!(output.stdout.is_empty(), "{args:?}: nothing on stdout: {}", stdout(&output));
        assert!(!marker.exists(), "{args:?}: no upstream was started");
    }
    Ok(())
}

const SEVERAL_PROBLEMS: &str = r#"
bogus = 1

[server]
listen = "nowhere"
page_size = 0

[[upstreams]]
name = "Bad_Name"
dir = "x"

[[upstreams]]
name = "dup"
dir = "x"

[[upstreams]]
name = "dup"
dir = "y"

[[upstreams]]
name = "both"
dir = "x"
url = "http://127.0.0.1:1/mcp"

[[upstreams]]
name = "remote"
url = "http://127.0.0.1:1/mcp"
headers = { Authorization = "Bearer ${MCP_PROXY_CLI_TEST_SURELY_UNSET}" }
protocol = "1999-01-01"
request_timeout = "soon"
roots = ["/srv/data", "file:///srv/../etc"]
colour = "blue"
"#;

/// (where, what) of every problem in [`SEVERAL_PROBLEMS`].
const SEVERAL_PROBLEMS_REPORTED: [(&str, &str); 12] = [
    ("bogus", "unknown key"),
    ("server.listen", "nowhere"),
    ("server.page_size", "0"),
    ("upstreams[0] (Bad_Name).name", "Bad_Name"),
    ("upstreams[2] (dup).name", "used by another upstream"),
    ("upstreams[3] (both)", "exactly one of"),
    ("upstreams[4] (remote).colour", "unknown key"),
    ("upstreams[4] (remote).headers.Authorization", "MCP_PROXY_CLI_TEST_SURELY_UNSET"),
    ("upstreams[4] (remote).protocol", "1999-01-01"),
    ("upstreams[4] (remote).request_timeout", "soon"),
    ("upstreams[4] (remote).roots[0]", "not a file:// URI"),
    ("upstreams[4] (remote).roots[1]", "`..` segment"),
];

/// Run the binary to completion (at most [`DEADLINE`]) with stdin closed.
async fn run(args: &[&str], cwd: Option<&Path>) -> anyhow::Result<Output> {
    let mut command = Command::new(PROXY_BIN);
    command.args(args).stdin(Stdio::null()).kill_on_drop(true);
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    tokio::time::timeout(DEADLINE, command.output())
        .await
        .with_context(|| format!("{args:?} did not exit"))?
        .map_err(Into::into)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
