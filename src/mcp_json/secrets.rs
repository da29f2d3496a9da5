//! Literal secrets out of the imported config: a value whose name says secret (`GITHUB_TOKEN`,
//! `DB_PW`, `Authorization`, `--api-key`, `--bearer`, `?api_key=`, `?sig=`) or whose shape does
//! (`ghp_…`, `sk-…`, a long random string), a header given as an argument (mcp-remote's
//! `--header "Authorization: Bearer …"`), a connection string's `Password=`, a URL's password
//! and a token-looking segment of its path, become `${VAR}` references. A value is kept only
//! when its secret part is `${VAR}` references alone: a literal beside a reference
//! (`sk-live-…${SUFFIX}`) is moved too. The note names the variable; the value itself is never
//! written or shown.

use std::convert::Infallible;

use super::state::State;
use super::vars::{reference, variable_name};
use crate::config::is_variable_name;

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
    "BEARER",
    "SIG",
    "SIGNATURE",
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
/// is a different secret); in any other value, a URL's or connection string's secrets.
pub(super) fn env(
    state: &mut State<'_>,
    entry: &str,
    upstream: &str,
    env: Vec<(String, String)>,
) -> Vec<(String, String)> {
    env.into_iter()
        .map(|(key, value)| {
            if !(secret_name(&key) && has_literal(&value)) {
                let what = format!("env `{key}`");
                let preferred = if is_variable_name(&key) { key.clone() } else { variable_name(&key) };
                return (key, secrets_within(state, entry, upstream, (&what, &preferred), value));
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
            let value = match secret_name(&header) || literal_words(&value).iter().any(|word| secret_value(word)) {
                true => header_value(state, entry, upstream, &header, &value),
                false => {
                    let (what, preferred) = (format!("header `{header}`"), variable_name(&header));
                    secrets_within(state, entry, upstream, (&what, &preferred), value)
                }
            };
            (header, value)
        })
        .collect()
}

/// A URL's password, its secret query values and its secret-looking path segments.
pub(super) fn url(state: &mut State<'_>, entry: &str, upstream: &str, url: String) -> String {
    let Some(scheme_end) = url.find("://").map(|at| at + 3) else { return url };
    let (head, rest) = url.split_at(scheme_end);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, password)) if has_literal(password) => {
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
    let (path, query) = match path.split_once('?') {
        Some((path, query)) => (path, format!("?{}", query_without_secrets(state, entry, upstream, query))),
        None => (path, String::new()),
    };
    let path = path_without_secrets(state, entry, upstream, path);
    format!("{head}{authority}{path}{query}{fragment}")
}

/// `args`: `--api-key=…`, the value after `--api-key`, a header (`Authorization: Bearer …`, as
/// mcp-remote's `--header` takes it), a connection string's password, a URL's secrets, a
/// token-shaped arg.
pub(super) fn args(state: &mut State<'_>, entry: &str, upstream: &str, args: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(args.len());
    for (index, arg) in args.into_iter().enumerate() {
        let flag_before = out.last().filter(|last| last.starts_with('-') && !last.contains('=')).cloned();
        let arg = if let Some((flag, value)) =
            arg.split_once('=').filter(|(flag, _)| flag.starts_with('-') || is_variable_name(flag))
            && secret_name(flag)
            && has_literal(value)
        {
            // `--api-key=…`, or `NAME=…` (as `docker run -e NAME=…` passes it).
            let preferred = match is_variable_name(flag) {
                true => flag.to_string(),
                false => format!("{}_{}", variable_name(upstream), variable_name(flag.trim_start_matches('-'))),
            };
            let variable = moved(state, entry, upstream, &preferred, value, &format!("argument `{flag}`"));
            format!("{flag}={variable}")
        } else if let Some(flag) = flag_before.filter(|flag| secret_name(flag) && !arg.starts_with('-'))
            && has_literal(&arg)
        {
            let preferred = format!("{}_{}", variable_name(upstream), variable_name(flag.trim_start_matches('-')));
            moved(state, entry, upstream, &preferred, &arg, &format!("the argument after `{flag}`"))
        } else if let Some((before, header, value)) = header_in_arg(&arg) {
            let value = header_value(state, entry, upstream, header, value);
            format!("{before}{header}:{value}")
        } else {
            let (what, preferred) = (format!("argument {index}"), format!("{}_ARG{index}", variable_name(upstream)));
            secrets_within(state, entry, upstream, (&what, &preferred), arg)
        };
        out.push(arg);
    }
    out
}

