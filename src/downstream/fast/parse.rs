//! The fast path's request parse: a typed, single-pass read of `{jsonrpc, id, method, params}`
//! for the three methods it answers, in place of rmcp's `ClientJsonRpcMessage` (an untagged
//! enum that buffers the body into serde's `Content` and tries variants, ~40 % of a hit's
//! instructions before this parse).
//!
//! Invariant: [`typed`] is a strict subset of [`via_rmcp`]: when it returns a request, rmcp's
//! parse of the same bytes gives the same id, method, parameters and request metadata facts.
//! It accepts only the plain shape — exactly the keys `jsonrpc` (`"2.0"`), `id` (an integer
//! or a string), `method` (one of the three), `params` (an object of `uri` or `cursor` (a
//! string) and `_meta`); `_meta` of the four protocol keys the fast path knows and the three
//! trace context keys (`traceparent`, `tracestate`, `baggage`, strings), no key twice — and
//! returns `None` for anything else (escaped keys, float ids, `null`s, unknown or MRTR fields,
//! batches). The caller then asks [`via_rmcp`], so such a body is classified exactly as before.

use std::fmt;
use std::sync::Arc;

use rmcp::model::{ClientCapabilities, ClientJsonRpcMessage, ClientRequest, GetMeta, RequestId, RequestMetaObject};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::Op;

use crate::wire::era::{
    META_CLIENT_CAPABILITIES as CLIENT_CAPABILITIES, META_CLIENT_INFO as CLIENT_INFO,
    META_PROGRESS_TOKEN as PROGRESS_TOKEN, META_PROTOCOL_VERSION as PROTOCOL_VERSION, MetaFacts,
};

/// The host's trace context in `_meta` (W3C `traceparent`, `tracestate`), for the request's span.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Trace {
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
}

/// A request of one of the three methods, as far as the fast path needs it.
#[derive(Debug, PartialEq)]
pub(super) struct Parsed {
    pub id: RequestId,
    pub op: Op,
    pub meta: MetaFacts,
    pub trace: Trace,
}

/// The typed parse; `None` when the body is not plainly one of ours (ask [`via_rmcp`]).
pub(super) fn typed(body: &[u8]) -> Option<Parsed> {
    serde_json::from_slice::<Envelope>(body).ok()?.into_parsed()
}

/// rmcp's parse, reduced to the same facts; `None` when it is not a request of the three.
pub(super) fn via_rmcp(body: &[u8]) -> Option<Parsed> {
    let ClientJsonRpcMessage::Request(request) = serde_json::from_slice(body).ok()? else { return None };
    let meta = meta_facts(request.request.get_meta());
    let trace = Trace {
        traceparent: request.request.get_meta().get_traceparent().map(str::to_owned),
        tracestate: request.request.get_meta().get_tracestate().map(str::to_owned),
    };
    let op = match request.request {
        ClientRequest::ReadResourceRequest(read) => {
            let params = read.params;
            if params.input_responses.is_some() || params.request_state.is_some() {
                return None;
            }
            Op::Read(params.uri)
        }
        ClientRequest::ListResourcesRequest(list) => Op::List(list.params.and_then(|p| p.cursor)),
        ClientRequest::ListResourceTemplatesRequest(list) => Op::Templates(list.params.and_then(|p| p.cursor)),
        _ => return None,
    };
    Some(Parsed { id: request.id, op, meta, trace })
}

/// The era facts of rmcp's parsed `_meta`.
fn meta_facts(meta: &RequestMetaObject) -> MetaFacts {
    MetaFacts {
        version: meta.protocol_version().map(|v| v.as_str().to_owned()),
        capabilities: meta.client_capabilities().is_some(),
        only_known_keys: meta.keys().all(|k| MetaFacts::known_key(k)),
        only_progress_token: meta.keys().all(|k| MetaFacts::transport_key(k)),
    }
}

/// The top-level object, each key at most once.
#[derive(Default)]
struct Envelope {
    jsonrpc: bool,
    id: Option<RequestId>,
    method: Option<String>,
    params: Option<Params>,
}

#[derive(Default)]
struct Params {
    uri: Option<String>,
    cursor: Option<String>,
    meta: Option<(MetaFacts, Trace)>,
}

impl Envelope {
    fn into_parsed(self) -> Option<Parsed> {
        let (true, Some(id), Some(method)) = (self.jsonrpc, self.id, self.method) else { return None };
        let Params { uri, cursor, meta } = self.params.unwrap_or_default();
        let op = match (method.as_str(), uri, cursor) {
            ("resources/read", Some(uri), None) => Op::Read(uri),
            ("resources/list", None, cursor) => Op::List(cursor),
            ("resources/templates/list", None, cursor) => Op::Templates(cursor),
            _ => return None,
        };
        // A read without `params` is not a read for rmcp (the `uri` is required): covered by
        // `uri` being `None` above.
        let (meta, trace) = meta.unwrap_or_else(|| (MetaFacts::absent(), Trace::default()));
        Some(Parsed { id, op, meta, trace })
    }
}

