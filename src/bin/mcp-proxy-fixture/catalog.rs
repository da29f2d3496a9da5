//! The fixture's resources as plain data: which URIs exist, how `resources/list` and
//! `resources/templates/list` are paged, and what a read of each URI returns. Synchronous, no IO.
//!
//! Invariant: list order is stable and only ever grows at the end (the fixed resources first, then
//! `item/0..count`), so an offset cursor handed out earlier stays valid after `add`.

use base64::{Engine, engine::general_purpose::STANDARD, engine::general_purpose::URL_SAFE_NO_PAD};
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitationSchema, InputRequest, InputRequests, InputRequiredResult, Resource,
    ResourceContents, ResourceTemplate,
};

/// Largest text a `fx://P/sized/{bytes}` read may ask for.
pub const MAX_SIZED_BYTES: usize = 64 * 1024 * 1024;

/// The `requestState` of the `input_required` answer to `fx://P/needs-input`.
pub const NEEDS_INPUT_STATE: &str = "fixture-needs-input:1";

/// The URI layout of one fixture.
#[derive(Debug, Clone)]
pub struct Catalog {
    prefix: String,
    text_bytes: Option<usize>,
    bad_uri: bool,
    page_size: usize,
    faults: bool,
    duplicate_uris: bool,
}

/// What a URI names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Item(u64),
    Multi,
    /// `fx://P/multi-bare`: unlisted; one proper content and two whose URIs have no scheme.
    MultiBare,
    Blob,
    NoScheme,
    Echo(String),
    Sized(usize),
    /// `fx://P/env/{NAME}` (unlisted): the fixture's environment variable NAME, if set.
    Env(String),
    /// `fx://P/fault/{kind}` (unlisted, `--faults` only): a hostile reply, see `faults`.
    Fault(String),
}

/// A cursor this fixture did not mint.
#[derive(Debug)]
pub struct InvalidCursor;

/// One page of a list.
#[derive(Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

impl Catalog {
    pub fn new(prefix: &str, text_bytes: Option<usize>, bad_uri: bool, page_size: usize) -> Self {
        Self {
            prefix: prefix.to_owned(),
            text_bytes,
            bad_uri,
            page_size: page_size.max(1),
            faults: false,
            duplicate_uris: false,
        }
    }

    /// Serve `fault/{kind}` (`faults`); list `multi` twice (`duplicate_uris`).
    pub fn with_hostility(mut self, faults: bool, duplicate_uris: bool) -> Self {
        self.faults = faults;
        self.duplicate_uris = duplicate_uris;
        self
    }

    pub fn item_uri(&self, id: u64) -> String {
        format!("fx://{}/item/{id}", self.prefix)
    }

    /// `fx://P/needs-input`: unlisted, and never resolved to contents — a read of it asks a
    /// 2026-07-28 client for input (MRTR) and fails for a legacy one.
    pub fn needs_input_uri(&self) -> String {
        format!("fx://{}/needs-input", self.prefix)
    }