/// Does a name (`GITHUB_TOKEN`, `X-Api-Key`, `--api-key`, `apiKey`, `DB_PW`, `dbPass`) say it
/// holds a secret? One of its words is a secret word, holds `PASS`, `SECRET` or `TOKEN`, or
/// ends in `KEY` or `PW`.
pub(super) fn secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let mut words = upper.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty());
    words.any(|word| {
        SECRET_WORDS.contains(&word)
            || ["PASS", "SECRET", "TOKEN"].iter().any(|part| word.contains(part))
            || ["KEY", "PW"].iter().any(|end| word.ends_with(end))
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

/// Does a URL path segment look like a token: [`secret_value`], or a long run of letters and
/// digits mixed as random text mixes them (a UUID, a hex digest, a base64url key), unlike a
/// name or a date (`2026-01-01-release`, `server-everything`)?
pub(super) fn secret_segment(segment: &str) -> bool {
    let bytes = segment.as_bytes();
    let letter_digit = |a: u8, b: u8| a.is_ascii_alphabetic() && b.is_ascii_digit();
    let mixed =
        bytes.windows(2).filter(|pair| letter_digit(pair[0], pair[1]) || letter_digit(pair[1], pair[0])).count();
    let token_like = bytes.iter().all(|b| b.is_ascii_alphanumeric() || b"-_.~=".contains(b));
    secret_value(segment) || (segment.len() >= 16 && token_like && mixed >= 6)
}

/// A header's value with its secret moved out, its scheme kept (`Bearer ${UPSTREAM_TOKEN}`): the
/// variable is `UPSTREAM_TOKEN` for `Authorization`, else `UPSTREAM_<HEADER>`. A value that is
/// `${VAR}` references alone is kept.
fn header_value(state: &mut State<'_>, entry: &str, upstream: &str, header: &str, value: &str) -> String {
    if !has_literal(value) {
        return value.to_string();
    }
    let lead = &value[..value.len() - value.trim_start().len()];
    let (scheme, secret) = match value.trim().split_once(' ') {
        Some((scheme, secret)) if scheme.chars().all(|c| c.is_ascii_alphabetic()) && has_literal(secret) => {
            (format!("{scheme} "), secret.trim())
        }
        Some((_, secret)) if !has_literal(secret) => return value.to_string(),
        _ => (String::new(), value.trim()),
    };
    let suffix = if header.eq_ignore_ascii_case("authorization") { "TOKEN".into() } else { variable_name(header) };
    let preferred = format!("{}_{suffix}", variable_name(upstream));
    let variable = moved(state, entry, upstream, &preferred, secret, &format!("header `{header}`"));
    format!("{lead}{scheme}{variable}")
}

/// A header written as one argument, `Authorization: Bearer …` or `Authorization:Bearer…`
/// (mcp-remote's `--header`), also behind its flag (`--header=…`, `--header …`), when the
/// header's name says secret: (what comes before the name, the name, the value).
fn header_in_arg(arg: &str) -> Option<(&str, &str, &str)> {
    let start = match arg.starts_with('-') {
        true => arg.find(['=', ' ']).map(|at| at + 1)?,
        false => 0,
    };
    let (name, value) = arg[start..].split_once(':')?;
    let token = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    (token && secret_name(name)).then_some((&arg[..start], name, value))
}

/// The secrets inside a value whose name says nothing: a connection string's password
/// (`…;Password=…;`), a URL's password, query values and path segments, or the whole value when
/// a literal part of it looks like a token (then as `preferred`; `what` names the value).
fn secrets_within(
    state: &mut State<'_>,
    entry: &str,
    upstream: &str,
    (what, preferred): (&str, &str),
    value: String,
) -> String {
    let value = connection_string(state, entry, upstream, value);
    let value = if value.contains("://") { url(state, entry, upstream, value) } else { value };
    match literal_words(&value).iter().any(|word| secret_value(word)) {
        true => moved(state, entry, upstream, preferred, &value, what),
        false => value,
    }
}

/// `Server=…;User Id=app;Password=…;`: each secret part's value (`Password`, `Pwd`,
/// `AccountKey`, `SharedAccessKey`, …) moved out.
fn connection_string(state: &mut State<'_>, entry: &str, upstream: &str, text: String) -> String {
    if !text.contains(';') {
        return text;
    }
    let parts: Vec<String> = text
        .split(';')
        .map(|part| match part.split_once('=') {
            Some((key, value))
                if (secret_name(key) || key.trim().eq_ignore_ascii_case("pwd")) && has_literal(value) =>
            {
                let preferred = format!("{}_{}", variable_name(upstream), variable_name(key.trim()));
                let what = format!("the connection string's `{}`", key.trim());
                let variable = moved(state, entry, upstream, &preferred, value, &what);
                format!("{key}={variable}")
            }
            _ => part.to_string(),
        })
        .collect();
    parts.join(";")
}

fn query_without_secrets(state: &mut State<'_>, entry: &str, upstream: &str, query: &str) -> String {
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, value))
                if has_literal(value)
                    && (secret_name(key) || literal_words(value).iter().any(|word| secret_segment(word))) =>
            {
                let preferred = format!("{}_{}", variable_name(upstream), variable_name(key));
                let variable = moved(state, entry, upstream, &preferred, value, &format!("URL parameter `{key}`"));
                format!("{key}={variable}")
            }
            _ => pair.to_string(),
        })
        .collect();
    pairs.join("&")
}

/// A URL path with each token-looking segment ([`secret_segment`]) moved out.
fn path_without_secrets(state: &mut State<'_>, entry: &str, upstream: &str, path: &str) -> String {
    let segments: Vec<String> = path
        .split('/')
        .map(|segment| match has_literal(segment) && literal_words(segment).iter().any(|word| secret_segment(word)) {
            true => {
                let preferred = format!("{}_URL_TOKEN", variable_name(upstream));
                moved(state, entry, upstream, &preferred, segment, "a secret-looking segment of the URL's path")
            }
            false => segment.to_string(),
        })
        .collect();
    segments.join("/")
}

/// Is there text in `value` besides its `${VAR}` references and spaces?
fn has_literal(value: &str) -> bool {
    !literal_words(value).is_empty()
}

/// The literal words of `value`: its text between `${VAR}` references, split at spaces.
fn literal_words(value: &str) -> Vec<String> {
    let literal = crate::config::replace_vars(value, |_| Ok::<_, Infallible>(" ".to_string()));
    let literal = literal.unwrap_or_else(|never| match never {});
    literal.split_whitespace().map(str::to_string).collect()
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
    state.note_moved_secret(entry, &message);
    reference(&variable)
}
