//! Literal secrets out of the imported config: a value whose name says secret (`GITHUB_TOKEN`,
//! `Authorization`, `--api-key`, `?api_key=`) or whose shape does (`ghp_…`, `sk-…`, a long
//! random string), and the password of a URL, become `${VAR}` references. The note names the
//! variable; the value itself is never written or shown.

use super::state::State;
use super::vars::{is_variable_name, reference, variable_name};

/// Words of a name that say it holds a secret.
const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "TOKENS",
    "KEY",
    "APIKEY",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "PAT",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "AUTHORIZATION",
    "COOKIE",
    "PRIVATE",
];

/// Beginnings of well-known token formats.
const TOKEN_PREFIXES: &[&str] = &[
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "sk-",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xapp-",
    "AKIA",
    "AIza",
    "ya29.",
    "npm_",
    "hf_",
    "pypi-",
    "lin_api_",
    "eyJ",
];

/// `env`: a secret value becomes `${KEY}` (or `${UPSTREAM_KEY}` when another entry's `KEY`
/// is a different secret).
pub(super) fn env(
    state: &mut State<'_>,
    entry: &str,
    upstream: &str,
    env: Vec<(String, String)>,
) -> Vec<(String, String)> {
    env.into_iter()
        .map(|(key, value)| {
            if value.contains("${") || !(secret_name(&key) || secret_value(&value)) {
                return (key, value);
            }
            let preferred = if is_variable_name(&key) { key.clone() } else { variable_name(&key) };
            let variable = moved(state, entry, upstream, &preferred, &value, &format!("env `{key}`"));
            (key, variable)
        })
        .collect()
}

/// `headers`: a secret header value becomes `${UPSTREAM_TOKEN}` (`Authorization`, its scheme
/// kept: `Bearer ${UPSTREAM_TOKEN}`) or `${UPSTREAM_<HEADER>}`.
pub(super) fn headers(
    state: &mut State<'_>,
    entry: &str,
    upstream: &str,
    headers: Vec<(String, String)>,
) -> Vec<(String, String)> {
    headers
        .into_iter()
        .map(|(header, value)| {
            if value.contains("${") || !(secret_name(&header) || secret_value(&value)) {
                return (header, value);
            }
            let (scheme, secret) = match value.split_once(' ') {
                Some((scheme, secret)) if scheme.chars().all(|c| c.is_ascii_alphabetic()) => {
                    (format!("{scheme} "), secret.trim().to_string())
                }
                _ => (String::new(), value.clone()),
            };
            let suffix =
                if header.eq_ignore_ascii_case("authorization") { "TOKEN".into() } else { variable_name(&header) };
            let preferred = format!("{}_{suffix}", variable_name(upstream));
            let variable = moved(state, entry, upstream, &preferred, &secret, &format!("header `{header}`"));
            (header, format!("{scheme}{variable}"))
        })
        .collect()
}

/// A URL's password and its secret query values.
pub(super) fn url(state: &mut State<'_>, entry: &str, upstream: &str, url: String) -> String {
    let Some(scheme_end) = url.find("://").map(|at| at + 3) else { return url };
    let (head, rest) = url.split_at(scheme_end);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, password)) if !password.is_empty() && !password.contains("${") => {
                let preferred = format!("{}_PASSWORD", variable_name(upstream));
                let variable = moved(state, entry, upstream, &preferred, password, "the URL's password");
                format!("{user}:{variable}@{host}")
            }
            _ => authority.to_string(),
        },
        None => authority.to_string(),
    };
    let (path, fragment) = match tail.split_once('#') {
        Some((path, fragment)) => (path, format!("#{fragment}")),
        None => (tail, String::new()),
    };
    let path = match path.split_once('?') {
        Some((path, query)) => format!("{path}?{}", query_without_secrets(state, entry, upstream, query)),
        None => path.to_string(),
    };
    format!("{head}{authority}{path}{fragment}")
}

