//! The bridge's list, search and read answers, built from the proxy's resource paths with the
//! caller's principal.
//!
//! Invariant: every error a model sees here is the one the resource methods would give the
//! same principal (denied and missing alike: `"resource not found: <uri>"`), in the proxy's words.

use base64::Engine;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, ResourceContents};
use serde::Serialize;
use serde_json::{Value, json};

use super::{Answer, optional_string};
use crate::proxy::{Caller, Proxy, ReadAnswer};

/// The fields of a listed resource or template a model needs.
const LISTED_FIELDS: [&str; 7] = ["uri", "uriTemplate", "name", "title", "description", "mimeType", "size"];

/// `proxy_resources_list`: one page of the caller's merged resource list.
pub(super) fn list(proxy: &Proxy, caller: &Caller, arguments: &JsonObject) -> Answer {
    let cursor = optional_string(arguments, "cursor")?;
    let page = proxy.list_resources(caller, cursor.as_deref()).map_err(|e| e.to_string())?;
    let resources: Vec<Value> = page.resources.iter().map(listed).collect();
    Ok(structured(json!({ "resources": resources, "nextCursor": page.next_cursor })))
}

/// `proxy_resource_templates_list`: one page of the caller's merged template list.
pub(super) fn templates(proxy: &Proxy, caller: &Caller, arguments: &JsonObject) -> Answer {
    let cursor = optional_string(arguments, "cursor")?;
    let page = proxy.list_templates(caller, cursor.as_deref()).map_err(|e| e.to_string())?;
    let templates: Vec<Value> = page.resource_templates.iter().map(listed).collect();
    Ok(structured(json!({ "resourceTemplates": templates, "nextCursor": page.next_cursor })))
}

/// `proxy_resources_read`: the caller's read of a namespaced URI, as tool content.
pub(super) async fn read(proxy: &Proxy, caller: &Caller, uri: &str) -> Answer {
    match proxy.read(caller, uri).await.map_err(|e| e.to_string())? {
        ReadAnswer::Result { result, .. } => {
            let max_blob_bytes = proxy.config().bridge.max_blob_bytes;
            let several = result.contents.len() > 1;
            let content = result.contents.into_iter().map(|c| block(c, several, max_blob_bytes)).collect();
            Ok(CallToolResult::success(content))
        }
        ReadAnswer::InputRequired(_) => Err(format!(
            "{uri} needs input from the user before it can be read, which this tool cannot ask for; \
             read it with resources/read instead"
        )),
    }
}

/// One content of a read: text as text (headed by its URI when a read gave several), a blob
/// embedded up to `max_blob_bytes` (decoded), else summarised.
fn block(content: ResourceContents, several: bool, max_blob_bytes: u64) -> ContentBlock {
    match content {
        ResourceContents::TextResourceContents { uri, mime_type, text, .. } => {
            if several {
                let mime = mime_type.map(|m| format!(" ({m})")).unwrap_or_default();
                ContentBlock::text(format!("--- {uri}{mime} ---\n{text}"))
            } else {
                ContentBlock::text(text)
            }
        }
        ResourceContents::BlobResourceContents { uri, mime_type, blob, meta } => {
            let size = decoded_len(&blob);
            if size <= max_blob_bytes {
                return ContentBlock::resource(ResourceContents::BlobResourceContents { uri, mime_type, blob, meta });
            }
            let mime = mime_type.as_deref().unwrap_or("unknown");
            ContentBlock::text(format!(
                "Binary resource {uri} (mimeType {mime}, {size} bytes) is larger than the {max_blob_bytes} bytes \
                 this tool returns; its content is not included."
            ))
        }
        // A kind of content newer than this proxy: as resources/read would give it.
        other => ContentBlock::resource(other),
    }
}

/// The decoded size of base64 `blob` (exact for well-formed base64).
fn decoded_len(blob: &str) -> u64 {
    let trimmed = blob.trim_end_matches('=');
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(trimmed)
        .map(|bytes| bytes.len() as u64)
        .unwrap_or((trimmed.len() as u64 * 3) / 4)
}

/// A listed resource or template, cut to the fields a model needs.
pub(super) fn listed(item: &impl Serialize) -> Value {
    let Ok(Value::Object(mut all)) = serde_json::to_value(item) else { return Value::Null };
    all.retain(|key, value| LISTED_FIELDS.contains(&key.as_str()) && !value.is_null());
    Value::Object(all)
}

/// A result a model reads as JSON text, also given as structured content.
pub(super) fn structured(value: Value) -> CallToolResult {
    let text = serde_json::to_string_pretty(&value).unwrap_or_default();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_are_embedded_up_to_the_limit_and_summarised_above_it() {
        let blob = |bytes: &[u8]| ResourceContents::BlobResourceContents {
            uri: "a+x:///b".into(),
            mime_type: Some("image/png".into()),
            blob: base64::engine::general_purpose::STANDARD.encode(bytes),
            meta: None,
        };
        assert!(matches!(block(blob(&[7; 10]), false, 10), ContentBlock::Resource(_)));
        let ContentBlock::Text(summary) = block(blob(&[7; 11]), false, 10) else { panic!("a summary") };
        assert!(summary.text.contains("a+x:///b") && summary.text.contains("image/png"), "{}", summary.text);
        assert!(summary.text.contains("11 bytes"), "{}", summary.text);
        assert_eq!(decoded_len("YQ=="), 1);
    }
}
