//! The sandbox profile `import` suggests for each stdio server (docs/sandbox.md), derived from
//! its entry: folders named as arguments become write paths, files named as arguments read
//! paths, the variables the entry sets are kept; a package runner (`npx`, `uvx`, `pipx`,
//! `bunx`) also gets the network and its cache. The look at the disk goes through [`Host`], so
//! the derivation itself is pure.
//!
//! Invariant: a profile is written active only for the shape whose needs the entry shows in
//! full: a native program (not a script, runner or container tool) whose every path argument
//! is absolute and exists, with no `cwd`. It keeps the network (the entry cannot say whether
//! the program calls out). Every other stdio entry is written without a profile (it starts as
//! before) and a note says the profile to start from and why it was not written.

use std::path::{Path, PathBuf};

use super::{Import, ImportedTransport, Note, printable};

/// A profile derived from an entry: what `[upstreams.sandbox]` would say.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SuggestedProfile {
    pub read: Vec<String>,
    pub write: Vec<String>,
    pub network: bool,
    pub keep_env: Vec<String>,
}

/// What a path on the importing machine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    Folder,
    /// A file that starts as an ELF executable.
    NativeProgram,
    File,
    Missing,
}

/// The importing machine, as the derivation sees it.
pub struct Host<'a> {
    /// `$HOME`, where the runners keep their caches.
    pub home: Option<PathBuf>,
    pub kind_of: &'a dyn Fn(&Path) -> PathKind,
    /// A command as the proxy finds it: itself when absolute, else on `PATH`.
    pub find_program: &'a dyn Fn(&str) -> Option<PathBuf>,
}

/// Runners that download a package on first start: their caches under `$HOME`.
const RUNNERS: &[(&str, &[&str])] = &[
    ("npx", &[".npm"]),
    ("bunx", &[".bun/install/cache"]),
    ("uvx", &[".cache/uv", ".local/share/uv"]),
    ("pipx", &[".local/share/pipx", ".cache/pipx"]),
];

/// Native programs whose needs no entry shows (a container engine's socket and state).
const CONTAINER_TOOLS: &[&str] = &["docker", "podman", "nerdctl"];

/// Interpreters (native programs themselves): what they load lies beside the script they run.
const INTERPRETERS: &[&str] =
    &["node", "nodejs", "bun", "deno", "uv", "ruby", "perl", "php", "java", "sh", "bash", "dash", "zsh", "env"];

impl Import {
    /// Derive a profile for each stdio upstream: set it where it is written active, note it
    /// where it is only suggested.
    pub fn suggest_sandboxes(&mut self, host: &Host) {
        for upstream in &mut self.upstreams {
            let ImportedTransport::Command { command, args, env, cwd } = &upstream.transport else { continue };
            match derive(command, args, env, cwd.is_some(), host) {
                Derived::Active(profile) => upstream.sandbox = Some(profile),
                Derived::Suggested(profile, why) => {
                    let message =
                        format!("no sandbox written ({why}); a profile to start from: {}", profile.describe());
                    self.notes.push(Note {
                        entry: upstream.entry.clone(),
                        message: printable(&message),
                        moved_secret: false,
                    });
                }
                Derived::Nothing(why) => {
                    let message = format!("no sandbox suggested: {why}");
                    self.notes.push(Note {
                        entry: upstream.entry.clone(),
                        message: printable(&message),
                        moved_secret: false,
                    });
                }
            }
        }
    }
}

impl SuggestedProfile {
    /// The profile as the lines of `[upstreams.sandbox]` would say it, on one line.
    pub fn describe(&self) -> String {
        let list = |items: &[String]| items.iter().map(|item| format!("{item:?}")).collect::<Vec<_>>().join(", ");
        format!(
            "read = [{}], write = [{}], network = {}, keep_env = [{}]",
            list(&self.read),
            list(&self.write),
            self.network,
            list(&self.keep_env)
        )
    }
}

impl Host<'static> {
    /// This machine: its `$HOME`, its files, its `PATH`.
    pub fn real() -> Host<'static> {
        Host { home: std::env::var_os("HOME").map(PathBuf::from), kind_of: &kind_on_disk, find_program: &find_on_path }
    }
}

/// What became of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Derived {
    Active(SuggestedProfile),
    Suggested(SuggestedProfile, String),
    Nothing(String),
}

fn derive(command: &str, args: &[String], env: &[(String, String)], has_cwd: bool, host: &Host) -> Derived {
    let Some(program) = (host.find_program)(command) else {
        return Derived::Nothing(format!("`{command}` is not found on PATH here"));
    };
    let mut profile =
        SuggestedProfile { keep_env: env.iter().map(|(key, _)| key.clone()).collect(), ..Default::default() };
    let mut uncertain = Vec::new();
    for arg in args {
        let value = arg.split_once('=').map_or(arg.as_str(), |(_, value)| value);
        if !looks_like_path(value) {
            continue;
        }
        match (value.starts_with('/') && !value.contains("${")).then(|| (host.kind_of)(Path::new(value))) {
            Some(PathKind::Folder) => profile.write.push(value.to_string()),
            Some(PathKind::File | PathKind::NativeProgram) => profile.read.push(package_of(value)),
            Some(PathKind::Missing) | None => uncertain.push(value.to_string()),
        }
    }
    let base = Path::new(command).file_name().and_then(|name| name.to_str()).unwrap_or(command);
    if let Some((_, caches)) = RUNNERS.iter().find(|(runner, _)| *runner == base) {
        profile.network = true;
        if let Some(home) = &host.home {
            profile.write.extend(caches.iter().map(|cache| home.join(cache).display().to_string()));
        }
        let why = "a package runner: it downloads on first start into a cache of the user it runs as, \
                   and a root proxy runs a sandboxed server as nobody";
        return Derived::Suggested(profile, why.to_string());
    }
    profile.network = true;
    let interpreter = INTERPRETERS.contains(&base) || base.starts_with("python");
    let why = match () {
        _ if interpreter || (host.kind_of)(&program) != PathKind::NativeProgram => {
            "a script or interpreter: what it loads may lie outside the system's folders".to_string()
        }
        _ if CONTAINER_TOOLS.contains(&base) => "a container tool: it needs its engine's socket".to_string(),
        _ if has_cwd => "it has a `cwd`".to_string(),
        _ if !uncertain.is_empty() => format!("relative or missing path arguments: {}", uncertain.join(", ")),
        _ => return Derived::Active(profile),
    };
    Derived::Suggested(profile, why)
}

