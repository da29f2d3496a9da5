//! The transport of one `[[upstreams]]` entry: exactly one of `dir`, `command`, `url`, with the
//! settings that belong to it (`uri_base`; `args`, `env`, `inherit_env`, `cwd`, `sandbox`; `headers`,
//! `ca_file`), `${VAR}`s expanded.
//!
//! Invariant: a [`CaFile`] that exists was read and holds at least one certificate that a TLS
//! client accepts as a root; it belongs to an `https://` upstream.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::credentials;
use super::{Problem, RawUpstream, UpstreamTransport, expand_vars, push, redact_url, upstream};

const RESERVED_HEADERS: &[&str] =
    &["accept", "mcp-session-id", "mcp-protocol-version", "last-event-id", "content-type"];

/// PEM CA certificates (`ca_file`) an HTTPS upstream's certificate may chain to, in addition to
/// the system's roots: for a server whose certificate a private CA issued.
#[derive(Debug, Clone, PartialEq)]
pub struct CaFile {
    /// Where it was read from (for messages).
    pub path: PathBuf,
    /// The file's contents, checked.
    pem: Vec<u8>,
}

impl CaFile {
    /// Read and check `path` for the upstream at `url`; every problem goes to `problems`.
    fn load(at: &str, url: &str, path: &Path, problems: &mut Vec<Problem>) -> Option<CaFile> {
        if !url.starts_with("https://") {
            push(problems, at, "applies only to https:// upstreams".into());
        }
        let shown = path.display();
        let pem = match std::fs::read(path) {
            Ok(pem) => pem,
            Err(error) => {
                push(problems, at, format!("cannot read `{shown}`: {error}"));
                return None;
            }
        };
        match check_pem(&pem) {
            Ok(()) => Some(CaFile { path: path.to_path_buf(), pem }),
            Err(message) => {
                push(problems, at, format!("`{shown}` {message}"));
                None
            }
        }
    }

    /// Its certificates, for the upstream's HTTP client.
    pub fn certificates(&self) -> Vec<reqwest::Certificate> {
        reqwest::Certificate::from_pem_bundle(&self.pem).unwrap_or_default()
    }
}

/// Whether `pem` holds CA certificates a TLS client takes as roots; what is wrong otherwise.
fn check_pem(pem: &[u8]) -> Result<(), String> {
    let certificates = reqwest::Certificate::from_pem_bundle(pem)
        .map_err(|_| "is not PEM: expected `-----BEGIN CERTIFICATE-----` blocks".to_string())?;
    if certificates.is_empty() {
        return Err("holds no certificate (no `-----BEGIN CERTIFICATE-----` block)".into());
    }
    crate::crypto::http_client()
        .tls_certs_merge(certificates)
        .build()
        .map(drop)
        .map_err(|error| format!("holds a certificate that is not a valid CA certificate: {}", source_chain(&error)))
}

/// `error` and its sources, each after a `: `.
fn source_chain(error: &dyn std::error::Error) -> String {
    let chain: Vec<String> =
        std::iter::successors(Some(error), |error| error.source()).map(ToString::to_string).collect();
    chain.join(": ")
}