/// `args`: `--api-key=…`, the value after `--api-key`, a URL's password, a token-shaped arg.
pub(super) fn args(state: &mut State<'_>, entry: &str, upstream: &str, args: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(args.len());
    for (index, arg) in args.into_iter().enumerate() {
        let flag_before = out.last().filter(|last| last.starts_with('-') && !last.contains('=')).cloned();
        let arg = if arg.contains("${") {
            arg
        } else if let Some((flag, value)) =
            arg.split_once('=').filter(|(flag, _)| flag.starts_with('-') || is_variable_name(flag))
            && secret_name(flag)
            && !value.is_empty()
        {
            // `--api-key=…`, or `NAME=…` (as `docker run -e NAME=…` passes it).
            let preferred = match is_variable_name(flag) {
                true => flag.to_string(),
                false => format!("{}_{}", variable_name(upstream), variable_name(flag.trim_start_matches('-'))),
            };
            let variable = moved(state, entry, upstream, &preferred, value, &format!("argument `{flag}`"));
            format!("{flag}={variable}")
        } else if let Some(flag) = flag_before.filter(|flag| secret_name(flag) && !arg.starts_with('-')) {
            let preferred = format!("{}_{}", variable_name(upstream), variable_name(flag.trim_start_matches('-')));
            moved(state, entry, upstream, &preferred, &arg, &format!("the argument after `{flag}`"))
        } else if arg.contains("://") {
            url(state, entry, upstream, arg)
        } else if secret_value(&arg) {
            let preferred = format!("{}_ARG{index}", variable_name(upstream));
            moved(state, entry, upstream, &preferred, &arg, &format!("argument {index}"))
        } else {
            arg
        };
        out.push(arg);
    }
    out
}

/// Does a name (`GITHUB_TOKEN`, `X-Api-Key`, `--api-key`, `apiKey`) say it holds a secret?
pub(super) fn secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let mut words = upper.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty());
    words.any(|word| {
        SECRET_WORDS.contains(&word)
            || ["TOKEN", "APIKEY", "SECRET", "PASSWORD"].iter().any(|end| word.len() > end.len() && word.ends_with(end))
    })
}

/// Does a value look like a token: a known token prefix, or a long random-looking string?
pub(super) fn secret_value(value: &str) -> bool {
    let value = value.trim();
    let known = value.len() >= 16
        && TOKEN_PREFIXES.iter().any(|prefix| value.starts_with(prefix))
        && !value.contains(char::is_whitespace);
    let random = value.len() >= 32
        && value.chars().all(|c| c.is_ascii_alphanumeric() || "_+=".contains(c))
        && value.chars().any(|c| c.is_ascii_digit())
        && value.chars().any(|c| c.is_ascii_alphabetic());
    known || random
}

fn query_without_secrets(state: &mut State<'_>, entry: &str, upstream: &str, query: &str) -> String {
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) if secret_name(key) && !value.is_empty() && !value.contains("${") => {
                let preferred = format!("{}_{}", variable_name(upstream), variable_name(key));
                let variable = moved(state, entry, upstream, &preferred, value, &format!("URL parameter `{key}`"));
                format!("{key}={variable}")
            }
            _ => pair.to_string(),
        })
        .collect();
    pairs.join("&")
}

/// A variable for `secret` (`preferred`, or a free variant when another secret has that
/// name), recorded and noted; its `${…}` reference.
fn moved(state: &mut State<'_>, entry: &str, upstream: &str, preferred: &str, secret: &str, what: &str) -> String {
    let prefixed = format!("{}_{preferred}", variable_name(upstream));
    let candidates =
        [preferred.to_string(), prefixed.clone()].into_iter().chain((2..).map(|n| format!("{prefixed}_{n}")));
    let free = |name: &String| state.secret_values.get(name).is_none_or(|known| known == secret);
    let variable = candidates.into_iter().find(free).expect("an endless list has a free name");
    state.secret_values.insert(variable.clone(), secret.to_string());
    let message = format!(
        "{what}: a secret-looking value is not written to the config; set `{variable}` in the proxy's environment"
    );
    state.note(entry, &message);
    reference(&variable)
}
