//! The `ServerHandler` side of resources: list, list templates and read go to the proxy with
//! the request's caller (its principal and one policy snapshot) and are counted like every
//! other request. [`read_response`] shapes a read's answer for the host's era; the fast path
//! (`fast.rs`) shares it.

use std::time::Instant;

use rmcp::ErrorData;
use rmcp::model::{
    ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse,
};
use rmcp::service::{RequestContext, RoleServer};

use super::ProxyServer;
use super::audited::{Asked, read_event};
use crate::audit;
use crate::protocol::{Era, method};
use crate::proxy::{Metered, ReadAnswer};

impl ProxyServer {
    pub(super) async fn resources_list(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.check_principal(&context.extensions, method::RESOURCES_LIST)?;
        let started = Instant::now();
        let cursor = request.and_then(|r| r.cursor);
        self.record(method::RESOURCES_LIST, started, self.proxy.list_resources(&self.caller(), cursor.as_deref()))
    }

    pub(super) async fn resources_list_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.check_principal(&context.extensions, method::TEMPLATES_LIST)?;
        let started = Instant::now();
        let cursor = request.and_then(|r| r.cursor);
        self.record(method::TEMPLATES_LIST, started, self.proxy.list_templates(&self.caller(), cursor.as_deref()))
    }

    pub(super) async fn resources_read(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.check_principal(&context.extensions, method::RESOURCES_READ)?;
        let caller = self.caller().with_subject(super::subject_of(&context.extensions));
        self.admit(&context.extensions, &caller, Metered::Read(&request.uri), method::RESOURCES_READ)?;
        let started = Instant::now();
        let (answer, notes) = audit::scope::noting(self.proxy.read(&caller, &request.uri)).await;
        super::traced::note_read(&request.uri, &answer, &notes);
        let asked = || Asked::of(&self.principal, &context, started);
        self.proxy.audit().request(notes, || read_event(&asked(), &request.uri, &answer));
        let answer = answer.inspect_err(|error| {
            tracing::debug!(uri = %request.uri, principal = %self.principal, error = %error, kind = error.kind(), "read failed");
        });
        let answer = self.record(method::RESOURCES_READ, started, answer)?;
        let modern = Era::of_negotiated(context.protocol_version().as_ref()) == Era::Modern;
        Ok(read_response(answer, modern))
    }
}

/// A `resources/read` answer as the host receives it: 2026-07-28 hosts (`modern`) learn how
/// long and for whom it may be kept (the scope the read decided with its caller's policy
/// snapshot). Shared by the rmcp handler and the fast path.
pub(super) fn read_response(answer: ReadAnswer, modern: bool) -> ReadResourceResponse {
    match answer {
        ReadAnswer::Result { mut result, ttl, scope, .. } => {
            result.ttl_ms = modern.then(|| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
            result.cache_scope = modern.then_some(scope);
            // A 2025-era upstream's result has no `resultType`; 2026-07-28 hosts need it.
            result.result_type = modern.then_some(rmcp::model::ResultType::COMPLETE);
            ReadResourceResponse::Complete(result)
        }
        ReadAnswer::InputRequired(response) => response,
    }
}
