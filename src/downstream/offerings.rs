//! The `ServerHandler` side of tools, prompts and completion: each request goes to
//! [`crate::tools::Tools`] with the caller's principal and its cancellation token, and is
//! counted like every other request.

use std::time::Instant;

use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, GetPromptRequestParams,
    GetPromptResponse, ListPromptsResult, ListToolsResult, PaginatedRequestParams, PromptsCapability,
    ServerCapabilities, ToolsCapability,
};
use rmcp::service::{RequestContext, RoleServer};

use super::ProxyServer;

/// Tools, prompts (both with `listChanged`) and completions, whatever the upstreams offer.
pub(super) fn advertise(capabilities: &mut ServerCapabilities) {
    let mut tools = ToolsCapability::default();
    tools.list_changed = Some(true);
    let mut prompts = PromptsCapability::default();
    prompts.list_changed = Some(true);
    capabilities.tools = Some(tools);
    capabilities.prompts = Some(prompts);
    capabilities.completions = Some(Default::default());
}

impl ProxyServer {
    pub(super) async fn offerings_list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.check_principal(&context.extensions)?;
        let started = Instant::now();
        let cursor = request.and_then(|r| r.cursor);
        self.record("tools/list", started, self.proxy.tools().list_tools(&self.principal, cursor.as_deref()))
    }

    pub(super) async fn offerings_list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.check_principal(&context.extensions)?;
        let started = Instant::now();
        let cursor = request.and_then(|r| r.cursor);
        self.record("prompts/list", started, self.proxy.tools().list_prompts(&self.principal, cursor.as_deref()))
    }

    pub(super) async fn offerings_call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.check_principal(&context.extensions)?;
        let started = Instant::now();
        let answer = self.proxy.tools().call_tool(&self.principal, request, &context.ct).await;
        self.record("tools/call", started, answer)
    }

    pub(super) async fn offerings_get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.check_principal(&context.extensions)?;
        let started = Instant::now();
        let answer = self.proxy.tools().get_prompt(&self.principal, request, &context.ct).await;
        self.record("prompts/get", started, answer)
    }

    pub(super) async fn offerings_complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.check_principal(&context.extensions)?;
        let started = Instant::now();
        let answer = self.proxy.tools().complete(&self.principal, request, &context.ct).await;
        self.record("completion/complete", started, answer)
    }
}