/// What a script needs read: the `node_modules` folder it lies in (its package's dependencies
/// lie beside it), else the file itself.
fn package_of(script: &str) -> String {
    let path = Path::new(script);
    let packages = path.ancestors().find(|folder| folder.file_name().is_some_and(|name| name == "node_modules"));
    packages.unwrap_or(path).display().to_string()
}

/// An argument that names a path: absolute, relative with `./` or `../`, `.`, `..`, or under `~`.
fn looks_like_path(arg: &str) -> bool {
    arg.starts_with('/')
        || arg.starts_with("./")
        || arg.starts_with("../")
        || arg.starts_with('~')
        || arg == "."
        || arg == ".."
        || (arg.contains("${") && arg.contains('/'))
}

fn kind_on_disk(path: &Path) -> PathKind {
    use std::io::Read;
    match std::fs::metadata(path) {
        Err(_) => PathKind::Missing,
        Ok(meta) if meta.is_dir() => PathKind::Folder,
        Ok(_) => {
            let mut magic = [0u8; 4];
            let elf = std::fs::File::open(path).and_then(|mut file| file.read_exact(&mut magic)).is_ok()
                && magic == *b"\x7fELF";
            if elf { PathKind::NativeProgram } else { PathKind::File }
        }
    }
}

fn find_on_path(command: &str) -> Option<PathBuf> {
    if command.contains('/') {
        let path = PathBuf::from(command);
        return path.is_absolute().then_some(path).filter(|path| path.is_file());
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|dir| dir.join(command)).find(|path| path.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = "/opt/bin/server";

    fn kind(path: &Path) -> PathKind {
        match path.to_str().unwrap_or_default() {
            "/srv/notes" | "/home/me/.npm" => PathKind::Folder,
            "/srv/script.py" | "/usr/bin/npx" | "/lib/node_modules/fs/dist/index.js" => PathKind::File,
            FIXTURE | "/usr/bin/docker" | "/usr/bin/python3" | "/usr/bin/node" => PathKind::NativeProgram,
            _ => PathKind::Missing,
        }
    }

    fn find(command: &str) -> Option<PathBuf> {
        match command {
            "npx" | "python3" | "docker" | "node" => Some(PathBuf::from(format!("/usr/bin/{command}"))),
            FIXTURE => Some(PathBuf::from(FIXTURE)),
            _ => None,
        }
    }

    fn check(command: &str, args: &[&str], cwd: bool, expected: &str) {
        let host = Host { home: Some(PathBuf::from("/home/me")), kind_of: &kind, find_program: &find };
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        let env = vec![("API_KEY".to_string(), "${API_KEY}".to_string())];
        let shown = match derive(command, &args, &env, cwd, &host) {
            Derived::Active(profile) => format!("active: {}", profile.describe()),
            Derived::Suggested(profile, why) => format!("suggested ({why}): {}", profile.describe()),
            Derived::Nothing(why) => format!("nothing: {why}"),
        };
        assert!(shown.starts_with(expected), "{command} {args:?}: {shown}");
    }

    #[test]
    fn profiles_derived_from_entries() {
        let keep = "keep_env = [\"API_KEY\"]";
        let active = format!("active: read = [], write = [\"/srv/notes\"], network = true, {keep}");
        check(FIXTURE, &["serve", "/srv/notes"], false, &active);
        check(FIXTURE, &["--root=/srv/notes"], false, &active);
        check(FIXTURE, &["serve", "/srv/notes"], true, "suggested (it has a `cwd`)");
        check(FIXTURE, &["serve", "."], false, "suggested (relative or missing path arguments: .)");
        check(FIXTURE, &["/srv/gone"], false, "suggested (relative or missing path arguments: /srv/gone)");
        check(FIXTURE, &["--verbose", "stdio"], false, "active: read = [], write = [], network = true");
        let npx = "suggested (a package runner: it downloads on first start into a cache of the user it runs as, \
                   and a root proxy runs a sandboxed server as nobody): read = [], \
                   write = [\"/srv/notes\", \"/home/me/.npm\"], network = true";
        check("npx", &["-y", "@modelcontextprotocol/server-filesystem", "/srv/notes"], false, npx);
        let script = "suggested (a script or interpreter: what it loads may lie outside the system's folders): \
                      read = [\"/srv/script.py\"]";
        check("python3", &["/srv/script.py"], false, script);
        let node = "suggested (a script or interpreter: what it loads may lie outside the system's folders): \
                    read = [\"/lib/node_modules\"], write = [\"/srv/notes\"]";
        check("node", &["/lib/node_modules/fs/dist/index.js", "/srv/notes"], false, node);
        check("docker", &["run", "-i", "image"], false, "suggested (a container tool");
        check("mcp-server-gone", &[], false, "nothing: `mcp-server-gone` is not found on PATH here");
    }
}
