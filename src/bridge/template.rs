//! `proxy_resource_template_expand`: fill a listed template's variables (RFC 6570, levels 1–3:
//! `{x}`, `{+x}`, `{#x}`, `{.x}`, `{/x}`, `{;x}`, `{?x}`, `{&x}`; prefix and explode
//! modifiers are read as plain variables) and read the URI it gives.
//!
//! Invariant: only a template the caller's own template list holds is expanded, and the
//! expanded URI is read like any other (policy decides it, not the template).

use std::fmt::Write;

use rmcp::model::JsonObject;
use serde_json::Value;

use super::{Answer, answers, string_argument};
use crate::proxy::{Caller, Proxy};

/// Expand a template the caller may see with the call's `arguments`, then read the URI.
pub(super) async fn expand_and_read(proxy: &Proxy, caller: &Caller, arguments: &JsonObject) -> Answer {
    let template = string_argument(arguments, "uriTemplate")?;
    let values = match arguments.get("arguments") {
        None | Some(Value::Null) => JsonObject::new(),
        Some(Value::Object(values)) => values.clone(),
        Some(_) => return Err("`arguments` must be an object: a value for each {variable}".into()),
    };
    if !listed(proxy, caller, &template)? {
        return Err(format!("resource template not found: {template}"));
    }
    let uri = expand(&template, &values)?;
    answers::read(proxy, caller, &uri).await
}

/// Is `template` in the caller's template list (every page)?
fn listed(proxy: &Proxy, caller: &Caller, template: &str) -> Result<bool, String> {
    let mut cursor: Option<String> = None;
    loop {
        let page = proxy.list_templates(caller, cursor.as_deref()).map_err(|e| e.to_string())?;
        if page.resource_templates.iter().any(|t| t.uri_template == template) {
            return Ok(true);
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(false);
        }
    }
}

/// RFC 6570 expansion. A variable of a simple, reserved, label or path expression must be
/// given; query-like ones (`?&;#`) may be left out.
pub(super) fn expand(template: &str, values: &JsonObject) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    let mut missing = Vec::new();
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let Some(end) = rest[start..].find('}') else { return Err(format!("`{template}` has an unclosed {{")) };
        expression(&rest[start + 1..start + end], values, &mut out, &mut missing)?;
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    if !missing.is_empty() {
        return Err(format!("missing arguments for {}: give a value for each", missing.join(", ")));
    }
    Ok(out)
}

fn expression(body: &str, values: &JsonObject, out: &mut String, missing: &mut Vec<String>) -> Result<(), String> {
    let (operator, names) = match body.chars().next() {
        Some(op @ ('+' | '#' | '.' | '/' | ';' | '?' | '&')) => (Some(op), &body[1..]),
        _ => (None, body),
    };
    let (first, separator, named, reserved, optional) = match operator {
        None => ("", ",", false, false, false),
        Some('+') => ("", ",", false, true, false),
        Some('#') => ("#", ",", false, true, true),
        Some('.') => (".", ".", false, false, false),
        Some('/') => ("/", "/", false, false, false),
        Some(';') => (";", ";", true, false, true),
        Some('?') => ("?", "&", true, false, true),
        _ => ("&", "&", true, false, true),
    };
    let mut wrote = false;
    for name in names.split(',') {
        let name = name.trim_end_matches('*').split(':').next().unwrap_or_default();
        if name.is_empty() {
            return Err(format!("`{{{body}}}` is not a template expression"));
        }
        let value = match values.get(name) {
            Some(Value::String(text)) => text.clone(),
            Some(value @ (Value::Number(_) | Value::Bool(_))) => value.to_string(),
            None | Some(Value::Null) if optional => continue,
            None | Some(Value::Null) => {
                missing.push(name.to_string());
                continue;
            }
            Some(_) => return Err(format!("`{name}` must be a string, number or boolean")),
        };
        out.push_str(if wrote { separator } else { first });
        wrote = true;
        if named {
            out.push_str(name);
            out.push('=');
        }
        encode(&value, reserved, out);
    }
    Ok(())
}

/// Percent-encode all but unreserved characters (and reserved ones for `+`/`#`).
fn encode(value: &str, reserved: bool, out: &mut String) {
    for byte in value.bytes() {
        let keep = byte.is_ascii_alphanumeric()
            || b"-._~".contains(&byte)
            || (reserved && b":/?#[]@!$&'()*+,;=%".contains(&byte));
        if keep {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn values(value: Value) -> JsonObject {
        value.as_object().cloned().expect("an object")
    }

    #[test]
    fn expands_the_common_forms_and_names_what_is_missing() {
        let v = values(json!({"id": "a b/c", "path": "x/y", "n": 3, "q": "z"}));
        assert_eq!(expand("ev+demo://resource/{id}", &v).as_deref(), Ok("ev+demo://resource/a%20b%2Fc"));
        assert_eq!(expand("d+file:///{+path}", &v).as_deref(), Ok("d+file:///x/y"));
        assert_eq!(expand("d+x://h{/n,q}{?q,absent}", &v).as_deref(), Ok("d+x://h/3/z?q=z"));
        let error = expand("d+x:///{a}/{b}", &v).expect_err("missing");
        assert!(error.contains("a, b"), "{error}");
        assert!(expand("d+x:///{id", &v).is_err());
    }
}
