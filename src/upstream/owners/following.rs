//! Every second the `sessions:<upstream>` sweep looks where each session lives now: the subscriptions
//! of one whose owner changed (those waiting since it was reclaimed from a full pool too) are
//! made where it lives now (here, or on a connection to the new owner), each subscriber told once
//! that its URI may have changed.

use super::Reach;
use crate::upstream::client::Declared;
use crate::upstream::owner_link::Whose;
use crate::upstream::pool::SessionKey;
use crate::upstream::session_subscriptions::{SessionSubscription, host_session};
use crate::upstream::{Upstream, UpstreamEvent};

impl Upstream {
    /// Each session's subscriptions go where it lives now: those on a connection to a replica that no
    /// longer owns it, and those on a session here that another replica owns now. Each
    /// subscriber is told once that its URI may have changed while it moved.
    pub(in crate::upstream) fn follow_owners(&self) {
        let Some(routes) = self.inner.owner_routes.get().filter(|_| self.has_sessions()) else { return };
        let lives_at = |key: &SessionKey, declared: Option<Declared>| {
            let host = host_session(key.host(), declared);
            let whose = Whose { upstream: self.name(), principal: key.principal(), host };
            (routes.owner_of)(&whose).map(|owner| owner.replica)
        };
        let moved_away = self.inner.at_owners.close_where(|(replica, key, reach), held| {
            *reach == Reach::Session && lives_at(key, held.session.inner.declared).as_deref() != Some(&**replica)
        });
        let mut moving = Vec::new();
        for session in &moved_away {
            moving.extend(session.subscribed(session.subscriptions().take_all()));
        }
        self.closed_with_own_offerings(&moved_away);
        if let Some(book) = &self.inner.sessions {
            for (key, session) in book.sessions() {
                if session.subscriptions().subscribes_anything() && lives_at(&key, session.inner.declared).is_some() {
                    let subscribed = session.subscriptions().take_all();
                    subscribed.keys().for_each(|uri| session.set_subscribed(uri, false));
                    moving.extend(session.subscribed(subscribed));
                }
            }
            // Those waiting since their session was reclaimed from a full pool too: they would
            // wait for a place here, for a session that lives elsewhere now.
            for (key, declared) in book.reclaimed.keys() {
                if lives_at(&key, declared).is_some()
                    && let Some(waiting) = book.reclaimed.take(&key)
                {
                    let host = host_session(key.host(), waiting.declared);
                    moving.extend(SessionSubscription::each(key.principal(), host, waiting.subscribed));
                }
            }
        }
        for subscription in moving {
            self.subscription_moved(subscription);
        }
    }

    /// Make `subscription` where its session lives now, and tell its subscriber once.
    fn subscription_moved(&self, subscription: SessionSubscription) {
        let SessionSubscription { principal, host, subscriber, uri } = subscription;
        if let Err(error) = self.session_subscribe(&principal, host, subscriber, &uri, None) {
            tracing::warn!(upstream = self.name(), error = %error, "cluster: a subscription could not follow its session");
            return;
        }
        let Some(events) = self.inner.events.lock().expect("events lock").clone() else { return };
        let (upstream, subscribers) = (self.name().to_string(), vec![(subscriber, vec![uri.clone()])]);
        events.send(UpstreamEvent::SessionUpdated { upstream, uri, heard: false, subscribers });
    }
}
