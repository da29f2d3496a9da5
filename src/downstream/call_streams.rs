//! Legacy sessions whose calls' own notifications ride the call's own response stream.
//!
//! rmcp's `LocalSessionManager` puts every server-to-host notification but progress and
//! cancellation on the session's standalone (GET) stream, so a log message an upstream sent for
//! a host's `tools/call` never reached a 2025 host that only POSTs (many hosts never open the
//! GET stream), and reached one that does on a stream that is meant for messages unrelated to
//! any request. The spec lets a server send a request's notifications on that request's SSE
//! stream before its answer; [`CallStreams`] does so. It wraps rmcp's manager (which keeps
//! everything else: sessions, priming, event ids, resumption):
//! - the response stream of each `tools/call` and `prompts/get` (the requests whose upstream
//!   messages are relayed, see `relay`) is rmcp's stream merged with a queue of the call's own,
//!   booked under (session, request id) while the stream is open;
//! - the session's transport ([`CallStreamTransport`]) puts a notification that names its
//!   request with rmcp's [`OriginatingRequestId`] marker (the SEP-2260 association rmcp itself
//!   honours only for requests) on that queue. A notification without the marker, or whose
//!   call's stream is gone, goes on to rmcp as before.
//!
//! With `[cluster]` the transport also gives each request to the host this replica's own id,
//! and an answer POSTed here goes where that id says (`shared::answers`). Each event of a
//! request's stream (from rmcp's priming event on) carries an event id that names this replica
//! and the request, marked with the cluster's session-id key (`shared::ids`): a host whose
//! stream is cut resumes it with `Last-Event-ID` on whichever replica the balancer picks; here
//! rmcp replays it, elsewhere the session gate answers it (`shared::resumed`). So that a
//! resumption elsewhere gets the answer of a call whose stream was cut while this replica
//! lives, each `tools/call` and `prompts/get` stream is booked in `kept` as it opens: the
//! handler gives its answer there too, kept for a while from the stream's end (which says
//! whether the answer went out on it: those make room first).
//!
//! Invariant: a marked notification reaches its host once — on its call's stream while that
//! stream is open, else where rmcp puts it — and before the call's answer whenever it was sent
//! before the answer: the merged stream takes the call's queue first, and the queue is filled as
//! the notification is sent, before the handler can answer.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::future::Either;
use futures::{Stream, StreamExt};
use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, GetExtensions, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::service::{OriginatingRequestId, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionTransport};
use rmcp::transport::streamable_http_server::session::{RestoreOutcome, ServerSseMessage, SessionId};
use tokio::sync::mpsc;

use super::kept::{KeptCalls, StreamKept};
use super::shared::answers::Answers;
use super::shared::ids::SessionIds;

/// A call's own messages that may wait for its stream (as many as rmcp's own stream holds).
const CALL_QUEUE: usize = 16;

/// rmcp's session manager, with each relaying call's notifications on the call's own stream.
pub(super) struct CallStreams {
    local: Arc<LocalSessionManager>,
    open: Arc<OpenCalls>,
    cluster: Option<ClusterStreams>,
}

/// `[cluster]`: what the session manager does across replicas.
pub(super) struct ClusterStreams {
    /// Session ids are minted with the cluster's key, bound to their principal.
    pub ids: SessionIds,
    /// Requests to hosts and their answers, across replicas.
    pub answers: Arc<Answers>,
    /// This replica's id, named by the event ids of its request streams.
    pub replica: Arc<str>,
    /// Where a call's answer is kept for a resumption elsewhere.
    pub kept: Arc<KeptCalls>,
}

/// A session's transport: marked notifications go to their call's stream (see the module doc).
pub(super) struct CallStreamTransport {
    transport: SessionTransport,
    session: SessionId,
    open: Arc<OpenCalls>,
    answers: Option<Arc<Answers>>,
}

/// The response streams open for relaying calls, by (session, request id), with a serial so a
/// stream that ends forgets only its own booking.
#[derive(Default)]
struct OpenCalls {
    streams: Mutex<HashMap<CallKey, OpenStream>>,
    serial: AtomicU64,
}

/// A call: its session and its request id there.
type CallKey = (SessionId, RequestId);

/// One booked stream: which booking it is, and its queue.
struct OpenStream {
    serial: u64,
    queue: mpsc::Sender<ServerSseMessage>,
}

