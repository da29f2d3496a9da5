//! Checks beyond the shape of the configuration: the folders it names exist, and settings
//! that are valid but risky get a warning (`check` prints them, `serve` logs them). Also the
//! loading mode of commands that connect nothing (`policy explain`), which must not need the
//! secrets that only serving uses.

use std::path::Path;

use super::{CliOverrides, Config, ConfigError, Problem, UpstreamTransport};

impl Config {
    /// Like [`Config::load`], but a `${VAR}` that is not set stands for a placeholder instead
    /// of being a problem: for commands that read policies and connect nothing. The
    /// OpenTelemetry variables (`OTEL_*`, read as themselves, never as `${VAR}`s) stay unset.
    pub fn load_without_secrets(path: &Path) -> Result<Config, ConfigError> {
        Self::load_with(path, &CliOverrides::default(), &|name| {
            std::env::var(name).ok().or_else(|| (!name.starts_with("OTEL_")).then(|| format!("unset-{name}")))
        })
    }

    /// Folder upstreams (`dir`) that name no directory: each a problem for `check` (and a
    /// warning at `serve`, where the upstream stays down until the folder appears).
    pub fn missing_folders(&self) -> Vec<Problem> {
        self.upstreams
            .iter()
            .enumerate()
            .filter_map(|(index, upstream)| match &upstream.transport {
                UpstreamTransport::Dir { path, .. } if !path.is_dir() => Some(Problem {
                    at: format!("upstreams[{index}] ({}).dir", upstream.name),
                    message: format!("{} is not a directory", path.display()),
                }),
                _ => None,
            })
            .collect()
    }

    /// Settings that are valid but probably not meant.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if let Some(admin) = self.server.admin_listen
            && !admin.ip().is_loopback()
        {
            warnings.push(format!(
                "server.admin_listen {admin} is not a loopback address: /status and /metrics have no \
                 authentication and answer anyone who can reach it"
            ));
        }
        if self.policies.dir.is_none() {
            warnings.push(
                "no policies: no `[policies] dir` and no `policies` folder beside the config file, so every \
                 caller may see and use everything"
                    .to_string(),
            );
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::from_toml(text, Path::new("/nonexistent-base"), &|_| None).expect("valid")
    }

