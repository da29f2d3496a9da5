use std::path::Path;

use super::*;

fn env(name: &str) -> Option<String> {
    (name == "TOKEN").then(|| "s3cret".to_string())
}

fn load(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml(text, Path::new("/etc/proxy"), &env)
}

fn problems(text: &str) -> Vec<String> {
    load(text).expect_err("invalid").problems.into_iter().map(|p| format!("{}: {}", p.at, p.message)).collect()
}

#[test]
fn a_full_config_validates_into_types() {
    let config = load(
        r#"
        [server]
        listen = "127.0.0.1:9000"
        page_size = 50

        [[upstreams]]
        name = "policies"
        dir = "policies"

        [[upstreams]]
        name = "everything"
        command = "npx"
        args = ["-y", "pkg@1", "stdio"]
        env = { A = "${TOKEN}" }

        [[upstreams]]
        name = "remote"
        url = "http://127.0.0.1:3001/mcp"
        headers = { Authorization = "Bearer ${TOKEN}" }
        protocol = "2025-11-25"
        request_timeout = "250ms"
        "#,
    )
    .unwrap();
    assert_eq!(config.server.listen, "127.0.0.1:9000".parse().unwrap());
    assert_eq!(config.server.page_size, 50);
    assert_eq!(config.upstreams.len(), 3);
    assert_eq!(
        config.upstreams[0].transport,
        UpstreamTransport::Dir { path: "/etc/proxy/policies".into(), uri_base: UriBase::Relative }
    );
    let UpstreamTransport::Command { env, args, .. } = &config.upstreams[1].transport else { panic!() };
    assert_eq!(env["A"], "s3cret");
    assert_eq!(args, &["-y", "pkg@1", "stdio"]);
    let UpstreamTransport::Http { headers, .. } = &config.upstreams[2].transport else { panic!() };
    assert_eq!(headers["Authorization"], "Bearer s3cret");
    assert_eq!(config.upstreams[2].protocol, ProtocolChoice::Pinned("2025-11-25".into()));
    assert_eq!(config.upstreams[2].request_timeout, Duration::from_millis(250));
    assert_eq!(config.upstreams[0].protocol, ProtocolChoice::Auto);
}

