//! What the hosts' side tells the audit trail ([`crate::audit`]): one request's context (who,
//! which era, which session, which request) and the event its answer makes. The rmcp handler
//! and the fast path both build their read events here, so a read is audited alike whichever
//! answered it.

use std::time::Instant;

use rmcp::service::{RequestContext, RoleServer};

use super::session_header;
use crate::audit::{Event, Kind};
use crate::cache::Outcome;
use crate::error::ProxyError;
use crate::protocol::Era;
use crate::proxy::{Metered, ReadAnswer};
use crate::tools::Routed;

/// Who asked, over what: the fields every event of one request shares.
pub(super) struct Asked<'a> {
    pub principal: &'a str,
    pub era: Option<Era>,
    pub session: Option<&'a str>,
    pub request: Option<String>,
    pub started: Instant,
}

impl<'a> Asked<'a> {
    /// The context of a request rmcp's handler serves.
    pub(super) fn of(principal: &'a str, context: &'a RequestContext<RoleServer>, started: Instant) -> Asked<'a> {
        Asked {
            principal,
            era: Some(Era::of_negotiated(context.protocol_version().as_ref())),
            session: session_header(&context.extensions),
            request: Some(context.id.to_string()),
            started,
        }
    }

    /// The event of `kind` for `method`, with `outcome`, as of now.
    pub(super) fn event(&self, kind: Kind, method: &'static str, outcome: &'static str) -> Event {
        Event::new(kind, outcome)
            .principal(self.principal)
            .method(method)
            .era(self.era)
            .session(self.session)
            .request(self.request.clone())
            .took(self.started.elapsed())
    }
}

/// A `resources/read`'s event: its outcome and, when it has contents, the cache's part.
pub(super) fn read_event(asked: &Asked<'_>, uri: &str, answer: &Result<ReadAnswer, ProxyError>) -> Event {
    let (outcome, cache) = match answer {
        Ok(ReadAnswer::Result { outcome, .. }) => ("ok", Some(cache_label(*outcome))),
        Ok(ReadAnswer::InputRequired(_)) => ("input_required", None),
        Err(error) => (error.kind(), None),
    };
    let mut event = asked.event(Kind::Read, crate::protocol::method::RESOURCES_READ, outcome).uri(uri);
    event.cache = cache;
    event
}

/// The event of a request of `principal` for `method` turned away before it was served, for
/// `reason` (see [`Kind::Refused`]), naming what it asked for.
pub(super) fn refused_event(
    principal: &str,
    method: Option<&'static str>,
    asked: &Metered<'_>,
    reason: &'static str,
) -> Event {
    // The request's span (when traces are on) says it was refused, and why.
    crate::telemetry::Span::current().note("mcp_proxy.refused", reason);
    let mut event = Event::refused(reason).principal(principal);
    event.method = method;
    naming(event, asked)
}

/// `event` naming what was `asked` for: a tool's or prompt's name, a URI or template.
pub(super) fn naming(event: Event, asked: &Metered<'_>) -> Event {
    match asked {
        Metered::Read(uri) | Metered::Template(uri) => event.uri(uri),
        Metered::Tool(name) | Metered::Prompt(name) => event.name(name),
        Metered::Other => event,
    }
}

/// A routed request's outcome: `ok`, `tool_error` (a tool said `isError`), `input_required`
/// or the error's kind.
pub(super) fn routed_outcome<R: Routed>(answer: &Result<R::Answer, ProxyError>) -> &'static str {
    match answer {
        Ok(answer) => R::outcome(answer),
        Err(error) => error.kind(),
    }
}

pub(super) fn cache_label(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Hit => "hit",
        Outcome::Stale => "stale",
        Outcome::Miss => "miss",
        Outcome::Coalesced => "coalesced",
        Outcome::Bypass => "bypass",
    }
}
