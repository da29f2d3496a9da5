//! rmcp ends of the fan-out: a legacy session's peer and a 2026-07-28 listen stream's sink.
//!
//! A listen stream's outlet is registered before rmcp acknowledges the stream (so that nothing
//! after the acknowledgement is missed) but rmcp hands over the sink only after it:
//! [`BufferedOutlet`] keeps what comes in between and flushes it, in order, on `attach`.

use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::{Peer, RoleServer, SubscriptionSink};
use tokio::sync::Mutex;

use crate::fanout::{Outgoing, Outlet, QUEUE_CAPACITY, SendError, SendFuture};

/// A 2025-era session: notifications go on its server→client stream.
pub(super) struct SessionOutlet(pub Peer<RoleServer>);

impl Outlet for SessionOutlet {
    fn send(&self, message: Outgoing) -> SendFuture<'_> {
        Box::pin(async move {
            let sent = match message {
                Outgoing::Updated(uri) => {
                    self.0.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await
                }
                Outgoing::ListChanged => self.0.notify_resource_list_changed().await,
                Outgoing::ToolsListChanged => self.0.notify_tool_list_changed().await,
                Outgoing::PromptsListChanged => self.0.notify_prompt_list_changed().await,
            };
            match sent {
                Ok(()) => Ok(()),
                Err(_) if self.0.is_transport_closed() => Err(SendError::Closed),
                Err(error) => {
                    tracing::debug!(error = %error, "notification not sent");
                    Err(SendError::Closed)
                }
            }
        })
    }
}

/// A `subscriptions/listen` stream: the sink stamps its subscription id.
pub(super) struct ListenOutlet(pub SubscriptionSink);

impl Outlet for ListenOutlet {
    fn send(&self, message: Outgoing) -> SendFuture<'_> {
        Box::pin(async move {
            let sent = match message {
                Outgoing::Updated(uri) => self.0.notify_resource_updated(uri).await,
                Outgoing::ListChanged => self.0.notify_resource_list_changed().await,
                Outgoing::ToolsListChanged => self.0.notify_tool_list_changed().await,
                Outgoing::PromptsListChanged => self.0.notify_prompt_list_changed().await,
            };
            sent.map_err(|_| SendError::Closed)
        })
    }
}

/// An outlet whose far end comes later: until `attach`, notifications wait here (a repeat of
/// one already waiting is dropped: the host re-reads once either way; at most
/// `QUEUE_CAPACITY` wait); `attach` sends them in order before anything newer.
pub(super) struct BufferedOutlet {
    stage: Mutex<Stage>,
}

enum Stage {
    Waiting(Vec<Outgoing>),
    Attached(Box<dyn Outlet>),
}

impl BufferedOutlet {
    pub(super) fn new() -> Self {
        Self { stage: Mutex::new(Stage::Waiting(Vec::new())) }
    }

    /// Sends what waited, in order, then hands every later notification to `outlet`.
    pub(super) async fn attach(&self, outlet: Box<dyn Outlet>) {
        let mut stage = self.stage.lock().await;
        if let Stage::Waiting(waiting) = &mut *stage {
            for message in std::mem::take(waiting) {
                if outlet.send(message).await.is_err() {
                    tracing::debug!("listen stream closed while its first notifications were sent");
                    break;
                }
            }
        }
        *stage = Stage::Attached(outlet);
    }
}

impl Outlet for BufferedOutlet {
    fn send(&self, message: Outgoing) -> SendFuture<'_> {
        Box::pin(async move {
            let mut stage = self.stage.lock().await;
            match &mut *stage {
                Stage::Attached(outlet) => outlet.send(message).await,
                Stage::Waiting(waiting) => {
                    if !waiting.contains(&message) {
                        if waiting.len() < QUEUE_CAPACITY {
                            waiting.push(message);
                        } else {
                            tracing::warn!(
                                kind = message.kind(),
                                "listen stream not attached yet; notification dropped"
                            );
                        }
                    }
                    Ok(())
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Records what it is sent.
    struct Recorder(Arc<Mutex<Vec<Outgoing>>>);

    impl Outlet for Recorder {
        fn send(&self, message: Outgoing) -> SendFuture<'_> {
            self.0.lock().expect("recorder lock").push(message);
            Box::pin(async { Ok(()) })
        }
    }

    fn updated(uri: &str) -> Outgoing {
        Outgoing::Updated(uri.to_owned())
    }

    #[tokio::test]
    async fn buffered_outlet_delivers_what_came_before_attach_in_order_then_the_rest() {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let outlet = BufferedOutlet::new();
        for message in [updated("a"), Outgoing::ListChanged, updated("b"), updated("a")] {
            assert_eq!(outlet.send(message).await, Ok(()));
        }
        assert!(heard.lock().expect("recorder lock").is_empty(), "nothing goes out before attach");
        outlet.attach(Box::new(Recorder(heard.clone()))).await;
        outlet.send(updated("c")).await.expect("attached send");
        outlet.send(updated("a")).await.expect("attached send");
        let heard = heard.lock().expect("recorder lock").clone();
        assert_eq!(heard, [updated("a"), Outgoing::ListChanged, updated("b"), updated("c"), updated("a")]);
    }

    #[tokio::test]
    async fn buffered_outlet_keeps_at_most_queue_capacity_before_attach() {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let outlet = BufferedOutlet::new();
        for n in 0..QUEUE_CAPACITY + 10 {
            outlet.send(updated(&n.to_string())).await.expect("buffered send");
        }
        outlet.attach(Box::new(Recorder(heard.clone()))).await;
        let heard = heard.lock().expect("recorder lock").clone();
        let expected: Vec<_> = (0..QUEUE_CAPACITY).map(|n| updated(&n.to_string())).collect();
        assert_eq!(heard, expected);
    }
}