    /// What a 2026-07-28 read of [`Self::needs_input_uri`] answers: one form elicitation
    /// (`confirm`, asking for a `name`) and an opaque `requestState`.
    pub fn input_required(&self) -> Result<InputRequiredResult, &'static str> {
        let schema = ElicitationSchema::builder().required_string("name").build()?;
        let elicitation = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: format!("Who is reading {}?", self.needs_input_uri()),
            requested_schema: schema,
        };
        let mut requests = InputRequests::new();
        requests.insert("confirm".to_owned(), InputRequest::Elicitation(ElicitRequest::new(elicitation)));
        Ok(InputRequiredResult::new(Some(requests), Some(NEEDS_INPUT_STATE.to_owned())))
    }

    /// One page of `resources/list` when `item_count` items exist.
    pub fn resources_page(&self, item_count: u64, cursor: Option<&str>) -> Result<Page<Resource>, InvalidCursor> {
        let fixed = self.fixed_resources();
        let total = fixed.len() as u64 + item_count;
        let start = decode_cursor(cursor, total)?;
        let end = total.min(start + self.page_size as u64);
        let items = (start..end)
            .map(|index| match usize::try_from(index).ok().and_then(|i| fixed.get(i)) {
                Some(resource) => resource.clone(),
                None => self.item_resource(index - fixed.len() as u64),
            })
            .collect();
        Ok(Page { items, next_cursor: (end < total).then(|| encode_cursor(end)) })
    }

    /// One page of `resources/templates/list`.
    pub fn templates_page(&self, cursor: Option<&str>) -> Result<Page<ResourceTemplate>, InvalidCursor> {
        let templates = self.templates();
        let total = templates.len() as u64;
        let start = decode_cursor(cursor, total)?;
        let end = total.min(start + self.page_size as u64);
        let items = templates[start as usize..end as usize].to_vec();
        Ok(Page { items, next_cursor: (end < total).then(|| encode_cursor(end)) })
    }

    /// What `uri` names, if anything. Items resolve for any `u64` id, listed or not.
    pub fn resolve(&self, uri: &str) -> Option<Target> {
        if self.bad_uri && uri == "no-scheme/item" {
            return Some(Target::NoScheme);
        }
        let rest = uri.strip_prefix("fx://")?.strip_prefix(self.prefix.as_str())?;
        match rest {
            "/multi" => return Some(Target::Multi),
            "/multi-bare" => return Some(Target::MultiBare),
            "/blob" => return Some(Target::Blob),
            _ => {}
        }
        if let Some(id) = rest.strip_prefix("/item/") {
            return id.parse().ok().map(Target::Item);
        }
        if let Some(name) = rest.strip_prefix("/env/") {
            return Some(Target::Env(name.to_owned()));
        }
        if let Some(kind) = rest.strip_prefix("/fault/") {
            return (self.faults && crate::faults::KINDS.contains(&kind)).then(|| Target::Fault(kind.to_owned()));
        }
        if let Some(text) = rest.strip_prefix("/echo/") {
            let decoded = percent_encoding::percent_decode_str(text).decode_utf8().ok()?;
            return Some(Target::Echo(decoded.into_owned()));
        }
        let bytes: usize = rest.strip_prefix("/sized/")?.parse().ok()?;
        (bytes <= MAX_SIZED_BYTES).then_some(Target::Sized(bytes))
    }

    /// The contents a read of `uri` returns; `version` is that URI's current version.
    pub fn contents(&self, uri: &str, target: &Target, version: u64) -> Vec<ResourceContents> {
        match target {
            Target::Item(id) => vec![ResourceContents::text(self.padded(format!("item {id} v{version}")), uri)],
            Target::Multi => {
                let base = format!("fx://{}/multi", self.prefix);
                vec![
                    ResourceContents::text(format!("multi a v{version}"), format!("{base}/a")),
                    ResourceContents::text(format!("multi b v{version}"), format!("{base}/b")),
                    ResourceContents::blob(STANDARD.encode(all_bytes()), format!("{base}/c"))
                        .with_mime_type("application/octet-stream"),
                ]
            }
            Target::MultiBare => vec![
                ResourceContents::text(format!("bare a v{version}"), format!("fx://{}/multi-bare/a", self.prefix)),
                ResourceContents::text(format!("bare b v{version}"), "bare/b"),
                ResourceContents::text(format!("bare c v{version}"), ""),
            ],
            Target::Blob => vec![
                ResourceContents::blob(STANDARD.encode(all_bytes()), uri).with_mime_type("application/octet-stream"),
            ],
            Target::NoScheme => vec![ResourceContents::text(format!("no-scheme v{version}"), uri)],
            Target::Echo(text) => vec![ResourceContents::text(text.clone(), uri)],
            Target::Sized(bytes) => vec![ResourceContents::text("x".repeat(*bytes), uri)],
            Target::Env(name) => vec![ResourceContents::text(std::env::var(name).unwrap_or_default(), uri)],
            Target::Fault(kind) => vec![ResourceContents::text(crate::faults::marker(kind), uri)],
        }
    }

    fn padded(&self, mut text: String) -> String {
        if let Some(bytes) = self.text_bytes
            && text.len() < bytes
        {
            text.extend(std::iter::repeat_n('.', bytes - text.len()));
        }
        text
    }

    fn fixed_resources(&self) -> Vec<Resource> {
        let prefix = &self.prefix;
        let mut fixed = vec![
            Resource::new(format!("fx://{prefix}/multi"), "multi")
                .with_description("three contents: text a, text b, blob c"),
            Resource::new(format!("fx://{prefix}/blob"), "blob").with_mime_type("application/octet-stream"),
        ];
        if self.duplicate_uris {
            fixed.push(Resource::new(format!("fx://{prefix}/multi"), "multi-again"));
        }
        if self.bad_uri {
            fixed.push(Resource::new("no-scheme/item", "no-scheme").with_mime_type("text/plain"));
        }
        fixed
    }

    fn item_resource(&self, id: u64) -> Resource {
        Resource::new(self.item_uri(id), format!("item-{id}")).with_mime_type("text/plain")
    }

    fn templates(&self) -> Vec<ResourceTemplate> {
        let prefix = &self.prefix;
        vec![
            ResourceTemplate::new(format!("fx://{prefix}/item/{{id}}"), "item")
                .with_description("item <id> v<version>, for any u64 id")
                .with_mime_type("text/plain"),
            ResourceTemplate::new(format!("fx://{prefix}/echo/{{text}}"), "echo")
                .with_description("the percent-decoded text")
                .with_mime_type("text/plain"),
            ResourceTemplate::new(format!("fx://{prefix}/sized/{{bytes}}"), "sized")
                .with_description("exactly <bytes> bytes of 'x' (at most 64 MiB)")
                .with_mime_type("text/plain"),
        ]
    }
}

fn all_bytes() -> Vec<u8> {
    (0..=255u8).collect()
}

fn encode_cursor(offset: u64) -> String {
    URL_SAFE_NO_PAD.encode(format!("fixture-offset:{offset}"))
}

fn decode_cursor(cursor: Option<&str>, total: u64) -> Result<u64, InvalidCursor> {
    let Some(cursor) = cursor else { return Ok(0) };
    let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| InvalidCursor)?;
    let text = String::from_utf8(bytes).map_err(|_| InvalidCursor)?;
    let offset: u64 =
        text.strip_prefix("fixture-offset:").and_then(|offset| offset.parse().ok()).ok_or(InvalidCursor)?;
    if offset == 0 || offset > total {
        return Err(InvalidCursor);
    }
    Ok(offset)
}