/// Refuse a key seen twice (serde_json's `Value` would keep the last; rmcp's buffered parse
/// may differ): the body goes to rmcp's parse instead.
fn once<T, E: de::Error>(slot: &Option<T>, key: &str) -> Result<(), E> {
    match slot {
        Some(_) => Err(E::custom(format_args!("{key} twice"))),
        None => Ok(()),
    }
}

impl<'de> serde::Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EnvelopeVisitor)
    }
}

struct EnvelopeVisitor;

impl<'de> Visitor<'de> for EnvelopeVisitor {
    type Value = Envelope;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a plain JSON-RPC request")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope, A::Error> {
        let mut envelope = Envelope::default();
        while let Some(key) = map.next_key::<&str>()? {
            match key {
                "jsonrpc" if !envelope.jsonrpc => {
                    envelope.jsonrpc = map.next_value::<String>()? == "2.0";
                    if !envelope.jsonrpc {
                        return Err(de::Error::custom("not JSON-RPC 2.0"));
                    }
                }
                "id" => {
                    once(&envelope.id, key)?;
                    envelope.id = Some(map.next_value::<Id>()?.0);
                }
                "method" => {
                    once(&envelope.method, key)?;
                    envelope.method = Some(map.next_value()?);
                }
                "params" => {
                    once(&envelope.params, key)?;
                    envelope.params = Some(map.next_value()?);
                }
                _ => return Err(de::Error::custom("unexpected key")),
            }
        }
        Ok(envelope)
    }
}

/// A JSON-RPC id as rmcp reads it, but only an integer literal or a string (a float form such
/// as `1.0`, which rmcp also reads as 1, goes to rmcp's parse).
struct Id(RequestId);

impl<'de> serde::Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(IdVisitor)
    }
}

struct IdVisitor;

impl Visitor<'_> for IdVisitor {
    type Value = Id;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer or a string")
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
        Ok(Id(RequestId::Number(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
        let v = i64::try_from(v).map_err(|_| E::custom("id beyond i64"))?;
        Ok(Id(RequestId::Number(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Id, E> {
        Ok(Id(RequestId::String(Arc::from(v))))
    }
}

impl<'de> serde::Deserialize<'de> for Params {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ParamsVisitor)
    }
}

struct ParamsVisitor;

impl<'de> Visitor<'de> for ParamsVisitor {
    type Value = Params;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the params of a read or a list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Params, A::Error> {
        let mut params = Params::default();
        while let Some(key) = map.next_key::<&str>()? {
            match key {
                "uri" => {
                    once(&params.uri, key)?;
                    params.uri = Some(map.next_value()?);
                }
                "cursor" => {
                    once(&params.cursor, key)?;
                    params.cursor = Some(map.next_value()?);
                }
                "_meta" => {
                    once(&params.meta, key)?;
                    let meta = map.next_value::<Meta>()?;
                    params.meta = Some((meta.0, meta.1));
                }
                _ => return Err(de::Error::custom("unexpected key")),
            }
        }
        Ok(params)
    }
}

/// `_meta`: only the four protocol keys and the three trace context keys (string values), each
/// at most once; values checked as rmcp's accessors do.
struct Meta(MetaFacts, Trace);

impl<'de> serde::Deserialize<'de> for Meta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MetaVisitor)
    }
}

struct MetaVisitor;

impl<'de> Visitor<'de> for MetaVisitor {
    type Value = Meta;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("request metadata")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Meta, A::Error> {
        let mut seen = [false; 7];
        let mut facts = MetaFacts::absent();
        let mut trace = Trace::default();
        while let Some(key) = map.next_key::<&str>()? {
            let slot = match key {
                PROTOCOL_VERSION => 0,
                CLIENT_CAPABILITIES => 1,
                CLIENT_INFO => 2,
                PROGRESS_TOKEN => 3,
                "traceparent" => 4,
                "tracestate" => 5,
                "baggage" => 6,
                _ => return Err(de::Error::custom("unexpected key")),
            };
            if std::mem::replace(&mut seen[slot], true) {
                return Err(de::Error::custom("key twice"));
            }
            facts.only_progress_token &= slot >= 3;
            match slot {
                0 => facts.version = Some(map.next_value()?),
                4 => trace.traceparent = Some(map.next_value()?),
                5 => trace.tracestate = Some(map.next_value()?),
                6 => {
                    map.next_value::<String>()?;
                }
                1 => {
                    map.next_value::<ClientCapabilities>()?;
                    facts.capabilities = true;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Meta(facts, trace))
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
