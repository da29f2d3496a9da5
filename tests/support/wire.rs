//! What a host's transport read, in the order it read it: an rmcp client over streamable HTTP
//! whose transport is wrapped so that every progress notification and every answer is logged
//! the moment it comes off the wire — before rmcp (which runs notification callbacks in tasks
//! of their own) can reorder them. For claims about order ("progress before the result").

use std::sync::{Arc, Mutex};

use anyhow::Context;
use rmcp::model::{JsonRpcMessage, NumberOrString, ProgressToken, RequestId, ServerNotification};
use rmcp::service::{ClientCacheConfig, RunningService, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, Transport};
use rmcp::{ClientServiceExt, RoleClient};

use super::DEADLINE;
use super::fixture::Era;

/// One thing the host read.
#[derive(Debug, Clone, PartialEq)]
pub enum Read {
    /// `notifications/progress`: its token and progress.
    Progress(String, f64),
    /// The answer (result or error) to the request with this id.
    Answer(String),
}

/// The shared log of a [`WireHost`].
#[derive(Clone, Default)]
pub struct WireLog(Arc<Mutex<Vec<Read>>>);

/// An rmcp host whose reads are in a [`WireLog`].
pub type WireHost = RunningService<RoleClient, ()>;

struct Logged<T> {
    transport: T,
    log: WireLog,
}

impl WireLog {
    pub fn reads(&self) -> Vec<Read> {
        self.0.lock().expect("wire log").clone()
    }

    /// The progress values read for `token` before the answer to `id` (`None`: no answer read).
    pub fn progress_before_answer(&self, token: &ProgressToken, id: &RequestId) -> Option<Vec<f64>> {
        let (token, id) = (text(&token.0), text(id));
        let mut seen = Vec::new();
        for read in self.reads() {
            match read {
                Read::Progress(t, value) if t == token => seen.push(value),
                Read::Answer(answered) if answered == id => return Some(seen),
                _ => {}
            }
        }
        None
    }
}

/// Connect an rmcp host in `era` to `url` (`token`: bearer), logging what it reads.
pub async fn connect(url: &str, era: Era, token: Option<&str>) -> anyhow::Result<(WireHost, WireLog)> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url).reinit_on_expired_session(false);
    if let Some(token) = token {
        config = config.auth_header(token);
    }
    let log = WireLog::default();
    let transport = Logged { transport: StreamableHttpClientTransport::from_config(config), log: log.clone() };
    let connecting = ().serve_with_lifecycle(transport, era.lifecycle());
    let host = tokio::time::timeout(DEADLINE, connecting).await.context("connect timed out")??;
    host.set_response_cache_config(ClientCacheConfig::disabled()).await;
    Ok((host, log))
}

fn text(id: &NumberOrString) -> String {
    match id {
        NumberOrString::String(s) => s.to_string(),
        NumberOrString::Number(n) => n.to_string(),
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Logged<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.transport.receive().await?;
        let read = match &message {
            JsonRpcMessage::Notification(note) => match &note.notification {
                ServerNotification::ProgressNotification(p) => {
                    Some(Read::Progress(text(&p.params.progress_token.0), p.params.progress))
                }
                _ => None,
            },
            JsonRpcMessage::Response(response) => Some(Read::Answer(text(&response.id))),
            JsonRpcMessage::Error(error) => error.id.as_ref().map(|id| Read::Answer(text(id))),
            JsonRpcMessage::Request(_) => None,
        };
        if let Some(read) = read {
            self.log.0.lock().expect("wire log").push(read);
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.transport.close()
    }
}
