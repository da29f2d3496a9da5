//! Figment's raw values, extracted leniently: a value of the wrong type is a problem and is
//! left out (its default applies), so validation still runs and every problem is reported at
//! once. Only a file that does not parse at all stops extraction.

use figment::Figment;
use figment::providers::Serialized;
use figment::value::Value;

use super::{ConfigError, Problem, RawConfig, where_of};

/// Extract the raw config; a value of the wrong type is reported and left out (its default
/// applies), so that validation still runs and every problem is listed at once. Only a file
/// that does not parse at all stops here.
pub(super) fn extract_leniently(figment: &Figment, problems: &mut Vec<Problem>) -> Result<RawConfig, ConfigError> {
    let to_problems = |errors: figment::Error| -> Vec<Problem> {
        errors.into_iter().map(|e| Problem { at: where_of(&e.path), message: e.kind.to_string() }).collect()
    };
    let mut value: Value = figment.extract().map_err(|errors| ConfigError { problems: to_problems(errors) })?;
    loop {
        let attempt = Figment::from(Serialized::defaults(&value)).extract::<RawConfig>();
        let errors = match attempt {
            Ok(raw) => return Ok(raw),
            Err(errors) => errors,
        };
        let paths: Vec<Vec<String>> = errors.clone().into_iter().map(|e| e.path.clone()).collect();
        problems.extend(to_problems(errors));
        if paths.iter().any(|path| !remove_at(&mut value, path)) {
            return Err(ConfigError { problems: std::mem::take(problems) });
        }
    }
}

/// Remove the value at `path` (dictionary keys and array indices); false when there is none.
fn remove_at(value: &mut Value, path: &[String]) -> bool {
    let Some((last, parents)) = path.split_last() else { return false };
    let mut current = value;
    for key in parents {
        current = match current {
            Value::Dict(_, dict) => match dict.get_mut(key) {
                Some(next) => next,
                None => return false,
            },
            Value::Array(_, items) => match key.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                Some(next) => next,
                None => return false,
            },
            _ => return false,
        };
    }
    match current {
        Value::Dict(_, dict) => dict.remove(last).is_some(),
        Value::Array(_, items) => match last.parse::<usize>() {
            Ok(i) if i < items.len() => {
                items.remove(i);
                true
            }
            _ => false,
        },
        _ => false,
    }
}
