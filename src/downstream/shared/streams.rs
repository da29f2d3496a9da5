//! `[cluster]`: the replica serving a 2025 session's GET stream delivers its `updated`. It subscribes
//! the session's subscriptions (from its record) through its own upstream connections while the
//! stream is open here, follows the record's changes (news from any replica, see `news`), and
//! lets them go when the stream ends.
//!
//! Nothing owed is lost when the stream moves (the host reconnects after a replica died, or its
//! load balancer sent the GET elsewhere): each URI this stream starts subscribing is acknowledged by
//! its upstream first, then the host is sent one `updated` for it on this stream — a change made
//! while no replica subscribed it for this host is announced, at the price of a spurious one.
//!
//! Invariant: a URI is subscribed for a session on this replica only while a GET stream of the session
//! is open here (or a newer one replaced it); the host hears of it only as its principal may
//! see it (the proxy's own subscribe and fan-out decide).

use std::collections::{BTreeSet, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::Stream;
use futures::stream::{BoxStream, StreamExt};
use tokio::sync::mpsc;

use rmcp::transport::streamable_http_server::session::SessionStore;

use super::records::Records;
use crate::downstream::sessions::SessionBook;
use crate::host::HostSession;
use crate::proxy::Proxy;
use crate::subscription_table::SubscriberId;
use crate::wire::sse;

/// How long a stream waits for the session's handler to register (a session restored by the
/// GET itself registers as its replayed handshake ends).
const SUBSCRIBER_WAIT: Duration = Duration::from_secs(10);
/// How long a URI's upstream has to acknowledge it before its `updated` is sent regardless.
const WATCH_WAIT: Duration = Duration::from_secs(5);

/// The GET streams open on this replica, by record key, each with its resync signal.
#[derive(Default)]
pub(crate) struct OpenStreams {
    open: Mutex<HashMap<String, (u64, mpsc::Sender<()>)>>,
    serial: AtomicU64,
}

impl OpenStreams {
    /// The record keyed `record_key` changed: its stream here (if any) syncs again.
    pub fn resync(&self, record_key: &str) {
        if let Some((_, signal)) = self.open.lock().expect("streams lock").get(record_key) {
            // Full: a sync is pending already, and it reads the record afresh.
            let _ = signal.try_send(());
        }
    }

    /// News may have been lost: every stream here syncs again.
    pub fn resync_all(&self) {
        for (_, signal) in self.open.lock().expect("streams lock").values() {
            let _ = signal.try_send(());
        }
    }
}

/// What a stream subscribing its session's subscriptions works with.
#[derive(Clone)]
pub(crate) struct StreamSubscriptions {
    pub proxy: Proxy,
    pub records: Records,
    pub book: Arc<SessionBook>,
    pub streams: Arc<OpenStreams>,
}

impl StreamSubscriptions {
    /// `response` (rmcp's GET stream of `session`) with the session's subscriptions subscribed and
    /// announced on it.
    pub fn subscribe(&self, session: &str, principal: &str, response: Response) -> Response {
        let record_key = self.records.ids.record_key(session);
        tracing::debug!(principal, "cluster: this replica serves the session's GET stream");
        let serial = self.streams.serial.fetch_add(1, Ordering::Relaxed);
        let (signal, resyncs) = mpsc::channel(1);
        self.streams.open.lock().expect("streams lock").insert(record_key.clone(), (serial, signal));
        let sync = Arc::new(Sync {
            stream_subscriptions: self.clone(),
            session: session.to_owned(),
            principal: principal.to_owned(),
            subscriber: Mutex::new(None),
            host: Mutex::new(None),
            subscribed: Mutex::default(),
        });
        let runner = sync.clone();
        let ours = futures::stream::once(async {})
            .chain(futures::stream::unfold(resyncs, |mut resyncs| async move {
                resyncs.recv().await.map(|()| ((), resyncs))
            }))
            .then(move |()| runner.clone().run())
            .flat_map(futures::stream::iter)
            .fuse()
            .boxed();
        let guard = Guard { sync, record_key, serial };
        response.map(|body| Body::from_stream(SubscribedBody { rmcp: body.into_data_stream(), ours, _guard: guard }))
    }
}

/// One stream's subscriptions.
struct Sync {
    stream_subscriptions: StreamSubscriptions,
    session: String,
    principal: String,
    subscriber: Mutex<Option<SubscriberId>>,
    /// The session as a per-host upstream session's host, once its `initialize` was read.
    host: Mutex<Option<HostSession>>,
    /// What this stream subscribes now.
    subscribed: Mutex<BTreeSet<String>>,
}

impl Sync {
    /// Subscribe what the record has, let go of what it no longer does; the `updated` events for
    /// the URIs newly subscribed, once their upstreams acknowledged them.
    async fn run(self: Arc<Self>) -> Vec<Bytes> {
        let Some(subscriber) = self.subscriber().await else {
            tracing::debug!(principal = %self.principal, "stream of a session with no handler here");
            return Vec::new();
        };
        let wanted: BTreeSet<String> = match self.stream_subscriptions.records.load(&self.session).await {
            Ok(Some(record)) => record.subscriptions.into_iter().collect(),
            Ok(None) => BTreeSet::new(),
            Err(error) => {
                tracing::warn!(error = %error, "cluster: a stream's subscriptions could not be read");
                return Vec::new();
            }
        };
        let host = self.host().await;
        let proxy = &self.stream_subscriptions.proxy;
        let caller = proxy.caller(&self.principal);
        let added: Vec<String> = {
            let mut subscribed = self.subscribed.lock().expect("stream subscriptions lock");
            for gone in subscribed.difference(&wanted).cloned().collect::<Vec<_>>() {
                let _ = proxy.unsubscribe(&caller, subscriber, &gone);
                subscribed.remove(&gone);
            }
            let mut added = Vec::new();
            for uri in wanted.difference(&subscribed.clone()) {
                match proxy.subscribe(&caller, subscriber, uri, host) {
                    Ok(()) => {
                        subscribed.insert(uri.clone());
                        added.push(uri.clone());
                    }
                    Err(error) => tracing::debug!(uri, error = %error, "a session's subscription not made here"),
                }
            }
            added
        };
        let acknowledged = added.iter().map(|uri| proxy.wait_subscribed(&caller, uri, WATCH_WAIT));
        futures::future::join_all(acknowledged).await;
        added.iter().map(|uri| updated_event(uri)).collect()
    }

    /// The session as its per-host upstream sessions know it: its key (the same on every
    /// replica) and what its host declared (its `initialize`, from the record).
    async fn host(&self) -> Option<HostSession> {
        if let Some(host) = *self.host.lock().expect("host lock") {
            return Some(host);
        }
        let records = &self.stream_subscriptions.records;
        let capabilities = match SessionStore::load(records, &self.session).await {
            Ok(Some(state)) => state.initialize_params.capabilities,
            _ => return None,
        };
        let host = HostSession {
            id: records.ids.host_key(&self.session),
            sampling: capabilities.sampling.is_some(),
            elicitation: capabilities.elicitation.is_some(),
        };
        *self.host.lock().expect("host lock") = Some(host);
        Some(host)
    }

    async fn subscriber(&self) -> Option<SubscriberId> {
        if let Some(subscriber) = *self.subscriber.lock().expect("subscriber lock") {
            return Some(subscriber);
        }
        let subscriber = self.stream_subscriptions.book.wait_subscriber(&self.session, SUBSCRIBER_WAIT).await?;
        *self.subscriber.lock().expect("subscriber lock") = Some(subscriber);
        Some(subscriber)
    }
}

/// One `notifications/resources/updated` as an SSE event.
fn updated_event(uri: &str) -> Bytes {
    let message = serde_json::json!({
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": { "uri": uri },
    });
    let mut body = Vec::new();
    sse::event(&mut body, |body| serde_json::to_writer(body, &message).expect("JSON"));
    Bytes::from(body)
}

/// The stream's place in [`OpenStreams`] and its subscriptions, given up when the body is dropped.
struct Guard {
    sync: Arc<Sync>,
    record_key: String,
    serial: u64,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let streams = &self.sync.stream_subscriptions.streams;
        let mut open = streams.open.lock().expect("streams lock");
        // A newer stream of the session here subscribes the same URIs under the same subscriber.
        if open.get(&self.record_key).is_none_or(|(serial, _)| *serial != self.serial) {
            return;
        }
        open.remove(&self.record_key);
        drop(open);
        let Some(subscriber) = *self.sync.subscriber.lock().expect("subscriber lock") else { return };
        let proxy = &self.sync.stream_subscriptions.proxy;
        let caller = proxy.caller(&self.sync.principal);
        for uri in std::mem::take(&mut *self.sync.subscribed.lock().expect("stream subscriptions lock")) {
            let _ = proxy.unsubscribe(&caller, subscriber, &uri);
        }
    }
}

/// rmcp's stream, with this stream's own events between its messages; it ends with rmcp's.
struct SubscribedBody {
    rmcp: axum::body::BodyDataStream,
    ours: BoxStream<'static, Bytes>,
    _guard: Guard,
}

impl Stream for SubscribedBody {
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match Pin::new(&mut self.rmcp).poll_next(cx) {
            Poll::Ready(item) => return Poll::Ready(item),
            Poll::Pending => {}
        }
        match self.ours.poll_next_unpin(cx) {
            Poll::Ready(Some(event)) => Poll::Ready(Some(Ok(event))),
            _ => Poll::Pending,
        }
    }
}