/// One call's response stream: its own queue first, then rmcp's stream, which ends it.
struct CallStream<S> {
    own: mpsc::Receiver<ServerSseMessage>,
    answers: S,
    _booking: Booking,
    /// `[cluster]`: told when the call's answer goes out on the stream.
    kept: Option<StreamKept>,
}

/// A call's place in [`OpenCalls`], given up when its stream is dropped.
struct Booking {
    open: Arc<OpenCalls>,
    key: CallKey,
    serial: u64,
}

/// A booked call's own queue, before it is joined to rmcp's stream.
struct CallQueue {
    own: mpsc::Receiver<ServerSseMessage>,
    booking: Booking,
}

impl CallStreams {
    /// Over `local`, which the rest of the listener (gate, reaper, fast path) shares.
    pub fn new(local: Arc<LocalSessionManager>, cluster: Option<ClusterStreams>) -> Self {
        CallStreams { local, open: Arc::default(), cluster }
    }

    /// `[cluster]`: `stream` (of request `request`, its id as JSON, on `session`) with each
    /// event id made one that names this replica and the request.
    fn marked<S>(
        &self,
        session: &SessionId,
        request: String,
        stream: S,
    ) -> Either<impl Stream<Item = ServerSseMessage> + use<S>, S>
    where
        S: Stream<Item = ServerSseMessage>,
    {
        let Some(ClusterStreams { ids, replica, .. }) = &self.cluster else { return Either::Right(stream) };
        let (ids, replica) = (ids.clone(), replica.clone());
        let session = session.clone();
        Either::Left(stream.map(move |mut message| {
            if let Some(rmcp) = message.event_id.take() {
                message.event_id = Some(ids.event_id(&session, &replica, &request, &rmcp));
            }
            message
        }))
    }

    fn transport(&self, session: &SessionId, transport: SessionTransport) -> CallStreamTransport {
        let answers = self.cluster.as_ref().map(|cluster| cluster.answers.clone());
        CallStreamTransport { transport, session: session.clone(), open: self.open.clone(), answers }
    }
}

impl OpenCalls {
    /// Book a stream of its own for `message` if it is a relaying call.
    fn book(self: &Arc<Self>, session: &SessionId, message: &ClientJsonRpcMessage) -> Option<CallQueue> {
        let JsonRpcMessage::Request(request) = message else { return None };
        if !matches!(request.request, ClientRequest::CallToolRequest(_) | ClientRequest::GetPromptRequest(_)) {
            return None;
        }
        let (sender, own) = mpsc::channel(CALL_QUEUE);
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let key = (session.clone(), request.id.clone());
        self.streams.lock().expect("call streams lock").insert(key.clone(), OpenStream { serial, queue: sender });
        Some(CallQueue { own, booking: Booking { open: self.clone(), key, serial } })
    }

    /// The queue of the call `message` names, if it is a notification that names one whose
    /// stream is open.
    fn queue_of(&self, session: &SessionId, message: &ServerJsonRpcMessage) -> Option<mpsc::Sender<ServerSseMessage>> {
        let JsonRpcMessage::Notification(notification) = message else { return None };
        let OriginatingRequestId(call) = notification.notification.extensions().get::<OriginatingRequestId>()?;
        let streams = self.streams.lock().expect("call streams lock");
        let open = streams.get(&(session.clone(), call.clone()))?;
        (!open.queue.is_closed()).then(|| open.queue.clone())
    }
}

impl Drop for Booking {
    fn drop(&mut self) {
        let mut streams = self.open.streams.lock().expect("call streams lock");
        if streams.get(&self.key).is_some_and(|open| open.serial == self.serial) {
            streams.remove(&self.key);
        }
    }
}

impl<S: Stream<Item = ServerSseMessage> + Unpin> Stream for CallStream<S> {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ServerSseMessage>> {
        if let Poll::Ready(Some(message)) = self.own.poll_recv(cx) {
            return Poll::Ready(Some(message));
        }
        let polled = Pin::new(&mut self.answers).poll_next(cx);
        if let Poll::Ready(Some(message)) = &polled
            && let Some(kept) = &mut self.kept
            && matches!(message.message.as_deref(), Some(JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_)))
        {
            kept.delivered();
        }
        polled
    }
}