    #[test]
    fn a_folder_that_does_not_exist_is_a_problem() {
        let found = config("[[upstreams]]\nname = \"docs\"\ndir = \"nowhere\"\n").missing_folders();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].at, "upstreams[0] (docs).dir");
        assert!(found[0].message.contains("nowhere"), "{found:?}");
    }

    #[test]
    fn uri_base_is_relative_by_default_and_checked() {
        let dir = |extra: &str| format!("[[upstreams]]\nname = \"docs\"\ndir = \"d\"\n{extra}");
        let base = |config: &Config| match &config.upstreams[0].transport {
            UpstreamTransport::Dir { uri_base, .. } => *uri_base,
            other => panic!("{other:?}"),
        };
        assert_eq!(base(&config(&dir(""))), super::super::UriBase::Relative);
        assert_eq!(base(&config(&dir("uri_base = \"absolute\"\n"))), super::super::UriBase::Absolute);
        let text = format!(
            "{}[[upstreams]]\nname = \"web\"\nurl = \"http://127.0.0.1:1/\"\nuri_base = \"relative\"\n",
            dir("uri_base = \"sideways\"\n")
        );
        let error = Config::from_toml(&text, Path::new("/b"), &|_| None).expect_err("two problems");
        let places: Vec<&str> = error.problems.iter().map(|p| p.at.as_str()).collect();
        assert_eq!(places, ["upstreams[0] (docs).uri_base", "upstreams[1] (web).uri_base"], "{error}");
    }

    #[test]
    fn upstream_sessions_are_shared_by_default_and_every_bad_setting_is_a_problem() {
        let web = |extra: &str| format!("[[upstreams]]\nname = \"web\"\nurl = \"http://127.0.0.1:1/\"\n{extra}");
        let shared = config(&web(""));
        assert_eq!(shared.upstreams[0].sessions, super::super::UpstreamSessions::default());
        assert_eq!(shared.upstreams[0].sessions.mode, super::super::SessionMode::Shared);
        let per = config(&web("session = \"per-principal\"\nsession_idle = \"2m\"\nmax_sessions = 3\n"));
        let sessions = &per.upstreams[0].sessions;
        assert_eq!(
            (sessions.mode, sessions.idle, sessions.max),
            (super::super::SessionMode::PerPrincipal, std::time::Duration::from_secs(120), 3)
        );
        let text = format!(
            "{}[[upstreams]]\nname = \"docs\"\ndir = \"d\"\nsession = \"per-host\"\n",
            web("session = \"per-user\"\nsession_idle = \"soon\"\nmax_sessions = 0\nmax_sessions_per_principal = -1\n")
        );
        let error = Config::from_toml(&text, Path::new("/b"), &|_| None).expect_err("five problems");
        let places: Vec<&str> = error.problems.iter().map(|p| p.at.as_str()).collect();
        let expected = [
            "upstreams[0] (web).session",
            "upstreams[0] (web).session_idle",
            "upstreams[0] (web).max_sessions",
            "upstreams[0] (web).max_sessions_per_principal",
            "upstreams[1] (docs).session",
        ];
        assert_eq!(places, expected, "{error}");
        assert!(
            error.to_string().contains("`per-user` is not \"shared\", \"per-principal\" or \"per-host\""),
            "{error}"
        );
    }

    #[test]
    fn a_stdio_upstream_is_per_principal_by_default_unless_one_principal_is_served() {
        use super::super::SessionMode::{PerPrincipal, Shared};
        let upstreams = "[[upstreams]]\nname = \"ev\"\ncommand = \"node\"\n\n\
                         [[upstreams]]\nname = \"kept\"\ncommand = \"node\"\nsession = \"shared\"\n\n\
                         [[upstreams]]\nname = \"web\"\nurl = \"http://127.0.0.1:1/\"\n";
        let bearer = "[auth]\nmode = \"bearer\"\n[[auth.tokens]]\nprincipal = \"alice\"\ntoken_env = \"T\"\n\n";
        let modes = |config: &Config| -> Vec<(super::super::SessionMode, bool)> {
            config.upstreams.iter().map(|upstream| (upstream.sessions.mode, upstream.sessions.set)).collect()
        };
        let token = |name: &str| (name == "T").then(|| "a-static-token-of-alice-5f1e9c".to_string());
        let served = Config::from_toml(&format!("{bearer}{upstreams}"), Path::new("/b"), &token).expect("valid");
        assert_eq!(modes(&served), [(PerPrincipal, false), (Shared, true), (Shared, false)]);
        let said = served.upstreams[0].sessions.describe(true);
        assert!(said.starts_with("session per-principal (the default of a stdio upstream"), "{said}");
        assert_eq!(served.upstreams[1].sessions.describe(true), "session = \"shared\"");
        // `[auth] mode = "none"`: every request is one principal's.
        let anonymous = config(upstreams);
        assert_eq!(modes(&anonymous), [(Shared, false), (Shared, true), (Shared, false)]);
        assert!(anonymous.upstreams[0].sessions.describe(true).contains("one principal is served"));
        // A `serve --stdio` host: the same.
        let mut stdio_host = served;
        stdio_host.serve_one_principal();
        assert_eq!(modes(&stdio_host), [(Shared, false), (Shared, true), (Shared, false)]);
    }

    #[test]
    fn an_admin_listener_off_loopback_is_warned_about() {
        let open = config("[server]\nadmin_listen = \"0.0.0.0:9464\"\n").warnings();
        assert!(open.iter().any(|w| w.contains("0.0.0.0:9464") && w.contains("authentication")), "{open:?}");
        let loopback = config("[server]\nadmin_listen = \"127.0.0.1:9464\"\n").warnings();
        assert!(!loopback.iter().any(|w| w.contains("admin_listen")), "{loopback:?}");
    }
}
