//! The built-in folder server: a directory exposed as an MCP server, in process (the proxy
//! talks to it over `tokio::io::duplex`) or standalone over stdio (`serve-dir DIR`).
//!
//! Every regular file under the folder is a resource `file:///<path relative to the folder>`
//! (or, with [`UriBase::Absolute`], `file:///<absolute path>`); one template
//! `file:///{+path}` (`file:///<dir>/{+path}`) reads anything under it; reading a directory gives one content per
//! direct entry (a subdirectory as an empty `inode/directory` content, so no name appears
//! except as its own content's URI). Both protocol eras are served: legacy
//! `resources/subscribe` sessions and 2026-07-28 `subscriptions/listen` streams get
//! `updated` / `list_changed` from file changes.
//!
//! Parts: `paths` (URI ↔ path, mime types), `beneath` (opening without following
//! symlinks), `content` (list and read), `subscribers`
//! (who wants what), `watch` (file events → notifications).
//!
//! Invariant: nothing outside the folder is ever read or listed, and no symlink is ever
//! followed. Every URI goes through `paths::Root`, which refuses anything not lexically
//! inside the folder, and `beneath` opens it from the folder's handle one name at a time
//! without following symlinks or blocking, so a swap between check and read cannot redirect
//! it; refusals, missing files and failures answer "not found" (or a generic error) without
//! OS text or outside paths. Links are neither listed nor read, so the URI a policy judges is
//! always the file that is read.

mod beneath;
mod content;
mod paths;
mod subscribers;
mod watch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use notify::RecommendedWatcher;
use rmcp::model::{
    Implementation, ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceTemplate, ServerCapabilities,
    ServerConfig, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, ServerHandler, ServiceExt};

use paths::Root;
pub use paths::UriBase;
use subscribers::Subscribers;

use crate::spine::Spine;

/// A folder served as MCP resources. Cheap to clone; clones share the watcher and the
/// registrations, so one value can serve many sessions.
#[derive(Clone)]
pub struct FolderServer {
    inner: Arc<Inner>,
}

/// Serve one host over stdin/stdout until it disconnects (logs go to stderr, never stdout).
pub async fn serve_stdio(dir: &Path, base: UriBase) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let server = FolderServer::with_uri_base(dir, base)?;
    tracing::info!(uri = %server.root_uri(), "serving folder over stdio");
    let running = server.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

struct Inner {
    root: Arc<Root>,
    subscribers: Arc<Subscribers>,
    /// Dropping it (with the last clone) ends the watch task.
    _watcher: RecommendedWatcher,
}

/// Deregisters a listen stream however its `listen` call ends.
struct StreamRegistration {
    subscribers: Arc<Subscribers>,
    id: u64,
}

impl FolderServer {
    /// Canonicalises `dir`, starts watching it (must be called inside a tokio runtime); files
    /// are named as `base` says (relative to it: `file:///README.md`). Error if `dir` is not a
    /// directory. Its watch task runs on a spine of its own (the `serve-dir` command, tests).
    pub fn with_uri_base(dir: &Path, base: UriBase) -> std::io::Result<FolderServer> {
        Self::on_spine(dir, base, &Spine::new())
    }

    /// The same, its watch task (`serve-dir-watch`) on `spine`: the proxy's in-process folder
    /// upstreams.
    pub fn on_spine(dir: &Path, base: UriBase, spine: &Spine) -> std::io::Result<FolderServer> {
        let root = Arc::new(Root::new(dir, base)?);
        let subscribers = Arc::new(Subscribers::default());
        let watcher = watch::start(root.clone(), subscribers.clone(), spine)?;
        let inner = Inner { root, subscribers, _watcher: watcher };
        Ok(FolderServer { inner: Arc::new(inner) })
    }

    /// The folder's URI without its trailing slash: `file://` when files are named relative
    /// to it, `file:///<canonical dir>` when by absolute path.
    pub fn root_uri(&self) -> String {
        self.inner.root.uri().to_owned()
    }

    fn template(&self) -> ResourceTemplate {
        let root = self.inner.root.uri();
        ResourceTemplate::new(format!("{root}/{{+path}}"), "file")
            .with_description(format!("Reads any file under {root}/ (a directory gives one content per entry)"))
    }

    /// The path `uri` names if a subscription to it may be accepted.
    fn watchable(&self, uri: &str) -> Result<PathBuf, ErrorData> {
        self.inner.root.watchable(uri).ok_or_else(|| ErrorData::resource_not_found("resource not found", None))
    }

    /// Remembers a legacy session (one that began with `initialize`) for `list_changed`.
    fn note_session(&self, peer: &Peer<RoleServer>) {
        if peer.peer_info().is_some() {
            self.inner.subscribers.session_seen(peer);
        }
    }

    /// Path → URIs for the accepted URIs of a listen stream.
    fn watched_paths(&self, uris: &[String]) -> HashMap<PathBuf, Vec<String>> {
        let mut watched: HashMap<PathBuf, Vec<String>> = HashMap::new();
        for uri in uris {
            if let Some(path) = self.inner.root.watchable(uri) {
                watched.entry(path).or_default().push(uri.clone());
            }
        }
        watched
    }
}

impl ServerHandler for FolderServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("mcp-resource-proxy serve-dir", env!("CARGO_PKG_VERSION")))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.note_session(&context.peer);
        let root = self.inner.root.clone();
        let resources = tokio::task::spawn_blocking(move || content::list(&root)).await.map_err(|e| {
            tracing::error!(uri = %self.inner.root.uri(), error = %e, "listing task failed");
            ErrorData::internal_error("listing failed", None)
        })?;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.note_session(&context.peer);
        Ok(ListResourceTemplatesResult::with_all_items(vec![self.template()]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.note_session(&context.peer);
        let root = self.inner.root.clone();
        let uri = request.uri;
        let wanted = uri.clone();
        let read = tokio::task::spawn_blocking(move || content::read(&root, &wanted)).await;
        match read {
            Ok(Ok(contents)) => Ok(ReadResourceResult::new(contents).into()),
            Ok(Err(e)) => {
                if let content::ReadError::Io(io) = &e {
                    tracing::warn!(uri = %uri, error = %io, "read failed");
                }
                Err(e.to_error_data())
            }
            Err(e) => {
                tracing::error!(uri = %uri, error = %e, "read task failed");
                Err(ErrorData::internal_error("resource could not be read", None))
            }
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.note_session(&context.peer);
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let path = self.watchable(&request.uri)?;
        tracing::debug!(uri = %request.uri, "subscribed");
        self.inner.subscribers.subscribe(&context.peer, request.uri, path);
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.inner.subscribers.unsubscribe(&context.peer, &request.uri);
        Ok(())
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        let uris: Vec<String> = requested
            .resource_subscriptions
            .iter()
            .flatten()
            .filter(|uri| self.inner.root.watchable(uri).is_some())
            .cloned()
            .collect();
        let mut accepted = SubscriptionFilter::new();
        accepted.resources_list_changed = requested.resources_list_changed;
        accepted.resource_subscriptions = (!uris.is_empty()).then_some(uris);
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let accepted = context.accepted();
        let uris = accepted.resource_subscriptions.as_deref().unwrap_or(&[]);
        let list_changed = accepted.resources_list_changed == Some(true);
        let id = self.inner.subscribers.add_stream(context.sink().clone(), list_changed, self.watched_paths(uris));
        let _registration = StreamRegistration { subscribers: self.inner.subscribers.clone(), id };
        context.cancelled().await;
        Ok(())
    }
}

impl Drop for StreamRegistration {
    fn drop(&mut self) {
        self.subscribers.remove_stream(self.id);
    }
}