impl SessionManager for CallStreams {
    type Error = <LocalSessionManager as SessionManager>::Error;
    type Transport = CallStreamTransport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        if let Some(ClusterStreams { ids, .. }) = &self.cluster {
            let principal = crate::auth::current_principal().unwrap_or_else(|| crate::auth::ANONYMOUS.to_string());
            let id: SessionId = Arc::from(ids.mint(&principal));
            // rmcp's way to open a session under an id of one's own choosing.
            if let RestoreOutcome::Restored(transport) = self.local.restore_session(id.clone()).await? {
                let transport = self.transport(&id, transport);
                return Ok((id, transport));
            }
        }
        let (id, transport) = self.local.create_session().await?;
        let transport = self.transport(&id, transport);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.local.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.local.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.local.close_session(id).await
    }

    /// A relaying call's queue is booked before rmcp hands the request to the handler, so
    /// nothing the handler sends for it can miss it.
    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let queue = self.open.book(id, &message);
        let request = request_json(&message);
        let kept = queue
            .as_ref()
            .zip(self.cluster.as_ref())
            .and_then(|(_, cluster)| cluster.kept.stream_opened(cluster.ids.call_key(id, &request)));
        let answers = match self.local.create_stream(id, message).await {
            Ok(answers) => answers,
            Err(error) => {
                if let Some(kept) = kept {
                    kept.forget();
                }
                return Err(error);
            }
        };
        let stream = match queue {
            Some(CallQueue { own, booking }) => Either::Left(CallStream { own, answers, _booking: booking, kept }),
            None => Either::Right(answers),
        };
        Ok(self.marked(id, request, stream))
    }

    /// `[cluster]`: an answer goes where its id says (`answers`).
    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        let message = match (&self.cluster, &message) {
            (Some(cluster), JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_)) => {
                let Some(message) = cluster.answers.route(id, message).await else { return Ok(()) };
                message
            }
            _ => message,
        };
        self.local.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // `[cluster]`: the gate lets through only ids of this replica's streams, or rmcp's own.
        let opened = self.cluster.as_ref().and_then(|cluster| cluster.ids.open_event_id(id, &last_event_id));
        Ok(match opened {
            Some(event) => Either::Left(self.marked(id, event.request, self.local.resume(id, event.rmcp).await?)),
            None => Either::Right(self.local.resume(id, last_event_id).await?),
        })
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        let session = id.clone();
        Ok(match self.local.restore_session(id).await? {
            RestoreOutcome::Restored(transport) => RestoreOutcome::Restored(self.transport(&session, transport)),
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            _ => RestoreOutcome::NotSupported,
        })
    }

    fn event_store(&self) -> Option<Arc<dyn rmcp::transport::streamable_http_server::session::EventStore>> {
        self.local.event_store()
    }
}

/// The id of `message` (a request) as JSON, as event ids name it.
fn request_json(message: &ClientJsonRpcMessage) -> String {
    match message {
        JsonRpcMessage::Request(request) => serde_json::to_string(&request.id).unwrap_or_default(),
        _ => String::new(),
    }
}

impl Transport<RoleServer> for CallStreamTransport {
    type Error = <SessionTransport as Transport<RoleServer>>::Error;

    /// A marked notification goes to its call's queue as it is sent (waiting only when the
    /// queue is full); anything else, and one whose call's stream is gone, to rmcp.
    fn send(
        &mut self,
        mut item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let Some(answers) = &self.answers {
            answers.ask(&self.session, &mut item);
        }
        let Some(queue) = self.open.queue_of(&self.session, &item) else {
            return Either::Left(self.transport.send(item));
        };
        let message = match queue.try_send(ServerSseMessage::from_message(item)) {
            Ok(()) => None,
            Err(mpsc::error::TrySendError::Full(message)) => Some(message),
            Err(mpsc::error::TrySendError::Closed(message)) => {
                let message = message.message.map(Arc::unwrap_or_clone).expect("a message");
                return Either::Left(self.transport.send(message));
            }
        };
        Either::Right(async move {
            if let Some(message) = message
                && queue.send(message).await.is_err()
            {
                tracing::debug!("a call's notification found its stream closed; dropped");
            }
            Ok(())
        })
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.transport.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.transport.close()
    }
}

#[cfg(test)]
mod tests;
