//! The built-in folder server (the library's `FolderServer`) in process, behind a real rmcp
//! client over `tokio::io::duplex`, in either protocol era: a temporary folder to serve, the
//! client, what it heard outside listen streams, and small read helpers.

use std::path::PathBuf;
use std::time::Duration;

use mcp_resource_proxy::serve_dir::{FolderServer, UriBase};
use rmcp::ServiceExt;
use rmcp::model::{ProtocolVersion, ReadResourceRequestParams, ResourceContents, ResourceUpdatedNotificationParam};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::{ClientCacheConfig, ClientHandler, ClientLifecycleMode, ClientServiceExt, ServiceError};
use tokio::sync::mpsc;
use tokio::time::timeout;

pub const WAIT: Duration = Duration::from_secs(10);
pub const NOT_FOUND_LEGACY: i32 = -32002;
pub const NOT_FOUND_MODERN: i32 = -32602;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Era {
    Legacy,
    Modern,
}

pub const ERAS: [Era; 2] = [Era::Legacy, Era::Modern];

/// What a client heard outside any listen stream.
#[derive(Debug, PartialEq)]
pub enum Heard {
    Updated(String),
    ListChanged,
}

#[derive(Clone)]
pub struct Recorder {
    heard: mpsc::UnboundedSender<Heard>,
}

impl ClientHandler for Recorder {
    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.heard.send(Heard::Updated(params.uri));
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.heard.send(Heard::ListChanged);
    }
}

pub type Client = RunningService<RoleClient, Recorder>;

/// A temp tree: `outside.txt` next to the served folder `served/`.
pub struct Fixture {
    _temp: tempfile::TempDir,
    pub outer: PathBuf,
    pub served: PathBuf,
    pub base: UriBase,
}

impl Default for Fixture {
    fn default() -> Self {
        Self::new()
    }
}

impl Fixture {
    /// Files named relative to the folder (the default).
    pub fn new() -> Fixture {
        Self::with_base(UriBase::Relative)
    }

    pub fn with_base(base: UriBase) -> Fixture {
        let temp = tempfile::tempdir().unwrap();
        let outer = temp.path().canonicalize().unwrap();
        let served = outer.join("served");
        std::fs::create_dir_all(served.join("sub dir/deeper")).unwrap();
        std::fs::write(outer.join("outside.txt"), "secret").unwrap();
        std::fs::write(served.join("notes.md"), "# Notes\n").unwrap();
        std::fs::write(served.join("data.bin"), [0xff, 0x00, 0xfe]).unwrap();
        std::fs::write(served.join("sub dir/inner.txt"), "inner").unwrap();
        std::fs::write(served.join("sub dir/deeper/x.json"), "{}").unwrap();
        Fixture { _temp: temp, outer, served, base }
    }

    pub fn uri(&self, relative: &str) -> String {
        match self.base {
            UriBase::Relative => format!("file:///{relative}"),
            UriBase::Absolute => format!("file://{}/{relative}", self.served.display()),
        }
    }

    pub fn server(&self) -> FolderServer {
        FolderServer::with_uri_base(&self.served, self.base).unwrap()
    }
}

pub async fn connect(server: FolderServer, era: Era) -> (Client, mpsc::UnboundedReceiver<Heard>) {
    let (server_side, client_side) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_side).await {
            let _ = running.waiting().await;
        }
    });
    let mode = match era {
        Era::Legacy => ClientLifecycleMode::Initialize,
        Era::Modern => ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
    };
    let (heard, rx) = mpsc::unbounded_channel();
    let client = Recorder { heard }.serve_with_lifecycle(client_side, mode).await.unwrap();
    client.peer().set_response_cache_config(ClientCacheConfig::disabled()).await;
    (client, rx)
}

pub async fn read(client: &Client, uri: &str) -> Result<Vec<ResourceContents>, ServiceError> {
    let params = ReadResourceRequestParams::new(uri);
    Ok(client.peer().read_resource(params).await?.contents)
}

pub async fn next_heard(rx: &mut mpsc::UnboundedReceiver<Heard>) -> Heard {
    timeout(WAIT, rx.recv()).await.expect("timed out").unwrap()
}

/// Waits until `wanted` is heard, skipping other notifications.
pub async fn hear(rx: &mut mpsc::UnboundedReceiver<Heard>, wanted: Heard) {
    loop {
        if next_heard(rx).await == wanted {
            return;
        }
    }
}

pub fn error_code(result: Result<Vec<ResourceContents>, ServiceError>) -> (i32, String) {
    match result {
        Err(ServiceError::McpError(e)) => (e.code.0, e.message.to_string()),
        other => panic!("expected an MCP error, got {other:?}"),
    }
}

pub fn text_of(contents: &ResourceContents) -> (&str, Option<&str>, &str) {
    match contents {
        ResourceContents::TextResourceContents { uri, mime_type, text, .. } => (uri, mime_type.as_deref(), text),
        other => panic!("expected text, got {other:?}"),
    }
}