#[test]
fn defaults_apply_to_an_empty_file() {
    let config = load("").unwrap();
    assert_eq!(config.server.listen, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(config.server.page_size, 100);
    assert!(config.upstreams.is_empty());
}

#[test]
fn every_problem_is_reported_at_once() {
    let found = problems(
        r#"
        colour = "blue"
        [server]
        listen = "nowhere"
        page_size = 0
        typo = 1

        [[upstreams]]
        name = "Bad_Name"
        dir = "x"

        [[upstreams]]
        name = "twice"
        dir = "x"

        [[upstreams]]
        name = "twice"
        command = "a"
        url = "http://x"

        [[upstreams]]
        name = "web"
        url = "ftp://x/${MISSING}"
        headers = { Accept = "x", "bad header" = "y" }
        protocol = "1999-01-01"
        request_timeout = "soon"
        extra = true

        [[upstreams]]
        dir = "y"
        "#,
    );
    let expected = [
        "colour: unknown key",
        "server.typo: unknown key",
        "server.listen: `nowhere` is not an address like 127.0.0.1:8080",
        "server.page_size: 0 is outside 1..=10000",
        "upstreams[0] (Bad_Name).name: `Bad_Name` must match ^[a-z0-9]([a-z0-9-]*[a-z0-9])?$",
        "upstreams[2] (twice).name: `twice` is used by another upstream",
        "upstreams[2] (twice): needs exactly one of `dir`, `command`, `url`",
        "upstreams[3] (web): unknown key",
        "upstreams[3] (web).url: environment variable `MISSING` is not set",
        "upstreams[3] (web).url: `` is not an http:// or https:// URL",
        "upstreams[3] (web).headers: `Accept` is set by the proxy itself",
        "upstreams[3] (web).headers: `bad header` is not a valid header name",
        "upstreams[3] (web).protocol: `1999-01-01` is not \"auto\" or one of",
        "upstreams[3] (web).request_timeout: `soon` is not a duration",
        "upstreams[4]: missing `name`",
    ];
    for want in expected {
        assert!(
            found.iter().any(|f| f.starts_with(want)
                || (want.ends_with("unknown key")
                    && f.contains("unknown key")
                    && f.starts_with(want.split(':').next().unwrap()))),
            "missing {want:?} in {found:#?}"
        );
    }
    assert_eq!(found.len(), expected.len(), "{found:#?}");
}

#[test]
fn type_errors_say_where_and_do_not_hide_other_problems() {
    let found = problems("[server]\npage_size = \"many\"\nlisten = 7\n[[upstreams]]\nname = \"Bad\"\ndir = \"x\"\n");
    assert!(found.iter().any(|f| f.starts_with("server.page_size")), "{found:?}");
    assert!(found.iter().any(|f| f.starts_with("server.listen")), "{found:?}");
    assert!(found.iter().any(|f| f.contains("`Bad` must match")), "{found:?}");
}

#[test]
fn vars_expand() {
    let lookup = |n: &str| (n == "A").then(|| "1".to_string());
    assert_eq!(expand_vars("x${A}y${A}", &lookup), Ok("x1y1".into()));
    assert_eq!(expand_vars("${B}", &lookup), Err("B".into()));
    assert_eq!(expand_vars("no vars $A {A}", &lookup), Ok("no vars $A {A}".into()));
}

#[test]
fn durations_parse() {
    assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
    assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
    assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
    assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
    for bad in ["", "s", "10", "1d", "-1s", "1.5s"] {
        assert_eq!(parse_duration(bad), None, "{bad}");
    }
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn auth_defaults_to_none_on_loopback_with_no_policies() {
    let config = load("").unwrap();
    assert_eq!(
        config.auth,
        AuthConfig { mode: AuthMode::None, allow_unauthenticated: false, tokens: vec![], jwt: None }
    );
    assert_eq!(config.policies.dir, None);
    assert!(config.policy_set().is_allow_all());
}

#[test]
fn bearer_tokens_resolve_to_digests_only() {
    let hex = sha256_hex("other-token");
    let config = load(&format!(
        r#"
        [server]
        listen = "0.0.0.0:8080"
        [auth]
        mode = "bearer"
        [[auth.tokens]]
        principal = "ci-bot"
        token_env = "TOKEN"
        [[auth.tokens]]
        principal = "alice"
        token_sha256 = "{}"
        "#,
        hex.to_uppercase()
    ))
    .unwrap();
    assert_eq!(config.auth.mode, AuthMode::Bearer);
    let pairs: Vec<(String, String)> = config
        .auth
        .tokens
        .iter()
        .map(|t| (t.principal.clone(), t.sha256.iter().map(|b| format!("{b:02x}")).collect()))
        .collect();
    assert_eq!(pairs, [("ci-bot".into(), sha256_hex("s3cret")), ("alice".into(), hex)]);
    let shown = format!("{config:?}");
    assert!(!shown.contains("s3cret") && !shown.contains(&sha256_hex("s3cret")), "{shown}");
}

#[test]
fn unauthenticated_non_loopback_needs_an_explicit_yes() {
    let found = problems("[server]\nlisten = \"0.0.0.0:8080\"\n");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("auth.mode: \"none\" on 0.0.0.0:8080, which is not loopback"), "{found:?}");
    let config = load("[server]\nlisten = \"0.0.0.0:8080\"\n[auth]\nallow_unauthenticated = true\n").unwrap();
    assert_eq!(config.auth.mode, AuthMode::None);
    load("[server]\nlisten = \"[::1]:8080\"\n").unwrap();
}

#[test]
fn every_auth_and_policies_problem_is_reported() {
    let found = problems(
        r#"
        [auth]
        mode = "basic"
        colour = 1
        [[auth.tokens]]
        principal = "a b"
        token_env = "MISSING"
        [[auth.tokens]]
        principal = "x"
        token_sha256 = "abc"
        [[auth.tokens]]
        principal = "y"
        token_env = "TOKEN"
        token_sha256 = "00"
        [[auth.tokens]]
        token_env = "TOKEN"
        [[auth.tokens]]
        principal = "z"
        token_env = "TOKEN"
        [policies]
        dir = "nowhere"
        extra = 2
        "#,
    );
    let expected = [
        "auth.mode: `basic` is not \"none\" or \"bearer\"",
        "auth.colour: unknown key",
        "auth.tokens[0].principal: `a b` is not a principal name",
        "auth.tokens[0].token_env: environment variable `MISSING` is not set",
        "auth.tokens[1].token_sha256: must be 64 hex digits",
        "auth.tokens[2]: needs exactly one of `token_env`, `token_sha256`",
        "auth.tokens[3]: missing `principal`",
        "auth.tokens[4]: the same token is configured twice",
        "policies.extra: unknown key",
        "/etc/proxy/nowhere: cannot read the policies directory",
    ];
    for want in expected {
        assert!(found.iter().any(|f| f.starts_with(want)), "missing {want:?} in {found:#?}");
    }
    assert_eq!(found.len(), expected.len(), "{found:#?}");
}

#[test]
fn tokens_without_bearer_and_bearer_without_tokens_are_problems() {
    let found = problems("[[auth.tokens]]\nprincipal = \"a\"\ntoken_env = \"TOKEN\"\n");
    assert!(found[0].starts_with("auth.mode: [[auth.tokens]] are set but mode is \"none\""), "{found:?}");
    let found = problems("[auth]\nmode = \"bearer\"\n");
    assert!(found[0].starts_with("auth.tokens: mode = \"bearer\" needs at least one"), "{found:?}");
}

#[test]
fn policies_load_with_the_config_and_their_problems_join_the_others() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("policies")).unwrap();
    std::fs::write(dir.path().join("policies/default.toml"), "principals = [\"*\"]\nallow = [\"docs+**\"]\n").unwrap();
    let config = Config::from_toml("", dir.path(), &env).unwrap();
    assert_eq!(config.policies.dir.as_deref(), Some(dir.path().join("policies").as_path()));
    assert!(config.policy_set().allows("anyone", "docs+file:///a"));
    assert!(!config.policy_set().allows("anyone", "gh+file:///a"));

    std::fs::write(dir.path().join("policies/bad.toml"), "principals = []\n").unwrap();
    let error = Config::from_toml("[server]\npage_size = 0\n", dir.path(), &env).expect_err("invalid");
    let found: Vec<String> = error.problems.iter().map(|p| format!("{}: {}", p.at, p.message)).collect();
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found.iter().any(|f| f.contains("bad.toml: principals: names no principal")), "{found:#?}");
}

