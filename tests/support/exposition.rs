//! A small parser for the Prometheus text exposition format (0.0.4), enough for tests to read
//! `/metrics` by series: `name{label="value",…} value [timestamp]` lines, `#` lines skipped,
//! label values unescaped (`\\`, `\"`, `\n`), values `NaN`/`+Inf`/`-Inf` understood.
//!
//! - [`Exposition::parse`]: every sample, or the first malformed line as an error.
//! - [`Exposition::value`]: the sample with exactly these labels; [`Exposition::sum`]: every
//!   sample of a family whose labels include these.
//! - [`Exposition::series`]: each series' identity (`name{sorted labels}`), for cardinality.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, bail};

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every sample of one scrape.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// Parse a whole exposition; an error names the first line that is not a sample.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let mut samples = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            samples.push(parse_sample(line).with_context(|| format!("line {}: {line:?}", number + 1))?);
        }
        Ok(Self { samples })
    }

    /// The value of the series `name` whose labels are exactly `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let wanted: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.samples.iter().find(|s| s.name == name && s.labels == wanted).map(|s| s.value)
    }

    /// The sum over every series `name` whose labels include `labels` (0 when there is none).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }

    /// Every series `name` whose labels include `labels`.
    pub fn matching<'a>(&'a self, name: &'a str, labels: &'a [(&str, &str)]) -> impl Iterator<Item = &'a Sample> {
        self.samples.iter().filter(move |s| {
            s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).is_some_and(|have| have == v))
        })
    }

    /// Each series' identity: `name{k="v",…}` with labels in name order.
    pub fn series(&self) -> BTreeSet<String> {
        self.samples.iter().map(Sample::identity).collect()
    }
}

impl Sample {
    /// `name{k="v",…}` with labels in name order (values as parsed, not re-escaped).
    pub fn identity(&self) -> String {
        let labels: Vec<String> = self.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        format!("{}{{{}}}", self.name, labels.join(","))
    }
}

fn parse_sample(line: &str) -> anyhow::Result<Sample> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace()).context("no value")?;
    let name = &line[..name_end];
    if !is_metric_name(name) {
        bail!("bad metric name {name:?}");
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        rest = parse_labels(after_brace, &mut labels)?;
    }
    let mut fields = rest.split_whitespace();
    let value = parse_value(fields.next().context("no value")?)?;
    if let Some(timestamp) = fields.next() {
        timestamp.parse::<i64>().with_context(|| format!("bad timestamp {timestamp:?}"))?;
    }
    if fields.next().is_some() {
        bail!("trailing text");
    }
    Ok(Sample { name: name.to_string(), labels, value })
}

/// Parse `k="v",…}` into `labels`; returns what follows the closing brace.
fn parse_labels<'a>(mut rest: &'a str, labels: &mut BTreeMap<String, String>) -> anyhow::Result<&'a str> {
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Ok(after);
        }
        let eq = rest.find('=').context("label without '='")?;
        let key = rest[..eq].trim();
        if !is_label_name(key) {
            bail!("bad label name {key:?}");
        }
        let quoted = rest[eq + 1..].trim_start().strip_prefix('"').context("label value not quoted")?;
        let (value, after) = unescape_until_quote(quoted)?;
        if labels.insert(key.to_string(), value).is_some() {
            bail!("label {key:?} twice");
        }
        rest = after.trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// The unescaped text up to the closing `"`, and what follows it.
fn unescape_until_quote(text: &str) -> anyhow::Result<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &text[at + 1..])),
            '\\' => match chars.next().map(|(_, e)| e) {
                Some('\\') => value.push('\\'),
                Some('"') => value.push('"'),
                Some('n') => value.push('\n'),
                other => bail!("bad escape \\{other:?}"),
            },
            c => value.push(c),
        }
    }
    bail!("unterminated label value")
}

fn parse_value(text: &str) -> anyhow::Result<f64> {
    match text {
        "NaN" => Ok(f64::NAN),
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        _ => text.parse().with_context(|| format!("bad value {text:?}")),
    }
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