pub(super) fn validate_transport(
    at: &str,
    raw: &RawUpstream,
    base: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Option<UpstreamTransport> {
    let chosen = [raw.dir.is_some(), raw.command.is_some(), raw.url.is_some()];
    if chosen.iter().filter(|c| **c).count() != 1 {
        push(problems, at, "needs exactly one of `dir`, `command`, `url`".into());
        return None;
    }
    if raw.dir.is_none() && raw.uri_base.is_some() {
        push(problems, &format!("{at}.uri_base"), "applies only to `dir` upstreams".into());
    }
    if raw.url.is_none() && raw.ca_file.is_some() {
        push(problems, &format!("{at}.ca_file"), "applies only to `url` upstreams".into());
    }
    if raw.url.is_none() && raw.auth.is_some() {
        push(problems, &format!("{at}.auth"), "applies only to `url` upstreams".into());
    }
    if raw.command.is_none() && raw.sandbox.is_some() {
        push(problems, &format!("{at}.sandbox"), "applies only to `command` upstreams".into());
    }
    if raw.command.is_none() && !raw.inherit_env.is_empty() {
        push(problems, &format!("{at}.inherit_env"), "applies only to `command` upstreams".into());
    }
    let dir_uri_base = upstream::uri_base(at, raw.uri_base.as_deref(), problems);
    let mut expand = |field: &str, text: &str| {
        expand_vars(text, lookup).unwrap_or_else(|missing| {
            push(problems, &format!("{at}.{field}"), format!("environment variable `{missing}` is not set"));
            String::new()
        })
    };
    if let Some(dir) = &raw.dir {
        return Some(UpstreamTransport::Dir { path: base.join(dir), uri_base: dir_uri_base });
    }
    if let Some(program) = raw.command.clone() {
        let args = raw.args.iter().map(|a| expand("args", a)).collect();
        let env: BTreeMap<String, String> =
            raw.env.iter().map(|(k, v)| (k.clone(), expand(&format!("env.{k}"), v))).collect();
        for name in env.keys().filter(|name| !upstream::is_variable_name(name)) {
            push(problems, &format!("{at}.env"), format!("`{name}` is not a variable name like API_KEY"));
        }
        let inherit_env = upstream::inherit_env(at, raw.inherit_env.clone(), problems);
        let cwd = raw.cwd.as_ref().map(|cwd| base.join(cwd));
        let sandbox = raw.sandbox.clone().map(|sandbox| super::sandbox::validate_sandbox(at, sandbox, base, problems));
        return Some(UpstreamTransport::Command { program, args, env, inherit_env, cwd, sandbox });
    }
    let url = expand("url", raw.url.as_deref().unwrap_or_default());
    let headers: BTreeMap<String, String> =
        raw.headers.iter().map(|(k, v)| (k.clone(), expand(&format!("headers.{k}"), v))).collect();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        push(problems, &format!("{at}.url"), format!("`{}` is not an http:// or https:// URL", redact_url(&url)));
    }
    for name in headers.keys() {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            push(problems, &format!("{at}.headers"), format!("`{name}` is not a valid header name"));
        } else if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            push(problems, &format!("{at}.headers"), format!("`{name}` is set by the proxy itself"));
        }
    }
    let ca =
        raw.ca_file.as_ref().and_then(|path| CaFile::load(&format!("{at}.ca_file"), &url, &base.join(path), problems));
    let auth = raw.auth.clone().and_then(|auth| credentials::validate_auth(at, auth, &headers, lookup, problems));
    Some(UpstreamTransport::Http { url, headers, ca, auth })
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, UpstreamTransport};

    /// A self-signed CA certificate in PEM, made here.
    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    fn upstream(name: &str, url: &str, ca_file: &str) -> String {
        format!("[[upstreams]]\nname = \"{name}\"\nurl = \"{url}\"\nca_file = \"{ca_file}\"\n")
    }

    #[test]
    fn a_ca_file_is_read_and_checked_with_every_problem_at_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca_pem()).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "just some words\n").unwrap();
        let broken = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        std::fs::write(dir.path().join("broken.pem"), broken).unwrap();
        let good = upstream("good", "https://mcp.internal/mcp", "ca.pem");
        let config = Config::from_toml(&good, dir.path(), &|_| None).unwrap();
        let UpstreamTransport::Http { ca: Some(ca), .. } = &config.upstreams[0].transport else { panic!() };
        assert_eq!(ca.path, dir.path().join("ca.pem"));
        assert_eq!(ca.certificates().len(), 1);

        let text = [
            upstream("missing", "https://a/mcp", "nowhere.pem"),
            upstream("words", "https://b/mcp", "notes.txt"),
            upstream("broken", "https://c/mcp", "broken.pem"),
            upstream("plain", "http://d/mcp", "ca.pem"),
            "[[upstreams]]\nname = \"child\"\ncommand = \"x\"\nca_file = \"ca.pem\"\n".to_string(),
        ]
        .concat();
        let problems = Config::from_toml(&text, dir.path(), &|_| None).unwrap_err().problems;
        let shown: Vec<String> = problems.iter().map(|p| format!("{}: {}", p.at, p.message)).collect();
        let expect = [
            ("upstreams[0] (missing).ca_file", "cannot read"),
            ("upstreams[1] (words).ca_file", "holds no certificate"),
            ("upstreams[2] (broken).ca_file", "not a valid CA certificate"),
            ("upstreams[3] (plain).ca_file", "applies only to https:// upstreams"),
            ("upstreams[4] (child).ca_file", "applies only to `url` upstreams"),
        ];
        for (at, says) in expect {
            assert!(problems.iter().any(|p| p.at == at && p.message.contains(says)), "{at}: {says} in {shown:#?}");
        }
        assert_eq!(problems.len(), expect.len(), "{shown:#?}");
    }
}
