//! The proxy's client side of one upstream connection: it identifies the proxy, turns the
//! upstream's legacy notifications into `Notice`s for the supervisor, and relays sampling and
//! elicitation of a routed call to the host that made it (`relay`), and answers `roots/list`
//! with the upstream's configured roots (`roots`). Log messages never reach
//! it: the connection's transport relays them as they are read (`tap`).

#![allow(deprecated)] // Sampling and logging are deprecated by SEP-2577 but still in the 2025 era.

use std::sync::Arc;

use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ElicitationCapability, ErrorCode, FormElicitationCapability, Implementation, ListRootsResult,
    ProtocolVersion, ResourceUpdatedNotificationParam, SamplingCapability, UrlElicitationCapability,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use rmcp::{ClientHandler, ErrorData};

use super::Change;
use super::notices::{Notice, NoticeSender};
use super::relay::{self, Refusal, RelayBook, Relayed};
use super::roots::Roots;

/// One per connection; rmcp runs each callback in its own task.
#[derive(Clone)]
pub(crate) struct UpstreamClient {
    notices: NoticeSender,
    protocol_version: ProtocolVersion,
    /// The routed calls in flight on this upstream, for what it asks for them.
    relays: Arc<RelayBook>,
    /// What it is answered for `roots/list`.
    roots: Roots,
    /// What the one host it serves declared (a per-host session); none: everything.
    declared: Option<Declared>,
}

/// What a host declared of what an upstream may ask it for during a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Declared {
    pub sampling: bool,
    pub elicitation: bool,
}

impl UpstreamClient {
    pub fn new(
        notices: NoticeSender,
        protocol_version: ProtocolVersion,
        relays: Arc<RelayBook>,
        roots: Roots,
        declared: Option<Declared>,
    ) -> Self {
        Self { notices, protocol_version, relays, roots, declared }
    }

    /// The host of the call a request from the upstream belongs to, if it declared `kind`;
    /// otherwise the error the upstream gets (and the call keeps, see `relay`'s `refusal`).
    fn host_of(
        &self,
        context: &RequestContext<RoleClient>,
        method: &str,
        kind: &'static str,
    ) -> Result<Relayed, ErrorData> {
        let origin = relay::request_origin(&context.extensions, &context.meta);
        let relayed = self.relays.relay_request(&origin, kind).ok_or_else(|| {
            let message = format!(
                "{method} is accepted only for a call in flight that it names (over stdio: its \
                 _meta.progressToken set to the call's)"
            );
            ErrorData::invalid_params(message, None)
        })?;
        let declared = match kind {
            "sampling" => relayed.host.declares_sampling(),
            _ => relayed.host.declares_elicitation(),
        };
        if !declared {
            relayed.refused(Refusal::Undeclared(kind));
            let message = format!("the calling host does not support {kind}");
            return Err(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, message, None));
        }
        Ok(relayed)
    }
}

/// The host's answer to a relayed request; an error is kept by the call it was relayed for.
fn answered<T>(relayed: &Relayed, kind: &'static str, answer: Result<T, ErrorData>) -> Result<T, ErrorData> {
    if let Err(error) = &answer {
        relayed.refused(Refusal::HostError(kind, error.code.0));
    }
    answer
}

/// What the proxy offers an upstream: what it relays to the calling host (which may still
/// refuse it when it lacks the capability itself; a per-host session offers only what its
/// host `declared`), and roots when it is given some.
fn capabilities(roots: &Roots, declared: Option<Declared>) -> ClientCapabilities {
    let declared = declared.unwrap_or(Declared { sampling: true, elicitation: true });
    let mut capabilities = ClientCapabilities::default();
    capabilities.roots = roots.capability();
    capabilities.sampling = declared.sampling.then(SamplingCapability::default);
    let mut elicitation = ElicitationCapability::default();
    elicitation.form = Some(FormElicitationCapability::default());
    elicitation.url = Some(UrlElicitationCapability::default());
    capabilities.elicitation = declared.elicitation.then_some(elicitation);
    capabilities
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::new(
            capabilities(&self.roots, self.declared),
            Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")),
        );
        info.protocol_version = self.protocol_version.clone();
        info
    }

    async fn on_resource_updated(&self, params: ResourceUpdatedNotificationParam, _: NotificationContext<RoleClient>) {
        self.notices.send(Notice::Changed(params.uri, Change::Heard));
    }

    async fn on_resource_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.notices.send(Notice::ListChanged);
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let relayed = self.host_of(&context, "sampling/createMessage", "sampling")?;
        let answer = relayed.host.sample(params).await;
        answered(&relayed, "sampling", answer)
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let relayed = self.host_of(&context, "elicitation/create", "elicitation")?;
        let answer = relayed.host.elicit(params).await;
        answered(&relayed, "elicitation", answer)
    }

    /// Its configured roots; without any, the capability was not declared: -32601.
    async fn list_roots(&self, _: RequestContext<RoleClient>) -> Result<ListRootsResult, ErrorData> {
        match self.roots.capability() {
            Some(_) => Ok(self.roots.list()),
            None => Err(ErrorData::method_not_found::<rmcp::model::ListRootsRequestMethod>()),
        }
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.notices.send(Notice::OfferingsChanged);
    }

    async fn on_prompt_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.notices.send(Notice::OfferingsChanged);
    }
}