#[test]
fn server_limits_have_defaults_and_every_bad_one_is_reported() {
    let server = load("").unwrap().server;
    assert_eq!(
        (server.max_sessions, server.max_sessions_per_principal, server.max_subscriptions_per_session),
        (10_000, 1_000, 1_000)
    );
    assert_eq!((server.max_connections, server.header_read_timeout), (1_024, Duration::from_secs(10)));
    assert_eq!(server.max_calls_per_principal, 256);
    assert_eq!(server.unused_session_idle_timeout, Duration::from_secs(300));
    assert!(server.allowed_origins.is_empty());
    let off = load("[server]\nunused_session_idle_timeout = \"0s\"\n").unwrap().server;
    assert!(off.unused_session_idle_timeout.is_zero(), "0s turns it off");
    let found = problems(
        r#"
        [server]
        max_sessions = 0
        max_sessions_per_principal = -1
        max_subscriptions_per_session = 2000000
        max_connections = 0
        max_calls_per_principal = 0
        header_read_timeout = "0s"
        unused_session_idle_timeout = "soon"
        allowed_origins = ["app.example.com", "null", "https://ok.example:443"]
        "#,
    );
    for at in [
        "server.max_sessions:",
        "server.max_sessions_per_principal:",
        "server.max_subscriptions_per_session:",
        "server.max_connections:",
        "server.max_calls_per_principal:",
        "server.header_read_timeout:",
        "server.unused_session_idle_timeout: `soon`",
        "server.allowed_origins: `app.example.com`",
    ] {
        assert!(found.iter().any(|p| p.starts_with(at)), "{at} in {found:#?}");
    }
    assert_eq!(found.len(), 8, "{found:#?}");
}

#[test]
fn roots_are_file_uris_and_every_bad_one_is_named() {
    let config =
        load("[[upstreams]]\nname = \"fs\"\ncommand = \"fs\"\nroots = [\"file:///srv/data\", \"file://host/share\"]\n")
            .unwrap();
    assert_eq!(config.upstreams[0].roots, ["file:///srv/data", "file://host/share"]);
    let found = problems(
        r#"
        [[upstreams]]
        name = "fs"
        command = "fs"
        roots = ["file:///ok", "/srv/data", "file:///a b", "file:///srv/../etc", "file://host", "file:///ok", "https://x/y", "file:///q?x=1"]
        "#,
    );
    assert_eq!(
        found,
        [
            "upstreams[0] (fs).roots[1]: `/srv/data` is not a file:// URI (like file:///srv/data)",
            "upstreams[0] (fs).roots[2]: `file:///a b` holds whitespace or control characters (percent-encode them)",
            "upstreams[0] (fs).roots[3]: `file:///srv/../etc` has a `.` or `..` segment",
            "upstreams[0] (fs).roots[4]: `file://host` has no absolute path (like file:///srv/data)",
            "upstreams[0] (fs).roots[5]: `file:///ok` is named twice",
            "upstreams[0] (fs).roots[6]: `https://x/y` is not a file:// URI (like file:///srv/data)",
            "upstreams[0] (fs).roots[7]: `file:///q?x=1` has a query or fragment",
        ]
    );
}
